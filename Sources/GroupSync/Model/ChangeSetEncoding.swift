import Foundation

/// The change-set file format, version 1: one UTF-8 JSON object.
///
/// ```json
/// {"format":"groupsync-changeset","version":1,
///  "store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":42,
///  "committedAtNs":1763800000123456789,"pid":4242,
///  "tables":{"notes":{"inserted":[7],"updated":[1,2],"deleted":[3]}},
///  "invalidatedTables":["tags"]}
/// ```
///
/// Empty `inserted` / `updated` / `deleted` arrays may be omitted. A reader
/// rejects another `format`, a higher `version`, and anything malformed.
public enum ChangeSetEncoding {
  /// The value of the `format` key.
  public static let format = "groupsync-changeset"
  /// The version this library writes and the highest it reads.
  public static let version = 1
  /// Files larger than this are rejected unread.
  public static let defaultMaximumSize = 64 << 20

  /// Encodes a change set as a version-1 file: compact JSON with sorted
  /// keys, written by hand because this runs on every commit.
  public static func encode(_ changeSet: ChangeSet) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(192 + changeSet.rowCount * 8)
    out.append(contentsOf: #"{"committedAtNs":"#.utf8)
    out.append(contentsOf: String(changeSet.committedAtNanoseconds).utf8)
    out.append(contentsOf: #","format":"groupsync-changeset","invalidatedTables":["#.utf8)
    for (index, table) in changeSet.invalidatedTableNames.sorted().enumerated() {
      if index > 0 { out.append(UInt8(ascii: ",")) }
      appendString(table, to: &out)
    }
    out.append(contentsOf: #"],"pid":"#.utf8)
    out.append(contentsOf: String(changeSet.writerProcessID).utf8)
    out.append(contentsOf: #","seq":"#.utf8)
    out.append(contentsOf: String(changeSet.sequence).utf8)
    out.append(contentsOf: #","store":""#.utf8)
    out.append(contentsOf: changeSet.storeID.uuidString.utf8)
    out.append(contentsOf: #"","tables":{"#.utf8)
    for (index, table) in changeSet.tables.keys.sorted().enumerated() {
      if index > 0 { out.append(UInt8(ascii: ",")) }
      appendString(table, to: &out)
      out.append(contentsOf: ":{".utf8)
      let changes = changeSet.tables[table]!
      var first = true
      for (key, rowIDs) in [("deleted", changes.deleted), ("inserted", changes.inserted), ("updated", changes.updated)]
      where !rowIDs.isEmpty {
        if !first { out.append(UInt8(ascii: ",")) }
        first = false
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: key.utf8)
        out.append(contentsOf: #"":["#.utf8)
        for (offset, rowID) in rowIDs.enumerated() {
          if offset > 0 { out.append(UInt8(ascii: ",")) }
          out.append(contentsOf: String(rowID).utf8)
        }
        out.append(UInt8(ascii: "]"))
      }
      out.append(UInt8(ascii: "}"))
    }
    out.append(contentsOf: #"},"version":"#.utf8)
    out.append(contentsOf: String(version).utf8)
    out.append(UInt8(ascii: "}"))
    return out
  }

  /// Appends a JSON string literal, escaping quotes, backslashes and
  /// control characters.
  private static func appendString(_ text: String, to out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    for byte in text.utf8 {
      switch byte {
      case UInt8(ascii: "\""), UInt8(ascii: "\\"):
        out.append(UInt8(ascii: "\\"))
        out.append(byte)
      case 0..<0x20:
        out.append(contentsOf: "\\u00".utf8)
        out.append(hexDigits[Int(byte >> 4)])
        out.append(hexDigits[Int(byte & 0xf)])
      default:
        out.append(byte)
      }
    }
    out.append(UInt8(ascii: "\""))
  }

  private static let hexDigits = Array("0123456789abcdef".utf8)

  /// Decodes a file; `name` is only used in errors.
  public static func decode(_ bytes: [UInt8], name: String = "<bytes>") throws -> ChangeSet {
    func fail(_ reason: String) -> GroupSyncError { GroupSyncError.invalidChangeSet(file: name, reason: reason) }
    let parsed: Any
    do {
      parsed = try JSONSerialization.jsonObject(with: Data(bytes))
    } catch {
      throw fail("not a change-set JSON object (corrupt JSON)")
    }
    guard let object = parsed as? [String: Any] else { throw fail("not a change-set JSON object") }
    let fields = Fields(object: object, fail: fail)
    let fileFormat: String = try fields.required("format")
    guard fileFormat == format else { throw fail("format is '\(fileFormat)', expected '\(format)'") }
    let fileVersion: Int = try fields.required("version")
    guard fileVersion >= 1 && fileVersion <= version else {
      throw fail("version \(fileVersion) is not supported (this library reads 1...\(version))")
    }
    let store: String = try fields.required("store")
    guard let storeID = UUID(uuidString: store) else { throw fail("'\(store)' is not a store UUID") }
    let sequence: Int64 = try fields.required("seq")
    guard sequence > 0 else { throw fail("seq \(sequence) is not positive") }
    let committedAt: Int64 = try fields.required("committedAtNs")
    let pid: Int32 = try fields.required("pid")
    let tableObjects: [String: Any] = try fields.required("tables")
    var tables: [String: TableChanges] = [:]
    for (table, value) in tableObjects {
      guard !table.isEmpty, !table.utf8.contains(0) else { throw fail("a table name is empty or contains NUL") }
      guard let changes = value as? [String: Any] else { throw fail("wrong type at 'tables.\(table)': expected an object") }
      let tableFields = Fields(object: changes, prefix: "tables.\(table).", fail: fail)
      tables[table] = TableChanges(
        inserted: try tableFields.optional("inserted") ?? [],
        updated: try tableFields.optional("updated") ?? [],
        deleted: try tableFields.optional("deleted") ?? [])
    }
    let invalidated: [String] = try fields.required("invalidatedTables")
    for table in invalidated where table.isEmpty || table.utf8.contains(0) {
      throw fail("an invalidated table name is empty or contains NUL")
    }
    return ChangeSet(
      storeID: storeID, sequence: sequence, committedAtNanoseconds: committedAt, writerProcessID: pid,
      tables: tables, invalidatedTableNames: Set(invalidated))
  }

  /// Typed access to the keys of a parsed JSON object, with errors that
  /// name the key.
  private struct Fields {
    let object: [String: Any]
    var prefix = ""
    let fail: (String) -> GroupSyncError

    func required<T>(_ key: String) throws -> T {
      guard let value = object[key] else { throw fail("missing key '\(prefix)\(key)'") }
      return try cast(value, key)
    }

    func optional<T>(_ key: String) throws -> T? {
      guard let value = object[key] else { return nil }
      return try cast(value, key) as T
    }

    private func cast<T>(_ value: Any, _ key: String) throws -> T {
      // JSON numbers arrive as NSNumber; only exact integers convert.
      if T.self == Int64.self || T.self == Int.self || T.self == Int32.self {
        guard let number = value as? NSNumber, let exact = Self.integer(number, T.self) else {
          throw fail("wrong type at '\(prefix)\(key)': expected an integer")
        }
        return exact
      }
      if T.self == [Int64].self {
        guard let array = value as? [Any] else { throw fail("wrong type at '\(prefix)\(key)': expected an array of integers") }
        var rowIDs: [Int64] = []
        rowIDs.reserveCapacity(array.count)
        for element in array {
          guard let number = element as? NSNumber, let rowID = Self.integer(number, Int64.self) else {
            throw fail("wrong type at '\(prefix)\(key)': expected an array of integers")
          }
          rowIDs.append(rowID)
        }
        return rowIDs as! T
      }
      guard let typed = value as? T else { throw fail("wrong type at '\(prefix)\(key)'") }
      return typed
    }

    private static func integer<T>(_ number: NSNumber, _: T.Type) -> T? {
      // Booleans are NSNumbers too ("c"); a fraction or an out-of-range
      // number does not survive the round trip through Int64.
      let type = number.objCType.pointee
      guard type != CChar(UInt8(ascii: "c")) && type != CChar(UInt8(ascii: "B")) else { return nil }
      let exact = number.int64Value
      guard Double(exact) == number.doubleValue else { return nil }
      switch T.self {
      case is Int64.Type: return exact as? T
      case is Int.Type: return Int(exact) as? T
      case is Int32.Type: return Int32(exactly: exact) as? T
      default: return nil
      }
    }
  }
}
