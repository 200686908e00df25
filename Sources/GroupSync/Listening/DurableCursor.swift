import GRDB
#if canImport(Glibc)
import Glibc
#endif

/// Where a durable listener keeps its place in one store: the last
/// sequence it acknowledged, in `listeners/NAME/cursor` (the main store;
/// `cursor.STORE` for another) or, for consumers whose state lives in the
/// store, in the store's `groupsync_cursors` table.
///
/// The file holds 16 bytes: the sequence and its bitwise complement, little
/// endian, so that a torn or planted file is told apart from a place.
/// Writing it is one `pwrite` on a descriptor opened once; no lock of the
/// store is taken per acknowledgement.
final class DurableCursor: Sendable {
  static let fileName = "cursor"
  static let table = "groupsync_cursors"

  enum Storage: Sendable {
    case file(FileDescriptor)
    case store(Store, name: String)
  }
  let storage: Storage

  /// Opens (creating, unless `readOnly`) the cursor file of `store` in a
  /// listener's folder.
  init(file folder: SafeDirectory, store: String = GroupLayout.mainStoreName, readOnly: Bool = false) throws {
    storage = .file(try folder.openFile(Self.fileName(store: store), readOnly ? O_RDONLY : O_RDWR | O_CREAT))
  }

  /// `cursor` for the main store, `cursor.STORE` for another.
  static func fileName(store: String) -> String {
    store == GroupLayout.mainStoreName ? fileName : fileName + "." + store
  }

  /// The cursor row `name` of `store`.
  init(store: Store, name: String) throws {
    try store.writeBookkeeping { try Self.createTable($0) }
    storage = .store(store, name: name)
  }

  static func createTable(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(table) (name TEXT PRIMARY KEY, acked INTEGER NOT NULL, updated_at INTEGER NOT NULL)
      """)
  }

  /// The acknowledged sequence; nil when the listener never had a place.
  /// - Throws: ``GroupSyncError/invalidStore(path:reason:)`` for a cursor
  ///   file that does not hold a place.
  func read() throws -> Int64? {
    switch storage {
    case .file(let fd):
      var bytes = [UInt8](repeating: 0, count: 16)
      let count = bytes.withUnsafeMutableBytes { pread(fd.rawValue, $0.baseAddress, 16, 0) }
      if count == 0 { return nil }
      return try Self.decode(count == 16 ? bytes : Array(bytes.prefix(max(count, 0))))
    case .store(let store, let name):
      return try store.read { db in
        try db.tableExists(Self.table)
          ? Int64.fetchOne(db, sql: "SELECT acked FROM \(Self.table) WHERE name = ?", arguments: [name]) : nil
      }
    }
  }

  /// Records `sequence` as acknowledged (file cursors only; store cursors
  /// are written inside the consumer's own transaction).
  func write(_ sequence: Int64) throws {
    guard case .file(let fd) = storage else { return }
    let bytes = Self.encode(sequence)
    let written = bytes.withUnsafeBytes { pwrite(fd.rawValue, $0.baseAddress, 16, 0) }
    guard written == 16 else { throw GroupSyncError.system(call: "pwrite", path: Self.fileName, errno: errno) }
  }

  /// Records `sequence` in the store's cursor table, in `db`'s transaction.
  static func write(_ sequence: Int64, name: String, _ db: Database) throws {
    try db.cachedStatement(sql: "INSERT OR REPLACE INTO \(table)(name, acked, updated_at) VALUES (?, ?, ?)")
      .execute(arguments: [name, sequence, Store.nowNanoseconds()])
  }

  static func encode(_ sequence: Int64) -> [UInt8] {
    let value = UInt64(bitPattern: sequence)
    return (0..<8).map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
      + (0..<8).map { UInt8(truncatingIfNeeded: ~value >> ($0 * 8)) }
  }

  static func decode(_ bytes: [UInt8]) throws -> Int64 {
    guard bytes.count == 16 else {
      throw GroupSyncError.invalidStore(path: fileName, reason: "a cursor file holds 16 bytes, not \(bytes.count)")
    }
    let value = (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[$1]) << ($1 * 8) }
    let check = (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[8 + $1]) << ($1 * 8) }
    guard check == ~value, Int64(bitPattern: value) >= 0 else {
      throw GroupSyncError.invalidStore(path: fileName, reason: "the cursor file does not hold a place (torn or planted)")
    }
    return Int64(bitPattern: value)
  }

  /// The lowest place any durable listener of the group keeps (file
  /// cursors under `listeners/`, and the store's cursor table), for
  /// retention: soft limits do not purge past it.
  static func lowestPlace(root: SafeDirectory, store: String, _ db: Database) -> Int64? {
    let fileName = fileName(store: store)
    var lowest: Int64?
    func note(_ place: Int64) { lowest = min(lowest ?? place, place) }
    if let listeners = try? root.child(GroupLayout.listenersFolder, create: false) {
      try? listeners.forEachEntry { bytes in
        guard let name = String(validating: bytes, as: UTF8.self), GroupLayout.isValidListenerName(name),
          let folder = try? listeners.child(name, create: false),
          let cursor = try? folder.openFile(fileName, O_RDONLY)
        else { return }
        var raw = [UInt8](repeating: 0, count: 16)
        let count = raw.withUnsafeMutableBytes { pread(cursor.rawValue, $0.baseAddress, 16, 0) }
        if count == 16, let place = try? decode(raw) { note(place) }
      }
    }
    if (try? db.tableExists(table)) == true,
      let place = try? Int64.fetchOne(db, sql: "SELECT min(acked) FROM \(table)")
    {
      note(place)
    }
    return lowest
  }
}
