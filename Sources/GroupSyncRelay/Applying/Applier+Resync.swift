// Re-synchronising a store from the rows' current images, when its
// place is no longer in the log (purged past, or lost in a failover).
import Foundation
import GRDB
import GroupSync

extension Applier {
  /// Re-synchronises the store from the rows' current images (`gs_row`),
  /// read in one snapshot with the log's position, when this host's place
  /// is no longer in the log. Rows changed here and not shipped yet are
  /// kept; they ship afterwards.
  ///
  /// `diverged`: the log lost entries this host applied or shipped (a
  /// failover to a standby that had not received them). The positions this
  /// host recorded may then name entries the log no longer holds (or holds
  /// other entries at), so none is trusted: every row takes the log's
  /// current image and position; a row the log does not know and this host
  /// did not change is deleted (it came from a lost entry: its origin ships
  /// it again); a row changed here keeps its values and ships as made on
  /// the log's current image.
  func resync(_ log: SharedLog, reason: String, diverged: Bool = false) throws {
    let context = self.context
    let snapshot = try log.snapshot(context.replica)
    let head = snapshot.head, headOrigin = snapshot.headOrigin
    var rowCount = 0
    try context.write { db in
      try context.refreshSchemaCache(db)
      let pass = try Pass(context, db)
      let pending = pass.pending
      if diverged {
        try GlobalIDTable.forgetPositions(db)
        try restoreDeletionsToShip(pending: pending, db)
      }
      var shapes: [String: TableShape?] = [:]
      var known: [String: Set<String>] = [:]
      for row in snapshot.rows {
        let table = row.table, gid = row.gid, position = row.position
        known[table, default: []].insert(gid)
        let columns = try JSONDecoder().decode([String].self, from: Data(row.columns.utf8))
        let values = try row.data.map {
          try StoredImage.decode($0, formats: context.version.reads, store: context.storeName, position: position)
        }
        let image = RowImage(gid: gid, rowID: nil, base: 0, values: values, lost: nil)
        let outcome = try applyImage(image, table: table, columns: columns, position: position, pass: pass, db, &shapes)
        if outcome == .changed {
          rowCount += 1
        } else if outcome == .unchanged, diverged, let mapping = try GlobalIDTable.entry(db, table: table, gid: gid), mapping.position == 0,
          pending.holds(mapping, table: table)
        {
          // Held: this host's change ships as made on the current image.
          try GlobalIDTable.raisePosition(db, table: table, gid: gid, to: position, deleted: false)
        }
      }
      rowCount += try applyHeldRows(pass: pass, db, &shapes)
      if diverged { rowCount += try removeRowsOfLostEntries(known: known, pass: pass, db) }
      try context.place.change(db) { place in
        place.applied = head
        place.appliedOrigin = headOrigin
      }
    }
    context.logHead = max(context.logHead, head)
    context.divergence = nil
    context.emit(.resync(store: context.storeName, position: head, rows: rowCount, reason: reason))
  }

  /// After a divergence: a row this host deleted and whose deletion
  /// shipped in an entry the log lost is a tombstone here, which the
  /// shipper (naming rows by rowid) cannot find: its global ID takes its
  /// former rowid again, so the deletion ships again (unless another row
  /// holds that rowid by now).
  private func restoreDeletionsToShip(pending: ReplicaContext.Unshipped, _ db: Database) throws {
    for (table, rowIDs) in pending.rows {
      guard let shape = (try? TableShape.read(db, table: table, store: context.storeName)) ?? nil else { continue }
      for rowID in rowIDs.sorted() where try shape.values(db, rowID: rowID) == nil {
        guard try GlobalIDTable.entry(db, table: table, rowID: rowID) == nil,
          let tombstone = try GlobalIDTable.tombstone(db, table: table, formerRowID: rowID)
        else { continue }
        try GlobalIDTable.set(.init(gid: tombstone.gid, rowID: rowID, position: 0), db, table: table)
      }
    }
  }

  /// After a divergence: deletes the rows the log does not know (mapped
  /// here, so they came through the log or were shipped from here) that
  /// this host did not change since its shipped place; their global IDs
  /// become tombstones of no position, so their origin can ship them again.
  private func removeRowsOfLostEntries(known: [String: Set<String>], pass: Pass, _ db: Database) throws -> Int {
    var removed = 0
    for table in try TableShape.userTables(db) {
      guard let shape = (try? TableShape.read(db, table: table, store: context.storeName)) ?? nil else { continue }
      for (rowID, entry) in try GlobalIDTable.liveEntries(db, table: table)
      where !(known[table]?.contains(entry.gid) ?? false) && !pass.pending.isDirty(table: table, rowID: rowID) {
        if try shape.values(db, rowID: rowID) != nil {
          try deleteRow(shape, rowID: rowID, position: 0, pass: pass, db)
          removed += 1
        }
        try GlobalIDTable.set(.init(gid: entry.gid, rowID: nil, position: 0), db, table: table)
      }
    }
    return removed
  }
}
