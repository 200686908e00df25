import CGroupSync

/// An error SQLite reported, with its extended result code, its message and
/// the statement that failed.
///
/// Match a code with `~=`. For example:
///
/// ```swift
/// do { try store.write { try $0.execute("INSERT ...") } }
/// catch SQLiteError.SQLITE_CONSTRAINT { ... }
/// ```
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
  /// The extended result code.
  public let code: Int32
  /// SQLite's message.
  public let message: String
  /// The SQL that failed, if a statement did.
  public let sql: String?

  init(code: Int32, message: String, sql: String? = nil) {
    self.code = code
    self.message = message
    self.sql = sql
  }

  init(code: Int32, connection: OpaquePointer?, sql: String? = nil) {
    let message = connection.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
    self.init(code: code, message: message ?? String(cString: sqlite3_errstr(code)), sql: sql)
  }

  /// The primary result code (the low byte of ``code``).
  public var primaryCode: Int32 { code & 0xff }

  public var description: String {
    var text = "SQLite error \(code): \(message)"
    if let sql { text += " (in: \(sql))" }
    return text
  }

  public static let SQLITE_ERROR = SQLiteError(code: 1, message: "")
  public static let SQLITE_BUSY = SQLiteError(code: 5, message: "")
  public static let SQLITE_READONLY = SQLiteError(code: 8, message: "")
  public static let SQLITE_CORRUPT = SQLiteError(code: 11, message: "")
  public static let SQLITE_CANTOPEN = SQLiteError(code: 14, message: "")
  public static let SQLITE_CONSTRAINT = SQLiteError(code: 19, message: "")
  public static let SQLITE_NOTADB = SQLiteError(code: 26, message: "")

  /// Matches an error with the same primary result code (or the same
  /// extended code, when the pattern is one).
  public static func ~= (pattern: SQLiteError, error: any Error) -> Bool {
    guard let error = error as? SQLiteError else { return false }
    return pattern.code > 0xff ? error.code == pattern.code : error.primaryCode == pattern.code
  }
}
