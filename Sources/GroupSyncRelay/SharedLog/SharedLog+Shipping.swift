import Foundation

/// A shipment's statements: in one round trip when no row it writes moved
/// on in the log meanwhile, else the rows locked and read, then the
/// position taken, the images and the entry written, in two more (see
/// ``Shipper``).
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

  /// An image that goes into `gs_row` as the row's current one, and the
  /// position of the image it was written on (checked when not settled).
  struct Winner: Sendable, Equatable {
    let table: String
    let gid: String
    let base: Int64
    let columns: String
    let data: String?
  }

  /// What a shipment writes.
  struct Shipment: Sendable {
    /// The local sequence it ships through (`gs_host.shipped_seq`, and the
    /// entry's `origin_seq`).
    let through: Int64
    /// The entry's body (``LogEntry/encoded(format:)``), and its format.
    let body: String
    let format: LogFormat
    /// Entries older than the newest minus this are purged (nil: none).
    let retention: Int64?
    let winners: [Winner]
    /// The conflicts settled, each with its record as JSON.
    let conflicts: [(record: ConflictRecord, json: String)]
  }

  /// `BEGIN`, then locks `replica`'s row of `gs_host` and the rows of
  /// `gs_row` named by `targets`, and reads them: one round trip. The
  /// transaction stays open for ``ship(_:_:settled:)`` (or a rollback).
  func beginShipment(_ replica: Replica, targets: [(table: String, gid: String)]) throws -> OpenShipment {
    let results = try connection.run([
      .init("BEGIN"),
      .init(
        "SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3 FOR UPDATE",
        [replica.group, replica.store, replica.host]),
      .init(
        """
        SELECT r.tbl, r.gid, r.seq, r.origin_host, r.columns, r.data
        FROM (SELECT DISTINCT u.tbl, u.gid FROM unnest($3::text[], $4::text[]) AS u(tbl, gid) ORDER BY u.tbl, u.gid) w
        CROSS JOIN LATERAL (
          SELECT g.tbl, g.gid, g.seq, g.origin_host, g.columns, g.data FROM gs_row g
          WHERE g.grp = $1 AND g.store = $2 AND g.tbl = w.tbl AND g.gid = w.gid FOR UPDATE) r
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

  /// How ``ship(_:_:settled:)`` ended.
  enum ShipOutcome: Sendable, Equatable {
    /// Appended as the entry at this position.
    case shipped(position: Int64)
    /// This host's shipped place on the server is already `through` or
    /// past it (a relay killed after COMMIT): nothing was written.
    case alreadyShipped(through: Int64)
    /// A row the shipment writes moved on in the log since the image this
    /// host wrote on: nothing was written; settle it
    /// (``beginShipment(_:targets:)``) and ship again, settled.
    case rowsMoved
  }

  /// Ships in one statement, `gs_ship_2`: unless `settled`, it locks this
  /// host's shipped place and the rows the shipment writes, and stops if
  /// the place is already past `through` or a row moved past the image's
  /// base; then it takes the next position (`UPDATE gs_clock … RETURNING
  /// seq`: the row lock orders shippers, so positions are gapless and in
  /// commit order), records the winners, appends the entry and its
  /// conflicts, moves the shipped place, purges what retention lets go
  /// and notifies (the entry itself in the payload when it fits and the
  /// log is not under row-level security, see ``Hint``). The group's
  /// format comes back with the outcome (``groupFormat``).
  ///
  /// Not `settled`: one statement on its own, so one round trip and its
  /// own transaction; the deferred bookkeeping rides along. `settled`:
  /// inside the transaction ``beginShipment(_:targets:)`` opened, with its
  /// `COMMIT` in the same pipeline, so the server runs it through without
  /// waiting for this host.
  ///
  /// - Throws: ``RelayError/invalidEntry(store:sequence:reason:)`` when
  ///   `gs_clock` has no row for the store.
  func ship(_ replica: Replica, _ shipment: Shipment, settled: Bool) throws -> ShipOutcome {
    let conflicts = shipment.conflicts.map(\.record)
    let statement = Statement(
      """
      SELECT outcome, pos, group_format FROM gs_ship_2($1, $2, $3, $4::bigint, $5, $6::bigint,
        $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[],
        $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::boolean, $19::smallint)
      """,
      [
        replica.group, replica.store, replica.host, String(shipment.through), shipment.body,
        shipment.retention.map { String($0) },
        PostgresArray.literal(shipment.winners.map(\.table)), PostgresArray.literal(shipment.winners.map(\.gid)),
        PostgresArray.literal(shipment.winners.map { String($0.base) }),
        PostgresArray.literal(shipment.winners.map(\.columns)), PostgresArray.literal(shipment.winners.map(\.data)),
        PostgresArray.literal(conflicts.map(\.table)), PostgresArray.literal(conflicts.map(\.gid)),
        PostgresArray.literal(conflicts.map(\.rule.rawValue)), PostgresArray.literal(conflicts.map(\.winnerHost)),
        PostgresArray.literal(conflicts.map(\.loserHost)), PostgresArray.literal(shipment.conflicts.map(\.json)),
        settled ? "true" : "false", String(shipment.format.rawValue),
      ])
    let rows = settled ? try connection.run([statement, Statement("COMMIT")])[0] : try exchange([statement])[0]
    let outcome = rows.first?[0] ?? nil, position = Self.integer(rows.first?[1] ?? nil) ?? 0
    if let format = Self.integer(rows.first?[2] ?? nil) { groupFormat = LogFormat(rawValue: Int(format)) }
    switch outcome {
    case "shipped": return .shipped(position: position)
    case "already": return .alreadyShipped(through: position)
    case "moved": return .rowsMoved
    default:
      throw RelayError.invalidEntry(store: replica.store, sequence: 0, reason: "gs_clock has no row for the store")
    }
  }
}
