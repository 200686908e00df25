import Foundation
import GRDB
import GroupSync

/// The relay's tables inside each replicated store. Their names do not
/// start with `groupsync_` on purpose: GroupSync's capture reports them,
/// so every transaction of the relay, also one that writes only these
/// tables, commits a change set (author `groupsync-relay@HOST`) and no
/// listener mistakes it for a foreign writer. They are never replicated.
///
/// - `gs_relay_row(tbl, gid, local_rowid, pos, former_rowid, alias_of,
///   base)`: each replicated row's global ID and its rowid here (NULL once
///   deleted: a tombstone, so the ID is never reused), `pos`, the log
///   position of the image the row holds here (0: written here, never
///   shipped), a tombstone's last rowid (so that a deletion which must ship
///   again, after the log lost it, still finds its global ID), and `base`,
///   the values of that image as the log has them (JSON, by lowercased
///   column name; NULL: unknown), from which the next update's changed
///   columns are told (log format 2).
/// - `gs_relay_state(grp, host, shipped, applied, last_shipment,
///   applied_origin, applied_origin_seq)`: the last local sequence shipped
///   (or skipped: the relay's own writes), the last log position applied,
///   the local sequence the last entry shipped from here covered, and the
///   origin of the entry at the applied position (to tell, after a
///   failover, whether the log still holds what this host shipped and
///   applied).
///   `applied` is written in the same transaction as the rows it applied.
enum RowIdentityMap {
  static let rowTable = Store.globalIDTable
  static let stateTable = "gs_relay_state"

  static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(rowTable) (
        tbl TEXT NOT NULL, gid TEXT NOT NULL, local_rowid INTEGER, pos INTEGER NOT NULL, former_rowid INTEGER,
        alias_of TEXT, PRIMARY KEY (tbl, gid));
      CREATE UNIQUE INDEX IF NOT EXISTS \(rowTable)_local ON \(rowTable)(tbl, local_rowid);
      CREATE TABLE IF NOT EXISTS \(stateTable) (
        grp TEXT NOT NULL, host TEXT NOT NULL, shipped INTEGER NOT NULL, applied INTEGER NOT NULL,
        last_shipment INTEGER NOT NULL DEFAULT 0, applied_origin TEXT, applied_origin_seq INTEGER,
        PRIMARY KEY (grp, host));
      """)
    // Stores set up before these were kept.
    if !(try db.columns(in: rowTable).contains { $0.name == "former_rowid" }) {
      try db.execute(sql: "ALTER TABLE \(rowTable) ADD COLUMN former_rowid INTEGER")
    }
    if !(try db.columns(in: rowTable).contains { $0.name == "alias_of" }) {
      try db.execute(sql: "ALTER TABLE \(rowTable) ADD COLUMN alias_of TEXT")
    }
    if !(try db.columns(in: rowTable).contains { $0.name == "base" }) {
      try db.execute(sql: "ALTER TABLE \(rowTable) ADD COLUMN base TEXT")
    }
    try db.execute(sql: "CREATE INDEX IF NOT EXISTS \(rowTable)_former ON \(rowTable)(tbl, former_rowid)")
    let columns = Set(try db.columns(in: stateTable).map(\.name))
    if !columns.contains("applied_origin") {
      try db.execute(sql: """
        ALTER TABLE \(stateTable) ADD COLUMN last_shipment INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE \(stateTable) ADD COLUMN applied_origin TEXT;
        ALTER TABLE \(stateTable) ADD COLUMN applied_origin_seq INTEGER;
        """)
    }
  }

  struct Place: Sendable, Equatable {
    var shipped: Int64
    var applied: Int64
    /// The local sequence the last entry shipped from here covered (the
    /// server's `gs_host.shipped_seq` once that entry committed).
    var lastShipment: Int64 = 0
    /// The origin of the entry at `applied` (nil: none applied yet, or a
    /// store set up before it was kept).
    var appliedOrigin: EntryOrigin? = nil
  }

  static func place(_ db: Database, group: String, host: String) throws -> Place {
    let row = try Row.fetchOne(
      db, sql: """
        SELECT shipped, applied, last_shipment, applied_origin, applied_origin_seq FROM \(stateTable)
        WHERE grp = ? AND host = ?
        """, arguments: [group, host])
    guard let row else { return Place(shipped: 0, applied: 0) }
    let host: String? = row[3], sequence: Int64? = row[4]
    let origin = host.flatMap { host in sequence.map { EntryOrigin(host: host, sequence: $0) } }
    return Place(shipped: row[0], applied: row[1], lastShipment: row[2], appliedOrigin: origin)
  }

  static func setPlace(_ place: Place, _ db: Database, group: String, host: String) throws {
    try db.cachedStatement(sql: """
      INSERT INTO \(stateTable)(grp, host, shipped, applied, last_shipment, applied_origin, applied_origin_seq)
      VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(grp, host) DO UPDATE SET shipped = excluded.shipped, applied = excluded.applied,
        last_shipment = excluded.last_shipment, applied_origin = excluded.applied_origin,
        applied_origin_seq = excluded.applied_origin_seq
      """).execute(arguments: [
        group, host, place.shipped, place.applied, place.lastShipment, place.appliedOrigin?.host,
        place.appliedOrigin?.sequence,
      ])
  }

  /// Forgets every row's log position and base (after the log lost
  /// entries, the positions recorded here may name entries it no longer
  /// holds).
  static func forgetPositions(_ db: Database) throws {
    try db.execute(sql: "UPDATE \(rowTable) SET pos = 0, base = NULL WHERE pos <> 0 OR base IS NOT NULL")
  }

  /// The largest rowid of `table` a live global ID maps to: a row deleted
  /// here keeps its mapping until the deletion ships, and its rowid must
  /// not be given to another row before.
  static func largestMappedRowID(_ db: Database, table: String) throws -> Int64? {
    try Int64.fetchOne(
      db.cachedStatement(sql: "SELECT max(local_rowid) FROM \(rowTable) WHERE tbl = ?"), arguments: [table])
  }

  struct Entry: Sendable, Equatable {
    var gid: String
    var rowID: Int64?
    var position: Int64
    /// A tombstone's last rowid here (nil for a live row).
    var formerRowID: Int64? = nil
    /// The row this one became one with (the two held the same value of a
    /// unique key): references to this one resolve to it.
    var aliasOf: String? = nil
    /// The values of the image at `position` (nil: unknown).
    var base: StoredBase? = nil
  }

  /// An image's values by lowercased column name, as the log has them
  /// (references as global IDs), kept as JSON and decoded when asked.
  struct StoredBase: Sendable, Equatable {
    let text: String

    init(text: String) { self.text = text }

    init(_ values: [String: RowValue]) {
      text = String(decoding: (try? JSONEncoder().encode(values)) ?? Data("{}".utf8), as: UTF8.self)
    }

    /// `values` of `columns`.
    init(_ values: [RowValue], columns: [String]) {
      var base = [String: RowValue](minimumCapacity: columns.count)
      for (column, value) in zip(columns, values) { base[column.lowercased()] = value }
      self.init(base)
    }

    /// The values by lowercased column name; nil (unknown) for text that
    /// is none.
    var values: [String: RowValue]? { try? JSONDecoder().decode([String: RowValue].self, from: Data(text.utf8)) }
  }

  private static func encode(_ base: StoredBase?) -> String? { base?.text }

  private static func decode(_ text: String?) -> StoredBase? { text.map(StoredBase.init(text:)) }

  static func entry(_ db: Database, table: String, rowID: Int64) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(sql: "SELECT gid, pos, base FROM \(rowTable) WHERE tbl = ? AND local_rowid = ?"),
      arguments: [table, rowID]
    ).map { Entry(gid: $0[0], rowID: rowID, position: $0[1], base: decode($0[2])) }
  }

  static func entry(_ db: Database, table: String, gid: String) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(
        sql: "SELECT local_rowid, pos, former_rowid, alias_of, base FROM \(rowTable) WHERE tbl = ? AND gid = ?"),
      arguments: [table, gid]
    ).map { Entry(gid: gid, rowID: $0[0], position: $0[1], formerRowID: $0[2], aliasOf: $0[3], base: decode($0[4])) }
  }

  /// The entry of `gid`, or of the row it became one with (following
  /// aliases): what a reference to `gid` points at here.
  static func resolve(_ db: Database, table: String, gid: String) throws -> Entry? {
    var entry = try self.entry(db, table: table, gid: gid)
    for _ in 0..<16 {
      guard let current = entry, current.rowID == nil, let alias = current.aliasOf else { return entry }
      entry = try self.entry(db, table: table, gid: alias) ?? current
      if entry == current { return entry }
    }
    return entry
  }

  /// The newest tombstone whose row had `rowID` here.
  static func tombstone(_ db: Database, table: String, formerRowID rowID: Int64) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(sql: """
        SELECT gid, pos FROM \(rowTable) WHERE tbl = ? AND former_rowid = ? AND local_rowid IS NULL
        ORDER BY rowid DESC LIMIT 1
        """),
      arguments: [table, rowID]
    ).map { Entry(gid: $0[0], rowID: nil, position: $0[1], formerRowID: rowID) }
  }

  /// Every live mapping of `table`: rowid → entry.
  static func liveEntries(_ db: Database, table: String) throws -> [Int64: Entry] {
    var entries: [Int64: Entry] = [:]
    for row in try Row.fetchAll(
      db, sql: "SELECT gid, local_rowid, pos FROM \(rowTable) WHERE tbl = ? AND local_rowid IS NOT NULL",
      arguments: [table])
    {
      let rowID: Int64 = row[1]
      entries[rowID] = Entry(gid: row[0], rowID: rowID, position: row[2])
    }
    return entries
  }

  /// Records `entry` (a nil rowid makes a tombstone). A rowid another gid
  /// held is taken over: that row is gone (its tombstone is kept).
  static func set(_ entry: Entry, _ db: Database, table: String) throws {
    if let rowID = entry.rowID {
      try db.cachedStatement(sql: """
        UPDATE \(rowTable) SET local_rowid = NULL WHERE tbl = ? AND local_rowid = ? AND gid <> ?
        """).execute(arguments: [table, rowID, entry.gid])
    }
    try db.cachedStatement(sql: """
      INSERT INTO \(rowTable)(tbl, gid, local_rowid, pos, former_rowid, alias_of, base) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(tbl, gid) DO UPDATE SET local_rowid = excluded.local_rowid, pos = excluded.pos,
        former_rowid = CASE WHEN excluded.local_rowid IS NULL THEN coalesce(local_rowid, former_rowid) END,
        alias_of = excluded.alias_of, base = excluded.base
      """).execute(arguments: [
        table, entry.gid, entry.rowID, entry.position, entry.formerRowID, entry.aliasOf, encode(entry.base),
      ])
  }

  /// Raises the position of `gid` to `position` (never lowers it), with
  /// the values of the image there (nil: unknown) when it raises it.
  static func raisePosition(
    _ db: Database, table: String, gid: String, to position: Int64, deleted: Bool, base: StoredBase? = nil
  ) throws {
    try db.cachedStatement(sql: """
      UPDATE \(rowTable) SET pos = max(pos, ?1),
        former_rowid = CASE WHEN ?2 THEN coalesce(local_rowid, former_rowid) ELSE former_rowid END,
        local_rowid = CASE WHEN ?2 THEN NULL ELSE local_rowid END,
        base = CASE WHEN ?1 >= pos THEN ?5 ELSE base END
      WHERE tbl = ?3 AND gid = ?4
      """).execute(arguments: [position, deleted, table, gid, encode(base)])
  }
}

/// Which host shipped a log entry, and as which of its local sequences:
/// the entry's identity, whatever position it holds.
struct EntryOrigin: Sendable, Equatable {
  let host: String
  let sequence: Int64
}
