// Parameters: Swift values bound to a statement, in libpq's text format.
import Foundation

/// A value a statement binds as a parameter (`$1`…), written in
/// PostgreSQL's text format, as libpq sends parameters (format 0). The
/// one place values become wire text: numbers in decimal, booleans as
/// `true`/`false`, `Data` as `bytea` hex (`\x…`), optionals as NULL, and
/// one-dimensional arrays as array literals with every element quoted
/// (see ``PostgresArray``).
///
/// Like postgres-nio's `PostgresEncodable`, but text only, over libpq:
///
/// ```swift
/// Statement("SELECT … WHERE grp = $1 AND seq > $2 AND tbl = ANY($3::text[])", [group, position, tables])
/// ```
protocol PostgresBindable: Sendable {
  /// The value in PostgreSQL's text format; nil: SQL NULL.
  var postgresText: String? { get }
}

extension String: PostgresBindable {
  var postgresText: String? { self }
}

extension Int64: PostgresBindable {
  var postgresText: String? { String(self) }
}

extension Int: PostgresBindable {
  var postgresText: String? { String(self) }
}

extension Double: PostgresBindable {
  /// Finite values only (the relay binds durations in seconds).
  var postgresText: String? { String(self) }
}

extension Bool: PostgresBindable {
  var postgresText: String? { self ? "true" : "false" }
}

extension Data: PostgresBindable {
  /// `bytea`'s hex format: `\x` and two lowercase hex digits a byte.
  var postgresText: String? {
    let digits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
    text.reserveCapacity(2 + 2 * count)
    for byte in self {
      text.append(digits[Int(byte >> 4)])
      text.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: text, as: UTF8.self)
  }
}

extension Optional: PostgresBindable where Wrapped: PostgresBindable {
  var postgresText: String? { flatMap(\.postgresText) }
}

extension Array: PostgresBindable where Element: PostgresBindable {
  /// A one-dimensional array literal (``PostgresArray/literal(_:)``), for
  /// `$1::text[]`, `$1::bigint[]` and the like.
  var postgresText: String? { PostgresArray.literal(self) }
}

/// PostgreSQL's array literals, written in one place.
enum PostgresArray {
  /// `{"a","b",NULL}`: every element quoted, `"` and `\` escaped, so that
  /// commas, braces, quotes, backslashes, spaces, the word `NULL` and empty
  /// strings all stay text; a nil element is NULL. One pass, no
  /// intermediate array: one shipment's arrays are built once per
  /// statement.
  static func literal<Elements: Sequence>(_ elements: Elements) -> String
  where Elements.Element: PostgresBindable {
    var text = "{"
    var first = true
    for element in elements {
      if !first { text += "," }
      first = false
      guard let value = element.postgresText else {
        text += "NULL"
        continue
      }
      text += "\""
      for scalar in value.unicodeScalars {
        if scalar == "\"" || scalar == "\\" { text += "\\" }
        text.unicodeScalars.append(scalar)
      }
      text += "\""
    }
    return text + "}"
  }
}
