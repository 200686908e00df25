import Foundation
import GRDB

/// What ``GroupFolder/migrateStore(_:into:tables:)`` copied.
public struct StoreMigration: Sendable {
  /// The target store's change set: every row copied, as inserted (nil
  /// when there was nothing to copy).
  public let changeSet: ChangeSet?
  /// Each copied row's ID in the source store and in the target store
  /// (rowids are kept; the store UUID changes). WITHOUT ROWID tables have
  /// no object IDs and are not listed.
  public let objectIDs: [ObjectID: ObjectID]
  /// The tables copied, and how many rows each.
  public let rowCounts: [String: Int]
}

extension GroupFolder {
  /// Copies the rows of store `source` into writable store `target` in one
  /// transaction of `target`, published as one change set (Core Data's
  /// `migratePersistentStore`, for rows of a read-only seed store that must
  /// become user data).
  ///
  /// Each table is created in `target` if missing (with its indexes), as
  /// `source` declares it. Rows keep their rowids, so that references
  /// among them stay valid; a rowid or unique key `target` already holds is
  /// a conflict, and nothing is written. Foreign keys are checked at
  /// COMMIT. `source` is not changed.
  ///
  /// For example:
  ///
  /// ```swift
  /// let migration = try group.migrateStore("seed", into: "main", tables: ["recipe", "ingredient"])
  /// let newID = migration.objectIDs[oldSeedID]
  /// ```
  ///
  /// - Parameters:
  ///   - source: the store to copy from (it is not changed).
  ///   - target: the writable store to copy into.
  ///   - tables: the tables to copy; nil: every table of `source` but
  ///     SQLite's, GroupSync's and GRDB's own, virtual tables and their
  ///     shadow tables.
  /// - Throws: ``GroupSyncError/readOnlyStore(_:)`` for a read-only target,
  ///   ``GroupSyncError/invalidStore(path:reason:)`` naming the table (and
  ///   row) that cannot be copied; nothing is written then.
  @discardableResult
  public func migrateStore(_ source: String, into target: String, tables: [String]? = nil) throws -> StoreMigration {
    let from = try store(named: source)
    let to = try store(named: target)
    guard from !== to else {
      throw GroupSyncError.invalidStore(path: to.path, reason: "a store cannot be migrated into itself")
    }
    try to.checkWritable()
    let plans = try from.read { db in try MigrationPlan.tables(tables, db, path: from.path) }
    var objectIDs: [ObjectID: ObjectID] = [:]
    var rowCounts: [String: Int] = [:]
    let (_, changeSet) = try to.writeAndReturnChangeSet { db in
      try db.execute(sql: "PRAGMA defer_foreign_keys = ON")
      for plan in plans {
        try plan.createIfMissing(db)
        let insert = try db.makeStatement(sql: plan.insertSQL)
        var count = 0
        try from.read { sourceDB in
          let rows = try Row.fetchCursor(sourceDB, sql: plan.selectSQL)
          while let row = try rows.next() {
            do {
              try insert.execute(arguments: StatementArguments(row.databaseValues))
            } catch let error as DatabaseError {
              let key = plan.hasRowID ? " rowid \(row.databaseValues.first?.description ?? "?")" : ""
              throw GroupSyncError.invalidStore(
                path: to.path, reason: "cannot copy table '\(plan.name)'\(key) from store '\(source)': \(error.message ?? "\(error)")")
            }
            if plan.hasRowID, let value = row.databaseValues.first, let rowID = Int64.fromDatabaseValue(value) {
              objectIDs[ObjectID(storeID: from.storeID, table: plan.name, rowID: rowID)] =
                ObjectID(storeID: to.storeID, table: plan.name, rowID: rowID)
            }
            count += 1
          }
        }
        rowCounts[plan.name] = count
      }
    }
    return StoreMigration(changeSet: changeSet, objectIDs: objectIDs, rowCounts: rowCounts)
  }
}

/// How one table is copied from a store into another.
struct MigrationPlan: Sendable {
  let name: String
  let createSQL: String
  let indexSQL: [String]
  /// Copied with its rowid (not a WITHOUT ROWID table).
  let hasRowID: Bool
  /// The columns copied, besides the rowid (a column that is the rowid's
  /// alias is the rowid).
  let columns: [String]

  /// The plans for `names` (nil: every ordinary table) of the store `db`.
  static func tables(_ names: [String]?, _ db: Database, path: String) throws -> [MigrationPlan] {
    let entries = try StoreSchema.entries(db)
    func sql(of name: String, type: String) -> String? {
      entries.first { $0.type == type && $0.name == name }?.sql
    }
    // Tables only, as `sqlite_schema` has them (`pragma_table_list` names
    // `temp`'s tables too).
    let list = try StoreSchema.tables(db).filter { table in entries.contains { $0.type == "table" && $0.name == table.name } }
    var byName: [String: StoreSchema.Table] = [:]
    for table in list { byName[table.name] = table }
    let wanted = names ?? list.compactMap { table -> String? in
      table.type == "table" && !TableName(table.name).isInternal ? table.name : nil
    }.sorted()
    return try wanted.map { name in
      guard let table = byName[name] ?? list.first(where: { $0.name.lowercased() == name.lowercased() }) else {
        throw GroupSyncError.invalidStore(path: path, reason: "the store has no table '\(name)'")
      }
      guard table.type == "table" else {
        throw GroupSyncError.invalidStore(
          path: path, reason: "'\(name)' is not a plain table (its type is \(table.type)) and cannot be copied row by row")
      }
      let tableName = table.name
      let hasRowID = !table.isWithoutRowID
      let info = try StoreSchema.columns(of: tableName, db)
      let primaryKeys = info.filter { $0.primaryKeyIndex > 0 }
      let rowIDAlias = hasRowID && primaryKeys.count == 1 && primaryKeys[0].type.uppercased() == "INTEGER"
        ? primaryKeys[0].name : nil
      let indexes = entries.compactMap { $0.type == "index" && $0.tableName == tableName ? $0.sql : nil }
      return MigrationPlan(
        name: tableName, createSQL: sql(of: tableName, type: "table") ?? "", indexSQL: indexes, hasRowID: hasRowID,
        columns: info.map(\.name).filter { $0 != rowIDAlias })
    }
  }

  /// `_rowid_`, `rowid` or `oid`: the first that no column shadows.
  private var rowIDName: String { StoreSchema.rowIDName(amongColumns: columns) ?? "_rowid_" }

  /// The rowid first (tables with rowids), then the columns.
  private var copiedNames: [String] {
    (hasRowID ? [rowIDName] : []) + columns.map { TableName($0).quoted }
  }

  var selectSQL: String {
    "SELECT \(copiedNames.joined(separator: ", ")) FROM main.\(TableName(name).quoted)"
      + (hasRowID ? " ORDER BY \(rowIDName)" : "")
  }

  var insertSQL: String {
    "INSERT INTO main.\(TableName(name).quoted)(\(copiedNames.joined(separator: ", "))) VALUES ("
      + Array(repeating: "?", count: copiedNames.count).joined(separator: ", ") + ")"
  }

  /// Creates the table and its indexes in `db` unless it has the table.
  func createIfMissing(_ db: Database) throws {
    guard try !db.tableExists(name) else { return }
    try db.execute(sql: createSQL)
    for sql in indexSQL { try db.execute(sql: sql) }
  }
}
