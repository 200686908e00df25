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

  /// Ships what is pending.
  func ship(_ log: SharedLog) throws -> Shipment {
    let start = ContinuousClock.now
    guard let plan = try makePlan() else { return .nothing }
    for error in plan.unsupported { context.emit(.error(error.description)) }
    for warning in plan.warnings { context.emit(.error(warning)) }
    guard plan.changeSets > 0 else {
      // Only the relay's own writes since the last shipment: nothing to
      // send; the place moves on in memory (and with the next shipment).
      context.place.skip(through: plan.through)
      return .nothing
    }
    switch try send(plan, log) {
    case .alreadyShipped(let shipped):
      // A relay killed after COMMIT: catch up from the log (Relay does it
      // on every connect), then ship what is left.
      return .recover(.alreadyShipped(store: context.storeName, through: shipped))
    case .shipped(let position, let entry, let bytes, let caughtUp):
      try recordShipped(plan: plan, position: position, entry: entry, bytes: bytes, caughtUp: caughtUp)
      if context.place.current.applied == position { log.recordApplied(context.replica, through: position) }
      ReplicaMetrics.record(context.metrics.shipDuration, since: start)
      return .shipped
    }
  }

  /// Reads the unshipped rows in one read snapshot, and gives new rows
  /// their global IDs in memory: they are recorded here after COMMIT, with
  /// the positions (and, after a crash, from the log's own entries, which
  /// carry the origin's rowids), so no local commit delays a shipment.
  private func makePlan() throws -> Plan? {
    let context = self.context
    // Most wake-ups find nothing new: ask without a transaction first.
    guard try context.store.currentSequence() > context.place.current.shipped else { return nil }
    return try context.store.read { db -> Plan? in
      // (A pool read refreshes GRDB's schema cache when another process
      // changed the schema.) A migration since the relay last reconciled with it ships on the
      // next pass, after the values kept for its new columns are filled in
      // (``Applier/reconcileSchema()``): a table it makes ship whole ships
      // them. (No known version: nothing reconciles here, as in a test that
      // drives the shipper alone.)
      if let known = context.schemaVersion,
        try StoreSchema.version(db) != known
      {
        return nil
      }
      let pending = try context.unshipped(db)
      guard pending.head > context.place.current.shipped else { return nil }
      var plan = Plan(
        through: pending.head, changeSets: pending.changeSets, tables: [], unsupported: [], notes: pending.notes)
      guard pending.changeSets > 0 || pending.everything else { return plan }
      plan.changeSets = max(plan.changeSets, 1)
      var tables = Set(pending.rows.keys).union(pending.wholeTables)
      if pending.everything { tables.formUnion(try TableShape.userTables(db)) }
      // The global IDs given to new rows of this shipment, by table and rowid.
      var assigned: [String: [Int64: String]] = [:]
      for table in tables.sorted() {
        let shape: TableShape
        switch try TableShape.lookUp(db, table: table) {
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
      return plan
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

  enum Outcome {
    /// Shipped as entry `position` with these resolved images.
    /// Rows it left out, the log holding the same values already, are
    /// `caughtUp`.
    case shipped(position: Int64, entry: LogEntry, bytes: Int, caughtUp: [CaughtUp])
    /// PostgreSQL already had it (shipped by a relay killed before it
    /// could record so here): its place is `shipped`.
    case alreadyShipped(shipped: Int64)
  }

  /// One shipment, in one round trip when no row it writes moved on in
  /// the log since the image this host wrote on (``SharedLog/ship(_:_:settled:)``,
  /// the usual case); else in two more, so that the store's clock row is
  /// never locked while the server waits for this host:
  ///
  /// 1. lock this host's shipped place and the rows of `gs_row` the
  ///    shipment writes, and read their images
  ///    (``SharedLog/beginShipment(_:targets:)``);
  /// 2. settle each image against them here, then ship settled: take the
  ///    next position, record the winners, append the entry and its
  ///    conflicts and move the shipped place, through `COMMIT`.
  ///
  /// The server runs the second batch through COMMIT without waiting for
  /// the client: a host cut off or frozen at any instant holds no clock
  /// lock, and the row locks of step 1 at most until the server's
  /// `idle_in_transaction_session_timeout` ends its session.
  private func send(_ plan: Plan, _ log: SharedLog) throws -> Outcome {
    let context = self.context
    // A stall asked for (a frozen host, in a test) is one between the
    // settled path's two round trips.
    if !context.failpoints.stallsNextShipment(carriesRows: !plan.tables.isEmpty) {
      let format = context.writeFormat
      let entry = LogEntry(
        tables: plan.tables.map { shipped($0, plan: plan, format: format) }, conflicts: [],
        notes: plan.notes.isEmpty ? nil : plan.notes)
      let winners = try plan.tables.flatMap { table in
        let columns = try Self.json(table.columns)
        return try table.rows.map { image in
          SharedLog.Winner(
            table: table.name, gid: image.gid, base: image.base, columns: columns,
            data: try image.values.map { try StoredImage.encode($0, format: format) })
        }
      }
      let body = try entry.encoded(format: format)
      let shipment = SharedLog.Shipment(
        through: plan.through, body: body, format: format, retention: context.retention, winners: winners,
        conflicts: [])
      switch try log.ship(context.replica, shipment, settled: false) {
      case .shipped(let position): return .shipped(position: position, entry: entry, bytes: body.utf8.count, caughtUp: [])
      case .alreadyShipped(let through): return .alreadyShipped(shipped: through)
      case .rowsMoved: break
      }
    }
    return try sendSettled(plan, log)
  }

  /// ``send(_:_:)`` when rows moved: settled here between two round trips.
  private func sendSettled(_ plan: Plan, _ log: SharedLog) throws -> Outcome {
    let context = self.context
    let targets = plan.tables.flatMap { table in table.rows.map { (table: table.name, gid: $0.gid) } }
    do {
      let opening = try log.beginShipment(context.replica, targets: targets)
      if opening.shippedPlace >= plan.through {
        log.rollBackQuietly()
        return .alreadyShipped(shipped: opening.shippedPlace)
      }
      var current: [RowKey: SharedLog.CurrentRow] = [:]
      for row in opening.rows { current[RowKey(table: row.table, gid: row.gid)] = row }
      var entry = LogEntry(tables: [], conflicts: [], notes: plan.notes.isEmpty ? nil : plan.notes)
      var winners: [SharedLog.Winner] = []
      var caughtUp: [CaughtUp] = []
      for table in plan.tables {
        let resolved = try settle(
          table, plan: plan, current: current, conflicts: &entry.conflicts, winners: &winners, caughtUp: &caughtUp)
        if !resolved.rows.isEmpty { entry.tables.append(resolved) }
      }
      let format = context.writeFormat
      let conflicts = try entry.conflicts.map { ($0, format.wrap(try Self.json($0), as: "r")) }
      context.failpoints.stallInShipment(stop: context.stop, carriesRows: !plan.tables.isEmpty)
      let body = try entry.encoded(format: format)
      let shipped = try log.ship(
        context.replica,
        SharedLog.Shipment(
          through: plan.through, body: body, format: format, retention: context.retention, winners: winners,
          conflicts: conflicts),
        settled: true)
      guard case .shipped(let position) = shipped else {
        throw RelayError.invalidEntry(store: context.storeName, sequence: 0, reason: "a settled shipment was refused")
      }
      for index in entry.conflicts.indices { entry.conflicts[index].sequence = position }
      return .shipped(position: position, entry: entry, bytes: body.utf8.count, caughtUp: caughtUp)
    } catch {
      log.rollBackQuietly()
      throw error
    }
  }

  /// `value` as JSON text.
  private static func json(_ value: some Encodable) throws -> String {
    String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
  }

  /// A row a shipment left out because the log held the same values: its
  /// position and values there.
  struct CaughtUp {
    let table: String
    let gid: String
    let position: Int64
    let values: [RowValue]?
    let columns: [String]
  }

  /// A row of `gs_row`, by table and global ID.
  struct RowKey: Hashable {
    let table: String
    let gid: String
  }

  /// `table` as the entry's body carries it in `format`: from format 2 on,
  /// an update of a row whose base this host knows lists only the columns
  /// it changed since (a table shipped whole lists every row whole).
  private func shipped(_ table: TableImage, plan: Plan, format: LogFormat) -> TableImage {
    guard format.mergesByProperty, !table.isSnapshot else { return table }
    var shipped = table
    for index in shipped.rows.indices {
      let image = shipped.rows[index]
      guard image.base > 0, image.values != nil,
        let base = plan.bases[RowKey(table: table.name, gid: image.gid)]?.values
      else { continue }
      shipped.rows[index] = image.changes(from: base, columns: table.columns)
    }
    return shipped
  }

  /// Settles one table's images against the rows' current images in
  /// `gs_row` (locked), collects the winners to record there, and returns
  /// the images every host is to apply. Conflicts get the entry's position
  /// once the server has assigned it.
  ///
  /// A row that moved on in the log since the image this host wrote on is
  /// merged with it by property (log format 2, ``PropertyMerge``), or, in
  /// format 1, settled whole by the policy. The settled row ships whole; the
  /// origin applies it too where it differs from what it wrote (`lost`).
  private func settle(
    _ table: TableImage, plan: Plan, current: [RowKey: SharedLog.CurrentRow], conflicts: inout [ConflictRecord],
    winners: inout [SharedLog.Winner], caughtUp: inout [CaughtUp]
  ) throws -> TableImage {
    let context = self.context
    let columnsJSON = try Self.json(table.columns)
    let format = context.writeFormat
    var resolved = table
    resolved.rows = []
    for image in table.rows {
      let key = RowKey(table: table.name, gid: image.gid)
      guard let now = current[key], now.position > image.base else {
        let body = shipped(TableImage(name: table.name, columns: table.columns, isSnapshot: table.isSnapshot, rows: [image]), plan: plan, format: format)
        resolved.rows.append(body.rows[0])
        winners.append(
          SharedLog.Winner(
            table: table.name, gid: image.gid, base: image.base, columns: columnsJSON,
            data: try image.values.map { try StoredImage.encode($0, format: format) }))
        continue
      }
      // The row moved on in the log since the image this host wrote on.
      // In this shipment's column order: hosts may list the same columns
      // in another order (a column added later by ALTER TABLE).
      let theirs = try now.data.map {
        try Self.values(
          try StoredImage.decode($0, formats: context.version.reads, store: context.storeName, position: now.position),
          columns: now.columns, as: table.columns, else: image.values)
      }
      if theirs == image.values && now.columns == columnsJSON {
        // The same values: no conflict, and nothing to ship. This host
        // holds the log's image of the row as of its position, so that no
        // older entry is applied over it (a partial one to a row both
        // deleted, say).
        caughtUp.append(
          CaughtUp(table: table.name, gid: image.gid, position: now.position, values: theirs, columns: table.columns))
        continue
      }
      if table.isSnapshot {
        // A table shipped whole carries every row, changed or not: an
        // older image of it never overwrites a newer one, and this host,
        // which held the newer one back meanwhile, takes it from here.
        resolved.rows.append(
          RowImage(gid: image.gid, rowID: image.rowID, base: now.position, values: theirs, lost: true))
        continue
      }
      let merge = PropertyMerge(
        store: context.storeName, table: table.name, gid: image.gid, columns: table.columns, ourHost: context.host,
        theirHost: now.host, rules: context.merge)
      var result: PropertyMerge.Result
      if format.mergesByProperty {
        result = merge.merge(base: plan.bases[key]?.values, ours: image.values, theirs: theirs)
        if let merged = result.values, merged != image.values, merged != theirs,
          let refusal = try MergeCheck.refusal(merged, columns: table.columns, table: table.name, context: context)
        {
          result = merge.wholeRow(
            ours: image.values, theirs: theirs, reason: "the merged row breaks a constraint of \(table.name): \(refusal)")
        }
      } else {
        // Format 1: relays that do not merge by property read the log.
        result = merge.wholeRow(ours: image.values, theirs: theirs, reason: nil)
      }
      conflicts += result.conflicts
      // Every host applies the settled row, this one where it differs from
      // what it wrote; the log's current image changes unless it stays.
      let ours = result.values == image.values
      resolved.rows.append(
        RowImage(
          gid: image.gid, rowID: image.rowID, base: ours ? image.base : now.position, values: result.values,
          lost: ours ? nil : true))
      if result.values != theirs {
        winners.append(
          SharedLog.Winner(
            table: table.name, gid: image.gid, base: image.base, columns: columnsJSON,
            data: try result.values.map { try StoredImage.encode($0, format: format) }))
      }
    }
    return resolved
  }

  /// After COMMIT returned: the rows that won hold their new position
  /// here, so that an older remote image of them is never applied over
  /// them, and the shipped place moves on.
  ///
  /// The entry right after the applied place that settled nothing (no
  /// conflict, no row taken back: every image as this host wrote it) has
  /// nothing to apply here, so it counts as applied in the same
  /// transaction; the applier then skips it.
  private func recordShipped(plan: Plan, position: Int64, entry: LogEntry, bytes: Int, caughtUp: [CaughtUp]) throws {
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
