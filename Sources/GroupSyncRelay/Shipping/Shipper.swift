// Shipping local commits to the shared log: the plan of what is pending
// (rows, references, notes) read in one snapshot, then sent.
import Foundation
import GRDB
import GroupSync

/// Ships a store's local change sets to the log: one PostgreSQL
/// transaction per shipment, which takes the next position under the
/// store's clock row, settles concurrent writes against `gs_row`, appends
/// the resolved images to `gs_change` and moves this host's shipped place,
/// all or nothing.
///
/// A shipment covers every local change set not shipped yet up to the
/// store's sequence at the snapshot the images were read in. The relay's
/// own writes (applied entries, author ``ReplicaContext/author``) are
/// skipped: they came from the log.
struct Shipper {
  let context: ReplicaContext

  /// What one shipment will send, read in one local snapshot.
  struct Plan {
    var through: Int64
    var changeSets: Int
    /// Every row's whole image (what `gs_row` keeps).
    var tables: [TableImage]
    var unsupported: [RelayError]
    var notes: [ShippedNote] = []
    /// What the shipment could not say exactly (told as errors).
    var warnings: [String] = []
    /// The values each updated row was made on (its image at its base), by
    /// table and global ID, where this host knows them.
    var bases: [RowKey: GlobalIDTable.StoredBase] = [:]
  }

  /// What one call of ``ship(_:)`` did.
  enum Shipment: Equatable {
    /// Nothing was pending (or only the relay's own writes).
    case nothing
    /// A shipment went to the log.
    case shipped
    /// The log already holds this host's shipments past its shipped place
    /// here: the relay recovers (reads its place back) before it ships.
    case recover(RecoveryReason)
  }

  /// What the plan's one read found: nothing to ship, a schema the relay
  /// has not reconciled with yet, or what to ship.
  private enum Planned {
    case nothing
    case schemaMoved
    case plan(Plan)
  }

  /// Ships what is pending.
  func ship(_ log: SharedLog) throws -> Shipment {
    let start = ContinuousClock.now
    var read = try makePlan()
    while case .schemaMoved = read {
      // A migration here (or the relay's first shipment): its new columns
      // filled in before anything ships.
      try Applier(context: context).reconcileSchema()
      read = try makePlan()
    }
    guard case .plan(let plan) = read else { return .nothing }
    let planned = context.trace == nil ? 0 : RelayTrace.now()
    for error in plan.unsupported { context.emit(.error(error.description)) }
    for warning in plan.warnings { context.emit(.error(warning)) }
    guard plan.changeSets > 0 else {
      // Only the relay's own writes since the last shipment: nothing to
      // send; the place moves on in memory (and with the next shipment).
      context.place.pass { $0.shipped = max($0.shipped, plan.through) }
      return .nothing
    }
    switch try send(plan, log) {
    case .alreadyShipped(let shipped):
      // A relay killed after COMMIT: catch up from the log (Relay does it
      // on every connect), then ship what is left.
      return .recover(.alreadyShipped(store: context.storeName, through: shipped))
    case .serverBehind(let shipped):
      // The server changed under a session that lived on (a pooler keeps
      // the client's connection across a failover): read the places back.
      return .recover(
        .serverBehind(store: context.storeName, server: shipped, here: context.place.current.lastShipment))
    case .shipped(let position, let entry, let bytes, let caughtUp):
      // The instant a kill finds the server ahead of this store.
      let shipped = context.trace == nil ? 0 : RelayTrace.now()
      context.failpoints.shipmentCommitted()
      try recordShipped(plan: plan, position: position, entry: entry, bytes: bytes, caughtUp: caughtUp)
      if let trace = context.trace {
        trace.record(
          RelayTrace.Shipment(
            store: context.storeName, through: plan.through, position: position, rung: trace.rungAt,
            passBegan: trace.passBegan, planned: planned, encoded: trace.encoded, shipped: shipped,
            recorded: RelayTrace.now()))
      }
      if context.place.current.applied == position { log.recordApplied(context.replica, through: position) }
      ReplicaMetrics.record(context.metrics.shipDuration, since: start)
      return .shipped
    }
  }

  /// Reads the unshipped rows in one read snapshot, and gives new rows
  /// their global IDs in memory: they are recorded here after COMMIT, with
  /// the positions (and, after a crash, from the log's own entries, which
  /// carry the origin's rowids), so no local commit delays a shipment.
  ///
  /// The same read checks the schema first: after a migration since the
  /// relay last reconciled with it, ``ship(_:)`` fills in the values kept
  /// for its new columns (``Applier/reconcileSchema()``) and plans again:
  /// a table the migration makes ship whole ships them. One read, because
  /// most wake-ups find one commit to ship, and every read is a
  /// transaction of its own.
  private func makePlan() throws -> Planned {
    let context = self.context
    return try context.store.read { db -> Planned in
      // (A pool read refreshes GRDB's schema cache when another process
      // changed the schema.)
      let version = try StoreSchema.version(db)
      guard version == context.schemaVersion else { return .schemaMoved }
      let pending = try context.unshipped(db)
      guard pending.head > context.place.current.shipped else { return .nothing }
      var plan = Plan(
        through: pending.head, changeSets: pending.changeSets, tables: [], unsupported: [], notes: pending.notes)
      guard pending.changeSets > 0 || pending.everything else { return .plan(plan) }
      plan.changeSets = max(plan.changeSets, 1)
      var tables = Set(pending.rows.keys).union(pending.wholeTables)
      if pending.everything { tables.formUnion(try TableShape.userTables(db)) }
      // The global IDs given to new rows of this shipment, by table and rowid.
      var assigned: [String: [Int64: String]] = [:]
      for table in tables.sorted() {
        let shape: TableShape
        switch try context.shape(of: table, version: version, db) {
        case .table(let found): shape = found
        case .none: continue
        case .withoutRowID:
          // Told, and the other tables ship.
          plan.unsupported.append(TableShape.unsupported(table, store: context.storeName))
          continue
        }
        let whole = pending.everything || pending.wholeTables.contains(table)
        var images: [RowImage] = []
        // A table shipped whole needs every mapping (those left over were
        // deleted); otherwise only the changed rows' own, looked up by rowid.
        var mapped = whole ? try GlobalIDTable.liveEntries(db, table: table) : [:]
        func image(rowID: Int64, values: [RowValue]?) throws {
          let entry = whole ? mapped.removeValue(forKey: rowID) : try GlobalIDTable.entry(db, table: table, rowID: rowID)
          if let entry {
            images.append(RowImage(gid: entry.gid, rowID: rowID, base: entry.position, values: values, lost: nil))
            if entry.position > 0, let base = entry.base { plan.bases[RowKey(table: table, gid: entry.gid)] = base }
          } else if let values {
            let gid = UUID().uuidString.lowercased()
            assigned[table, default: [:]][rowID] = gid
            images.append(RowImage(gid: gid, rowID: rowID, base: 0, values: values, lost: nil))
          }
          // Neither mapped nor present: made and deleted before shipping.
        }
        if whole {
          for (rowID, values) in try shape.allRows(db) { try image(rowID: rowID, values: values) }
          // Mapped rows no longer there were deleted.
          for rowID in mapped.keys.sorted() { try image(rowID: rowID, values: nil) }
        } else {
          for rowID in (pending.rows[table] ?? []).sorted() {
            try image(rowID: rowID, values: try shape.values(db, rowID: rowID))
          }
        }
        if !images.isEmpty {
          plan.tables.append(TableImage(name: table, columns: shape.columns, isSnapshot: whole, rows: images))
        }
      }
      try translateReferences(&plan, assigned: assigned, db)
      return .plan(plan)
    }
  }

  /// Replaces each reference's rowid (this host's own) with the global ID
  /// of the row it points at, so that every host stores its own rowid of
  /// that same row.
  private func translateReferences(_ plan: inout Plan, assigned: [String: [Int64: String]], _ db: Database) throws {
    let graph = try context.referenceGraph(db)
    guard !graph.isEmpty else { return }
    for index in plan.tables.indices {
      let columns = plan.tables[index].columns
      let translated = graph.references(from: plan.tables[index].name).compactMap { reference in
        columns.firstIndex { $0.lowercased() == reference.column.lowercased() }.map { ($0, reference) }
      }
      guard !translated.isEmpty else { continue }
      for row in plan.tables[index].rows.indices {
        guard var values = plan.tables[index].rows[row].values else { continue }
        for (column, reference) in translated {
          guard case .integer(let rowID) = values[column] else { continue }
          if let gid = try assigned[reference.parent]?[rowID]
            ?? GlobalIDTable.entry(db, table: reference.parent, rowID: rowID)?.gid
            ?? GlobalIDTable.tombstone(db, table: reference.parent, formerRowID: rowID)?.gid
          {
            values[column] = .reference(gid)
          } else {
            // A row this host does not have (foreign keys off, or a
            // relation declared to the relay): no host can resolve it, so
            // every host holds the image and says why.
            values[column] = .reference("missing:\(context.host):\(reference.parent):\(rowID)")
            plan.warnings.append(
              "\(plan.tables[index].name).\(reference.column) of a row shipped from store '\(context.storeName)' "
                + "points at rowid \(rowID) of \(reference.parent), which this host does not have")
          }
        }
        plan.tables[index].rows[row].values = values
      }
    }
  }
}
