import GRDB

extension Statement {
  /// The tables of the main schema this statement reads, as SQLite tells
  /// GRDB through its region (joins and subqueries included).
  func tablesRead(_ db: Database) throws -> Set<TableName> {
    let region = databaseRegion
    let names = try StoreSchema.tableNames(db)
    var read = Set<TableName>()
    for name in names where region.isModified(byEventsOfKind: .insert(tableName: name)) { read.insert(TableName(name)) }
    return read
  }
}
