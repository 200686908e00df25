// This host's places in one store's log: the store's `gs_relay_state`
// row and its copy in memory, changed through one door.
import GRDB
import GroupSync

/// How far this host got with one replicated store: the last local
/// sequence shipped, the last log position applied, and what the log must
/// still hold of them. Kept in the store (`gs_relay_state(grp, host,
/// shipped, applied, last_shipment, applied_origin, applied_origin_seq)`)
/// and in memory.
///
/// A change is made inside the local transaction that does what it
/// records (``change(_:_:)``), so the stored place never runs ahead of
/// the rows, and becomes ``current`` only once that transaction committed
/// (``ReplicaContext/write(_:)`` publishes it; a rollback drops it).
/// Used only on the relay's thread.
final class ReplicaPlace {
  struct Place: Sendable, Equatable {
    /// The last local sequence shipped (or skipped: the relay's own writes).
    var shipped: Int64
    /// The last log position applied here.
    var applied: Int64
    /// The local sequence the last entry shipped from here covered (the
    /// server's `gs_host.shipped_seq` once that entry committed).
    var lastShipment: Int64 = 0
    /// The origin of the entry at `applied` (nil: none applied yet, or a
    /// store set up before it was kept): after a failover, whether the
    /// log still holds what this host applied.
    var appliedOrigin: EntryOrigin? = nil
  }

  // Named in the core (``RelayTables``), whose capture ignores it.
  static let table = RelayTables.place

  private let group: String
  private let host: String
  /// The place as committed.
  private(set) var current: Place
  /// The place the open transaction wrote, published once it commits.
  private var pending: Place?

  /// Reads the place of `host` in `group` (zero when none), making the
  /// table if the store has none yet.
  init(_ db: Database, group: String, host: String) throws {
    self.group = group
    self.host = host
    try Self.setUp(db)
    let row = try Row.fetchOne(
      db, sql: """
        SELECT shipped, applied, last_shipment, applied_origin, applied_origin_seq FROM \(Self.table)
        WHERE grp = ? AND host = ?
        """, arguments: [group, host])
    guard let row else {
      current = Place(shipped: 0, applied: 0)
      return
    }
    let originHost: String? = row[3], sequence: Int64? = row[4]
    let origin = originHost.flatMap { host in sequence.map { EntryOrigin(host: host, sequence: $0) } }
    current = Place(shipped: row[0], applied: row[1], lastShipment: row[2], appliedOrigin: origin)
  }

  private static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(table) (
        grp TEXT NOT NULL, host TEXT NOT NULL, shipped INTEGER NOT NULL, applied INTEGER NOT NULL,
        last_shipment INTEGER NOT NULL DEFAULT 0, applied_origin TEXT, applied_origin_seq INTEGER,
        PRIMARY KEY (grp, host));
      """)
    // Stores set up before these were kept.
    if !(try db.columns(in: table).contains { $0.name == "applied_origin" }) {
      try db.execute(sql: """
        ALTER TABLE \(table) ADD COLUMN last_shipment INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE \(table) ADD COLUMN applied_origin TEXT;
        ALTER TABLE \(table) ADD COLUMN applied_origin_seq INTEGER;
        """)
    }
  }

  /// Moves the place inside `db`'s open transaction: `change` is given the
  /// place as it will be after the transactions committed before, and what
  /// it makes of it is written, and published once this one commits.
  func change(_ db: Database, _ change: (inout Place) -> Void) throws {
    var place = pending ?? current
    change(&place)
    try db.cachedStatement(sql: """
      INSERT INTO \(Self.table)(grp, host, shipped, applied, last_shipment, applied_origin, applied_origin_seq)
      VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(grp, host) DO UPDATE SET shipped = excluded.shipped, applied = excluded.applied,
        last_shipment = excluded.last_shipment, applied_origin = excluded.applied_origin,
        applied_origin_seq = excluded.applied_origin_seq
      """).execute(arguments: [
        group, host, place.shipped, place.applied, place.lastShipment, place.appliedOrigin?.host,
        place.appliedOrigin?.sequence,
      ])
    pending = place
  }

  /// The transaction that changed the place committed.
  func publish() {
    if let pending { current = pending }
    pending = nil
  }

  /// The transaction that changed the place rolled back.
  func discard() { pending = nil }

  /// Moves the place in memory only, past what changed nothing here (the
  /// relay's own writes, which need no shipment; entries that applied
  /// nothing): it is stored with the next change, and a relay restarted
  /// before passes them again, to the same effect.
  func pass(_ change: (inout Place) -> Void) {
    change(&current)
  }
}

/// Which host shipped a log entry, and as which of its local sequences:
/// the entry's identity, whatever position it holds.
struct EntryOrigin: Sendable, Equatable {
  let host: String
  let sequence: Int64
}
