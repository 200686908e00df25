import Foundation

/// A shipment's statements: the rows it writes locked and read, then the
/// position taken, the images and the entry written, in two round trips
/// (see ``Shipper``).
extension SharedLog {
  /// A row of `gs_row`: its current image, the position and host that
  /// wrote it, its columns (a JSON array) and values (JSON; nil: deleted).
  struct CurrentRow: Sendable, Equatable {
    let table: String
    let gid: String
    let position: Int64
    let host: String
    let columns: String
    let data: String?
  }

  /// What a shipment's first round trip found, its transaction left open.
  struct OpenShipment: Sendable {
    /// This host's shipped place in `gs_host` (0 when none), locked.
    let shippedPlace: Int64
    /// The current images of the rows the shipment writes, locked.
    let rows: [CurrentRow]
  }

  /// An image that goes into `gs_row` as the row's current one.
  struct Winner: Sendable, Equatable {
    let table: String
    let gid: String
    let columns: String
    let data: String?
  }

  /// What a shipment writes in its second round trip.
  struct Shipment: Sendable {
    /// The local sequence it ships through (`gs_host.shipped_seq`, and the
    /// entry's `origin_seq`).
    let through: Int64
    /// The entry's body (``LogEntry/encoded()``).
    let body: String
    /// Entries older than the newest minus this are purged (nil: none).
    let retention: Int64?
    let winners: [Winner]
    /// The conflicts settled, each with its record as JSON.
    let conflicts: [(record: ConflictRecord, json: String)]
  }

  /// `BEGIN`, then locks `replica`'s row of `gs_host` and the rows of
  /// `gs_row` named by `targets`, and reads them: one round trip. The
  /// transaction stays open for ``finishShipment(_:_:)`` (or a rollback).
  func beginShipment(_ replica: Replica, targets: [(table: String, gid: String)]) throws -> OpenShipment {
    let results = try connection.run([
      .init("BEGIN"),
      .init(
        "SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3 FOR UPDATE",
        [replica.group, replica.store, replica.host]),
      .init(
        """
        SELECT r.tbl, r.gid, r.seq, r.origin_host, r.columns, r.data
        FROM gs_row r JOIN unnest($3::text[], $4::text[]) AS w(tbl, gid) ON r.tbl = w.tbl AND r.gid = w.gid
        WHERE r.grp = $1 AND r.store = $2 ORDER BY r.tbl, r.gid FOR UPDATE OF r
        """,
        [replica.group, replica.store, PostgresArray.literal(targets.map(\.table)),
         PostgresArray.literal(targets.map(\.gid))]),
    ])
    let rows = results[2].compactMap { row -> CurrentRow? in
      guard let table = row[0], let gid = row[1], let position = Self.integer(row[2]), let host = row[3],
        let columns = row[4]
      else { return nil }
      return CurrentRow(table: table, gid: gid, position: position, host: host, columns: columns, data: row[5])
    }
    return OpenShipment(shippedPlace: Self.integer(results[1].first?[0] ?? nil) ?? 0, rows: rows)
  }

  /// In one statement: takes the next position (`UPDATE gs_clock …
  /// RETURNING seq`: the row lock orders shippers, so positions are
  /// gapless and in commit order), records the winners, appends the entry
  /// and its conflicts, moves the shipped place, purges what retention
  /// lets go and rings the doorbell; `COMMIT` in the same pipeline, so the
  /// server runs it through without waiting for this host. Returns the
  /// entry's position.
  ///
  /// - Throws: ``RelayError/invalidEntry(store:sequence:reason:)`` when
  ///   `gs_clock` has no row for the store.
  func finishShipment(_ replica: Replica, _ shipment: Shipment) throws -> Int64 {
    let conflicts = shipment.conflicts.map(\.record)
    let results = try connection.run([
      .init(
        """
        WITH clock AS (
          UPDATE gs_clock SET seq = seq + 1,
            purged_through = CASE WHEN $6::bigint IS NULL THEN purged_through
                                  ELSE greatest(purged_through, seq + 1 - $6::bigint) END
          WHERE grp = $1 AND store = $2 RETURNING seq, purged_through),
        rows AS (
          INSERT INTO gs_row(grp, store, tbl, gid, seq, origin_host, columns, data)
          SELECT $1, $2, w.tbl, w.gid, clock.seq, $3, w.columns, w.data
          FROM clock, unnest($7::text[], $8::text[], $9::text[], $10::text[]) AS w(tbl, gid, columns, data)
          ON CONFLICT (grp, store, tbl, gid) DO UPDATE SET seq = excluded.seq,
            origin_host = excluded.origin_host, columns = excluded.columns, data = excluded.data),
        entry AS (
          INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body)
          SELECT $1, $2, clock.seq, $3, $4::bigint, $5 FROM clock),
        conflicts AS (
          INSERT INTO gs_conflict(grp, store, seq, tbl, gid, rule, winner_host, loser_host, record)
          SELECT $1, $2, clock.seq, c.tbl, c.gid, c.rule, c.winner, c.loser, c.record
          FROM clock, unnest($11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
            AS c(tbl, gid, rule, winner, loser, record)),
        place AS (
          UPDATE gs_host SET shipped_seq = $4::bigint, seen_at = now() WHERE grp = $1 AND store = $2 AND host = $3),
        purge AS (
          DELETE FROM gs_change WHERE grp = $1 AND store = $2 AND seq <= (SELECT purged_through FROM clock))
        SELECT seq, pg_notify($17, $1 || '/' || $2 || ':' || seq) FROM clock
        """,
        [
          replica.group, replica.store, replica.host, String(shipment.through), shipment.body,
          shipment.retention.map { String($0) },
          PostgresArray.literal(shipment.winners.map(\.table)), PostgresArray.literal(shipment.winners.map(\.gid)),
          PostgresArray.literal(shipment.winners.map(\.columns)), PostgresArray.literal(shipment.winners.map(\.data)),
          PostgresArray.literal(conflicts.map(\.table)), PostgresArray.literal(conflicts.map(\.gid)),
          PostgresArray.literal(conflicts.map(\.rule)), PostgresArray.literal(conflicts.map(\.winnerHost)),
          PostgresArray.literal(conflicts.map(\.loserHost)), PostgresArray.literal(shipment.conflicts.map(\.json)),
          Self.channel,
        ]),
      .init("COMMIT"),
    ])
    guard let position = Self.integer(results[0].first?[0] ?? nil) else {
      throw RelayError.invalidEntry(store: replica.store, sequence: 0, reason: "gs_clock returned no position")
    }
    return position
  }
}
