import GRDB

/// Which rows of one table of one store a context fetches, and in which
/// order: the request a ``ResultsController`` keeps current.
///
/// `store` names a store of the group (``GroupFolder/store(named:create:)``);
/// the main store by default. For example, rows of a read-only store of
/// shipped data:
///
/// ```swift
/// let shipped = FetchRequest(table: "item", store: "seed", orderBy: [.ascending("name")])
/// ```
///
/// `filter` is an SQL expression (a `WHERE` clause without the keyword)
/// with `arguments`; it may read other tables (a subquery), in which case a
/// results controller re-runs the request when those change. The order is
/// total: rows equal under `orderBy` are ordered by rowid.
public struct FetchRequest: Sendable {
  /// The table to fetch from.
  public var table: String
  /// The store of the group whose table is read: `main` by default.
  public var store: String
  /// An SQL expression rows must match (a WHERE clause without `WHERE`), or nil for every row.
  public var filter: String?
  /// The values of the filter's `?` placeholders.
  public var arguments: StatementArguments
  /// The order, first key first; the rowid breaks ties.
  public var sortDescriptors: [SortDescriptor]
  /// At most this many rows, or nil for all.
  public var limit: Int?

  /// A request for the rows of `table` in `store` that match `filter` (an
  /// SQL expression with `arguments`), sorted and limited.
  public init(
    table: String, store: String = "main", filter: String? = nil, arguments: StatementArguments = [],
    orderBy: [SortDescriptor] = [], limit: Int? = nil
  ) {
    self.table = table
    self.store = store
    self.filter = filter
    self.arguments = arguments
    self.sortDescriptors = orderBy
    self.limit = limit
  }

  /// `SELECT <rowid>, <sort keys>, *` with the filter, the order and the
  /// limit; `onlyRowIDs` adds a condition on a JSON array of rowids.
  func sql(_ info: TableInfoCache.Info, onlyRowIDs: Bool = false) -> String {
    let keys = sortDescriptors.map { SQLIdentifier.quoted($0.column) }
    var sql = "SELECT " + ([info.rowIDName] + keys + ["*"]).joined(separator: ", ") + " FROM " + info.quotedName
    var conditions: [String] = []
    if let filter { conditions.append("(\(filter))") }
    if onlyRowIDs { conditions.append("\(info.rowIDName) IN (SELECT value FROM json_each(?))") }
    if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
    let order = sortDescriptors.map { $0.sql } + ["\(info.rowIDName) ASC"]
    sql += " ORDER BY " + order.joined(separator: ", ")
    if let limit, !onlyRowIDs { sql += " LIMIT \(limit)" }
    return sql
  }

  /// The rows the request selects, with their rowids and sort keys.
  func fetchRows(_ db: Database, tables: TableInfoCache, onlyRowIDs rowIDs: [Int64]? = nil) throws -> [FetchedRow] {
    let info = try tables.info(TableName(table), db)
    let statement: Statement
    do {
      statement = try db.cachedStatement(sql: sql(info, onlyRowIDs: rowIDs != nil))
    } catch let error as DatabaseError {
      throw ContextError.invalidRequest(
        "\(error.message ?? "\(error)") in the request on '\(table)' of store '\(store)'")
    }
    var arguments = self.arguments
    if let rowIDs { arguments += ["[" + rowIDs.map(String.init).joined(separator: ",") + "]"] }
    var rows: [FetchedRow] = []
    let keyCount = sortDescriptors.count
    let cursor = try Row.fetchCursor(statement, arguments: arguments)
    while let row = try cursor.next() {
      var keys: [DatabaseValue] = []
      keys.reserveCapacity(keyCount)
      for index in 0..<keyCount { keys.append(row[index + 1]) }
      let rowID: Int64 = row[0]
      rows.append(FetchedRow(rowID: rowID, keys: keys, values: RowValues(row, droppingFirst: keyCount + 1)))
    }
    return rows
  }

  /// The tables the request reads, as SQLite tells from its statement.
  func readTables(_ db: Database, tables: TableInfoCache) throws -> Set<TableName> {
    let info = try tables.info(TableName(table), db)
    return try db.makeStatement(sql: sql(info)).tablesRead(db)
  }
}

/// One row a request selected.
struct FetchedRow {
  let rowID: Int64
  let keys: [DatabaseValue]
  let values: RowValues
}

/// One key of a request's order: a column, ascending or descending, under
/// SQLite's `BINARY` or `NOCASE` collation.
public struct SortDescriptor: Sendable, Equatable {
  /// SQLite's collating sequences a sort key may use.
  public enum Collation: String, Sendable {
    case binary = "BINARY"
    case nocase = "NOCASE"
  }

  /// The column to sort by.
  public var column: String
  /// Ascending (`ASC`) or descending (`DESC`).
  public var ascending: Bool
  /// How text compares.
  public var collation: Collation

  /// A sort key on `column`.
  public init(column: String, ascending: Bool = true, collation: Collation = .binary) {
    self.column = column
    self.ascending = ascending
    self.collation = collation
  }

  /// An ascending sort key on `column`.
  public static func ascending(_ column: String, collation: Collation = .binary) -> SortDescriptor {
    SortDescriptor(column: column, ascending: true, collation: collation)
  }

  /// A descending sort key on `column`.
  public static func descending(_ column: String, collation: Collation = .binary) -> SortDescriptor {
    SortDescriptor(column: column, ascending: false, collation: collation)
  }

  var sql: String {
    "\(SQLIdentifier.quoted(column)) COLLATE \(collation.rawValue) \(ascending ? "ASC" : "DESC")"
  }
}
