import CGroupSync
import Foundation
import GRDB

/// The statements GroupSync runs on every commit, prepared once on the
/// writer connection and stepped through SQLite's C API.
///
/// Why not GRDB's `cachedStatement`: these run inside every write, and
/// GRDB's general path (a statement cache keyed by SQL strings, arguments
/// as existentials checked at run time) costs several times the statement
/// itself; its cache also compares SQL as Swift `String`s, which would
/// merge two tables whose names differ only in Unicode normalization.
/// Used only on the writer's queue; ``finalize()`` runs before the
/// connection closes.
final class WriterStatements {
  private let connection: OpaquePointer
  /// The statements of every commit, each in a slot of its own: looking
  /// them up by SQL hashed the string on every call.
  private var schemaVersionStatement: OpaquePointer?
  private var lastSequenceStatement: OpaquePointer?
  private var appendHistoryStatement: OpaquePointer?
  private var existence: [TableName: (range: OpaquePointer?, list: OpaquePointer?, count: OpaquePointer?)] = [:]
  private var existenceVersion: Int64 = -1
  /// The table whose existence statements were looked up last, and them:
  /// most commits check one table, the one the last commit checked.
  private var lastExistence: (table: TableName, statements: (range: OpaquePointer, list: OpaquePointer, count: OpaquePointer))?

  init(connection: OpaquePointer) {
    self.connection = connection
  }

  deinit { finalize() }

  /// Finalizes every statement; they are prepared again when needed.
  func finalize() {
    for slot in [schemaVersionStatement, lastSequenceStatement, appendHistoryStatement] { sqlite3_finalize(slot) }
    (schemaVersionStatement, lastSequenceStatement, appendHistoryStatement) = (nil, nil, nil)
    for (range, list, count) in existence.values {
      sqlite3_finalize(range)
      sqlite3_finalize(list)
      sqlite3_finalize(count)
    }
    existence = [:]
    lastExistence = nil
  }

  private func prepare(_ sql: String) throws -> OpaquePointer {
    var statement: OpaquePointer?
    let code = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
    guard code == SQLITE_OK, let statement else {
      throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }
    return statement
  }

  private func prepared(_ slot: inout OpaquePointer?, _ sql: @autoclosure () -> String) throws -> OpaquePointer {
    if let statement = slot { return statement }
    let statement = try prepare(sql())
    slot = statement
    return statement
  }

  /// Steps `statement` to its end; returns the first column of its first
  /// row, if any.
  @discardableResult
  private func run(_ statement: OpaquePointer) throws -> Int64? {
    defer {
      sqlite3_reset(statement)
      sqlite3_clear_bindings(statement)
    }
    var first: Int64?
    while true {
      switch sqlite3_step(statement) {
      case SQLITE_ROW: if first == nil { first = sqlite3_column_int64(statement, 0) }
      case SQLITE_DONE: return first
      case let code:
        throw DatabaseError(
          resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)),
          sql: String(cString: sqlite3_sql(statement)))
      }
    }
  }

  func schemaVersion() throws -> Int64 { try run(prepared(&schemaVersionStatement, "PRAGMA main.schema_version")) ?? 0 }

  /// The connection's data version (`SQLITE_FCNTL_DATA_VERSION`): it
  /// moves with every commit to the file, this connection's and, once a
  /// transaction began, any other connection's.
  func dataVersion() -> UInt32? {
    var version: UInt32 = 0
    return sqlite3_file_control(connection, "main", SQLITE_FCNTL_DATA_VERSION, &version) == SQLITE_OK ? version : nil
  }

  func lastSequence() throws -> Int64 {
    try run(prepared(&lastSequenceStatement, "SELECT coalesce(max(seq), 0) FROM main.\(StoreState.historyTable)")) ?? 0
  }

  /// Appends a history entry (see ``StoreState``), keeping the caller's
  /// `last_insert_rowid`.
  func appendHistory(_ changeSet: ChangeSet, payload: [UInt8], author: String?) throws {
    let statement = try prepared(
      &appendHistoryStatement,
      "INSERT INTO main.\(StoreState.historyTable)(seq, committed_at, author, pid, payload) VALUES (?, ?, ?, ?, ?)")
    let savedRowID = sqlite3_last_insert_rowid(connection)
    sqlite3_bind_int64(statement, 1, changeSet.sequence)
    sqlite3_bind_int64(statement, 2, changeSet.committedAtNanoseconds)
    sqlite3_bind_int64(statement, 4, Int64(changeSet.writerProcessID))
    // Author and payload bound in place (SQLITE_STATIC): `run` steps the
    // statement and clears its bindings while both buffers are held.
    try payload.withUnsafeBytes { bytes in
      _ = sqlite3_bind_blob64(statement, 5, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), UInt64(bytes.count), nil)
      if let author {
        try author.withCString { text in
          sqlite3_bind_text(statement, 3, text, -1, nil)
          try run(statement)
        }
      } else {
        sqlite3_bind_null(statement, 3)
        try run(statement)
      }
    }
    sqlite3_set_last_insert_rowid(connection, savedRowID)
  }

  /// The existence statements are prepared again, whatever the schema
  /// version (a rolled-back transaction's version may come back for
  /// another schema).
  func forgetSchemaVersion() { existenceVersion = -1 }

  /// The existence statements of `table`, prepared once per schema
  /// version; nil when its rowid cannot be named in SQL.
  private func existenceStatements(
    _ table: TableName, schemaVersion: Int64, _ db: Database
  ) throws -> (range: OpaquePointer, list: OpaquePointer, count: OpaquePointer)? {
    if schemaVersion != existenceVersion {
      for (range, list, count) in existence.values {
        sqlite3_finalize(range)
        sqlite3_finalize(list)
        sqlite3_finalize(count)
      }
      existence = [:]
      lastExistence = nil
      existenceVersion = schemaVersion
    }
    if let last = lastExistence, TableName.sameBytes(last.table.name, table.name) { return last.statements }
    if let (range, list, count) = existence[table] {
      guard let range, let list, let count else { return nil }
      lastExistence = (table, (range, list, count))
      return (range, list, count)
    }
    // Nil when every alias is a column name: its rows cannot be checked,
    // only invalidated.
    guard let rowID = try StoreSchema.rowIDName(of: table.name, db) else {
      existence[table] = (nil, nil, nil)
      return nil
    }
    let statements = (
      range: try prepare("SELECT \(rowID) FROM \(table.qualified) WHERE \(rowID) BETWEEN ? AND ?"),
      list: try prepare("SELECT \(rowID) FROM \(table.qualified) WHERE \(rowID) IN (SELECT value FROM json_each(?))"),
      count: try prepare("SELECT count(*) FROM \(table.qualified) WHERE \(rowID) BETWEEN ? AND ?"))
    existence[table] = statements
    lastExistence = (table, statements)
    return statements
  }

  /// Whether every one of the sorted `rowIDs`, a dense range, exists in
  /// `table`: one count over the range, no row handed back. Nil when they
  /// are not a dense range or the rowid cannot be named in SQL.
  func allExist(_ rowIDs: [Int64], in table: TableName, schemaVersion: Int64, _ db: Database) throws -> Bool? {
    guard let first = rowIDs.first, let last = rowIDs.last, last &- first == Int64(rowIDs.count - 1),
      let (range, _, count) = try existenceStatements(table, schemaVersion: schemaVersion, db)
    else { return nil }
    if rowIDs.count == 1 {
      // One row, the common write: found by its rowid, no aggregate.
      sqlite3_bind_int64(range, 1, first)
      sqlite3_bind_int64(range, 2, first)
      return try run(range) == first
    }
    sqlite3_bind_int64(count, 1, first)
    sqlite3_bind_int64(count, 2, last)
    return try run(count) == Int64(rowIDs.count)
  }

  /// Which of the sorted `rowIDs` exist in `table`, sorted; nil when its
  /// rowid cannot be named in SQL (columns shadow `rowid`, `_rowid_` and
  /// `oid`).
  func existingRowIDs(among rowIDs: [Int64], in table: TableName, schemaVersion: Int64, _ db: Database) throws -> [Int64]? {
    guard let first = rowIDs.first, let last = rowIDs.last else { return [] }
    guard let (range, list, _) = try existenceStatements(table, schemaVersion: schemaVersion, db) else { return nil }
    let statement: OpaquePointer
    if last &- first == Int64(rowIDs.count - 1) {
      // A dense range, the bulk case: one range scan, no list to pass.
      statement = range
      sqlite3_bind_int64(statement, 1, first)
      sqlite3_bind_int64(statement, 2, last)
    } else {
      statement = list
      let json = "[" + rowIDs.map(String.init).joined(separator: ",") + "]"
      sqlite3_bind_text(statement, 1, json, -1, SQLITE_TRANSIENT_DESTRUCTOR)
    }
    defer {
      sqlite3_reset(statement)
      sqlite3_clear_bindings(statement)
    }
    // An array, not a set: the caller compares it with what the log
    // claims, equal in the common case.
    var existing: [Int64] = []
    existing.reserveCapacity(rowIDs.count)
    var sorted = true
    while true {
      switch sqlite3_step(statement) {
      case SQLITE_ROW:
        let rowID = sqlite3_column_int64(statement, 0)
        if let previous = existing.last, previous >= rowID { sorted = false }
        existing.append(rowID)
      case SQLITE_DONE:
        return sorted ? existing : Array(Set(existing)).sorted()
      case let code:
        throw DatabaseError(
          resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)),
          sql: String(cString: sqlite3_sql(statement)))
      }
    }
  }
}

/// SQLite's "copy this buffer now" destructor, which Swift cannot import.
let SQLITE_TRANSIENT_DESTRUCTOR = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
