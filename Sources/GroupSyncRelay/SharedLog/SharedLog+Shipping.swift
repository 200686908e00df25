// SharedLog+Shipping: a shipment's statements, and how their answers read.
import Foundation

/// A shipment's statements: in one round trip when no row it writes moved
/// on in the log meanwhile, else the rows locked and read, then the
/// position taken, the images and the entry written, in two more (see
/// ``Shipper``).
extension SharedLog {
  /// A row of `gs_row` as a settled shipment locks and reads it: its
  /// current image (``StoredRow``, whose fields it answers to:
  /// `current.position`) and the host that wrote it.
  @dynamicMemberLookup
  struct CurrentRow: Sendable, Equatable {
    let row: StoredRow
    let host: String

    subscript<Value>(dynamicMember field: KeyPath<StoredRow, Value>) -> Value { row[keyPath: field] }
  }

  /// What a shipment's first round trip found, its transaction left open.
  struct OpenShipment: Sendable {
    /// This host's shipped place in `gs_host` (0 when none), locked.
    let shippedPlace: Int64
    /// The current images of the rows the shipment writes, locked.
    let rows: [CurrentRow]
  }

  /// What a shipment writes.
  struct Shipment: Sendable {
    /// The local sequence it ships through (`gs_host.shipped_seq`, and the
    /// entry's `origin_seq`).
    let through: Int64
    /// The entry's body (``LogEntry/encoded(format:)``), and its format.
    let body: String
    let format: LogFormat
    let winners: [Winner]
    /// The conflicts settled, each with its record as JSON.
    let conflicts: [(record: ConflictRecord, json: String)]
    /// The shipped place this host last learned the server holds (nil: no
    /// check): a server below it lost shipments (``ShipOutcome/serverBehind(shipped:)``).
    var shippedBefore: Int64? = nil
  }

  /// ``beginShipment(_:targets:)``'s statements, prepared once per session.
  static let lockShippedPlace = PreparedSQL(
    "lock_shipped", "SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3 FOR UPDATE")
  /// The rows, through `gs_lock_5` (a host role may not lock them itself).
  static let lockRows = PreparedSQL(
    "lock_rows_5", "SELECT tbl, gid, seq, origin_host, columns, data FROM gs_lock_5($1, $2, $3, $4::text[], $5::text[])")

  /// `BEGIN`, then locks `replica`'s row of `gs_host` and the rows of
  /// `gs_row` named by `targets`, and reads them: one round trip. The
  /// transaction stays open for ``ship(_:_:settled:)`` (or a rollback).
  func beginShipment(_ replica: Replica, targets: [(table: String, gid: String)]) throws -> OpenShipment {
    let results = try connection.query([
      .init("BEGIN"),
      .init(Self.lockShippedPlace, [replica.group, replica.store, replica.host]),
      .init(Self.lockRows, [replica.group, replica.store, replica.host, targets.map(\.table), targets.map(\.gid)]),
    ])
    let rows = try results[2].map { row in
      CurrentRow(row: try StoredRow(row, skipping: 1), host: try row.decode(String.self, at: 3))
    }
    return OpenShipment(shippedPlace: try results[1].first?.decode(Int64?.self, at: 0) ?? 0, rows: rows)
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
    /// The server's shipped place for this host is `shipped`, below what
    /// it had acknowledged (``Shipment/shippedBefore``): it lost shipments
    /// (a failover, a restored backup). Nothing was written.
    case serverBehind(shipped: Int64)
  }

  /// ``ship(_:_:settled:)``'s call, prepared once per session.
  static let shipCall = PreparedSQL(
    "ship_5",
    """
    SELECT outcome, pos, group_format FROM gs_ship_5($1, $2, $3, $4::bigint, $5,
      $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[],
      $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::boolean, $18::smallint,
      $19::uuid, $20::bigint)
    """)

  /// Ships in one statement, `gs_ship_5`: unless `settled`, it locks this
  /// host's shipped place and the rows the shipment writes, and stops if
  /// the place is already past `through` or a row moved past the image's
  /// base; then it takes the next position (`UPDATE gs_clock … RETURNING
  /// seq`: the row lock orders shippers, so positions are gapless and in
  /// commit order), records the winners, appends the entry and its
  /// conflicts, moves the shipped place and purges what the group's
  /// retention lets go. The server refuses, naming why (SQLSTATE 22023),
  /// a shipment that is not one every relay can read or is over the
  /// group's size limit (``SharedSchema/shipmentProblem5``). The group's format comes back with the outcome (``groupFormat``).
  /// Once it committed, the group's listening members are woken in a
  /// transaction of its own, in the same pipeline
  /// (``wakeStatements(_:through:body:)``: the entry itself in the payload
  /// when it fits, see ``Hint``).
  ///
  /// Not `settled`: its own transaction (the deferred bookkeeping rides
  /// along in it), one round trip. `settled`: inside the transaction
  /// ``beginShipment(_:targets:)`` opened, with its `COMMIT` in the same
  /// pipeline, so the server runs it through without waiting for this
  /// host. Under a lease (the poll transport: ``leaseHolder``), only while
  /// the host's lease is this relay's.
  ///
  /// - Throws: ``RelayError/shipmentRefused(store:reason:)`` when the
  ///   server refuses what the shipment carries (nothing was written);
  ///   ``RelayError/unexpectedAnswer(statement:problem:)`` when
  ///   `gs_clock` has no row for the store;
  ///   ``RelayError/relayAlreadyRunning(host:group:where:)`` when another
  ///   relay of the host took its lease over (nothing was written).
  func ship(_ replica: Replica, _ shipment: Shipment, settled: Bool) throws -> ShipOutcome {
    let conflicts = shipment.conflicts.map(\.record)
    let statement = Statement(
      Self.shipCall,
      [
        replica.group, replica.store, replica.host, shipment.through, shipment.body,
        shipment.winners.map(\.table), shipment.winners.map(\.gid), shipment.winners.map(\.position),
        shipment.winners.map(\.columns), shipment.winners.map(\.data),
        conflicts.map(\.table), conflicts.map(\.gid), conflicts.map(\.rule.rawValue), conflicts.map(\.winnerHost),
        conflicts.map(\.loserHost), shipment.conflicts.map(\.json), settled, shipment.format.rawValue,
        leaseHolder?.uuidString, shipment.shippedBefore,
      ])
    let wakes = wakeStatements(replica, through: shipment.through, body: shipment.body)
    let rows: PostgresRows
    do {
      rows =
        if settled {
          try connection.query([statement, Statement("COMMIT")] + wakes)[0]
        } else if wakes.isEmpty {
          try exchange([statement])[0]
        } else {
          // Its own transaction, then the wake-up's (the bookkeeping that
          // rides along joins the first).
          try ownTransaction { try exchange([Statement("BEGIN"), statement, Statement("COMMIT")] + wakes)[1] }
        }
    } catch RelayError.postgres(_, let message, Self.shipmentRefusal?, _, _) where message.contains("groupsync: ") {
      if connection.isConnected, connection.isInTransaction { connection.rollBackQuietly() }
      // The server's words, without its CONTEXT lines.
      let reason = message.components(separatedBy: "groupsync: ").last?.split(separator: "\n").first ?? ""
      throw RelayError.shipmentRefused(store: replica.store, reason: reason.trimmingCharacters(in: .whitespaces))
    }
    let row = rows.first
    let outcome = try row?.decode(String?.self, at: 0), position = try row?.decode(Int64?.self, at: 1) ?? 0
    if let format = try row?.decode(Int?.self, at: 2) { groupFormat = LogFormat(rawValue: format) }
    switch outcome {
    case "shipped": return .shipped(position: position)
    case "already": return .alreadyShipped(through: position)
    case "moved": return .rowsMoved
    case "behind": return .serverBehind(shipped: position)
    case "lease":
      throw RelayError.relayAlreadyRunning(
        host: replica.host, group: replica.group, where: "another relay took the host's lease over")
    default:
      throw RelayError.unexpectedAnswer(
        statement: "gs_ship_5", problem: "gs_clock has no row for store '\(replica.store)' of group '\(replica.group)'")
    }
  }

  /// The SQLSTATE `gs_ship_5` refuses a shipment's content with
  /// (invalid_parameter_value), its message beginning `groupsync: `.
  static let shipmentRefusal: SQLState? = "22023"

  /// Runs `body`, which opens a transaction of its own: when it fails,
  /// that transaction is rolled back (the pipeline's end does not end a
  /// transaction begun explicitly), so the session is left as it was.
  private func ownTransaction<T>(_ body: () throws -> T) throws -> T {
    do {
      return try body()
    } catch {
      if connection.isConnected, connection.isInTransaction { connection.rollBackQuietly() }
      throw error
    }
  }
}
