
/// A value stored in or bound to SQLite.
public enum DatabaseValue: Sendable, Hashable {
  case null
  case integer(Int64)
  case real(Double)
  case text(String)
  case blob([UInt8])
}

extension DatabaseValue: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral,
  ExpressibleByFloatLiteral, ExpressibleByNilLiteral
{
  public init(integerLiteral value: Int64) { self = .integer(value) }
  public init(stringLiteral value: String) { self = .text(value) }
  public init(floatLiteral value: Double) { self = .real(value) }
  public init(nilLiteral: ()) { self = .null }
}

extension DatabaseValue {
  /// The value as an integer, if it is one.
  public var int64: Int64? {
    if case .integer(let value) = self { return value }
    return nil
  }

  /// The value as text, if it is text.
  public var string: String? {
    if case .text(let value) = self { return value }
    return nil
  }

  /// A readable rendering: SQL literals, as the sqlite3 shell prints them.
  public var sqlLiteral: String {
    switch self {
    case .null: return "NULL"
    case .integer(let value): return String(value)
    case .real(let value): return String(value)
    case .text(let value): return "'" + value.replacingOccurrences(of: "'", with: "''") + "'"
    case .blob(let bytes): return "X'" + bytes.map { String(format: "%02X", $0) }.joined() + "'"
    }
  }
}
