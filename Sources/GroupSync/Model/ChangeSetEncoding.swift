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
    appendUUID(changeSet.storeID, to: &out)
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

  /// Appends the UUID as `uuidString` spells it (uppercase), without the
  /// String that `uuidString` builds.
  private static func appendUUID(_ id: UUID, to out: inout [UInt8]) {
    withUnsafeBytes(of: id.uuid) { bytes in
      for (index, byte) in bytes.enumerated() {
        if index == 4 || index == 6 || index == 8 || index == 10 { out.append(UInt8(ascii: "-")) }
        out.append(upperHexDigits[Int(byte >> 4)])
        out.append(upperHexDigits[Int(byte & 0xf)])
      }
    }
  }

  private static let hexDigits = Array("0123456789abcdef".utf8)
  private static let upperHexDigits = Array("0123456789ABCDEF".utf8)
}
