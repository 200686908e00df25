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

  private struct File: Codable {
    var format: String
    var version: Int
    var store: String
    var seq: Int64
    var committedAtNs: Int64
    var pid: Int32
    var tables: [String: Table]
    var invalidatedTables: [String]
  }

  private struct Table: Codable {
    var inserted: [Int64]?
    var updated: [Int64]?
    var deleted: [Int64]?
  }

  /// Only the two keys every version must keep, checked before the rest.
  private struct Header: Decodable {
    var format: String
    var version: Int
  }

  /// Encodes a change set as a version-1 file.
  public static func encode(_ changeSet: ChangeSet) -> [UInt8] {
    let file = File(
      format: format, version: version, store: changeSet.storeID.uuidString,
      seq: changeSet.sequence, committedAtNs: changeSet.committedAtNanoseconds,
      pid: changeSet.writerProcessID,
      tables: changeSet.tables.mapValues {
        Table(
          inserted: $0.inserted.isEmpty ? nil : $0.inserted,
          updated: $0.updated.isEmpty ? nil : $0.updated,
          deleted: $0.deleted.isEmpty ? nil : $0.deleted)
      },
      invalidatedTables: changeSet.invalidatedTableNames.sorted())
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    // Encoding plain strings and integers cannot fail.
    return Array(try! encoder.encode(file))
  }

  /// Decodes a file; `name` is only used in errors.
  public static func decode(_ bytes: [UInt8], name: String = "<bytes>") throws -> ChangeSet {
    func fail(_ reason: String) -> GroupSyncError { .invalidChangeSet(file: name, reason: reason) }
    let data = Data(bytes)
    let decoder = JSONDecoder()
    let header: Header
    do {
      header = try decoder.decode(Header.self, from: data)
    } catch {
      throw fail("not a change-set JSON object (\(Self.summary(of: error)))")
    }
    guard header.format == format else { throw fail("format is '\(header.format)', expected '\(format)'") }
    guard header.version >= 1 && header.version <= version else {
      throw fail("version \(header.version) is not supported (this library reads 1...\(version))")
    }
    let file: File
    do {
      file = try decoder.decode(File.self, from: data)
    } catch {
      throw fail(Self.summary(of: error))
    }
    guard let storeID = UUID(uuidString: file.store) else { throw fail("'\(file.store)' is not a store UUID") }
    guard file.seq > 0 else { throw fail("seq \(file.seq) is not positive") }
    for table in file.tables.keys where table.isEmpty || table.utf8.contains(0) {
      throw fail("a table name is empty or contains NUL")
    }
    for table in file.invalidatedTables where table.isEmpty || table.utf8.contains(0) {
      throw fail("an invalidated table name is empty or contains NUL")
    }
    return ChangeSet(
      storeID: storeID, sequence: file.seq, committedAtNanoseconds: file.committedAtNs,
      writerProcessID: file.pid,
      tables: file.tables.mapValues {
        TableChanges(inserted: $0.inserted ?? [], updated: $0.updated ?? [], deleted: $0.deleted ?? [])
      },
      invalidatedTableNames: Set(file.invalidatedTables))
  }

  /// A one-line reason from a DecodingError.
  private static func summary(of error: any Error) -> String {
    guard let error = error as? DecodingError else { return "\(error)" }
    switch error {
    case .dataCorrupted(let context):
      return "corrupt JSON: \(context.debugDescription)"
    case .keyNotFound(let key, let context):
      return "missing key '\(path(context.codingPath + [key]))'"
    case .typeMismatch(_, let context), .valueNotFound(_, let context):
      return "wrong type at '\(path(context.codingPath))': \(context.debugDescription)"
    @unknown default:
      return "\(error)"
    }
  }

  private static func path(_ keys: [any CodingKey]) -> String {
    keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
  }
}
