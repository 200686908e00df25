/// Reduces the row operations one transaction went through to their net
/// effect per row.
///
/// Only whether a row existed before the transaction and after it matters:
/// its first operation tells the one (an INSERT means it did not), its last
/// operation the other (a DELETE means it does not).
struct ChangeSetBuilder {
  /// Each table's row operations, in the order they happened.
  private var logs: [String: [(rowID: Int64, operation: RowOperation)]] = [:]

  mutating func record(table: String, operations: [(rowID: Int64, operation: RowOperation)]) {
    logs[table, default: []].append(contentsOf: operations)
  }

  /// Tables in which rowid 0 was touched: SQLite reports rows of WITHOUT
  /// ROWID tables that way.
  var tablesTouchingRowIDZero: [String] {
    logs.compactMap { table, log in log.contains { $0.rowID == 0 } ? table : nil }
  }

  /// The net changes per table; tables in `invalidated` are left out.
  func tableChanges(excluding invalidated: Set<String>) -> [String: TableChanges] {
    var result: [String: TableChanges] = [:]
    for (table, log) in logs where !invalidated.contains(table) {
      let changes = Self.netChanges(log)
      if !changes.isEmpty { result[table] = changes }
    }
    return result
  }

  private static func netChanges(_ log: [(rowID: Int64, operation: RowOperation)]) -> TableChanges {
    var changes = TableChanges()
    // Fast path, the common bulk case: every row touched once, in rowid
    // order, so each operation is its row's net effect and lists come out
    // sorted.
    if zip(log, log.dropFirst()).allSatisfy({ $0.rowID < $1.rowID }) {
      for (rowID, operation) in log {
        switch operation {
        case .insert: changes.inserted.append(rowID)
        case .update: changes.updated.append(rowID)
        case .delete: changes.deleted.append(rowID)
        }
      }
      return changes
    }
    var states: [Int64: (existedBefore: Bool, existsAfter: Bool)] = [:]
    states.reserveCapacity(log.count)
    for (rowID, operation) in log {
      states[rowID, default: (operation != .insert, true)].existsAfter = operation != .delete
    }
    for (rowID, state) in states {
      switch (state.existedBefore, state.existsAfter) {
      case (false, true): changes.inserted.append(rowID)
      case (true, true): changes.updated.append(rowID)
      case (true, false): changes.deleted.append(rowID)
      case (false, false): break  // created and removed unseen
      }
    }
    changes.inserted.sort()
    changes.updated.sort()
    changes.deleted.sort()
    return changes
  }
}

/// What happened to a row, as the capture saw it.
enum RowOperation: UInt32 {
  case insert = 1
  case update = 2
  case delete = 3
}
