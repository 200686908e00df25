import CGroupSync
import Foundation

/// A connection to an SQLite database, as handed to `Store.read` and
/// `Store.write` closures.
///
/// A `Database` is only valid inside the closure it was given to: the store
/// serializes access to it.
public final class Database {
  /// The raw `sqlite3*` handle, for SQLite calls GroupSync does not wrap.
  /// Do not install hooks on it: GroupSync's capture owns them.
  public let sqliteConnection: OpaquePointer
  let path: String
  /// Prepared once, reused: the statements GroupSync runs on every write.
  private var cachedStatements: [String: OpaquePointer] = [:]

  init(path: String, flags: Int32) throws {
    var handle: OpaquePointer?
    let code = sqlite3_open_v2(path, &handle, flags | SQLITE_OPEN_NOMUTEX, nil)
    guard code == SQLITE_OK, let handle else {
      let error = SQLiteError(code: code, connection: handle)
      sqlite3_close_v2(handle)
      throw error
    }
    sqlite3_extended_result_codes(handle, 1)
    self.sqliteConnection = handle
    self.path = path
  }

  /// Closes the connection. Statements still open are finalized by SQLite.
  func close() {
    for statement in cachedStatements.values { sqlite3_finalize(statement) }
    cachedStatements.removeAll()
    sqlite3_close_v2(sqliteConnection)
  }

  /// Runs one statement that takes no arguments from a cache of prepared
  /// statements, and returns the first column of its first row.
  @discardableResult
  func executeCached(_ sql: String) throws -> DatabaseValue? {
    let statement: OpaquePointer
    if let cached = cachedStatements[sql] {
      statement = cached
    } else {
      var prepared: OpaquePointer?
      let code = sqlite3_prepare_v3(sqliteConnection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
      guard code == SQLITE_OK, let prepared else {
        throw SQLiteError(code: code, connection: sqliteConnection, sql: sql)
      }
      cachedStatements[sql] = prepared
      statement = prepared
    }
    defer { sqlite3_reset(statement) }
    var first: DatabaseValue?
    while try step(statement, sql) {
      if first == nil { first = Self.value(statement, 0) }
    }
    return first
  }

  /// Runs one or more statements separated by semicolons, binding
  /// `arguments` to the first one (`?` placeholders). Rows are discarded.
  ///
  /// For example:
  ///
  /// ```swift
  /// try db.execute("INSERT INTO notes(body) VALUES (?)", ["Hello"])
  /// ```
  public func execute(_ sql: String, _ arguments: [DatabaseValue] = []) throws {
    try forEachStatement(sql, arguments) { statement in
      while try step(statement, sql) {}
    }
  }

  /// Runs one or more statements and returns the rows of the last one that
  /// returned any, each as its column values.
  public func rows(_ sql: String, _ arguments: [DatabaseValue] = []) throws -> [[DatabaseValue]] {
    var result: [[DatabaseValue]] = []
    try forEachStatement(sql, arguments) { statement in
      var rows: [[DatabaseValue]] = []
      let columns = sqlite3_column_count(statement)
      while try step(statement, sql) {
        rows.append((0..<columns).map { Self.value(statement, $0) })
      }
      if columns > 0 { result = rows }
    }
    return result
  }

  /// The first column of the first row, or nil when there is no row.
  public func scalar(_ sql: String, _ arguments: [DatabaseValue] = []) throws -> DatabaseValue? {
    try rows(sql, arguments).first?.first
  }

  /// The number of rows the last INSERT, UPDATE or DELETE changed.
  public var changesCount: Int { Int(sqlite3_changes64(sqliteConnection)) }

  /// The rowid of the last inserted row.
  public var lastInsertedRowID: Int64 { sqlite3_last_insert_rowid(sqliteConnection) }

  /// Whether a transaction is open.
  public var isInsideTransaction: Bool { sqlite3_get_autocommit(sqliteConnection) == 0 }

  // MARK: Statements

  private func forEachStatement(
    _ sql: String, _ arguments: [DatabaseValue], _ body: (OpaquePointer) throws -> Void
  ) throws {
    try sql.withCString { start in
      var cursor: UnsafePointer<CChar>? = start
      var first = true
      while let current = cursor, current.pointee != 0 {
        var statement: OpaquePointer?
        var tail: UnsafePointer<CChar>?
        let code = sqlite3_prepare_v2(sqliteConnection, current, -1, &statement, &tail)
        guard code == SQLITE_OK else {
          throw SQLiteError(code: code, connection: sqliteConnection, sql: sql)
        }
        cursor = tail
        guard let statement else { continue }  // whitespace or a comment
        defer { sqlite3_finalize(statement) }
        if first {
          try bind(arguments, to: statement, sql)
          first = false
        }
        try body(statement)
      }
      if first && !arguments.isEmpty {
        throw SQLiteError(code: SQLITE_RANGE, message: "arguments given but no statement", sql: sql)
      }
    }
  }

  private func bind(_ arguments: [DatabaseValue], to statement: OpaquePointer, _ sql: String) throws {
    let expected = Int(sqlite3_bind_parameter_count(statement))
    guard expected == arguments.count else {
      throw SQLiteError(
        code: SQLITE_RANGE,
        message: "statement takes \(expected) arguments, \(arguments.count) given", sql: sql)
    }
    for (offset, value) in arguments.enumerated() {
      let index = Int32(offset + 1)
      let code: Int32
      switch value {
      case .null: code = sqlite3_bind_null(statement, index)
      case .integer(let int): code = sqlite3_bind_int64(statement, index, int)
      case .real(let double): code = sqlite3_bind_double(statement, index, double)
      case .text(let text): code = sqlite3_bind_text(statement, index, text, -1, SQLITE_TRANSIENT)
      case .blob(let bytes):
        code = bytes.withUnsafeBytes {
          sqlite3_bind_blob64(statement, index, $0.baseAddress, UInt64($0.count), SQLITE_TRANSIENT)
        }
      }
      guard code == SQLITE_OK else { throw SQLiteError(code: code, connection: sqliteConnection, sql: sql) }
    }
  }

  /// Steps once; true while there is a row.
  private func step(_ statement: OpaquePointer, _ sql: String) throws -> Bool {
    switch sqlite3_step(statement) {
    case SQLITE_ROW: return true
    case SQLITE_DONE: return false
    case let code: throw SQLiteError(code: code, connection: sqliteConnection, sql: sql)
    }
  }

  private static func value(_ statement: OpaquePointer, _ column: Int32) -> DatabaseValue {
    switch sqlite3_column_type(statement, column) {
    case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
    case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, column))
    case SQLITE_TEXT: return .text(String(cString: sqlite3_column_text(statement, column)))
    case SQLITE_BLOB:
      let count = Int(sqlite3_column_bytes(statement, column))
      guard count > 0, let base = sqlite3_column_blob(statement, column) else { return .blob([]) }
      return .blob(Array(UnsafeRawBufferPointer(start: base, count: count)))
    default: return .null
    }
  }
}

/// SQLite's "copy this buffer now" destructor, which Swift cannot import.
let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
