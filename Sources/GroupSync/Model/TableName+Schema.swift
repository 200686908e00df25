import GRDB

extension TableName {
  /// Whether the table is a WITHOUT ROWID table of `db`'s main schema: it
  /// has no rowid, so nothing can name its rows by one (neither change
  /// sets nor a relay's map of global IDs). False for a table with a rowid,
  /// a view, a virtual table, or no such table. For example:
  ///
  /// ```swift
  /// let skipped = try store.read { db in try TableName("kv").isWithoutRowIDTable(in: db) }
  /// ```
  ///
  /// Read from SQLite's `pragma_table_list` (its `wr` column), not from
  /// the table's SQL text.
  public func isWithoutRowIDTable(in db: Database) throws -> Bool {
    try Bool.fetchOne(
      db.cachedStatement(sql: "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?"),
      arguments: [name]) ?? false
  }
}
