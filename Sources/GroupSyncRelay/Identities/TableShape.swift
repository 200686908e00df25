// A replicated table as the relay reads and writes it: its columns, its
// rowid column, and the statements on one row.
import Foundation
import GroupSync
import GRDB

/// A replicated table as the local store has it: its columns without the
/// rowid alias (an `INTEGER PRIMARY KEY` is each host's own rowid, so it
/// does not travel; rows travel by global ID).
struct TableShape: Sendable, Equatable {
  let name: String
  let columns: [String]
  /// The INTEGER PRIMARY KEY column, if the table has one.
  let rowIDColumn: String?

  /// What a store has under a table's name.
  enum Lookup: Equatable {
    case table(TableShape)
    /// A WITHOUT ROWID table: no rowid to map a global ID to.
    case withoutRowID
    /// No such table.
    case none
  }

  /// Looks `table` up in the store's main schema.
  static func lookUp(_ db: Database, table: String) throws -> Lookup {
    // A table by that very name (SQLite would find `NOTE` for `note`), not a view.
    guard let entry = try StoreSchema.table(named: table, db), TableName(entry.name) == TableName(table),
      entry.type != "view"
    else { return .none }
    if entry.isWithoutRowID { return .withoutRowID }
    let rowIDColumn = try db.primaryKey(table, in: "main").rowIDColumn
    let columns = try db.columns(in: table, in: "main").map(\.name).filter { $0 != rowIDColumn }
    return .table(TableShape(name: table, columns: columns, rowIDColumn: rowIDColumn))
  }

  /// Reads the shape of `table`, or nil when the store has no such table.
  ///
  /// - Throws: ``RelayError/unsupportedTable(store:table:reason:)`` for a
  ///   WITHOUT ROWID table, where a table of rows is needed.
  static func read(_ db: Database, table: String, store: String) throws -> TableShape? {
    switch try lookUp(db, table: table) {
    case .table(let shape): return shape
    case .none: return nil
    case .withoutRowID: throw unsupported(table, store: store)
    }
  }

  /// Why a WITHOUT ROWID table is not replicated.
  static func unsupported(_ table: String, store: String) -> RelayError {
    RelayError.unsupportedTable(store: store, table: table, reason: "a WITHOUT ROWID table has no rowid to map")
  }

  /// The user tables of the store: every table but SQLite's, GRDB's,
  /// GroupSync's and the relay's own.
  static func userTables(_ db: Database) throws -> [String] {
    try StoreSchema.tableNames(db).filter { !isInternal($0) }
  }

  /// The core's internal tables and the relay's own (`gs_relay_`).
  static func isInternal(_ table: String) -> Bool {
    TableName(table).isInternal || table.hasPrefix("gs_relay_")
  }

  var quotedName: String { "main." + name.quotedDatabaseIdentifier }

  /// The row's values in ``columns`` order, or nil when there is no row.
  func values(_ db: Database, rowID: Int64) throws -> [RowValue]? {
    let row = try Row.fetchOne(
      db.cachedStatement(sql: "SELECT \(selectList) FROM \(quotedName) WHERE rowid = ?"), arguments: [rowID])
    return row.map { row in (0..<columns.count).map { RowValue(row[$0] as DatabaseValue) } }
  }

  /// Every row: rowid and values.
  func allRows(_ db: Database) throws -> [(Int64, [RowValue])] {
    let list = columns.isEmpty ? "rowid" : "rowid, " + selectList
    return try Row.fetchAll(db, sql: "SELECT \(list) FROM \(quotedName)").map { row in
      (row[0], (0..<columns.count).map { RowValue(row[$0 + 1] as DatabaseValue) })
    }
  }

  private var selectList: String {
    columns.isEmpty ? "NULL" : columns.map(\.quotedDatabaseIdentifier).joined(separator: ", ")
  }

  /// Inserts a row under a fresh local rowid, above every rowid the table
  /// holds and every rowid a global ID still maps to; returns it.
  ///
  /// SQLite would give the new row the largest rowid plus one, which may be
  /// the rowid of a row deleted here whose deletion has not shipped yet: the
  /// shipper, which names changed rows by rowid, would then ship this row's
  /// image for the deleted row's global ID, and the deletion would be lost.
  func insert(_ db: Database, columns shipped: [String], values: [RowValue]) throws -> Int64 {
    let rowID = try freshRowID(db)
    let names = ([rowIDName] + shipped.map(\.quotedDatabaseIdentifier)).joined(separator: ", ")
    let marks = Array(repeating: "?", count: shipped.count + 1).joined(separator: ", ")
    try db.cachedStatement(sql: "INSERT INTO \(quotedName)(\(names)) VALUES (\(marks))")
      .execute(arguments: StatementArguments([rowID.databaseValue] + values.map(\.databaseValue)))
    return rowID
  }

  /// A rowid no row of the table and no live global ID holds.
  ///
  /// - Throws: ``RelayError/invalidEntry(store:sequence:reason:)`` when the
  ///   largest rowid is taken (2^63 - 1): SQLite would pick a random free
  ///   one, which might be a deleted row's that has not shipped yet.
  private func freshRowID(_ db: Database) throws -> Int64 {
    let largestHere = try Int64.fetchOne(db.cachedStatement(sql: "SELECT max(rowid) FROM \(quotedName)")) ?? 0
    let largestMapped = try GlobalIDTable.largestMappedRowID(db, table: name) ?? 0
    let largest = max(largestHere, largestMapped)
    guard largest < Int64.max else {
      throw RelayError.invalidEntry(
        store: "", sequence: 0, reason: "table '\(name)' holds rowid \(Int64.max): no rowid above it is left")
    }
    return max(largest, 0) + 1
  }

  /// A name for the rowid that no column of the table takes.
  private var rowIDName: String {
    if let rowIDColumn { return rowIDColumn.quotedDatabaseIdentifier }
    let taken = Set(columns.map { $0.lowercased() })
    return ["rowid", "_rowid_", "oid"].first { !taken.contains($0) } ?? "rowid"
  }

  func update(_ db: Database, rowID: Int64, columns shipped: [String], values: [RowValue]) throws {
    guard !shipped.isEmpty else { return }
    let assignments = shipped.map { "\($0.quotedDatabaseIdentifier) = ?" }.joined(separator: ", ")
    try db.cachedStatement(sql: "UPDATE \(quotedName) SET \(assignments) WHERE rowid = ?")
      .execute(arguments: StatementArguments(values.map(\.databaseValue) + [rowID.databaseValue]))
  }

  func delete(_ db: Database, rowID: Int64) throws {
    try db.cachedStatement(sql: "DELETE FROM \(quotedName) WHERE rowid = ?").execute(arguments: [rowID])
  }

  /// The row's values for `shipped` columns (an entry's order), or nil.
  func values(_ db: Database, rowID: Int64, columns shipped: [String]) throws -> [RowValue]? {
    let list = shipped.isEmpty ? "NULL" : shipped.map(\.quotedDatabaseIdentifier).joined(separator: ", ")
    let row = try Row.fetchOne(
      db.cachedStatement(sql: "SELECT \(list) FROM \(quotedName) WHERE rowid = ?"), arguments: [rowID])
    return row.map { row in (0..<shipped.count).map { RowValue(row[$0] as DatabaseValue) } }
  }
}
