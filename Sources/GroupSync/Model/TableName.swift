import CGroupSync
#if canImport(Glibc)
import Glibc
#endif

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

  public static func == (a: TableName, b: TableName) -> Bool { sameBytes(a.name, b.name) }
  public func hash(into hasher: inout Hasher) {
    // The bytes at once where the string holds them contiguously (always,
    // for a native string): hashing byte by byte cost most of a commit's
    // dictionary look-ups.
    let hashed: Void? = name.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    if hashed == nil {
      for byte in name.utf8 { hasher.combine(byte) }
    }
    hasher.combine(0xFF as UInt8)  // never a UTF-8 byte: ends the name
  }

  /// Whether `a` and `b` are the same bytes: SQLite's rule for names,
  /// where `String`'s `==` would call canonically equivalent names equal.
  static func sameBytes(_ a: String, _ b: String) -> Bool {
    // The same storage (GRDB hands a cached statement's table name back
    // each time): the same bytes, without reading them.
    if unsafeBitCast(a, to: (UInt64, UInt64).self) == unsafeBitCast(b, to: (UInt64, UInt64).self) { return true }
    let a = a.utf8, b = b.utf8
    guard a.count == b.count else { return false }
    guard a.count > 0 else { return true }
    let same = a.withContiguousStorageIfAvailable { a in
      b.withContiguousStorageIfAvailable { b in memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
    }
    return (same ?? nil) ?? a.elementsEqual(b)
  }
  /// Byte order, SQLite's `BINARY` collation.
  public static func < (a: TableName, b: TableName) -> Bool { a.name.utf8.lexicographicallyPrecedes(b.name.utf8) }

  public var description: String { name }

  /// Whether the table is internal, never captured, replicated or copied:
  /// SQLite's (`sqlite_`), GroupSync's (`groupsync_`) or GRDB's (`grdb_`).
  public var isInternal: Bool { gs_is_internal_table(name) != 0 }

  /// The name as an SQL identifier: in double quotes, each double quote
  /// doubled. (GRDB's `quotedDatabaseIdentifier` leaves quotes as they are.)
  var quoted: String { SQLIdentifier.quoted(name) }

  /// The name in schema `main`: SQLite resolves an unqualified name to a
  /// `temp` table of the same name first, which must never stand in for
  /// the store's own.
  var qualified: String { "main." + quoted }
}
