// After a shipment committed: its rows' positions and bases recorded
// here, and the shipped (and maybe applied) place moved, in one local
// transaction; and the same for shipments recovery finds.
import Foundation
import GRDB
import GroupSync

extension Shipper {
  /// After COMMIT returned: the rows that won hold their new position
  /// here, so that an older remote image of them is never applied over
  /// them, and the shipped place moves on.
  ///
  /// The entry right after the applied place that settled nothing (no
  /// conflict, no row taken back: every image as this host wrote it) has
  /// nothing to apply here, so it counts as applied in the same
  /// transaction; the applier then skips it.
  func recordShipped(plan: Plan, position: Int64, entry: LogEntry, bytes: Int, caughtUp: [CaughtUp]) throws {
    let context = self.context
    let origin = EntryOrigin(host: context.host, sequence: plan.through)
    let appliedAsIs = position == context.place.current.applied + 1 && context.divergence == nil
      && entry.conflicts.isEmpty && entry.tables.allSatisfy { $0.rows.allSatisfy { $0.lost != true } }
    try context.write { db in
      try Self.recordWinners(entry, position: position, db)
      for row in caughtUp {
        // (A row made again here at the same rowid since stays.)
        var deleted = false
        if row.values == nil, let rowID = try GlobalIDTable.entry(db, table: row.table, gid: row.gid)?.rowID {
          deleted = try TableShape.read(db, table: row.table, store: "")?.values(db, rowID: rowID) == nil
        }
        try GlobalIDTable.raisePosition(
          db, table: row.table, gid: row.gid, to: row.position, deleted: deleted,
          base: row.values.map { GlobalIDTable.StoredBase($0, columns: row.columns) })
      }
      try context.place.change(db) { place in
        place.shipped = max(place.shipped, plan.through)
        place.lastShipment = plan.through
        if appliedAsIs {
          place.applied = position
          place.appliedOrigin = origin
        }
      }
    }
    if appliedAsIs {
      context.countApplied(1)
      context.emit(.applied(store: context.storeName, position: position, entries: 1, rows: 0, localSequence: nil))
    }
    // The log reaches this entry: the applier takes it (from the
    // notification it sent, or else from the log).
    context.logHead = max(context.logHead, position)
    context.metrics.shipped.increment()
    context.emit(
      .shipped(
        store: context.storeName, position: position, localSequence: plan.through, changeSets: plan.changeSets,
        rows: entry.rowCount, bytes: bytes))
    for conflict in entry.conflicts { context.tell(conflict) }
  }

  /// `values`, listed in the order of the JSON array `columns`, in the
  /// order of `wanted`. A column they lack (written by a host whose schema
  /// did not have it yet, during a rolling upgrade) takes its value from
  /// `fallback` (this host's image, in `wanted` order): the other host did
  /// not touch it. NULL when there is none.
  static func values(_ values: [RowValue], columns: String, as wanted: [String], else fallback: [RowValue]?) throws
    -> [RowValue]
  {
    let names = try JSONDecoder().decode([String].self, from: Data(columns.utf8))
    guard names != wanted else { return values }
    var byName: [String: RowValue] = [:]
    for (name, value) in zip(names, values) { byName[name.lowercased()] = value }
    return wanted.indices.map { byName[wanted[$0].lowercased()] ?? fallback?[$0] ?? .null }
  }

  /// Records this host's rows of its own `entry`: a new row's global ID
  /// (mapped to the rowid the image carries, unless that rowid is mapped
  /// already), and the position of the rows that won; a row deleted here
  /// becomes a tombstone if its rowid was not reused.
  static func recordWinners(_ entry: LogEntry, position: Int64, _ db: Database) throws {
    for table in entry.tables {
      let shape = try TableShape.read(db, table: table.name, store: "")
      for row in table.rows {
        let known = try GlobalIDTable.entry(db, table: table.name, gid: row.gid)
        if let rowID = row.rowID, row.values != nil, known == nil,
          try GlobalIDTable.entry(db, table: table.name, rowID: rowID) == nil
        {
          try GlobalIDTable.set(.init(gid: row.gid, rowID: rowID, position: 0), db, table: table.name)
        }
        guard row.lost != true else { continue }
        var deleted = false
        if row.values == nil, let rowID = row.rowID {
          deleted = try shape?.values(db, rowID: rowID) == nil
        }
        // The values the log now holds for the row: the next update's base.
        let base = row.values.map { values -> GlobalIDTable.StoredBase in
          let (columns, values) = (row.assignments(table.columns).columns, values)
          guard row.isPartial else { return GlobalIDTable.StoredBase(values, columns: columns) }
          var merged = known?.base?.values ?? [:]
          for (column, value) in zip(columns, values) { merged[column.lowercased()] = value }
          return GlobalIDTable.StoredBase(merged)
        }
        try GlobalIDTable.raisePosition(
          db, table: table.name, gid: row.gid, to: position, deleted: deleted, base: base)
      }
    }
  }
}
