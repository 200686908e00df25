import Foundation

/// The identity of one row in a store, as a URI that any process can parse.
///
/// The URI is `x-groupsync://<STORE-UUID>/<table>/p<rowid>`, the table name
/// percent-encoded. An object a ``Context`` inserted and has not saved yet
/// has a temporary ID, `.../t<n>`, that becomes permanent at save. For example:
///
/// ```swift
/// let id = try ObjectID(uri: "x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/notes/p42")
/// id.table  // "notes"
/// id.rowID  // 42
/// ```
public struct ObjectID: Hashable, Sendable, CustomStringConvertible {
  /// The store the row lives in.
  public let storeID: UUID
  /// The row's table.
  public let table: String
  /// The row's rowid (for a temporary ID, a number unique in its context).
  public let rowID: Int64
  /// An unsaved object's ID, valid only in the context that made it.
  public let isTemporary: Bool

  /// The ID of row `rowID` of `table` in store `storeID`.
  public init(storeID: UUID, table: String, rowID: Int64) {
    self.init(storeID: storeID, table: table, rowID: rowID, isTemporary: false)
  }

  init(storeID: UUID, table: String, rowID: Int64, isTemporary: Bool) {
    self.storeID = storeID
    self.table = table
    self.rowID = rowID
    self.isTemporary = isTemporary
  }

  /// Parses an object URI; throws ``GroupSyncError/invalidURI(_:reason:)``
  /// naming what is wrong, also for a table URI (which has no rowid).
  public init(uri: String) throws {
    let parsed = try GroupSyncURI.parse(uri)
    guard let rowID = parsed.rowID else {
      throw GroupSyncError.invalidURI(uri, reason: "it names a table, not a row (no '/p<rowid>' segment)")
    }
    self.init(storeID: parsed.storeID, table: parsed.table, rowID: rowID, isTemporary: parsed.isTemporary)
  }

  /// The URI: `x-groupsync://<STORE-UUID>/<table>/p<rowid>` (`t<n>` for a
  /// temporary ID).
  public var uri: String { GroupSyncURI.format(storeID, table, rowID, temporary: isTemporary) }

  /// The table this row belongs to.
  public var tableID: TableID { TableID(storeID: storeID, table: table) }

  public var description: String { uri }

  /// Table names compare by their bytes, as SQLite compares them.
  public static func == (a: ObjectID, b: ObjectID) -> Bool {
    a.rowID == b.rowID && a.isTemporary == b.isTemporary && a.storeID == b.storeID
      && TableName(a.table) == TableName(b.table)
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(storeID)
    hasher.combine(TableName(table))
    hasher.combine(rowID)
    hasher.combine(isTemporary)
  }
}

/// The identity of a whole table, meaning "any row of it may have changed".
///
/// The URI is `x-groupsync://<STORE-UUID>/<table>`.
public struct TableID: Hashable, Sendable, CustomStringConvertible {
  /// The UUID of the table's store.
  public let storeID: UUID
  /// The table's name, as SQLite spells it.
  public let table: String

  /// The ID of `table` in store `storeID`.
  public init(storeID: UUID, table: String) {
    self.storeID = storeID
    self.table = table
  }

  /// Parses a table URI; throws for an object URI or anything malformed.
  public init(uri: String) throws {
    let parsed = try GroupSyncURI.parse(uri)
    guard parsed.rowID == nil else {
      throw GroupSyncError.invalidURI(uri, reason: "it names a row, not a table")
    }
    self.init(storeID: parsed.storeID, table: parsed.table)
  }

  /// The URI: `x-groupsync://<STORE-UUID>/<table>`.
  public var uri: String { GroupSyncURI.format(storeID, table, nil) }

  public var description: String { uri }

  public static func == (a: TableID, b: TableID) -> Bool {
    a.storeID == b.storeID && TableName(a.table) == TableName(b.table)
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(storeID)
    hasher.combine(TableName(table))
  }
}

/// Formatting and strict parsing of `x-groupsync:` URIs.
enum GroupSyncURI {
  static let scheme = "x-groupsync://"

  static func format(_ storeID: UUID, _ table: String, _ rowID: Int64?, temporary: Bool = false) -> String {
    var uri = scheme + storeID.uuidString + "/" + percentEncode(table)
    if let rowID { uri += (temporary ? "/t" : "/p") + String(rowID) }
    return uri
  }

  static func parse(_ uri: String) throws -> (storeID: UUID, table: String, rowID: Int64?, isTemporary: Bool) {
    func fail(_ reason: String) -> GroupSyncError { GroupSyncError.invalidURI(uri, reason: reason) }
    guard uri.hasPrefix(scheme) else { throw fail("it does not start with '\(scheme)'") }
    let segments = uri.dropFirst(scheme.count).split(separator: "/", omittingEmptySubsequences: false)
    guard segments.count == 2 || segments.count == 3 else {
      throw fail("expected '<store-uuid>/<table>' or '<store-uuid>/<table>/p<rowid>'")
    }
    guard segments[0].count == 36, let storeID = UUID(uuidString: String(segments[0])) else {
      throw fail("'\(segments[0])' is not a store UUID")
    }
    // The empty name is a table name SQLite accepts (`CREATE TABLE ""`).
    guard let table = percentDecode(segments[1]) else {
      throw fail("the table name is not properly percent-encoded")
    }
    guard segments.count == 3 else { return (storeID, table, nil, false) }
    let key = segments[2]
    guard key.first == "p" || key.first == "t", let rowID = Int64(key.dropFirst()), String(rowID) == key.dropFirst()
    else {
      throw fail("'\(key)' is not a rowid segment ('p' and a canonical integer, or 't' for a temporary ID)")
    }
    return (storeID, table, rowID, key.first == "t")
  }

  /// Encodes every byte outside RFC 3986's unreserved set.
  static func percentEncode(_ text: String) -> String {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(text.utf8.count)
    for byte in text.utf8 {
      if isUnreserved(byte) {
        bytes.append(byte)
      } else {
        bytes.append(UInt8(ascii: "%"))
        bytes.append(hexDigits[Int(byte >> 4)])
        bytes.append(hexDigits[Int(byte & 0xf)])
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }

  /// Decodes `%XX` escapes; nil for a bad escape, a raw reserved character,
  /// or bytes that are not UTF-8.
  static func percentDecode(_ text: Substring) -> String? {
    var bytes: [UInt8] = []
    var iterator = text.utf8.makeIterator()
    while let byte = iterator.next() {
      if byte == UInt8(ascii: "%") {
        guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue)
        else { return nil }
        bytes.append(high << 4 | low)
      } else if isUnreserved(byte) {
        bytes.append(byte)
      } else {
        return nil
      }
    }
    guard bytes.firstIndex(of: 0) == nil else { return nil }
    return String(validating: bytes, as: UTF8.self)
  }

  private static let hexDigits = Array("0123456789ABCDEF".utf8)

  private static func isUnreserved(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
      UInt8(ascii: "_"), UInt8(ascii: "~"):
      return true
    default:
      return false
    }
  }

  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
    default: return nil
    }
  }
}
