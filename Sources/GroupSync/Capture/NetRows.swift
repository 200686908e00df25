import CGroupSync

/// One table's rows reduced to their net effect, by what the captured
/// operations say of them (made beside the hook, in C); each list sorted.
///
/// Whether a row existed before the transaction is exact: its first
/// captured operation tells (an INSERT means it did not), whatever happened
/// later. Whether it exists after is what its last operation says, unless a
/// savepoint rollback or a failed statement undid operations the hook saw;
/// rows judged gone are therefore kept too, so that the caller can check
/// both claims against the store.
struct NetRows {
  /// Did not exist before; the log says they exist after.
  var inserted: [Int64] = []
  /// Existed before; the log says they exist after.
  var updated: [Int64] = []
  /// Existed before; the log says they are gone.
  var deleted: [Int64] = []
  /// Did not exist before; the log says they are gone again.
  var transient: [Int64] = []

  init(inserted: [Int64] = [], updated: [Int64] = [], deleted: [Int64] = [], transient: [Int64] = []) {
    self.inserted = inserted
    self.updated = updated
    self.deleted = deleted
    self.transient = transient
  }

  /// The lists the C capture made (see `gs_capture_net_rows`), copied.
  init(_ net: gs_net_rows) {
    func list(_ rows: UnsafePointer<Int64>?, _ count: Int) -> [Int64] {
      guard let rows, count > 0 else { return [] }
      return Array(UnsafeBufferPointer(start: rows, count: count))
    }
    self.init(
      inserted: list(net.inserted, net.inserted_count), updated: list(net.updated, net.updated_count),
      deleted: list(net.deleted, net.deleted_count), transient: list(net.transient, net.transient_count))
  }

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

  /// The rows of two tables that carry the same rowids (a full-text
  /// table's shadows), as one: a row existed before if either says so,
  /// and is gone if either says so (the store is checked then anyway).
  func merged(with other: NetRows) -> NetRows {
    let deleted = Set(deleted).union(other.deleted)
    let existed = Set(updated).union(other.updated).union(deleted)
    let updated = existed.subtracting(deleted)
    let transient = Set(transient).union(other.transient).subtracting(existed)
    let inserted = Set(inserted).union(other.inserted).subtracting(existed).subtracting(transient)
    return NetRows(
      inserted: inserted.sorted(), updated: updated.sorted(), deleted: deleted.sorted(),
      transient: transient.sorted())
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
