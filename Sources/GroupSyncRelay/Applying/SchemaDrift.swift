// The columns this host's schema lacks or gained against an entry's:
// values kept for columns it will have, and entries held for ones it dropped.
import Foundation
import GRDB
import GroupSync

/// What the relay keeps while hosts run different versions of a schema
/// (a rolling upgrade: each host runs its migrations when its new version
/// starts):
///
/// - `gs_relay_extra(tbl, gid, col, pos, value)`: values of columns this
///   host does not have yet (added on a host upgraded first), per row, as
///   of the newest image that carried them (`value` as JSON, a reference
///   as a global ID). They are filled in once this host has the column.
/// - `gs_relay_columns(tbl, col)`: every column this host's tables have
///   had while the relay ran. An entry that carries a column this host
///   *had* is no additive change: the column was dropped or renamed here,
///   and the entry waits with an error naming it.
enum SchemaDrift {
  // Named in the core (``RelayTables``), whose capture ignores them.
  static let extraTable = RelayTables.extraValues
  static let columnsTable = RelayTables.columns

  static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(extraTable) (
        tbl TEXT NOT NULL, gid TEXT NOT NULL, col TEXT NOT NULL, pos INTEGER NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (tbl, gid, col));
      CREATE TABLE IF NOT EXISTS \(columnsTable) (tbl TEXT NOT NULL, col TEXT NOT NULL, PRIMARY KEY (tbl, col));
      """)
  }

  /// Records the columns every user table has now.
  static func recordColumns(_ db: Database) throws {
    for table in try TableShape.userTables(db) {
      for column in try db.columns(in: table, in: "main") {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO \(columnsTable)(tbl, col) VALUES (?, lower(?))")
          .execute(arguments: [table, column.name])
      }
    }
  }

  /// Whether `table` had `column` here while the relay ran.
  static func hadColumn(_ db: Database, table: String, column: String) throws -> Bool {
    try Bool.fetchOne(
      db.cachedStatement(sql: "SELECT 1 FROM \(columnsTable) WHERE tbl = ? AND col = lower(?)"),
      arguments: [table, column]) ?? false
  }

  /// Whether this host had `table` while the relay ran.
  static func hadTable(_ db: Database, table: String) throws -> Bool {
    try Bool.fetchOne(
      db.cachedStatement(sql: "SELECT 1 FROM \(columnsTable) WHERE tbl = ? LIMIT 1"), arguments: [table]) ?? false
  }

  /// Keeps the values of `columns` (which this host lacks) of row `gid`,
  /// unless newer ones are kept already.
  static func keep(_ db: Database, table: String, gid: String, columns: [String], values: [RowValue], position: Int64)
    throws
  {
    for (column, value) in zip(columns, values) {
      let text = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
      try db.cachedStatement(sql: """
        INSERT INTO \(extraTable)(tbl, gid, col, pos, value) VALUES (?, ?, ?, ?, ?)
        ON CONFLICT(tbl, gid, col) DO UPDATE SET pos = excluded.pos, value = excluded.value
        WHERE excluded.pos >= pos
        """).execute(arguments: [table, gid, column, position, text])
    }
  }

  /// The SQL of the default `column` of `table` takes (`NULL` when it has none).
  static func defaultExpression(_ db: Database, table: String, column: String) throws -> String {
    try StoreSchema.columns(of: table, db).first { $0.name.lowercased() == column.lowercased() }?.defaultSQL ?? "NULL"
  }

  /// Forgets what was kept for row `gid` (it was deleted).
  static func forget(_ db: Database, table: String, gid: String) throws {
    try db.cachedStatement(sql: "DELETE FROM \(extraTable) WHERE tbl = ? AND gid = ?").execute(arguments: [table, gid])
  }

  /// Whether anything is kept (most stores never keep anything).
  static func isEmpty(_ db: Database) throws -> Bool {
    try Int64.fetchOne(db, sql: "SELECT count(*) FROM \(extraTable)") == 0
  }

  /// The kept values of the columns `table` has by now, by row; removed
  /// from the table (the caller fills them in, in the same transaction).
  static func takeArrived(_ db: Database) throws -> [(table: String, column: String, gid: String, value: RowValue)] {
    var arrived: [(table: String, column: String, gid: String, value: RowValue)] = []
    for pair in try Row.fetchAll(db, sql: "SELECT DISTINCT tbl, col FROM \(extraTable)") {
      let table: String = pair[0], column: String = pair[1]
      guard try db.tableExists(table, in: "main"),
        try db.columns(in: table, in: "main").contains(where: { $0.name.lowercased() == column.lowercased() })
      else { continue }
      for row in try Row.fetchAll(
        db, sql: "SELECT gid, value FROM \(extraTable) WHERE tbl = ? AND col = ?", arguments: [table, column])
      {
        let value = try JSONDecoder().decode(RowValue.self, from: Data((row[1] as String).utf8))
        arrived.append((table, column, row[0], value))
      }
      try db.execute(sql: "DELETE FROM \(extraTable) WHERE tbl = ? AND col = ?", arguments: [table, column])
    }
    return arrived
  }
}
