import GRDB

/// What a context needs of each table it reads in one store: a rowid alias
/// that no column shadows, and a quoted name; and the reads by rowid it
/// makes. A context keeps one per store, since two stores may hold tables
/// of the same name with different columns.
final class TableInfoCache {
  struct Info {
    /// The name as the schema spells it, which change sets use: SQLite
    /// finds `NOTE` for a table declared `note`.
    let name: String
    /// `_rowid_`, `rowid` or `oid`: the first that is not a column name.
    let rowIDName: String
    /// Quoted and in schema `main` (never a `temp` table of the same name).
    let quotedName: String
  }

  /// The store's name, for errors.
  let storeName: String
  private var infos: [TableName: Info] = [:]

  init(storeName: String) {
    self.storeName = storeName
  }

  func info(_ table: TableName, _ db: Database) throws -> Info {
    if let info = infos[table] { return info }
    let entry = try StoreSchema.table(named: table.name, db)
    guard let entry, ["table", "virtual"].contains(entry.type), !entry.isWithoutRowID else {
      throw ContextError.invalidRequest(
        entry == nil ? "the store '\(storeName)' has no table '\(table.name)'"
          : "'\(table.name)' of store '\(storeName)' is not a table with rowids")
    }
    guard let alias = try StoreSchema.rowIDName(of: table.name, db) else {
      throw ContextError.invalidRequest("every rowid alias of '\(table.name)' of store '\(storeName)' is a column name")
    }
    let name = entry.name
    let info = Info(name: name, rowIDName: alias, quotedName: TableName(name).qualified)
    infos[table] = info
    return info
  }

  /// Whether the store has a table (or view) named `table`.
  func exists(_ table: TableName, _ db: Database) throws -> Bool {
    if infos[table] != nil { return true }
    return try StoreSchema.table(named: table.name, db) != nil
  }

  /// The schema's spelling of `table`, if already known (no I/O).
  func cachedName(_ table: TableName) -> String? { infos[table]?.name }

  /// A table's schema may have changed.
  func forget(_ table: TableName) { infos[table] = nil }
  func forgetAll() { infos = [:] }

  /// The rows of `table` among `rowIDs` that exist, by rowid: one query,
  /// whatever the number of rowids.
  func rows(of table: TableName, rowIDs: [Int64], _ db: Database) throws -> [Int64: RowValues] {
    guard !rowIDs.isEmpty else { return [:] }
    let info = try info(table, db)
    let statement = try db.cachedStatement(
      sql: "SELECT \(info.rowIDName), * FROM \(info.quotedName) WHERE \(info.rowIDName) IN (SELECT value FROM json_each(?))")
    let list = "[" + rowIDs.map(String.init).joined(separator: ",") + "]"
    var found: [Int64: RowValues] = [:]
    found.reserveCapacity(rowIDs.count)
    let cursor = try Row.fetchCursor(statement, arguments: [list])
    while let row = try cursor.next() {
      found[row[0]] = RowValues(row, droppingFirst: 1)
    }
    return found
  }

  /// The current row of one rowid, or nil.
  func row(of table: TableName, rowID: Int64, _ db: Database) throws -> RowValues? {
    let info = try info(table, db)
    let statement = try db.cachedStatement(
      sql: "SELECT \(info.rowIDName), * FROM \(info.quotedName) WHERE \(info.rowIDName) = ?")
    return try Row.fetchOne(statement, arguments: [rowID]).map { RowValues($0, droppingFirst: 1) }
  }
}
