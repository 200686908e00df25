/// Reduces the row operations one transaction went through to their net
/// effect per row.
///
/// Only whether a row existed before the transaction and after it matters:
/// its first operation tells the one (an INSERT means it did not), its last
/// operation the other (a DELETE means it does not).
struct ChangeSetBuilder {
  private struct RowState {
    var existedBefore: Bool
    var existsAfter: Bool
  }

  private var rows: [String: [Int64: RowState]] = [:]

  mutating func record(table: String, rowID: Int64, operation: RowOperation) {
    rows[table, default: [:]][rowID, default: RowState(existedBefore: operation != .insert, existsAfter: true)]
      .existsAfter = operation != .delete
  }

  /// The tables touched, with the rowids touched in each.
  var touchedRowIDs: [String: [Int64]] { rows.mapValues { Array($0.keys) } }

  /// The net changes per table; tables in `invalidated` are left out.
  func tableChanges(excluding invalidated: Set<String>) -> [String: TableChanges] {
    var result: [String: TableChanges] = [:]
    for (table, states) in rows where !invalidated.contains(table) {
      var changes = TableChanges()
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
      if !changes.isEmpty { result[table] = changes }
    }
    return result
  }
}

/// What happened to a row, as the capture saw it.
enum RowOperation: UInt32 {
  case insert = 1
  case update = 2
  case delete = 3
}
