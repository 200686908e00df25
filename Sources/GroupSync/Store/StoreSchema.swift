import GRDB

/// The one reader of a store's schema (schema `main`, never a `temp`
/// namesake): which tables there are and of what kind, their columns, and
/// how to name a table's rowid in SQL. The capture's snapshot, contexts,
/// listeners, store migration and the relay all ask here.
///
/// For example, inside `store.read` or `store.write`:
///
/// ```swift
/// if let table = try StoreSchema.table(named: "note", db), table.isWithoutRowID {
///   // no rowid to name its rows by
/// }
/// ```
public enum StoreSchema {
  /// A table as `pragma_table_list` describes it.
  public struct Table: Sendable, Equatable {
    /// The name as the schema spells it.
    public let name: String
    /// `table`, `view`, `virtual` or `shadow`.
    public let type: String
    /// Whether it is a `WITHOUT ROWID` table.
    public let isWithoutRowID: Bool
  }

  /// One row of `sqlite_schema`: a table, index, view or trigger.
  struct Entry: Equatable {
    let type: String
    let name: String
    /// The table it belongs to (its own name for a table).
    let tableName: String
    let sql: String?
    let rootPage: Int64

    /// Byte for byte, as SQLite compares: Swift's `==` takes canonically
    /// equivalent text for equal, and would miss a table renamed from
    /// "café" spelled precomposed to "café" spelled decomposed, which
    /// rewrites every reference to it.
    static func == (a: Entry, b: Entry) -> Bool {
      func same(_ x: String?, _ y: String?) -> Bool {
        guard let x, let y else { return x == nil && y == nil }
        return x.utf8.elementsEqual(y.utf8)
      }
      return a.rootPage == b.rootPage && same(a.type, b.type) && same(a.name, b.name)
        && same(a.tableName, b.tableName) && same(a.sql, b.sql)
    }
  }

  /// One column as `pragma_table_info` describes it.
  public struct Column: Sendable, Equatable {
    /// The name as the schema spells it.
    public let name: String
    /// The declared type, as written.
    public let type: String
    /// Its position in the primary key, from 1; 0 when not part of it.
    public let primaryKeyIndex: Int
    /// Whether it is declared NOT NULL.
    public let isNotNull: Bool
    /// The SQL of its default value, nil when it has none.
    public let defaultSQL: String?
  }

  /// `PRAGMA schema_version`: it moves with every change to the schema.
  public static func version(_ db: Database) throws -> Int64 {
    try Int64.fetchOne(db.cachedStatement(sql: "PRAGMA main.schema_version")) ?? 0
  }

  /// Every table, view, virtual and shadow table.
  static func tables(_ db: Database) throws -> [Table] {
    try Row.fetchAll(db, sql: "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main'").map(Table.init)
  }

  /// The table named `name` (ASCII case ignored, as SQLite finds it), or
  /// nil when the store has none.
  public static func table(named name: String, _ db: Database) throws -> Table? {
    try Row.fetchOne(
      db.cachedStatement(
        sql: "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main' AND name = ? COLLATE NOCASE"),
      arguments: [name]
    ).map(Table.init)
  }

  /// The names of the entries of type `table` in `sqlite_schema`: plain,
  /// WITHOUT ROWID, virtual and shadow tables, in name order.
  public static func tableNames(_ db: Database) throws -> [String] {
    try String.fetchAll(
      db.cachedStatement(sql: "SELECT name FROM main.sqlite_schema WHERE type = 'table' ORDER BY name"))
  }

  /// The rows of `sqlite_schema`.
  static func entries(_ db: Database) throws -> [Entry] {
    try Row.fetchAll(db, sql: "SELECT type, name, tbl_name, sql, rootpage FROM main.sqlite_schema").map {
      Entry(type: $0[0], name: $0[1], tableName: $0[2], sql: $0[3], rootPage: $0[4] ?? 0)
    }
  }

  /// The columns of `table` in declaration order, without hidden ones.
  public static func columns(of table: String, _ db: Database) throws -> [Column] {
    try Row.fetchAll(
      db.cachedStatement(
        sql: "SELECT name, type, pk, \"notnull\", dflt_value FROM pragma_table_info(?, 'main') ORDER BY cid"),
      arguments: [table]
    ).map { Column(name: $0[0], type: $0[1], primaryKeyIndex: $0[2], isNotNull: $0[3], defaultSQL: $0[4]) }
  }

  /// How to name the rowid of `table` in SQL: `_rowid_`, `rowid` or `oid`,
  /// whichever no column (hidden ones included) shadows; nil when all
  /// three are column names.
  static func rowIDName(of table: String, _ db: Database) throws -> String? {
    let columns = try String.fetchAll(
      db.cachedStatement(sql: "SELECT name FROM pragma_table_xinfo(?, 'main')"), arguments: [table])
    return rowIDName(amongColumns: columns)
  }

  /// The first of `_rowid_`, `rowid` and `oid` that none of `columns`
  /// names (SQLite folds identifiers in ASCII only).
  static func rowIDName(amongColumns columns: [String]) -> String? {
    let taken = Set(columns.map(SQLIdentifier.asciiLowercased))
    return ["_rowid_", "rowid", "oid"].first { !taken.contains($0) }
  }
}

extension StoreSchema.Table {
  init(_ row: Row) {
    self.init(name: row[0], type: row[1], isWithoutRowID: (row[2] as Int64) != 0)
  }
}
