// Sending a planned shipment: in one round trip when no row it writes
// moved on in the log, else locked, settled here and shipped settled.
import Foundation
import GRDB
import GroupSync

extension Shipper {
  enum Outcome {
    /// Shipped as entry `position` with these resolved images.
    /// Rows it left out, the log holding the same values already, are
    /// `caughtUp`.
    case shipped(position: Int64, entry: LogEntry, bytes: Int, caughtUp: [CaughtUp])
    /// PostgreSQL already had it (shipped by a relay killed before it
    /// could record so here): its place is `shipped`.
    case alreadyShipped(shipped: Int64)
    /// The server's shipped place is `shipped`, below the one this host
    /// last learned: the log lost shipments it had acknowledged.
    case serverBehind(shipped: Int64)
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
  func send(_ plan: Plan, _ log: SharedLog) throws -> Outcome {
    let context = self.context
    // A stall asked for (a frozen host, in a test) is one between the
    // settled path's two round trips.
    if !context.failpoints.stallsNextShipment(carriesRows: !plan.tables.isEmpty) {
      let format = context.writeFormat
      let entry = LogEntry(
        tables: plan.tables.map { shipped($0, plan: plan, format: format) }, conflicts: [],
        notes: plan.notes.isEmpty ? nil : plan.notes)
      let winners = try plan.tables.flatMap { table in
        let columns = LogJSON.columns(table.columns)
        return try table.rows.map { image in
          SharedLog.Winner(
            table: table.name, gid: image.gid, base: image.base, columns: columns,
            data: try image.values.map { try StoredImage.encode($0, format: format) })
        }
      }
      let body = try entry.encoded(format: format)
      context.trace?.encoded = RelayTrace.now()
      let shipment = SharedLog.Shipment(
        through: plan.through, body: body, format: format, winners: winners,
        conflicts: [], shippedBefore: context.place.current.lastShipment)
      switch try log.ship(context.replica, shipment, settled: false) {
      case .shipped(let position): return .shipped(position: position, entry: entry, bytes: body.utf8.count, caughtUp: [])
      case .alreadyShipped(let through): return .alreadyShipped(shipped: through)
      case .serverBehind(let shipped): return .serverBehind(shipped: shipped)
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
      if opening.shippedPlace < context.place.current.lastShipment {
        log.rollBackQuietly()
        return .serverBehind(shipped: opening.shippedPlace)
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
      context.trace?.encoded = RelayTrace.now()
      let shipped = try log.ship(
        context.replica,
        SharedLog.Shipment(
          through: plan.through, body: body, format: format, winners: winners,
          conflicts: conflicts),
        settled: true)
      guard case .shipped(let position) = shipped else {
        throw RelayError.unexpectedAnswer(
          statement: "gs_ship_5", problem: "a settled shipment of store '\(context.storeName)' was refused (\(shipped))")
      }
      for index in entry.conflicts.indices { entry.conflicts[index].sequence = position }
      return .shipped(position: position, entry: entry, bytes: body.utf8.count, caughtUp: caughtUp)
    } catch {
      log.rollBackQuietly()
      throw error
    }
  }

  /// `value` as JSON text.
  static func json(_ value: some Encodable) throws -> String {
    String(decoding: try encoder.encode(value), as: UTF8.self)
  }

  /// One for every call: `JSONEncoder` is safe to share (its options are
  /// read under a lock), and making one per call is waste.
  private static let encoder = JSONEncoder()

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
  func shipped(_ table: TableImage, plan: Plan, format: LogFormat) -> TableImage {
    guard format.mergesByProperty, !table.isSnapshot else { return table }
    var shipped = table
    for index in shipped.rows.indices { shipped.rows[index] = changes(shipped.rows[index], of: table, plan: plan) }
    return shipped
  }

  /// A row of `table` (not shipped whole) as the body carries it in a
  /// format that merges by property: what changed since its base, where
  /// this host knows that base.
  func changes(_ image: RowImage, of table: TableImage, plan: Plan) -> RowImage {
    guard image.base > 0, image.values != nil,
      let base = plan.bases[RowKey(table: table.name, gid: image.gid)]?.values
    else { return image }
    return image.changes(from: base, columns: table.columns)
  }
}
