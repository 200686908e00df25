import Foundation
import GRDB

/// The relay's tables inside each replicated store. Their names do not
/// start with `groupsync_` on purpose: GroupSync's capture reports them,
/// so every transaction of the relay, also one that writes only these
/// tables, commits a change set (author `groupsync-relay@HOST`) and no
/// listener mistakes it for a foreign writer. They are never replicated.
///
/// - `gs_relay_row(tbl, gid, local_rowid, pos)`: each replicated
///   row's global ID and its rowid here (NULL once deleted: a tombstone,
///   so the ID is never reused), and `pos`, the log position of the image
///   the row holds here (0: written here, never shipped).
/// - `gs_relay_state(grp, host, shipped, applied)`: the last local
///   sequence shipped and the last log position applied. `applied` is
///   written in the same transaction as the rows it applied.
enum RowIdentityMap {
  static let rowTable = "gs_relay_row"
  static let stateTable = "gs_relay_state"

  static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(rowTable) (
        tbl TEXT NOT NULL, gid TEXT NOT NULL, local_rowid INTEGER, pos INTEGER NOT NULL,
        PRIMARY KEY (tbl, gid));
      CREATE UNIQUE INDEX IF NOT EXISTS \(rowTable)_local ON \(rowTable)(tbl, local_rowid);
      CREATE TABLE IF NOT EXISTS \(stateTable) (
        grp TEXT NOT NULL, host TEXT NOT NULL, shipped INTEGER NOT NULL, applied INTEGER NOT NULL,
        PRIMARY KEY (grp, host));
      """)
  }

  struct Place: Sendable, Equatable {
    var shipped: Int64
    var applied: Int64
  }

  static func place(_ db: Database, group: String, host: String) throws -> Place {
    let row = try Row.fetchOne(
      db, sql: "SELECT shipped, applied FROM \(stateTable) WHERE grp = ? AND host = ?", arguments: [group, host])
    return row.map { Place(shipped: $0[0], applied: $0[1]) } ?? Place(shipped: 0, applied: 0)
  }

  static func setPlace(_ place: Place, _ db: Database, group: String, host: String) throws {
    try db.cachedStatement(sql: """
      INSERT INTO \(stateTable)(grp, host, shipped, applied) VALUES (?, ?, ?, ?)
      ON CONFLICT(grp, host) DO UPDATE SET shipped = excluded.shipped, applied = excluded.applied
      """).execute(arguments: [group, host, place.shipped, place.applied])
  }

  struct Entry: Sendable, Equatable {
    var gid: String
    var rowID: Int64?
    var position: Int64
  }

  static func entry(_ db: Database, table: String, rowID: Int64) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(sql: "SELECT gid, pos FROM \(rowTable) WHERE tbl = ? AND local_rowid = ?"),
      arguments: [table, rowID]
    ).map { Entry(gid: $0[0], rowID: rowID, position: $0[1]) }
  }

  static func entry(_ db: Database, table: String, gid: String) throws -> Entry? {
    try Row.fetchOne(
      db.cachedStatement(sql: "SELECT local_rowid, pos FROM \(rowTable) WHERE tbl = ? AND gid = ?"),
      arguments: [table, gid]
    ).map { Entry(gid: gid, rowID: $0[0], position: $0[1]) }
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
      INSERT INTO \(rowTable)(tbl, gid, local_rowid, pos) VALUES (?, ?, ?, ?)
      ON CONFLICT(tbl, gid) DO UPDATE SET local_rowid = excluded.local_rowid, pos = excluded.pos
      """).execute(arguments: [table, entry.gid, entry.rowID, entry.position])
  }

  /// Raises the position of `gid` to `position` (never lowers it).
  static func raisePosition(_ db: Database, table: String, gid: String, to position: Int64, deleted: Bool) throws {
    try db.cachedStatement(sql: """
      UPDATE \(rowTable) SET pos = max(pos, ?),
        local_rowid = CASE WHEN ? THEN NULL ELSE local_rowid END
      WHERE tbl = ? AND gid = ?
      """).execute(arguments: [position, deleted, table, gid])
  }
}
