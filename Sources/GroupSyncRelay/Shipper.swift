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
    var tables: [TableImage]
    var unsupported: [RelayError]
    var notes: [ShippedNote] = []
  }

  /// Ships what is pending; returns whether anything went to the log.
  @discardableResult
  func ship(_ connection: PostgresConnection) throws -> Bool {
    guard let plan = try makePlan() else { return false }
    for error in plan.unsupported { context.emit(.error(error.description)) }
    guard plan.changeSets > 0 else {
      // Only the relay's own writes since the last shipment: nothing to
      // send; the place moves on in memory (and with the next shipment).
      context.place.shipped = plan.through
      return false
    }
    let outcome = try send(plan, connection)
    try recordShipped(plan: plan, outcome: outcome)
    return true
  }

  /// Reads the unshipped rows in one read snapshot, and gives new rows
  /// their global IDs in memory: they are recorded here after COMMIT, with
  /// the positions (and, after a crash, from the log's own entries, which
  /// carry the origin's rowids), so no local commit delays a shipment.
  private func makePlan() throws -> Plan? {
    let context = self.context
    // Most wake-ups find nothing new: ask without a transaction first.
    guard try context.store.currentSequence() > context.place.shipped else { return nil }
    return try context.store.read { db -> Plan? in
      // Another process may have changed the schema since GRDB cached it.
      db.clearSchemaCache()
      let pending = try context.unshipped(db)
      guard pending.head > context.place.shipped else { return nil }
      var plan = Plan(
        through: pending.head, changeSets: pending.changeSets, tables: [], unsupported: [], notes: pending.notes)
      guard pending.changeSets > 0 || pending.everything else { return plan }
      plan.changeSets = max(plan.changeSets, 1)
      var tables = Set(pending.rows.keys).union(pending.wholeTables)
      if pending.everything { tables.formUnion(try TableShape.userTables(db)) }
      for table in tables.sorted() {
        let shape: TableShape
        do {
          guard let read = try TableShape.read(db, table: table, store: context.storeName) else { continue }
          shape = read
        } catch let error as RelayError {
          plan.unsupported.append(error)
          continue
        }
        let whole = pending.everything || pending.wholeTables.contains(table)
        var images: [RowImage] = []
        var mapped = try RowIdentityMap.liveEntries(db, table: table)
        func image(rowID: Int64, values: [RowValue]?) throws {
          if let entry = mapped.removeValue(forKey: rowID) {
            images.append(RowImage(gid: entry.gid, rowID: rowID, base: entry.position, values: values, lost: nil))
          } else if let values {
            let gid = UUID().uuidString.lowercased()
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
      return plan
    }
  }

  enum Outcome {
    /// Shipped as entry `position` with these resolved images.
    case shipped(position: Int64, entry: LogEntry)
    /// PostgreSQL already had it (shipped by a relay killed before it
    /// could record so here): its place is `shipped`.
    case alreadyShipped(shipped: Int64)
  }

  private func send(_ plan: Plan, _ connection: PostgresConnection) throws -> Outcome {
    let context = self.context
    let keys: [String?] = [context.group, context.storeName]
    do {
      return try shipTransaction(plan, connection, keys: keys)
    } catch let already as AlreadyShipped {
      return .alreadyShipped(shipped: already.shipped)
    }
  }

  /// Thrown inside the shipping transaction to roll it back.
  private struct AlreadyShipped: Error {
    let shipped: Int64
  }

  private func shipTransaction(_ plan: Plan, _ connection: PostgresConnection, keys: [String?]) throws -> Outcome {
    let context = self.context
    return try connection.transaction {
      // gs_host's and gs_clock's rows exist: Relay.recover makes them on
      // every connect. One round trip locks this host's row, reads its
      // shipped place, and takes the next position: the clock row's lock
      // orders this shipment among all shippers of the store until COMMIT,
      // so positions are gapless and in commit order. (Already shipped: the
      // ROLLBACK undoes the increment.)
      let clock = try connection.execute(
        """
        WITH host AS (
          SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3 FOR UPDATE)
        UPDATE gs_clock SET seq = seq + 1 WHERE grp = $1 AND store = $2
        RETURNING seq, (SELECT shipped_seq FROM host)
        """, keys + [context.host])
      guard let text = clock.first?[0] ?? nil, let position = Int64(text) else {
        throw RelayError.invalidEntry(store: context.storeName, sequence: 0, reason: "gs_clock returned no position")
      }
      let shippedPlace = clock.first.flatMap { $0[1] }.flatMap { Int64($0) } ?? 0
      if shippedPlace >= plan.through { throw AlreadyShipped(shipped: shippedPlace) }
      var entry = LogEntry(tables: [], conflicts: [], notes: plan.notes.isEmpty ? nil : plan.notes)
      for table in plan.tables {
        let resolved = try settle(table, position: position, connection: connection, conflicts: &entry.conflicts)
        if !resolved.rows.isEmpty { entry.tables.append(resolved) }
      }
      let body = try entry.encoded()
      for conflict in entry.conflicts {
        let record = String(decoding: try JSONEncoder().encode(conflict), as: UTF8.self)
        try connection.execute(
          """
          INSERT INTO gs_conflict(grp, store, seq, tbl, gid, rule, winner_host, loser_host, record)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
          """,
          keys + [String(position), conflict.table, conflict.gid, conflict.rule, conflict.winnerHost,
                  conflict.loserHost, record])
      }
      // The entry, the shipped place, the purge of what retention lets go
      // and the doorbell, in one round trip (data-modifying WITH clauses
      // run whether or not the final SELECT reads them).
      let horizon = context.retention.map { position - $0 } ?? 0
      try connection.execute(
        """
        WITH entry AS (
          INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body) VALUES ($1, $2, $3, $4, $5, $6)),
        place AS (
          UPDATE gs_host SET shipped_seq = $5, seen_at = now() WHERE grp = $1 AND store = $2 AND host = $4),
        purge AS (
          DELETE FROM gs_change WHERE grp = $1 AND store = $2 AND seq <= $7),
        horizon AS (
          UPDATE gs_clock SET purged_through = $7 WHERE grp = $1 AND store = $2 AND purged_through < $7)
        SELECT pg_notify($8, $9)
        """,
        keys + [String(position), context.host, String(plan.through), body, String(horizon), LogSchema.channel,
                "\(context.group)/\(context.storeName):\(position)"])
      return .shipped(position: position, entry: entry)
    }
  }

  /// Settles one table's images against the rows' current images in
  /// `gs_row` (locked), records the winners there, and returns the images
  /// every host is to apply.
  private func settle(
    _ table: TableImage, position: Int64, connection: PostgresConnection, conflicts: inout [ConflictRecord]
  ) throws -> TableImage {
    let context = self.context
    let keys: [String?] = [context.group, context.storeName, table.name]
    var current: [String: (seq: Int64, host: String, columns: String, data: String?)] = [:]
    let rows = try connection.execute(
      """
      SELECT gid, seq, origin_host, columns, data FROM gs_row
      WHERE grp = $1 AND store = $2 AND tbl = $3 AND gid = ANY($4::text[]) FOR UPDATE
      """, keys + [PostgresArray.literal(table.rows.map(\.gid))])
    for row in rows {
      guard let gid = row[0], let seq = row[1].flatMap({ Int64($0) }), let host = row[2], let columns = row[3] else {
        continue
      }
      current[gid] = (seq, host, columns, row[4])
    }
    let columnsJSON = String(decoding: try JSONEncoder().encode(table.columns), as: UTF8.self)
    var resolved = table
    resolved.rows = []
    var winners: [(gid: String, data: String?)] = []
    for image in table.rows {
      let data = try image.values.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
      guard let now = current[image.gid], now.seq > image.base else {
        resolved.rows.append(image)
        winners.append((image.gid, data))
        continue
      }
      // The row moved on in the log since the image this host wrote on.
      // In this shipment's column order: hosts may list the same columns
      // in another order (a column added later by ALTER TABLE).
      let theirs = try now.data.map {
        try Self.values(try JSONDecoder().decode([RowValue].self, from: Data($0.utf8)), columns: now.columns, as: table.columns)
      }
      if now.data == data && now.columns == columnsJSON {
        // The same values: no conflict, and nothing to change.
        continue
      }
      if table.isSnapshot {
        // A table shipped whole carries every row, changed or not: an
        // older image of it never overwrites a newer one, and this host,
        // which held the newer one back meanwhile, takes it from here.
        resolved.rows.append(
          RowImage(gid: image.gid, rowID: image.rowID, base: now.seq, values: theirs, lost: true))
        continue
      }
      var record = ConflictRecord(
        store: context.storeName, table: table.name, gid: image.gid, sequence: position, columns: table.columns,
        winnerHost: context.host, winnerValues: image.values, loserHost: now.host, loserValues: theirs,
        rule: context.policy.rawValue)
      switch context.policy {
      case .lastWriterWins:
        resolved.rows.append(image)
        winners.append((image.gid, data))
      case .firstWriterWins:
        record.winnerHost = now.host
        record.winnerValues = theirs
        record.loserHost = context.host
        record.loserValues = image.values
        // Every host, this one too, applies the winner's values.
        resolved.rows.append(
          RowImage(gid: image.gid, rowID: image.rowID, base: now.seq, values: theirs, lost: true))
      }
      conflicts.append(record)
    }
    if !winners.isEmpty {
      try connection.execute(
        """
        INSERT INTO gs_row(grp, store, tbl, gid, seq, origin_host, columns, data)
        SELECT $1, $2, $3, w.gid, $4, $5, $6, w.data FROM unnest($7::text[], $8::text[]) AS w(gid, data)
        ON CONFLICT (grp, store, tbl, gid) DO UPDATE
          SET seq = excluded.seq, origin_host = excluded.origin_host, columns = excluded.columns, data = excluded.data
        """,
        keys + [String(position), context.host, columnsJSON, PostgresArray.literal(winners.map(\.gid)),
                PostgresArray.literal(winners.map(\.data))])
    }
    return resolved
  }

  /// After COMMIT returned: the rows that won hold their new position
  /// here, so that an older remote image of them is never applied over
  /// them, and the shipped place moves on.
  private func recordShipped(plan: Plan, outcome: Outcome) throws {
    let context = self.context
    switch outcome {
    case .alreadyShipped(let shipped):
      // A relay killed after COMMIT: catch up from the log (Relay does it
      // on every connect), then ship what is left.
      throw RelayError.invalidEntry(
        store: context.storeName, sequence: shipped,
        reason: "the log already holds this host's shipment through local sequence \(shipped); recovering")
    case .shipped(let position, let entry):
      try context.store.write { db in
        try Self.recordWinners(entry, position: position, db)
        var place = try RowIdentityMap.place(db, group: context.group, host: context.host)
        place.shipped = max(place.shipped, plan.through)
        try RowIdentityMap.setPlace(place, db, group: context.group, host: context.host)
      }
      context.place.shipped = max(context.place.shipped, plan.through)
      context.conflicts += Int64(entry.conflicts.count)
      context.emit(
        .shipped(
          store: context.storeName, position: position, localSequence: plan.through, changeSets: plan.changeSets,
          rows: entry.rowCount))
      for conflict in entry.conflicts { context.emit(.conflict(conflict)) }
    }
  }

  /// `values`, listed in the order of the JSON array `columns`, in the
  /// order of `wanted` (a column missing from them is NULL).
  static func values(_ values: [RowValue], columns: String, as wanted: [String]) throws -> [RowValue] {
    let names = try JSONDecoder().decode([String].self, from: Data(columns.utf8))
    guard names != wanted else { return values }
    var byName: [String: RowValue] = [:]
    for (name, value) in zip(names, values) { byName[name.lowercased()] = value }
    return wanted.map { byName[$0.lowercased()] ?? .null }
  }

  /// Records this host's rows of its own `entry`: a new row's global ID
  /// (mapped to the rowid the image carries, unless that rowid is mapped
  /// already), and the position of the rows that won; a row deleted here
  /// becomes a tombstone if its rowid was not reused.
  static func recordWinners(_ entry: LogEntry, position: Int64, _ db: Database) throws {
    for table in entry.tables {
      let shape = try TableShape.read(db, table: table.name, store: "")
      for row in table.rows {
        if let rowID = row.rowID, row.values != nil,
          try RowIdentityMap.entry(db, table: table.name, gid: row.gid) == nil,
          try RowIdentityMap.entry(db, table: table.name, rowID: rowID) == nil
        {
          try RowIdentityMap.set(.init(gid: row.gid, rowID: rowID, position: 0), db, table: table.name)
        }
        guard row.lost != true else { continue }
        var deleted = false
        if row.values == nil, let rowID = row.rowID {
          deleted = try shape?.values(db, rowID: rowID) == nil
        }
        try RowIdentityMap.raisePosition(db, table: table.name, gid: row.gid, to: position, deleted: deleted)
      }
    }
  }
}
