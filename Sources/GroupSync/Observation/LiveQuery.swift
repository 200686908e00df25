import GRDB

/// Any SQL query kept current across processes: re-run only for change sets
/// that touch a table it reads, and compared with its previous result row
/// by row, rows matched by their first column (select the key first).
/// `groupsync query --live` shows it in a terminal.
///
/// For a single table, a ``ResultsController`` does better: it checks only
/// the changed rowids instead of re-running the query.
public struct LiveQuery {
  /// The query.
  public let sql: String
  /// The result's column names, in order.
  public private(set) var columns: [String] = []
  /// The current rows, in the query's order.
  public private(set) var rows: [[DatabaseValue]] = []
  private var readTables: Set<TableName> = []
  private let store: Store

  /// How the result changed, by each row's first column.
  public struct Change: Equatable {
    /// First-column values of the rows that appeared.
    public var inserted: [DatabaseValue] = []
    /// First-column values of the rows whose values changed.
    public var updated: [DatabaseValue] = []
    /// First-column values of the rows that vanished.
    public var deleted: [DatabaseValue] = []
    /// No change.
    public init() {}
    /// Whether nothing appeared, changed or vanished.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }
  }

  /// Runs the query once; throws GRDB's error for SQL that is not a query
  /// of the store.
  public init(store: Store, sql: String) throws {
    self.store = store
    self.sql = sql
    _ = try refresh()
  }

  /// Re-runs the query if `changeSet` touches a table it reads (always for
  /// `nil`: a reset), and returns how the result changed.
  public mutating func update(for changeSet: ChangeSet?) throws -> Change {
    if let changeSet {
      let touched = Set(changeSet.tables.keys).union(changeSet.invalidatedTableNames)
      guard changeSet.storeID == store.storeID, !touched.isDisjoint(with: readTables) else { return Change() }
    }
    return try refresh()
  }

  private mutating func refresh() throws -> Change {
    let sql = self.sql
    let (columns, rows, tables) = try store.read { db -> ([String], [[DatabaseValue]], Set<TableName>) in
      let statement = try db.makeStatement(sql: sql)
      guard statement.isReadonly else {
        throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "only a query (SELECT) can be live: \(sql)")
      }
      let tables = try statement.tablesRead(db)
      let rows = try Row.fetchAll(statement).map { Array($0.databaseValues) }
      return (Array(statement.columnNames), rows, tables)
    }
    let old = Dictionary(self.rows.map { ($0.first ?? .null, $0) }, uniquingKeysWith: { a, _ in a })
    var change = Change()
    var seen = Set<DatabaseValue>()
    for row in rows {
      let key = row.first ?? .null
      seen.insert(key)
      if let before = old[key] {
        if before != row { change.updated.append(key) }
      } else {
        change.inserted.append(key)
      }
    }
    change.deleted = self.rows.compactMap { $0.first ?? .null }.filter { !seen.contains($0) }
    self.columns = columns
    self.rows = rows
    self.readTables = tables
    return change
  }
}
