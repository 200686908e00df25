// SharedLog: the door to the shared log, its session, and the round trips its extensions share.
import Foundation

/// The relay's tables in PostgreSQL, shared by every host of every group
/// in the database, and the one door to them: every statement against
/// them is here (and in its extensions by concern), with typed parameters
/// (``PostgresBindable``) and typed rows (``PostgresRow``), over one
/// ``PostgresConnection``. Its tables are listed once, in
/// ``SharedSchema/tables``.
///
/// Rows are keyed by group name and store name: each host's replica of a
/// store has its own local UUID, so stores meet by name.
///
/// - `gs_clock(grp, store, seq, purged_through)`: the log's last position
///   per store. A shipper takes it with `UPDATE … SET seq = seq + 1
///   RETURNING seq` inside its transaction, so the row lock orders
///   shippers and positions are gapless and in commit order. A `bigserial`
///   would hand out numbers before commit, in another order than commits,
///   and a reader asking for `seq > 10` could miss 10 for good.
/// - `gs_change(grp, store, seq, origin_host, origin_seq, committed_at,
///   body)`: the log. `UNIQUE(grp, store, origin_host, origin_seq)` makes a
///   shipment sent twice (a relay killed between COMMIT and its own
///   bookkeeping) fail instead of landing twice.
/// - `gs_row(grp, store, tbl, gid, seq, origin_host, columns, data)`: each
///   row's current image (NULL data: deleted) and the position that wrote
///   it; the arbiter of concurrent writes and the snapshot a host whose
///   place was purged re-synchronises from.
/// - `gs_host(grp, store, host, shipped_seq, applied_seq, seen_at)`: each
///   host's places; `shipped_seq` commits with the shipment.
/// - `gs_conflict`: every conflict settled, with both images.
/// - `gs_ship_2(…)`: a shipment as one statement (see
///   ``ship(_:_:settled:)``), so that shipping costs one round trip.
/// - `gs_member(role, grp, host)`: filled only by the set-up an
///   administrator runs (``AccessSetup``): which login role may act as
///   which host, enforced by row-level security (see
///   ``prepareAccess(group:host:version:)``).
/// - `gs_peer`, `gs_group`, `gs_schema`: what each member reads, the
///   group's format, the objects' version (see ``SharedSchema``).
///
/// Used on the relay's thread only, as its connection is.
final class SharedLog {
  /// A host's replica of a store in a group: the key of its rows.
  struct Replica: Sendable, Hashable {
    let group: String
    let store: String
    let host: String
  }

  /// The channel every relay before version 4 LISTENs on, whatever its
  /// group; a relay of version 4 listens on its group's own
  /// (``Transport``), and on this one too while a member of its group is
  /// older.
  static let legacyChannel = "gs_changes"

  let connection: PostgresConnection

  /// The group's log format as this session last read it (when it
  /// announced itself, and with every shipment's answer).
  var groupFormat = LogFormat.v1
  /// The other members that announce merge rules other than this relay's,
  /// by host, as last read (``announce(group:host:version:rules:)``).
  var differingRules: [String: String] = [:]
  /// How the group's members are woken, as last read (``Wakes``).
  var wakes = Wakes()
  /// Each store's tag (`gs_clock.tag`), which notifications name it by,
  /// by store name, as read when the store enrolled.
  var tags: [String: String] = [:]
  /// The channels the session listens on.
  var listening: Set<String> = []
  /// Off only for tests of a lost wake-up (``RelayFailpoints``).
  var sendsWakeUps = true
  /// Whether wake-ups carry entries and a carried entry is applied
  /// (``Hint``): not under row-level security (``prepareAccess(group:host:)``
  /// finds it on), where any member could send a wake-up on the group's
  /// channel with an entry under another host's name. Each entry is then
  /// read from the log, which only its host's shipment writes.
  var entriesRideWakeUps = true
  /// Whether every shipment wakes the group's channel, whoever listens
  /// (a notify relay's session; see ``Wakes/listeners``).
  var wakesAlways = false
  /// The host's lease this relay holds (the poll transport), which every
  /// shipment checks on the server; nil: the session's advisory lock
  /// guards the host instead.
  var leaseHolder: UUID?

  /// Statements of this host's own bookkeeping (its applied places) that
  /// wait to ride on the next round trip, by replica, and since when the
  /// oldest waits.
  private var deferred: [Replica: Statement] = [:]
  private var deferredSince: ContinuousClock.Instant?

  typealias Statement = PostgresConnection.Statement
  typealias PreparedSQL = PostgresConnection.PreparedSQL

  init(_ connection: PostgresConnection) {
    self.connection = connection
  }

  /// Round trips to the server so far on this session.
  var roundTrips: Int64 { connection.roundTrips }

  // MARK: The session

  /// Whether libpq still considers the connection good.
  var isConnected: Bool { connection.isConnected }

  /// The connection's socket, for `poll`.
  var socket: Int32 { connection.socket }

  /// The notifications received meanwhile, without blocking.
  func notifications() throws -> [(channel: String, payload: String)] { try connection.notifications() }

  /// Rolls back an open transaction, if any, ignoring failures.
  func rollBackQuietly() { connection.rollBackQuietly() }

  // MARK: Bookkeeping that rides along

  /// Queues `statement` as `replica`'s bookkeeping (replacing what it
  /// queued before): it goes with the next round trip that runs outside a
  /// transaction, or with ``flushDeferred(olderThan:)``.
  func deferBookkeeping(_ statement: Statement, for replica: Replica) {
    deferred[replica] = statement
    deferredSince = deferredSince ?? .now
  }

  /// When the oldest deferred statement was queued (nil: none waits).
  var oldestDeferred: ContinuousClock.Instant? { deferredSince }

  /// Sends the deferred statements on their own, if the oldest has waited
  /// `age` or more.
  func flushDeferred(olderThan age: Duration = .zero) throws {
    guard let since = deferredSince, ContinuousClock.now - since >= age else { return }
    _ = try exchange([])
  }

  /// Runs `statements` in one round trip, outside any transaction, after
  /// the deferred bookkeeping (one implicit transaction with them: if any
  /// fails, nothing is done and the bookkeeping waits on). Returns the
  /// rows of `statements` only.
  func exchange(_ statements: [Statement]) throws -> [PostgresRows] {
    let riding = Array(deferred.values)
    guard !riding.isEmpty || !statements.isEmpty else { return [] }
    let results = try connection.query(riding + statements)
    deferred = [:]
    deferredSince = nil
    return Array(results.dropFirst(riding.count))
  }

  /// Bounds every wait of the relay's session on the server (see
  /// ``RelayTimeouts``), and keeps the server's NOTICEs ("relation already
  /// exists, skipping") off the relay's stderr, in one round trip.
  func configureSession(timeouts: RelayTimeouts) throws {
    let settings = timeouts.sessionSettings(serverVersion: connection.serverVersion)
      + [("client_min_messages", "warning")]
    let calls = settings.indices.map { "set_config($\(2 * $0 + 1), $\(2 * $0 + 2), false)" }
    try connection.query("SELECT " + calls.joined(separator: ", "), settings.flatMap { [$0.0, $0.1] })
  }

  /// Makes the server's objects, or migrates them to this build's
  /// version (``SharedSchema``), in one transaction. Relays of several
  /// hosts may start at once, and concurrent `CREATE TABLE IF NOT EXISTS`
  /// can still collide in the catalog, so it runs under a
  /// transaction-level advisory lock.
  func createTables() throws {
    try connection.transaction {
      try connection.query("SELECT " + Self.schemaLock)
      for statement in SharedSchema.statements { try connection.query(statement) }
    }
  }

  /// Taken by whoever creates or changes the tables: a relay, or the
  /// set-up an administrator runs (``AccessSetup``).
  static let schemaLock = "pg_advisory_xact_lock(hashtext('groupsync-relay-schema'))"


  // MARK: Values

  /// A row's image as `gs_row` keeps it: its table and global ID, a
  /// position, its columns (a JSON array) and values (``StoredImage``;
  /// nil: the row is deleted). Read from `gs_row` (``snapshot(_:)``,
  /// ``CurrentRow``), `position` is the entry that wrote the image; as a
  /// shipment's winner (``Winner``), the one whose image it was written on.
  struct StoredRow: Sendable, Equatable {
    let table: String
    let gid: String
    let position: Int64
    let columns: String
    let data: String?

    init(table: String, gid: String, position: Int64, columns: String, data: String?) {
      self.table = table
      self.gid = gid
      self.position = position
      self.columns = columns
      self.data = data
    }

    /// A winner of a shipment, written on the image at position `base`.
    init(table: String, gid: String, base: Int64, columns: String, data: String?) {
      self.init(table: table, gid: gid, position: base, columns: columns, data: data)
    }

    /// The row of `gs_row` that a result's `row` holds: table, global ID
    /// and position, then (after `skipping` columns) columns and values.
    init(_ row: PostgresRow, skipping: Int = 0) throws {
      self.init(
        table: try row.decode(String.self, at: 0), gid: try row.decode(String.self, at: 1),
        position: try row.decode(Int64.self, at: 2), columns: try row.decode(String.self, at: 3 + skipping),
        data: try row.decode(String?.self, at: 4 + skipping))
    }
  }

  /// An image that goes into `gs_row` as the row's current one, and the
  /// position of the image it was written on (checked when not settled).
  typealias Winner = StoredRow

  /// The origin of an entry, from `row`'s host and origin-sequence columns
  /// (nil when either is NULL: no such entry).
  static func origin(_ row: PostgresRow, host: Int, sequence: Int) throws -> EntryOrigin? {
    guard let host = try row.decode(String?.self, at: host), let sequence = try row.decode(Int64?.self, at: sequence)
    else { return nil }
    return EntryOrigin(host: host, sequence: sequence)
  }
}
