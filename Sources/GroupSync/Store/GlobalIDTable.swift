// The one owner of a replicated store's global-ID table (`gs_relay_row`):
// its columns, its upkeep and every query on it, for the core's lookups
// (`Store+GlobalIDs.swift`) and for the relay that fills it.
import Foundation
import GRDB

/// Each replicated row's global ID and its rowid here, in the table
/// `gs_relay_row(tbl, gid, local_rowid, pos, former_rowid, alias_of,
/// base)`:
/// - `local_rowid`: NULL once deleted (a tombstone, so the ID is never
///   reused);
/// - `pos`: the log position of the image the row holds here (0: written
///   here, never shipped);
/// - `former_rowid`: a tombstone's last rowid (so that a deletion which
///   must ship again, after the log lost it, still finds its global ID);
/// - `alias_of`: the row this one became one with (the two held the same
///   value of a unique key);
/// - `base`: the values of the image at `pos` as the log has them (JSON,
///   by lowercased column name; NULL: unknown), from which the next
///   update's changed columns are told (log format 2).
///
/// GroupSync's capture ignores it, as every table of the relay
/// (``RelayTables``): a relay's transaction that writes only its own
/// tables commits no change set and counts as a quiet commit, so no
/// listener mistakes it for a foreign writer; one that applies rows
/// reports those rows alone. A row's global ID is therefore read from
/// here when needed, never learnt from a change set. It is never
/// replicated.
package enum GlobalIDTable {
  package static let name = RelayTables.globalIDs

  package static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(name) (
        tbl TEXT NOT NULL, gid TEXT NOT NULL, local_rowid INTEGER, pos INTEGER NOT NULL, former_rowid INTEGER,
        alias_of TEXT, PRIMARY KEY (tbl, gid));
      CREATE UNIQUE INDEX IF NOT EXISTS \(name)_local ON \(name)(tbl, local_rowid);
      """)
    // Stores set up before these were kept.
    let columns = Set(try db.columns(in: name).map(\.name))
    for (column, type) in [("former_rowid", "INTEGER"), ("alias_of", "TEXT"), ("base", "TEXT")]
    where !columns.contains(column) {
      try db.execute(sql: "ALTER TABLE \(name) ADD COLUMN \(column) \(type)")
    }
    try db.execute(sql: "CREATE INDEX IF NOT EXISTS \(name)_former ON \(name)(tbl, former_rowid)")
  }

  /// One row's mapping.
  package struct Entry: Sendable, Equatable {
    package var gid: String
    package var rowID: Int64?
    package var position: Int64
    /// A tombstone's last rowid here (nil for a live row).
    package var formerRowID: Int64?
    /// The row this one became one with (the two held the same value of a
    /// unique key): references to this one resolve to it.
    package var aliasOf: String?
    /// The values of the image at `position` (nil: unknown).
    package var base: StoredBase?

    package init(
      gid: String, rowID: Int64?, position: Int64, formerRowID: Int64? = nil, aliasOf: String? = nil,
      base: StoredBase? = nil
    ) {
      self.gid = gid
      self.rowID = rowID
      self.position = position
      self.formerRowID = formerRowID
      self.aliasOf = aliasOf
      self.base = base
    }
  }

  /// An image's values by lowercased column name, as the log has them
  /// (references as global IDs), kept as JSON and decoded by the relay
  /// when it needs them.
  package struct StoredBase: Sendable, Equatable {
    package let text: String

    package init(text: String) { self.text = text }
  }

  /// Forgets every row's log position and base (after the log lost
  /// entries, the positions recorded here may name entries it no longer
  /// holds).
  package static func forgetPositions(_ db: Database) throws {
    try db.execute(sql: "UPDATE \(name) SET pos = 0, base = NULL WHERE pos <> 0 OR base IS NOT NULL")
  }

  /// The largest rowid of `table` a live global ID maps to: a row deleted
  /// here keeps its mapping until the deletion ships, and its rowid must
  /// not be given to another row before.
  package static func largestMappedRowID(_ db: Database, table: String) throws -> Int64? {
    try Int64.fetchOne(
      db.cachedStatement(sql: "SELECT max(local_rowid) FROM \(name) WHERE tbl = ?"), arguments: [table])
  }

  /// The mapping of the live row `rowID` of `table`.
  package static func entry(_ db: Database, table: String, rowID: Int64) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(sql: "SELECT gid, pos, base FROM \(name) WHERE tbl = ? AND local_rowid = ?"),
      arguments: [table, rowID]
    ).map { Entry(gid: $0[0], rowID: rowID, position: $0[1], base: decode($0[2])) }
  }

  /// The mapping of `gid` in `table` (a live row or a tombstone).
  package static func entry(_ db: Database, table: String, gid: String) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(
        sql: "SELECT local_rowid, pos, former_rowid, alias_of, base FROM \(name) WHERE tbl = ? AND gid = ?"),
      arguments: [table, gid]
    ).map { Entry(gid: gid, rowID: $0[0], position: $0[1], formerRowID: $0[2], aliasOf: $0[3], base: decode($0[4])) }
  }

  /// The entry of `gid`, or of the row it became one with (following
  /// aliases): what a reference to `gid` points at here.
  package static func resolve(_ db: Database, table: String, gid: String) throws -> Entry? {
    var entry = try self.entry(db, table: table, gid: gid)
    for _ in 0..<16 {
      guard let current = entry, current.rowID == nil, let alias = current.aliasOf else { return entry }
      entry = try self.entry(db, table: table, gid: alias) ?? current
      if entry == current { return entry }
    }
    return entry
  }

  /// The newest tombstone whose row had `rowID` here.
  package static func tombstone(_ db: Database, table: String, formerRowID rowID: Int64) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(sql: """
        SELECT gid, pos FROM \(name) WHERE tbl = ? AND former_rowid = ? AND local_rowid IS NULL
        ORDER BY rowid DESC LIMIT 1
        """),
      arguments: [table, rowID]
    ).map { Entry(gid: $0[0], rowID: nil, position: $0[1], formerRowID: rowID) }
  }

  /// The global ID of row `rowID` of `table`: a live row's, or else the
  /// newest tombstone's whose row had that rowid.
  package static func gid(_ db: Database, table: String, rowID: Int64) throws -> String? {
    if let live = try entry(db, table: table, rowID: rowID) { return live.gid }
    return try tombstone(db, table: table, formerRowID: rowID)?.gid
  }

  /// Every live mapping of `table`: rowid → entry.
  package static func liveEntries(_ db: Database, table: String) throws -> [Int64: Entry] {
    var entries: [Int64: Entry] = [:]
    for row in try Row.fetchAll(
      db, sql: "SELECT gid, local_rowid, pos FROM \(name) WHERE tbl = ? AND local_rowid IS NOT NULL",
      arguments: [table])
    {
      let rowID: Int64 = row[1]
      entries[rowID] = Entry(gid: row[0], rowID: rowID, position: row[2])
    }
    return entries
  }

  /// Records `entry` (a nil rowid makes a tombstone). A rowid another gid
  /// held is taken over: that row is gone (its tombstone is kept).
  package static func set(_ entry: Entry, _ db: Database, table: String) throws {
    if let rowID = entry.rowID {
      try db.cachedStatement(sql: """
        UPDATE \(name) SET local_rowid = NULL WHERE tbl = ? AND local_rowid = ? AND gid <> ?
        """).execute(arguments: [table, rowID, entry.gid])
    }
    try db.cachedStatement(sql: """
      INSERT INTO \(name)(tbl, gid, local_rowid, pos, former_rowid, alias_of, base) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(tbl, gid) DO UPDATE SET local_rowid = excluded.local_rowid, pos = excluded.pos,
        former_rowid = CASE WHEN excluded.local_rowid IS NULL THEN coalesce(local_rowid, former_rowid) END,
        alias_of = excluded.alias_of, base = excluded.base
      """).execute(arguments: [
        table, entry.gid, entry.rowID, entry.position, entry.formerRowID, entry.aliasOf, entry.base?.text,
      ])
  }

  /// Raises the position of `gid` to `position` (never lowers it), with
  /// the values of the image there (nil: unknown) when it raises it.
  package static func raisePosition(
    _ db: Database, table: String, gid: String, to position: Int64, deleted: Bool, base: StoredBase? = nil
  ) throws {
    try db.cachedStatement(sql: """
      UPDATE \(name) SET pos = max(pos, ?1),
        former_rowid = CASE WHEN ?2 THEN coalesce(local_rowid, former_rowid) ELSE former_rowid END,
        local_rowid = CASE WHEN ?2 THEN NULL ELSE local_rowid END,
        base = CASE WHEN ?1 >= pos THEN ?5 ELSE base END
      WHERE tbl = ?3 AND gid = ?4
      """).execute(arguments: [position, deleted, table, gid, base?.text])
  }

  private static func decode(_ text: String?) -> StoredBase? { text.map(StoredBase.init(text:)) }
}
