// Results: a statement's rows as libpq returned them, decoded into typed values.
import Foundation

/// A value a result column decodes into, from PostgreSQL's text format
/// (libpq's results are text). Like postgres-nio's `PostgresDecodable`,
/// text only: `nil` from ``init(postgresText:)`` means the server sent
/// something that is no value of this type, which ``PostgresRow`` turns
/// into ``RelayError/unexpectedValue(column:text:expected:)``.
protocol PostgresDecodable {
  /// The type as an error names it (`bigint`, `boolean`).
  static var postgresTypeName: String { get }
  /// The value `text` spells, or nil.
  init?(postgresText text: String)
}

extension String: PostgresDecodable {
  static var postgresTypeName: String { "text" }
  init?(postgresText text: String) { self = text }
}

extension Int64: PostgresDecodable {
  static var postgresTypeName: String { "bigint" }
  init?(postgresText text: String) { self.init(text) }
}

extension Int: PostgresDecodable {
  static var postgresTypeName: String { "integer" }
  init?(postgresText text: String) { self.init(text) }
}

extension Double: PostgresDecodable {
  static var postgresTypeName: String { "number" }
  /// Also `numeric`'s text (`extract(epoch …)`), and `NaN`, `Infinity`.
  init?(postgresText text: String) { self.init(text) }
}

extension Bool: PostgresDecodable {
  static var postgresTypeName: String { "boolean" }
  /// `t` or `f`, as the server writes booleans.
  init?(postgresText text: String) {
    switch text {
    case "t": self = true
    case "f": self = false
    default: return nil
    }
  }
}

extension Data: PostgresDecodable {
  static var postgresTypeName: String { "bytea" }
  /// `bytea`'s hex format (`\x…`), the server's default output.
  init?(postgresText text: String) {
    let bytes = text.utf8
    guard bytes.count % 2 == 0, bytes.starts(with: "\\x".utf8) else { return nil }
    func nibble(_ digit: UInt8) -> UInt8? {
      switch digit {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
      case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
      default: nil
      }
    }
    var data = Data(capacity: bytes.count / 2 - 1)
    var high: UInt8?
    for digit in bytes.dropFirst(2) {
      guard let value = nibble(digit) else { return nil }
      if let first = high {
        data.append(first << 4 | value)
        high = nil
      } else {
        high = value
      }
    }
    self = data
  }
}

/// One statement's result: its column names and rows, as libpq returned
/// them (nil: NULL). The column names are read once per statement and
/// shared by its rows.
struct PostgresRows: RandomAccessCollection, Sendable {
  /// The result's column names, in order.
  let columns: [String]
  /// Each row's values as text.
  let texts: [[String?]]

  init(columns: [String] = [], texts: [[String?]] = []) {
    self.columns = columns
    self.texts = texts
  }

  var startIndex: Int { texts.startIndex }
  var endIndex: Int { texts.endIndex }
  subscript(position: Int) -> PostgresRow { PostgresRow(columns: columns, texts: texts[position]) }
}

/// A row of a result, whose columns decode into typed values:
///
/// ```swift
/// let position = try row.decode(Int64.self, at: 0)       // NULL or "x" throws
/// let body = try row.decode(String?.self, at: 1)         // NULL is nil
/// ```
///
/// Every unexpected value (NULL where a value is needed, text that is no
/// value of the type, a column the result lacks) throws
/// ``RelayError/unexpectedValue(column:text:expected:)`` naming the column
/// and the text.
struct PostgresRow: Sendable {
  /// The result's column names, in order.
  let columns: [String]
  /// The values as text (nil: NULL).
  let texts: [String?]

  /// Column `index`'s value, which must not be NULL.
  func decode<Value: PostgresDecodable>(_: Value.Type, at index: Int) throws -> Value {
    guard let text = try text(at: index, expecting: Value.self) else {
      throw RelayError.unexpectedValue(column: name(index), text: nil, expected: Value.postgresTypeName)
    }
    return try value(text, at: index)
  }

  /// Column `index`'s value, nil for NULL.
  func decode<Value: PostgresDecodable>(_: Value?.Type, at index: Int) throws -> Value? {
    try text(at: index, expecting: Value.self).map { try value($0, at: index) }
  }

  private func text<Value: PostgresDecodable>(at index: Int, expecting _: Value.Type) throws -> String? {
    guard texts.indices.contains(index) else {
      throw RelayError.unexpectedValue(
        column: "#\(index + 1) (the result has \(texts.count))", text: nil, expected: Value.postgresTypeName)
    }
    return texts[index]
  }

  private func value<Value: PostgresDecodable>(_ text: String, at index: Int) throws -> Value {
    guard let value = Value(postgresText: text) else {
      throw RelayError.unexpectedValue(column: name(index), text: text, expected: Value.postgresTypeName)
    }
    return value
  }

  /// The column's name, or its number where the result has no name for it.
  private func name(_ index: Int) -> String {
    columns.indices.contains(index) ? columns[index] : "#\(index + 1)"
  }
}
