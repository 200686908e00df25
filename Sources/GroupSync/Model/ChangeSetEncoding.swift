import Foundation

/// The change-set encoding, version 2: one compact binary form for the
/// inbox file and the store's history (`groupsync_history.payload`).
///
/// ```
/// "GSCS"  version=2  flags=0          magic, version, reserved byte
/// store UUID                          16 bytes
/// seq                                 uvarint
/// committedAtNs, pid                  svarint (zigzag)
/// table count; per table, sorted by name bytes:
///   name length, name (UTF-8)         uvarint, bytes
///   inserted, updated, deleted:       count uvarint; first rowid svarint,
///                                     then gaps to the next rowid, uvarint >= 1
/// invalidated count; names            uvarint; (length, bytes)... sorted
/// note count; per note:               uvarint;
///   name length, name, payload length, payload
/// ```
///
/// Varints are LEB128, minimal; every count and length is checked against
/// the bytes that remain before anything is allocated, and a reader
/// rejects anything else with a reason.
public enum ChangeSetEncoding {
  /// The version this library writes and reads.
  public static let version = 2
  static let magic: [UInt8] = Array("GSCS".utf8)

  /// Files larger than this are rejected unread. A transaction names at
  /// most ``StoreOptions/rowBudget`` (300,000) rows, at most 10 bytes each
  /// (a rowid gap of 2^63): 3 MB, plus table names and notes (each capped
  /// at 64 KiB by the notification center and 256 KiB by defaults); 16 MiB
  /// leaves room for budgets several times the default.
  public static let defaultMaximumSize = 16 << 20

  /// Encodes a change set.
  public static func encode(_ changeSet: ChangeSet) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(48 + changeSet.rowCount * 2 + changeSet.tables.count * 16)
    out += magic
    out.append(UInt8(version))
    out.append(0)
    withUnsafeBytes(of: changeSet.storeID.uuid) { out += $0 }
    appendUnsigned(UInt64(changeSet.sequence), to: &out)
    appendSigned(changeSet.committedAtNanoseconds, to: &out)
    appendSigned(Int64(changeSet.writerProcessID), to: &out)
    appendUnsigned(UInt64(changeSet.tables.count), to: &out)
    // Most change sets name one table: nothing to sort.
    if changeSet.tables.count == 1, let (name, changes) = changeSet.tables.first {
      appendTable(name, changes, to: &out)
    } else {
      for (name, changes) in changeSet.tables.sorted(by: { $0.key < $1.key }) { appendTable(name, changes, to: &out) }
    }
    appendUnsigned(UInt64(changeSet.invalidatedTableNames.count), to: &out)
    for name in changeSet.invalidatedTableNames.sorted() { appendName(name.name, to: &out) }
    appendUnsigned(UInt64(changeSet.notes.count), to: &out)
    for note in changeSet.notes {
      appendBytes(Array(note.name.utf8), to: &out)
      appendBytes(note.payload, to: &out)
    }
    return out
  }

  /// Decodes a change set; throws ``GroupSyncError/invalidChangeSet(file:reason:)``
  /// naming what is wrong, for anything but a well-formed version 2 encoding.
  public static func decode(_ bytes: [UInt8], name: String = "<bytes>") throws -> ChangeSet {
    try bytes.withUnsafeBufferPointer { buffer in
      var reader = Reader(bytes: buffer)
      do {
        return try reader.changeSet()
      } catch let error as Reader.Malformed {
        throw GroupSyncError.invalidChangeSet(file: name, reason: "\(error.reason) (at byte \(error.offset))")
      }
    }
  }

  /// Table names are ordered, and compared, by their UTF-8 bytes.
  static func precedes(_ a: String, _ b: String) -> Bool {
    a.utf8.lexicographicallyPrecedes(b.utf8)
  }

  // MARK: Writing

  static func appendUnsigned(_ value: UInt64, to out: inout [UInt8]) {
    var value = value
    while value >= 0x80 {
      out.append(UInt8(truncatingIfNeeded: value) | 0x80)
      value >>= 7
    }
    out.append(UInt8(value))
  }

  static func appendSigned(_ value: Int64, to out: inout [UInt8]) {
    appendUnsigned(UInt64(bitPattern: (value << 1) ^ (value >> 63)), to: &out)
  }

  private static func appendTable(_ name: TableName, _ changes: TableChanges, to out: inout [UInt8]) {
    appendName(name.name, to: &out)
    appendRowIDs(changes.inserted, to: &out)
    appendRowIDs(changes.updated, to: &out)
    appendRowIDs(changes.deleted, to: &out)
  }

  private static func appendRowIDs(_ rowIDs: [Int64], to out: inout [UInt8]) {
    appendUnsigned(UInt64(rowIDs.count), to: &out)
    guard let first = rowIDs.first else { return }
    appendSigned(first, to: &out)
    var previous = first
    for rowID in rowIDs.dropFirst() {
      appendUnsigned(UInt64(bitPattern: rowID &- previous), to: &out)
      previous = rowID
    }
  }

  private static func appendName(_ name: String, to out: inout [UInt8]) {
    appendUnsigned(UInt64(name.utf8.count), to: &out)
    out.append(contentsOf: name.utf8)
  }

  static func appendBytes(_ bytes: [UInt8], to out: inout [UInt8]) {
    appendUnsigned(UInt64(bytes.count), to: &out)
    out += bytes
  }

  // MARK: Reading

  /// A single pass over the bytes; every length is checked against what
  /// remains before it is used.
  struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    var offset = 0

    struct Malformed: Error {
      let reason: String
      let offset: Int
    }

    init(bytes: UnsafeBufferPointer<UInt8>) {
      self.bytes = bytes
    }

    var remaining: Int { bytes.count - offset }

    func fail(_ reason: String) -> Malformed { Malformed(reason: reason, offset: offset) }

    mutating func byte() throws(Malformed) -> UInt8 {
      guard offset < bytes.count else { throw fail("truncated") }
      defer { offset += 1 }
      return bytes[offset]
    }

    mutating func unsigned(_ what: @autoclosure () -> String) throws(Malformed) -> UInt64 {
      var value: UInt64 = 0
      var shift: UInt64 = 0
      while true {
        guard offset < bytes.count else { throw fail("truncated in \(what())") }
        let byte = bytes[offset]
        offset += 1
        if shift == 63 && byte > 1 { throw fail("\(what()) overflows 64 bits") }
        value |= UInt64(byte & 0x7F) << shift
        if byte & 0x80 == 0 {
          if byte == 0 && shift > 0 { throw fail("\(what()) is not minimally encoded") }
          return value
        }
        shift += 7
      }
    }

    mutating func signed(_ what: @autoclosure () -> String) throws(Malformed) -> Int64 {
      let raw = try unsigned(what())
      return Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
    }

    /// A count of items that take at least `minimumSize` bytes each.
    mutating func count(_ what: String, minimumSize: Int) throws(Malformed) -> Int {
      let value = try unsigned(what)
      guard value <= UInt64(remaining / max(minimumSize, 1)) else {
        throw fail("\(what) \(value) exceeds what the remaining \(remaining) bytes can hold")
      }
      return Int(value)
    }

    mutating func data(_ what: String) throws(Malformed) -> UnsafeBufferPointer<UInt8> {
      let length = try count("\(what) length", minimumSize: 1)
      defer { offset += length }
      return UnsafeBufferPointer(rebasing: bytes[offset..<offset + length])
    }

    mutating func text(_ what: String) throws(Malformed) -> String {
      let raw = try data(what)
      guard let text = String(validating: raw, as: UTF8.self) else { throw fail("\(what) is not UTF-8") }
      return text
    }

    mutating func rowIDs(_ what: String) throws(Malformed) -> [Int64] {
      let count = try count("\(what) count", minimumSize: 1)
      var rowIDs: [Int64] = []
      rowIDs.reserveCapacity(count)
      guard count > 0 else { return rowIDs }
      var current = try signed("first \(what) rowid")
      rowIDs.append(current)
      for _ in 1..<count {
        let gap = try unsigned("\(what) rowid gap")  // the message is built only on failure
        guard gap >= 1 else { throw fail("\(what) rowids are not strictly increasing") }
        guard gap <= UInt64(Int64.max), case let (next, overflow) = current.addingReportingOverflow(Int64(gap)),
          !overflow
        else { throw fail("\(what) rowid overflows") }
        current = next
        rowIDs.append(current)
      }
      return rowIDs
    }

    /// A value in both sorted arrays, found by merging them.
    static func common(_ a: [Int64], _ b: [Int64]) -> Int64? {
      var i = 0
      var j = 0
      while i < a.count && j < b.count {
        if a[i] == b[j] { return a[i] }
        if a[i] < b[j] { i += 1 } else { j += 1 }
      }
      return nil
    }

    mutating func changeSet() throws(Malformed) -> ChangeSet {
      guard bytes.count >= 6, Array(bytes[0..<4]) == ChangeSetEncoding.magic else {
        throw fail("not a GroupSync change set (no GSCS marker)")
      }
      offset = 4
      let version = try byte()
      guard version == UInt8(ChangeSetEncoding.version) else {
        throw fail("version \(version) is not supported (this library reads \(ChangeSetEncoding.version))")
      }
      guard try byte() == 0 else { throw fail("reserved flags are not 0") }
      guard remaining >= 16 else { throw fail("truncated in the store UUID") }
      var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
      let start = offset
      withUnsafeMutableBytes(of: &uuid) { target in
        for index in 0..<16 { target[index] = bytes[start + index] }
      }
      offset += 16
      let sequence = try unsigned("sequence")
      guard sequence >= 1, sequence <= UInt64(Int64.max) else { throw fail("sequence \(sequence) is out of range") }
      let committedAt = try signed("commit time")
      let pid = try signed("writer pid")
      guard let processID = Int32(exactly: pid) else { throw fail("writer pid \(pid) is out of range") }

      let tableCount = try count("table count", minimumSize: 4)
      var tables: [TableName: TableChanges] = [:]
      var previousName: String?
      for _ in 0..<tableCount {
        let name = try text("table name")
        if let previousName, !ChangeSetEncoding.precedes(previousName, name) {
          throw fail("tables are not sorted by name or repeat '\(name)'")
        }
        previousName = name
        let changes = TableChanges(
          inserted: try rowIDs("inserted"), updated: try rowIDs("updated"), deleted: try rowIDs("deleted"))
        guard !changes.isEmpty else { throw fail("table '\(name)' has no rows") }
        for (a, b) in [(changes.inserted, changes.updated), (changes.inserted, changes.deleted), (changes.updated, changes.deleted)] {
          if let rowID = Self.common(a, b) { throw fail("row \(rowID) of '\(name)' is in two categories") }
        }
        tables[TableName(name)] = changes
      }
      let invalidatedCount = try count("invalidated table count", minimumSize: 1)
      var invalidated = Set<TableName>()
      previousName = nil
      for _ in 0..<invalidatedCount {
        let name = try text("invalidated table name")
        if let previousName, !ChangeSetEncoding.precedes(previousName, name) {
          throw fail("invalidated tables are not sorted or repeat '\(name)'")
        }
        previousName = name
        invalidated.insert(TableName(name))
      }
      let noteCount = try count("note count", minimumSize: 2)
      var notes: [ChangeSetNote] = []
      notes.reserveCapacity(noteCount)
      for _ in 0..<noteCount {
        let name = try text("note name")
        let payload = try data("note payload")
        notes.append(ChangeSetNote(name: name, payload: [UInt8](payload)))
      }
      guard remaining == 0 else { throw fail("\(remaining) bytes after the end") }
      return ChangeSet(
        storeID: UUID(uuid: uuid), sequence: Int64(sequence), committedAtNanoseconds: committedAt,
        writerProcessID: processID, tables: tables, invalidatedTableNames: invalidated, notes: notes)
    }
  }
}
