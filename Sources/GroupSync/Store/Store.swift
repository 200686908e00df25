import CGroupSync
import CoreMetrics
import Foundation
import GRDB
import Logging
import Synchronization

/// The shared SQLite store of a group folder: a GRDB `DatabasePool` whose
/// writer captures every row a transaction changes, and which publishes the
/// change set to every listener after COMMIT.
///
/// Read and write with GRDB's API through `write(_:)` and `read(_:)`.
/// One `write` is one `BEGIN IMMEDIATE` transaction; before it commits it
/// gets its sequence number, and once it committed its change set goes to
/// every listener of the group. For example:
///
/// ```swift
/// struct Note: Codable, FetchableRecord, PersistableRecord {
///   var id: Int64?
///   var body: String
/// }
/// let group = try GroupFolder(path: "/srv/app/group")
/// try group.store.write { db in
///   try Note(id: nil, body: "Hello").insert(db)
/// }
/// let notes = try group.store.read { db in try Note.fetchAll(db) }
/// ```
///
/// Reads run on the pool's reader connections, concurrently with writes,
/// and never wait for a write's fan-out. ``pool`` serves GRDB APIs that
/// need a `DatabaseWriter` or `DatabaseReader`, such as
/// `ValueObservation.start(in:)`; a transaction that changes rows through
/// `pool.write` directly is refused with
/// ``GroupSyncError/unsequencedCommit``, because no listener would be told.
public final class Store: Sendable {
  /// The store's name in its group: `main` for the group's main store.
  public let name: String
  /// The database file.
  public let path: String
  /// The store's UUID, created once and kept in the store itself (for a
  /// read-only store, which cannot keep it, derived from the main store's
  /// UUID and its name, so that it survives the file being replaced).
  public let storeID: UUID
  /// A read-only store is opened read-only and never captured; it changes
  /// only by its file being replaced as a whole.
  public var isReadOnly: Bool { readOnlyFile != nil }

  /// The GRDB pool: one writer connection and concurrent WAL readers (for
  /// a read-only store, read-only connections to its current file).
  public var pool: DatabasePool {
    guard let readOnlyFile else { return writerPool! }
    // A file replaced meanwhile is opened again; while the new one cannot
    // be opened, the last pool serves.
    return (try? readOnlyFile.pool()) ?? readOnlyFile.lastPool
  }

  /// The pool to read from: a read-only store's file replaced meanwhile
  /// is opened again (and one that cannot be opened is an error).
  func currentPool() throws -> DatabasePool {
    try readOnlyFile?.pool() ?? writerPool!
  }

  private let writerPool: DatabasePool?
  let readOnlyFile: ReadOnlyStoreFile?
  /// Records every write (writable stores only); the one door to the
  /// capture.
  private let writer: (recorder: CommitRecorder, publisher: CommitPublisher)?
  /// Writable stores only.
  private let metrics: StoreMetrics?
  private let closed = Atomic<Bool>(false)
  /// Recorded with each change set in the history (Core Data's
  /// `transactionAuthor`) unless a write names its own.
  let author: String

  /// Opens (creating if needed) the store at `path`.
  ///
  /// - Parameters:
  ///   - configuration: GRDB's configuration, which GroupSync extends: a
  ///     busy timeout of 10 s unless one is set (tried every few
  ///     milliseconds, see `BusyWait`), `synchronous = NORMAL`.
  ///   - publish: delivers a committed change set to the listeners.
  init(
    name: String = GroupLayout.mainStoreName, path: String, configuration: Configuration, options: StoreOptions,
    durableFloor: (@Sendable (Database) -> Int64?)? = nil, publish: @escaping CommitPublisher.Deliver
  ) throws {
    self.name = name
    self.path = path
    readOnlyFile = nil
    author = options.author ?? ProcessInfo.processInfo.processName
    var configuration = configuration
    BusyWait.applyDefault(to: &configuration)
    configuration.prepareDatabase { db in
      if !db.configuration.readonly { try db.execute(sql: "PRAGMA synchronous = NORMAL") }
    }
    let pool = try DatabasePool(path: path, configuration: configuration)
    writerPool = pool
    // No metrics at all where they go nowhere (the factory nobody
    // bootstrapped): each write then reads no clock for them.
    let factory = options.metricsFactory ?? MetricsSystem.factory
    let metrics = factory is NOOPMetricsHandler ? nil : StoreMetrics(store: name, factory: factory)
    self.metrics = metrics
    let publisher = CommitPublisher(deliver: publish, metrics: metrics)
    // The bookkeeping row is written before the capture exists: it is
    // GroupSync's own and never reported.
    let storeID = try pool.write { db in try StoreState.bookkeeping(db) { try StoreState.setUp(db, path: path) } }
    self.storeID = storeID
    let recorder = try pool.writeWithoutTransaction { db in
      try CommitRecorder.install(
        on: db, path: path, storeID: storeID, options: options, publisher: publisher, durableFloor: durableFloor)
    }
    writer = (recorder, publisher)
    if recorder.isFallback {
      Logger.groupSync.warning(
        "store \(path): SQLite has no pre-update hook; capturing through GRDB's observer (REPLACE deletes unseen)")
    }
  }

  /// Opens read-only store `name`, the file `fileName` of `folder`.
  init(readOnly name: String, file: ReadOnlyStoreFile, storeID: UUID) {
    self.name = name
    path = file.path
    self.storeID = storeID
    readOnlyFile = file
    writerPool = nil
    writer = nil
    metrics = nil
    author = ""
  }

  deinit { close() }

  /// Closes the pool's connections. Later reads and writes throw
  /// ``GroupSyncError/storeClosed(path:)``.
  public func close() {
    guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
    do {
      guard let writerPool, let recorder = writer?.recorder else {
        try readOnlyFile?.lastPool.close()
        return
      }
      writerPool.writeWithoutTransaction { _ in recorder.detach() }
      try writerPool.close()
    } catch {
      Logger.groupSync.error("closing store \(path): \(error)")
    }
  }

  /// Whether the capture runs on SQLite's pre-update hook (else it is fed by
  /// GRDB's observer, which cannot see rows deleted by REPLACE).
  public var usesPreUpdateHook: Bool { writer.map { !$0.recorder.isFallback } ?? false }

  // MARK: Writing

  /// Runs `body` in one transaction and publishes what it changed.
  ///
  /// Errors thrown by `body` roll the transaction back. Nest savepoints with
  /// `db.inSavepoint`; do not COMMIT or ROLLBACK inside `body`. A read
  /// inside `body` (`read(_:)`) sees the store as of the last commit.
  ///
  /// - Parameters:
  ///   - author: the author the history records for this write (Core
  ///     Data's `transactionAuthor`); nil: the store's (``StoreOptions/author``).
  ///   - body: the transaction's work.
  /// - Returns: what `body` returned.
  /// - Throws: what `body` threw, GRDB's `DatabaseError`, or
  ///   ``GroupSyncError/nestedWrite`` when called inside a transaction of
  ///   this store.
  @discardableResult
  public func write<T>(author: String? = nil, _ body: (Database) throws -> T) throws -> T {
    var outcome: CommitPublisher.Outcome?
    return try write(author: author, outcome: &outcome, body)
  }

  /// Like `write(author:_:)`, and also returns the change set published,
  /// or nil when the transaction changed no rows.
  public func writeAndReturnChangeSet<T>(
    author: String? = nil, _ body: (Database) throws -> T
  ) throws -> (result: T, changeSet: ChangeSet?) {
    var outcome: CommitPublisher.Outcome?
    let result = try write(author: author, outcome: &outcome, body)
    return (result, outcome?.changeSet)
  }

  /// Like `write(author:_:)`, and also says what was committed and which
  /// live listeners it could not be delivered to (they read it from the
  /// history; nothing is lost, but the caller may want to know).
  public func writeAndReport<T>(author: String? = nil, _ body: (Database) throws -> T) throws -> WriteReport<T> {
    var outcome: CommitPublisher.Outcome?
    let result = try write(author: author, outcome: &outcome, body)
    return WriteReport(result: result, changeSet: outcome?.changeSet, publishFailures: outcome?.failures ?? [])
  }

  /// The synchronous writes' one path; what publishing came to goes to
  /// `outcome` (no generic result type of our own to instantiate per call).
  private func write<T>(
    author: String?, outcome: inout CommitPublisher.Outcome?, _ body: (Database) throws -> T
  ) throws -> T {
    try checkWritable()
    // Reentrant on the writer queue, so that a nested call gets a clear
    // error instead of GRDB's reentrancy trap.
    var sequence: Int64?
    let result = try pool.unsafeReentrantWrite { db in try transaction(db, author: author, sequence: &sequence, body) }
    outcome = published(sequence)
    return result
  }

  /// Runs `body` in one transaction, without blocking the calling thread,
  /// and publishes what it changed. See `write(_:)`.
  @discardableResult
  public func write<T: Sendable>(
    author: String? = nil, _ body: @escaping @Sendable (Database) throws -> T
  ) async throws -> T {
    try await writeAndReturnChangeSet(author: author, body).result
  }

  /// Like `write(author:_:)`, and also returns the change set
  /// published.
  public func writeAndReturnChangeSet<T: Sendable>(
    author: String? = nil, _ body: @escaping @Sendable (Database) throws -> T
  ) async throws -> (result: T, changeSet: ChangeSet?) {
    try checkWritable()
    let (result, sequence) = try await pool.writeWithoutTransaction { db in
      var sequence: Int64?
      let result = try self.transaction(db, author: author, sequence: &sequence, body)
      return (result, sequence)
    }
    return (result, published(sequence)?.changeSet)
  }

  /// Runs `body` outside any transaction, for what cannot run inside one
  /// (`VACUUM`, `PRAGMA foreign_keys`), then commits one change set that
  /// invalidates every table: `VACUUM` renumbers the rowids of tables
  /// without an INTEGER PRIMARY KEY, so no row ID can be trusted.
  ///
  /// Statements in `body` that change rows are refused with
  /// ``GroupSyncError/unsequencedCommit`` (each would commit on its own,
  /// unannounced): change rows with `write(_:)`.
  public func writeWithoutTransaction<T>(_ body: (Database) throws -> T) throws -> (result: T, changeSet: ChangeSet) {
    try checkWritable()
    let result = try pool.unsafeReentrantWrite { db in
      guard !db.isInsideTransaction else { throw GroupSyncError.nestedWrite }
      return try body(db)
    }
    let (_, changeSet) = try writeAndReturnChangeSet { db in try self.writer!.recorder.invalidateEveryTable(db) }
    guard let changeSet else { throw GroupSyncError.invalidStore(path: path, reason: "no change set for the invalidation") }
    return (result, changeSet)
  }

  /// One write: begin, the caller's body, finish (the change set in the
  /// history), COMMIT; the caller then publishes. Returns the body's
  /// result and the change set's sequence (nil: nothing changed).
  private func transaction<T>(
    _ db: Database, author: String?, sequence: inout Int64?, _ body: (Database) throws -> T
  ) throws -> T {
    let recorder = writer!.recorder
    // SQLite's own answer: GRDB's `isInsideTransaction` checks its queue
    // too, which costs more than the check on every write.
    guard !recorder.isInTransaction else { throw GroupSyncError.nestedWrite }
    var result: T?
    var finished: Int64?
    let start = metrics == nil ? nil : ContinuousClock.now
    defer { if let start, finished != nil { metrics?.commitDuration.record(duration: ContinuousClock.now - start) } }
    try db.inTransaction(.immediate) {
      try recorder.begin(db, author: author ?? self.author)
      result = try body(db)
      finished = try recorder.finish(db)
      return .commit
    }
    sequence = finished
    return result!
  }

  /// Adds `note` to the change set of the open `write(_:)` of this
  /// store (a relay re-posting another host's notification uses it).
  ///
  /// - Throws: ``GroupSyncError/noteOutsideWrite`` outside `write`.
  public func addNote(_ note: ChangeSetNote, in db: Database) throws {
    try checkWritable()
    try recorder.addNote(note, db)
  }

  private func published(_ sequence: Int64?) -> CommitPublisher.Outcome? {
    guard let sequence, let publisher = writer?.publisher else { return nil }
    return publisher.publish(through: sequence)
  }

  // MARK: Reading

  /// Runs `body` in a read transaction on a reader connection: it sees the
  /// store as of the last commit and does not wait for writes.
  public func read<T>(_ body: (Database) throws -> T) throws -> T {
    try checkOpen()
    return try currentPool().read(body)
  }

  /// Runs `body` in a read transaction without blocking the calling thread.
  public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
    try checkOpen()
    return try await currentPool().read(body)
  }

  /// The sequence number of the last committed change set (0 before any).
  public func currentSequence() throws -> Int64 {
    if isReadOnly { return 0 }
    return try read { try History.lastSequence($0) }
  }

  // MARK: History

  /// The committed change sets after `sequence`, oldest first, at most
  /// `limit`, as the store's history holds them (Core Data's
  /// `fetchHistory(after:)`).
  public func history(after sequence: Int64, limit: Int = 1000) throws -> [HistoryEntry] {
    if isReadOnly { return [] }
    return try read { try History.entries(after: sequence, limit: limit, path: path, $0) }
  }

  /// Like ``history(after:limit:)``, inside a transaction the caller has
  /// open on this store (`db` from `read(_:)` or `write(_:)`), so
  /// that the entries and the rows read beside them are one snapshot.
  public func history(after sequence: Int64, limit: Int = 1000, in db: Database) throws -> [HistoryEntry] {
    if isReadOnly { return [] }
    return try History.entries(after: sequence, limit: limit, path: path, db)
  }

  /// The last committed sequence number as `db`'s transaction sees it.
  public func currentSequence(in db: Database) throws -> Int64 {
    if isReadOnly { return 0 }
    return try History.lastSequence(db)
  }

  /// The oldest sequence number the history holds as `db` sees it.
  public func oldestHistorySequence(in db: Database) throws -> Int64? {
    if isReadOnly { return nil }
    return try History.oldestSequence(db)
  }

  /// The oldest sequence number the history still holds (nil if none).
  public func oldestHistorySequence() throws -> Int64? {
    if isReadOnly { return nil }
    return try read { try History.oldestSequence($0) }
  }

  /// How much history the group keeps.
  public func historyRetention() throws -> HistoryRetention {
    try read { try History.retention($0) }
  }

  /// Sets how much history the group keeps; writers apply it as they
  /// commit.
  public func setHistoryRetention(_ retention: HistoryRetention) throws {
    try checkWritable()
    try writeBookkeeping { try History.setRetention(retention, $0) }
  }

  // MARK: Internals

  /// Runs `body`, GroupSync's own bookkeeping (its tables or a relay's,
  /// no row a listener is told of), in one transaction outside
  /// `write(_:)`, counted as a quiet commit if it wrote anything (see
  /// ``StoreState``): also the schema, which `write(_:)` would report.
  package func writeBookkeeping<T>(_ body: (Database) throws -> T) throws -> T {
    try pool.write { db in try StoreState.bookkeeping(db) { try body(db) } }
  }

  func publishPending() { writer?.publisher.publish(through: nil) }

  /// The commit recorder (writable stores only), for the store's own
  /// extensions (migrations).
  var recorder: CommitRecorder { writer!.recorder }

  /// Runs `body`, in which the writer connection notifies GRDB's observers
  /// of other processes' changes (not writes of its own).
  func relayingOtherProcesses<T>(_ body: () throws -> T) rethrows -> T {
    guard let recorder = writer?.recorder else { return try body() }
    return try recorder.relayingOtherProcesses(body)
  }

  func checkOpen() throws {
    if closed.load(ordering: .acquiring) { throw GroupSyncError.storeClosed(path: path) }
  }

  /// Throws for a closed store and for a read-only one.
  func checkWritable() throws {
    try checkOpen()
    if isReadOnly { throw GroupSyncError.readOnlyStore(name) }
  }

  static func nowNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
  }
}

/// What a write committed and published.
public struct WriteReport<Result> {
  /// What the write closure returned.
  public let result: Result
  /// The change set committed, or nil when the transaction changed nothing.
  public let changeSet: ChangeSet?
  /// Live listeners the change set could not be delivered to (they read
  /// it from the history), or `listener == nil` when its file could not be
  /// written at all. Empty when every live listener got it.
  public let publishFailures: [PublishFailure]
}

/// How a store captures changes.
public struct StoreOptions: Sendable {
  /// Rows one transaction may change before its largest tables are
  /// reported as invalidated instead of row by row, which bounds the
  /// memory of writers and listeners and the size of change sets.
  public var rowBudget: Int = 300_000
  /// Capture through GRDB's transaction observer even where SQLite has the
  /// pre-update hook: the fallback GroupSync uses when the hook is missing
  /// (for tests of it). It cannot see rows deleted by REPLACE.
  public var captureWithoutPreUpdateHook = false
  /// The author label each change set carries in the history; the
  /// process name by default.
  public var author: String?
  /// Where the store's metrics go (see ``GroupSyncMetrics``); nil: the
  /// factory bootstrapped with `MetricsSystem.bootstrap(_:)`.
  public var metricsFactory: (any MetricsFactory)?

  /// The default options.
  public init() {}
}
