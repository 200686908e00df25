import CGroupSync
import Foundation
import Logging

/// The shared SQLite store of a group folder, which captures every row a
/// transaction changes and publishes the change set after COMMIT.
///
/// Write through ``write(_:)``: it opens a `BEGIN IMMEDIATE` transaction,
/// runs the closure, gives the transaction its sequence number, commits,
/// and hands the change set to every listener. For example:
///
/// ```swift
/// let group = try GroupFolder(path: "/srv/app/group")
/// try group.store.write { db in
///   try db.execute("INSERT INTO notes(body) VALUES (?)", ["Hello"])
/// }
/// ```
///
/// A `Store` is `@unchecked Sendable`: its one connection and the capture
/// installed on it are only touched while holding `lock`.
public final class Store: @unchecked Sendable {
  /// The database file.
  public let path: String
  /// The store's UUID, created once and kept in the store itself.
  public let storeID: UUID

  private let lock = NSLock()
  private let database: Database
  private let capture: ChangeCapture
  private let noRowIDTables = NoRowIDTableCache()
  private var isClosed = false
  /// Called with each committed change set, still under the lock, so that
  /// publishing follows commit order within this process.
  var didCommit: (@Sendable (ChangeSet) -> Void)?

  /// The bookkeeping table: one row with the store UUID and the last
  /// sequence number handed out.
  static let stateTable = ChangeCapture.internalTablePrefix + "store"
  static let busyTimeoutMilliseconds: Int32 = 10_000

  /// Opens (creating if needed) the store at `path`.
  ///
  /// - Parameter forceUpdateHook: capture with SQLite's update hook even
  ///   where the pre-update hook exists (for tests of the fallback).
  init(path: String, forceUpdateHook: Bool = false) throws {
    self.path = path
    database = try Database(path: path, flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
    do {
      try Self.configure(database)
      storeID = try Self.setUpState(database, path: path)
      capture = try ChangeCapture(on: database, forceUpdateHook: forceUpdateHook)
    } catch {
      database.close()
      throw error
    }
  }

  deinit { close() }

  /// Closes the connection. Later calls throw.
  public func close() {
    lock.withLock {
      guard !isClosed else { return }
      isClosed = true
      capture.close()
      database.close()
    }
  }

  /// Whether the capture runs on the pre-update hook (else the update hook).
  public var usesPreUpdateHook: Bool { capture.usesPreUpdateHook }

  /// Runs `body` in one transaction and publishes what it changed.
  ///
  /// Errors thrown by `body` roll the transaction back. Do not run BEGIN,
  /// COMMIT or ROLLBACK inside `body`: a COMMIT of captured changes is
  /// refused, so that nothing commits without a sequence number.
  ///
  /// - Returns: what `body` returned.
  @discardableResult
  public func write<T>(_ body: (Database) throws -> T) throws -> T {
    try writeAndReturnChangeSet(body).result
  }

  /// Like ``write(_:)``, and also returns the change set published, or nil
  /// when the transaction changed no rows.
  public func writeAndReturnChangeSet<T>(
    _ body: (Database) throws -> T
  ) throws -> (result: T, changeSet: ChangeSet?) {
    try lock.withLock {
      try checkOpen()
      try database.executeCached("BEGIN IMMEDIATE")
      let result: T
      let sequence: Int64?
      do {
        result = try body(database)
        guard database.isInsideTransaction else {
          throw SQLiteError(code: SQLITE_MISUSE, message: "the write closure ended the transaction itself")
        }
        if capture.overflowed {
          throw SQLiteError(code: SQLITE_NOMEM, message: "out of memory while capturing changed rows")
        }
        sequence = capture.hasPendingChanges ? try allocateSequence() : nil
        if sequence != nil { capture.allowCommit() }
        try database.executeCached("COMMIT")
      } catch {
        capture.reset()
        if database.isInsideTransaction { try? database.execute("ROLLBACK") }
        throw error
      }
      guard let sequence else { return (result, nil) }
      let committedAt = Self.nowNanoseconds()
      let changeSet = makeChangeSet(sequence: sequence, committedAt: committedAt)
      didCommit?(changeSet)
      return (result, changeSet)
    }
  }

  /// Runs `body` with the connection, outside any write transaction.
  public func read<T>(_ body: (Database) throws -> T) throws -> T {
    try lock.withLock {
      try checkOpen()
      return try body(database)
    }
  }

  /// The sequence number of the last committed change set (0 before any).
  public func currentSequence() throws -> Int64 {
    try read { try Self.readSequence($0, path: path) }
  }

  // MARK: Internals

  private func checkOpen() throws {
    if isClosed { throw SQLiteError(code: SQLITE_MISUSE, message: "the store is closed", sql: nil) }
  }

  private func allocateSequence() throws -> Int64 {
    // Two cached statements cost less than one UPDATE ... RETURNING.
    try database.executeCached("UPDATE \(Self.stateTable) SET seq = seq + 1 WHERE id = 1")
    let value = try database.executeCached("SELECT seq FROM \(Self.stateTable) WHERE id = 1")
    guard let sequence = value?.int64 else {
      throw GroupSyncError.invalidStore(path: path, reason: "\(Self.stateTable) has no row")
    }
    return sequence
  }

  private func makeChangeSet(sequence: Int64, committedAt: Int64) -> ChangeSet {
    let builder = capture.takeCommitted()
    // SQLite reports rows of WITHOUT ROWID tables with rowid 0: ask the
    // schema about every table where rowid 0 showed up.
    var invalidated = Set<String>()
    for table in builder.tablesTouchingRowIDZero where noRowIDTables.hasNoRowID(table, in: database) {
      invalidated.insert(table)
    }
    return ChangeSet(
      storeID: storeID, sequence: sequence, committedAtNanoseconds: committedAt,
      writerProcessID: System.processID, tables: builder.tableChanges(excluding: invalidated),
      invalidatedTableNames: invalidated)
  }

  static func nowNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
  }

  static func configure(_ database: Database) throws {
    sqlite3_busy_timeout(database.sqliteConnection, busyTimeoutMilliseconds)
    let mode = try database.scalar("PRAGMA journal_mode = WAL")
    if mode?.string?.lowercased() != "wal" {
      Logger.groupSync.warning("store \(database.path) is not in WAL mode (\(mode?.sqlLiteral ?? "?"))")
    }
    try database.execute("PRAGMA synchronous = NORMAL")
  }

  /// Creates the bookkeeping table and the store UUID on first open.
  private static func setUpState(_ database: Database, path: String) throws -> UUID {
    try database.execute("BEGIN IMMEDIATE")
    do {
      try database.execute(
        "CREATE TABLE IF NOT EXISTS \(stateTable) (id INTEGER PRIMARY KEY CHECK (id = 1), uuid TEXT NOT NULL, seq INTEGER NOT NULL)"
      )
      try database.execute(
        "INSERT OR IGNORE INTO \(stateTable)(id, uuid, seq) VALUES (1, ?, 0)", [.text(UUID().uuidString)])
      let id = try readStoreID(database, path: path)
      try database.execute("COMMIT")
      return id
    } catch {
      try? database.execute("ROLLBACK")
      throw error
    }
  }

  static func readStoreID(_ database: Database, path: String) throws -> UUID {
    let text = try database.scalar("SELECT uuid FROM \(stateTable) WHERE id = 1")?.string
    guard let text, let id = UUID(uuidString: text) else {
      throw GroupSyncError.invalidStore(path: path, reason: "\(stateTable).uuid is missing or not a UUID")
    }
    return id
  }

  static func readSequence(_ database: Database, path: String) throws -> Int64 {
    guard let sequence = try database.scalar("SELECT seq FROM \(stateTable) WHERE id = 1")?.int64 else {
      throw GroupSyncError.invalidStore(path: path, reason: "\(stateTable).seq is missing")
    }
    return sequence
  }
}

/// Which tables are WITHOUT ROWID, cached per schema version.
private final class NoRowIDTableCache {
  private var schemaVersion: Int64 = -1
  private var answers: [String: Bool] = [:]

  func hasNoRowID(_ table: String, in database: Database) -> Bool {
    let version = (try? database.scalar("PRAGMA schema_version"))??.int64 ?? -2
    if version != schemaVersion {
      schemaVersion = version
      answers = [:]
    }
    if let answer = answers[table] { return answer }
    // A table gone since the commit is invalidated too: over-reporting is safe.
    let rows = (try? database.rows("SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", [.text(table)])) ?? []
    let answer = rows.first?.first?.int64 != 0
    answers[table] = answer
    return answer
  }
}
