/// A table's name, compared and hashed by its UTF-8 bytes, as SQLite
/// compares them: `"café"` (NFC) and `"cafe\u{301}"` (NFD) are two tables,
/// although Swift's `String` calls them equal.
///
/// For example:
///
/// ```swift
/// changeSet.tables["notes"]?.inserted          // a string literal is a TableName
/// for (table, changes) in changeSet.tables { print(table.name, changes.count) }
/// ```
public struct TableName: Hashable, Comparable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
  /// The name as SQLite has it.
  public let name: String

  /// The table named `name`, compared by its bytes.
  public init(_ name: String) { self.name = name }
  /// The table named by a string literal.
  public init(stringLiteral name: String) { self.name = name }

  public static func == (a: TableName, b: TableName) -> Bool { a.name.utf8.elementsEqual(b.name.utf8) }
  public func hash(into hasher: inout Hasher) {
    for byte in name.utf8 { hasher.combine(byte) }
    hasher.combine(0xFF as UInt8)  // never a UTF-8 byte: ends the name
  }
  /// Byte order, SQLite's `BINARY` collation.
  public static func < (a: TableName, b: TableName) -> Bool { a.name.utf8.lexicographicallyPrecedes(b.name.utf8) }

  public var description: String { name }

  /// The name as an SQL identifier: in double quotes, each double quote
  /// doubled. (GRDB's `quotedDatabaseIdentifier` leaves quotes as they are.)
  var quoted: String { SQLIdentifier.quoted(name) }

  /// The name in schema `main`: SQLite resolves an unqualified name to a
  /// `temp` table of the same name first, which must never stand in for
  /// the store's own.
  var qualified: String { "main." + quoted }
}
