import Foundation
import GRDB
import Synchronization
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// A GRDB record, as users of GroupSync write them.
struct Note: Codable, Equatable, FetchableRecord, MutablePersistableRecord, Sendable {
  static let databaseTableName = "note"
  var id: Int64?
  var body: String

  mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// The store over GRDB: records, reads and writes, what is refused, and
/// GRDB observation across real processes.
@Suite(.serialized, .timed)
struct GRDBStoreTests {
  static let schema = "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT NOT NULL);"

  let folder: TemporaryFolder
  init() throws { folder = try TemporaryFolder() }

  func makeGroup(_ options: StoreOptions = StoreOptions()) throws -> GroupFolder {
    let group = try GroupFolder(path: folder.child("group"), options: options)
    try group.store.write { try $0.execute(sql: Self.schema) }
    return group
  }

  func noteID(_ group: GroupFolder, _ rowID: Int64) -> String {
    ObjectID(storeID: group.store.storeID, table: "note", rowID: rowID).uri
  }

  // MARK: Records across processes

  @Test func recordsWrittenHereReachAListenerProcess() async throws {
    let group = try makeGroup()
    let watch = try await ProcessHarness.startWatch([group.path, "--name", "other", "--json", "--count", "3"])
    var note = Note(id: nil, body: "first")
    try await group.store.write { [note] db in
      var note = note
      try note.insert(db)
    }
    note.id = try await group.store.read { try Note.fetchOne($0)?.id }
    let id = try #require(note.id)
    note.body = "second"
    try await group.store.write { [note] db in try note.update(db) }
    try await group.store.write { [note] db in _ = try note.delete(db) }

    let lines = try jsonLines(try await ProcessHarness.finish(watch).stdout).map(ChangeSetLine.init(json:))
    try #require(lines.count == 3)
    #expect(lines[0].inserted == [noteID(group, id)] && lines[0].updated.isEmpty)
    #expect(lines[1].updated == [noteID(group, id)] && lines[1].inserted.isEmpty)
    #expect(lines[2].deleted == [noteID(group, id)])
    #expect(lines.map(\.seq) == [lines[0].seq, lines[0].seq + 1, lines[0].seq + 2])
  }

  @Test func aValueObservationSeesEachCommitOfAnotherProcess() async throws {
    let group = try makeGroup()
    let relay = try group.observeOtherProcesses()
    defer { relay.cancel() }
    let seen = Collected<[Note]>()
    let observation = ValueObservation.tracking { db in try Note.order(Column("id")).fetchAll(db) }
    let cancellable = observation.start(
      in: group.store.pool, scheduling: .async(onQueue: DispatchQueue(label: "observation")),
      onError: { Issue.record($0) }, onChange: { seen.append($0) })
    defer { cancellable.cancel() }
    try await waitUntil("the initial value") { !seen.all.isEmpty }

    let steps: [(sql: String, expected: [Note])] = [
      ("INSERT INTO note(id, body) VALUES (1, 'a'), (2, 'b')", [Note(id: 1, body: "a"), Note(id: 2, body: "b")]),
      ("UPDATE note SET body = 'B' WHERE id = 2", [Note(id: 1, body: "a"), Note(id: 2, body: "B")]),
      ("DELETE FROM note WHERE id = 1", [Note(id: 2, body: "B")]),
    ]
    for step in steps {
      _ = try await ProcessHarness.exec(group.path, [step.sql])
      try await waitUntil("the observation saw \(step.expected)") { seen.all.last == step.expected }
    }
  }

  @Test func aRegionObservationFiresOncePerChangeSet() async throws {
    let group = try makeGroup()
    let relay = try group.observeOtherProcesses()
    defer { relay.cancel() }
    let fired = Atomic<Int>(0)
    let observation = DatabaseRegionObservation(tracking: Table("note"))
      .start(in: group.store.pool, onError: { Issue.record($0) }, onChange: { _ in fired.add(1, ordering: .relaxed) })
    defer { observation.cancel() }

    _ = try await ProcessHarness.exec(group.path, repeat: 5, ["INSERT INTO note(body) VALUES ('x')"])
    try await waitUntil("5 change sets observed") { fired.load(ordering: .relaxed) == 5 }
    // A commit of this process is seen by GRDB itself, and not relayed again.
    try await group.store.write { _ = try Note(body: "mine").inserted($0) }
    _ = try await ProcessHarness.exec(group.path, ["INSERT INTO note(body) VALUES ('y')"])
    try await waitUntil("7 change sets observed") { fired.load(ordering: .relaxed) >= 7 }
    try await Task.sleep(for: .milliseconds(300))
    #expect(fired.load(ordering: .relaxed) == 7)
  }

  // MARK: What is refused

  @Test func aPlainPoolWriteThatChangesRowsIsRefused() throws {
    let group = try makeGroup()
    try group.store.write { _ = try Note(body: "kept").inserted($0) }
    let before = try group.store.currentSequence()
    #expect(throws: GroupSyncError.unsequencedCommit) {
      try group.store.pool.write { db in _ = try Note(body: "sneaky").inserted(db) }
    }
    #expect(throws: GroupSyncError.unsequencedCommit) {
      try group.store.pool.writeWithoutTransaction { try $0.execute(sql: "UPDATE note SET body = 'autocommit'") }
    }
    #expect(try group.store.read { try Note.fetchAll($0) } == [Note(id: 1, body: "kept")])
    #expect(try group.store.currentSequence() == before)
    // A plain write that changes no captured row is fine.
    try group.store.pool.write { try $0.execute(sql: "CREATE INDEX note_body ON note(body)") }
  }

  @Test func aNestedWriteIsAClearErrorAndAReadInsideAWriteWorks() throws {
    let group = try makeGroup()
    let seenInside = try group.store.write { db in
      _ = try Note(body: "new").inserted(db)
      #expect(throws: GroupSyncError.nestedWrite) { try group.store.write { _ in } }
      // A read runs on a reader connection: it sees the last commit.
      return try group.store.read { try Note.fetchCount($0) }
    }
    #expect(seenInside == 0)
    #expect(try group.store.read { try Note.fetchCount($0) } == 1)
  }

  @Test func lastInsertedRowIDIsTheCallersAndMigrationsArePublished() async throws {
    let group = try makeGroup()
    let rowID = try await group.store.write { db in
      try db.execute(sql: "INSERT INTO note(id, body) VALUES (41, 'x')")
      return db.lastInsertedRowID
    }
    #expect(rowID == 41)

    let listener = try group.listen(as: "migrations")
    defer { listener.close() }
    var migrator = DatabaseMigrator()
    migrator.registerMigration("tags") { db in
      try db.create(table: "tag") { t in
        t.autoIncrementedPrimaryKey("id")
        t.column("name", .text).notNull()
      }
      try db.execute(sql: "INSERT INTO tag(name) VALUES ('a'), ('b')")
    }
    migrator.registerMigration("schema only") { db in
      try db.alter(table: "tag") { t in t.add(column: "color", .text) }
    }
    // Run by GRDB alone, a migration that inserts rows would commit them
    // unannounced: it is refused.
    #expect(throws: GroupSyncError.unsequencedCommit) { try migrator.migrate(group.store.pool) }
    let before = try group.store.currentSequence()
    try group.store.migrate(migrator)
    #expect(try group.store.currentSequence() == before + 2)
    #expect(try await group.store.read { try String.fetchAll($0, sql: "SELECT name FROM tag") } == ["a", "b"])
    // In this process the change sets arrive in memory, in order.
    let first = try await ListenerHarness.nextChanges(listener)
    #expect(first.sequence == before + 1)
    #expect(first.inserted == Set([1, 2].map { ObjectID(storeID: group.store.storeID, table: "tag", rowID: $0) }))
    let second = try await ListenerHarness.nextChanges(listener)
    #expect(second.sequence == before + 2 && second.rowCount == 0)
    // Migrating again changes nothing and allocates nothing.
    try group.store.migrate(migrator)
    #expect(try group.store.currentSequence() == before + 2)
  }

  @Test func aReplacedPreUpdateHookRollsBackAndFallsBackToGRDBsObserver() throws {
    let group = try makeGroup()
    #expect(group.store.usesPreUpdateHook)
    #expect {
      try group.store.write { db in
        _ = try Note(body: "lost?").inserted(db)
        // What a GRDB built with SQLITE_ENABLE_PREUPDATE_HOOK does.
        Self.clearPreUpdateHook(db.sqliteConnection)
      }
    } throws: { error in
      guard case GroupSyncError.captureUnavailable(let reason) = error else { return false }
      return reason.contains("replaced the SQLite pre-update hook")
    }
    #expect(try group.store.read { try Note.fetchCount($0) } == 0, "the transaction rolled back")
    #expect(!group.store.usesPreUpdateHook)
    // Retried, it commits and is reported through GRDB's observer.
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { _ = try Note(body: "again").inserted($0) }
    #expect(changeSet?.inserted == [ObjectID(storeID: group.store.storeID, table: "note", rowID: 1)])
  }

  // MARK: Concurrency

  @Test func readersRunWhileAWriterWrites() async throws {
    let group = try makeGroup()
    let store = group.store
    let stop = Atomic<Bool>(false)
    let writer = Thread {
      var index = 0
      while !stop.load(ordering: .relaxed) {
        index += 1
        try? store.write { _ = try Note(body: "n\(index)").inserted($0) }
      }
    }
    writer.start()
    defer { stop.store(true, ordering: .relaxed) }
    try await withThrowingTaskGroup(of: Int.self) { tasks in
      for _ in 0..<2 {
        tasks.addTask {
          var last = 0
          for _ in 0..<200 {
            let count = try store.read { try Note.fetchCount($0) }
            #expect(count >= last, "a reader went back in time")
            last = count
          }
          return last
        }
      }
      for try await count in tasks { #expect(count >= 0) }
    }
  }

  @Test func closeIsSafeFromTwoThreads() async throws {
    let group = try makeGroup()
    for _ in 0..<50 {
      let listener = try group.listen()
      await withTaskGroup(of: Void.self) { tasks in
        tasks.addTask { listener.close() }
        tasks.addTask { listener.close() }
      }
      #expect(listener.isClosed)
    }
    group.store.close()
    group.store.close()
    #expect(throws: GroupSyncError.storeClosed(path: group.store.path)) { try group.store.read { _ in } }
  }

  // MARK: Huge transactions

  @Test func pastTheRowBudgetTheLargestTablesAreInvalidated() throws {
    var options = StoreOptions()
    options.rowBudget = 1000
    let group = try makeGroup(options)
    try group.store.write { try $0.execute(sql: "CREATE TABLE small(x)") }
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "INSERT INTO small VALUES (1), (2)")
      try db.execute(sql: """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
        INSERT INTO note(body) SELECT 'row ' || i FROM n
        """)
      try db.execute(sql: "INSERT INTO small VALUES (3)")
    }
    let changes = try #require(changeSet)
    #expect(changes.invalidatedTableNames == ["note"])
    #expect(changes.tables.keys.sorted() == ["small"])
    #expect(changes.tables["small"]?.inserted == [1, 2, 3])
    #expect(try group.store.read { try Note.fetchCount($0) } == 5000)
  }

  @Test func aMillionRowTransactionCommitsWithBoundedMemory() async throws {
    let group = try makeGroup()
    let listener = try await ProcessHarness.startWatch([group.path, "--name", "big", "--json", "--count", "1"])
    let result = try await ProcessHarness.run([
      "exec", group.path, "--json",
      """
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000)
      INSERT INTO note(body) SELECT 'row' FROM n
      """,
    ], timeout: 300, measuringPeakMemory: true)
    try #require(result.status == 0, "\(result.stderr)")
    let line = try #require(try jsonLines(result.stdout).map(ChangeSetLine.init(json:)).first)
    #expect(line.invalidatedTables == [TableID(storeID: group.store.storeID, table: "note").uri])
    #expect(line.inserted.isEmpty)
    let delivered = try jsonLines(try await ProcessHarness.finish(listener).stdout).map(ChangeSetLine.init(json:))
    #expect(delivered == [line])
    // The writer's own peak memory (not that of the other tests' children).
    // (AddressSanitizer's shadow memory and quarantine make sizes meaningless.)
    if ProcessInfo.processInfo.environment["GROUPSYNC_SANITIZER"] == nil {
      #expect(result.peakResidentKiB > 0 && result.peakResidentKiB < 96 * 1024, "peak RSS of the writer: \(result.peakResidentKiB) KiB")
      Swift.print("a million rows: peak RSS of the writer \(result.peakResidentKiB) KiB")
    }
    #expect(try await group.store.read { try Note.fetchCount($0) } == 1_000_000)
  }

  // MARK: Helpers

  /// Removes whatever pre-update hook the connection has, through the
  /// symbol itself (sqlite3.h declares it only under a compile option).
  static func clearPreUpdateHook(_ connection: OpaquePointer?) {
    typealias Function = @convention(c) (OpaquePointer?, UnsafeRawPointer?, UnsafeMutableRawPointer?)
      -> UnsafeMutableRawPointer?
    guard let symbol = dlsym(nil, "sqlite3_preupdate_hook") else {
      Issue.record("SQLite has no pre-update hook")
      return
    }
    _ = unsafeBitCast(symbol, to: Function.self)(connection, nil, nil)
  }

}
