/// Reduces the row operations one transaction went through to their net
/// effect per row.
///
/// Whether a row existed before the transaction is exact: its first
/// captured operation tells (an INSERT means it did not), whatever happened
/// later. Whether it exists after is what its last operation says, unless a
/// savepoint rollback or a failed statement undid operations the hook saw;
/// ``NetRows`` therefore keeps every row it judged gone too, so that the
/// caller can check both claims against the store.
struct ChangeSetBuilder {
  /// Each table's row operations, in the order they happened.
  private var logs: [TableName: [(rowID: Int64, operation: RowOperation)]] = [:]

  mutating func record(table: TableName, operations: [(rowID: Int64, operation: RowOperation)]) {
    logs[table, default: []].append(contentsOf: operations)
  }

  /// The tables with recorded rows.
  var tables: Dictionary<TableName, [(rowID: Int64, operation: RowOperation)]>.Keys { logs.keys }

  /// The net rows of each table.
  func netRows() -> [TableName: NetRows] {
    logs.mapValues(Self.netRows)
  }

  private static func netRows(_ log: [(rowID: Int64, operation: RowOperation)]) -> NetRows {
    var rows = NetRows()
    // Fast path, the common bulk case: every row touched once, in rowid
    // order, so each operation is its row's net effect and lists come out
    // sorted.
    if zip(log, log.dropFirst()).allSatisfy({ $0.rowID < $1.rowID }) {
      for (rowID, operation) in log {
        switch operation {
        case .insert: rows.inserted.append(rowID)
        case .update: rows.updated.append(rowID)
        case .delete: rows.deleted.append(rowID)
        }
      }
      return rows
    }
    var states: [Int64: (existedBefore: Bool, existsAfter: Bool)] = [:]
    states.reserveCapacity(log.count)
    for (rowID, operation) in log {
      states[rowID, default: (operation != .insert, true)].existsAfter = operation != .delete
    }
    for (rowID, state) in states {
      switch (state.existedBefore, state.existsAfter) {
      case (false, true): rows.inserted.append(rowID)
      case (true, true): rows.updated.append(rowID)
      case (true, false): rows.deleted.append(rowID)
      case (false, false): rows.transient.append(rowID)
      }
    }
    rows.inserted.sort()
    rows.updated.sort()
    rows.deleted.sort()
    rows.transient.sort()
    return rows
  }
}

/// One table's rows, by what the captured operations say of them; each
/// list sorted.
struct NetRows {
  /// Did not exist before; the log says they exist after.
  var inserted: [Int64] = []
  /// Existed before; the log says they exist after.
  var updated: [Int64] = []
  /// Existed before; the log says they are gone.
  var deleted: [Int64] = []
  /// Did not exist before; the log says they are gone again.
  var transient: [Int64] = []

  /// The net changes, given which of the rows exist after the transaction
  /// (nil: as the log says). Over-reports nothing the store contradicts.
  func changes(existing: Set<Int64>? = nil) -> TableChanges {
    guard let existing else { return TableChanges(inserted: inserted, updated: updated, deleted: deleted) }
    var changes = TableChanges()
    for rowID in inserted + transient where existing.contains(rowID) { changes.inserted.append(rowID) }
    for rowID in updated + deleted {
      if existing.contains(rowID) { changes.updated.append(rowID) } else { changes.deleted.append(rowID) }
    }
    changes.inserted.sort()
    changes.updated.sort()
    changes.deleted.sort()
    return changes
  }

  /// Rows the log says exist after the transaction.
  var claimedPresent: [Int64] { merge(inserted, updated) }
  /// Rows the log says do not exist after the transaction.
  var claimedGone: [Int64] { merge(deleted, transient) }

  private func merge(_ a: [Int64], _ b: [Int64]) -> [Int64] {
    if a.isEmpty { return b }
    if b.isEmpty { return a }
    return (a + b).sorted()
  }
}

/// What happened to a row, as the capture saw it.
enum RowOperation: UInt32 {
  case insert = 1
  case update = 2
  case delete = 3
}
