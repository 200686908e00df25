import CGroupSync
import Foundation
import GRDB
@testable import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Helpers for the tests that run real `groupsync` processes next to
/// in-process listeners.
///
/// Blocking waits (for a child process, for a line) run on threads of their
/// own, so the few threads of Swift's cooperative pool stay free for the
/// listeners' tasks.
enum ProcessHarness {
  /// Runs blocking `body` on a new thread and awaits its result.
  static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
      let thread = Thread { continuation.resume(with: Result { try body() }) }
      thread.start()
    }
  }

  /// `groupsync args...` to completion, off the cooperative pool.
  static func run(_ arguments: [String], timeout: Double = 300, measuringPeakMemory: Bool = false) async throws
    -> CLI.Result
  {
    try await onThread { try CLI.run(arguments, timeout: timeout, measuringPeakMemory: measuringPeakMemory) }
  }

  /// Starts `groupsync watch` and waits until it listens.
  /// The complete JSON lines a `watch --json` process printed so far.
  static func printedLines(_ child: ChildProcess) throws -> [[String: Any]] {
    let text = child.stdout
    guard let end = text.lastIndex(of: "\n") else { return [] }
    return try jsonLines(String(text[...end]))
  }

  static func startWatch(_ arguments: [String]) async throws -> ChildProcess {
    let child = try CLI.start(["watch"] + arguments)
    try await onThread { try child.waitForStderr(containing: "listening as", timeout: 30) }
    return child
  }

  static func finish(_ child: ChildProcess, timeout: Double = 60) async throws -> CLI.Result {
    try await onThread { child.finish(timeout: timeout) }
  }

  /// Waits for every child at once (each killed after `timeout` seconds).
  static func finishAll(_ children: [ChildProcess], timeout: Double = 30) async throws -> [CLI.Result] {
    try await withThrowingTaskGroup(of: (Int, CLI.Result).self) { group in
      for (index, child) in children.enumerated() {
        group.addTask { (index, try await finish(child, timeout: timeout)) }
      }
      var results: [(Int, CLI.Result)] = []
      for try await result in group { results.append(result) }
      return results.sorted { $0.0 < $1.0 }.map(\.1)
    }
  }

  /// Whether the child exits on its own within `timeout` seconds (it is
  /// not signalled; `finish` afterwards collects its output).
  static func exitsOnItsOwn(_ child: ChildProcess, within timeout: Double = 60) async throws -> Bool {
    try await onThread { child.waitForExit(timeout: timeout) }
  }

  /// Waits until stdout holds `count` lines.
  static func waitForLines(_ child: ChildProcess, _ count: Int, timeout: Double = 60) async throws {
    try await onThread { try child.waitForLines(count, timeout: timeout) }
  }

  /// Runs `groupsync exec DIR --json [--repeat n] SQL...`, requires success,
  /// and returns its change-set lines.
  static func exec(
    _ directory: String, repeat count: Int = 1, _ statements: [String]
  ) async throws -> [ChangeSetLine] {
    let result = try await run(["exec", directory, "--json", "--repeat", String(count)] + statements)
    guard result.status == 0 else {
      throw TestFailure("exec failed (\(result.status)): \(result.stderr)")
    }
    return try jsonLines(result.stdout).map(ChangeSetLine.init(json:))
  }

  /// `groupsync init DIR --schema FILE` with `schema` written to a file.
  static func initGroup(_ folder: TemporaryFolder, schema: String, name: String = "group") async throws -> String {
    let schemaPath = folder.child("schema-\(name).sql")
    try schema.write(toFile: schemaPath, atomically: true, encoding: .utf8)
    let directory = folder.child(name)
    let result = try await run(["init", directory, "--schema", schemaPath])
    guard result.status == 0 else { throw TestFailure("init failed (\(result.status)): \(result.stderr)") }
    return directory
  }

  /// `groupsync status DIR --json`, decoded.
  static func status(_ directory: String) async throws -> GroupStatus {
    let result = try await run(["status", directory, "--json"])
    guard result.status == 0 else { throw TestFailure("status failed (\(result.status)): \(result.stderr)") }
    return try JSONDecoder().decode(GroupStatus.self, from: Data(result.stdout.utf8))
  }

  /// The names in a folder (empty if it is missing), sorted.
  static func entries(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
  }

  /// Whether anything (even a dangling symlink) exists at `path`.
  static func exists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
  }

  /// Places `bytes` at `destination` in one step: written beside it under
  /// another folder on the same filesystem, then renamed.
  static func placeAtomically(_ bytes: [UInt8], at destination: String, staging: String) throws {
    let temporary = staging + "/staged-\(UUID().uuidString)"
    try Data(bytes).write(to: URL(fileURLWithPath: temporary))
    guard rename(temporary, destination) == 0 else {
      throw TestFailure("rename to \(destination) failed: \(String(cString: strerror(errno)))")
    }
  }

  /// Commits `body`'s insert through plain GRDB together with its history
  /// entry, and publishes nothing: what a writer SIGKILLed right after
  /// COMMIT leaves behind. `body` returns the table and rowid it inserted.
  static func commitWithoutPublishing(
    store path: String, committedAtNanoseconds: Int64 = Store.nowNanoseconds(),
    _ body: @escaping @Sendable (Database) throws -> (String, Int64)
  ) throws -> ChangeSet {
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    let queue = try DatabaseQueue(path: path, configuration: configuration)
    return try queue.write { db in
      let (table, rowID) = try body(db)
      let storeID = try StoreState.readStoreID(db, path: path)
      let sequence = try History.lastSequence(db) + 1
      let changeSet = ChangeSet(
        storeID: storeID, sequence: sequence, committedAtNanoseconds: committedAtNanoseconds, writerProcessID: 4242,
        tables: [TableName(table): TableChanges(inserted: [rowID])], invalidatedTableNames: [])
      try StoreState.append(changeSet, payload: ChangeSetEncoding.encode(changeSet), author: "killed", db)
      return changeSet
    }
  }

  /// Commits directly through SQLite, bypassing the engine: the store's
  /// sequence moves on by `count` (history rows stamped now, with no change
  /// set recorded) and nothing is published, as if writers had died between
  /// COMMIT and fan-out.
  static func advanceSequenceWithoutPublishing(store path: String, by count: Int) throws {
    // A plain GRDB queue: no GroupSync capture, as a foreign program.
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    let queue = try DatabaseQueue(path: path, configuration: configuration)
    try queue.write { db in
      for _ in 0..<count {
        try db.execute(sql: """
          INSERT INTO \(StoreState.historyTable)(seq, committed_at, author, pid, payload)
          SELECT coalesce(max(seq), 0) + 1, ?, 'test', 0, x'' FROM \(StoreState.historyTable)
          """, arguments: [Store.nowNanoseconds()])
      }
    }
  }
}

/// One change set as `groupsync exec --json` or `watch --json` prints it,
/// reduced to what writer and listener must agree on.
struct ChangeSetLine: Equatable, Sendable, CustomStringConvertible {
  var seq: Int64
  var store: String
  var inserted: [String]
  var updated: [String]
  var deleted: [String]
  var invalidatedTables: [String]

  init(seq: Int64, store: String, inserted: [String], updated: [String], deleted: [String], invalidatedTables: [String]) {
    self.seq = seq
    self.store = store
    self.inserted = inserted
    self.updated = updated
    self.deleted = deleted
    self.invalidatedTables = invalidatedTables
  }

  init(json object: [String: Any]) throws {
    guard object["reset"] == nil else { throw TestFailure("a reset line where a change set was expected: \(object)") }
    func strings(_ key: String) throws -> [String] {
      guard let value = object[key] as? [String] else { throw TestFailure("'\(key)' missing or not strings in \(object)") }
      return value
    }
    guard let seq = (object["seq"] as? NSNumber)?.int64Value, let store = object["store"] as? String else {
      throw TestFailure("no seq or store in \(object)")
    }
    self.init(
      seq: seq, store: store, inserted: try strings("inserted"), updated: try strings("updated"),
      deleted: try strings("deleted"), invalidatedTables: try strings("invalidatedTables"))
  }

  /// A change set delivered in process, in the same shape.
  init(_ changeSet: ChangeSet) {
    self.init(
      seq: changeSet.sequence, store: changeSet.storeID.uuidString,
      inserted: changeSet.inserted.map(\.uri).sorted(), updated: changeSet.updated.map(\.uri).sorted(),
      deleted: changeSet.deleted.map(\.uri).sorted(), invalidatedTables: changeSet.invalidatedTables.map(\.uri).sorted())
  }

  var description: String {
    "#\(seq) ins \(inserted) upd \(updated) del \(deleted) inv \(invalidatedTables)"
  }
}

/// Waiting for a listener's events with a deadline.
enum ListenerHarness {
  /// The listener's next event, or nil if none came within `timeout`.
  static func next(_ listener: Listener, timeout: Duration = .seconds(60)) async -> ListenerEvent? {
    await withTaskGroup(of: ListenerEvent?.self) { group in
      group.addTask {
        var iterator = listener.events.makeAsyncIterator()
        return await iterator.next()
      }
      group.addTask {
        try? await Task.sleep(for: timeout)
        return nil
      }
      let first = await group.next() ?? nil
      group.cancelAll()
      return first
    }
  }

  /// The next event, required to be a change set.
  static func nextChanges(
    _ listener: Listener, timeout: Duration = .seconds(60)
  ) async throws -> ChangeSet {
    let event = await next(listener, timeout: timeout)
    guard case .changes(let changeSet) = event else {
      throw TestFailure("expected a change set, got \(event.map { "\($0)" } ?? "nothing within \(timeout)")")
    }
    return changeSet
  }

  /// The next event, required to be a reset.
  static func nextReset(_ listener: Listener, timeout: Duration = .seconds(60)) async throws -> Reset {
    let event = await next(listener, timeout: timeout)
    guard case .reset(let reset) = event else {
      throw TestFailure("expected a reset, got \(event.map { "\($0)" } ?? "nothing within \(timeout)")")
    }
    return reset
  }
}

/// A thread-safe list, for events a callback collects.
final class Collected<Element: Sendable>: Sendable {
  private let items = Mutex<[Element]>([])
  func append(_ item: Element) { items.withLock { $0.append(item) } }
  var all: [Element] { items.withLock { $0 } }
}

/// A valid-looking change-set file for `store`, naming row `rowID` of `table`.
func craftedChangeSet(store: UUID, sequence: Int64, table: String = "items", rowID: Int64 = 4242) -> ChangeSet {
  ChangeSet(
    storeID: store, sequence: sequence, committedAtNanoseconds: 1, writerProcessID: 1,
    tables: [TableName(table): TableChanges(inserted: [rowID])], invalidatedTableNames: [])
}

/// Waits until `condition` holds, polling every 5 ms at first and every
/// 50 ms at most.
func waitUntil(
  _ what: String = "condition", timeout: Duration = .seconds(60), _ condition: @Sendable () -> Bool
) async throws {
  let deadline = ContinuousClock.now + timeout
  var backoff = PollBackoff()
  while !condition() {
    guard ContinuousClock.now < deadline else { throw TestFailure("timed out waiting: \(what)") }
    try await backoff.pause()
  }
}
