import Foundation
@testable import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Real `groupsync` writer and listener processes on one group folder:
/// every listener receives every committed change set, in commit order,
/// exactly once, with the IDs the writer committed.
@Suite(.serialized, .timed)
struct MultiProcessTests {
  /// A rowid table and a WITHOUT ROWID table; the seed row gives the
  /// schema a sequence of its own.
  static let schema = """
    CREATE TABLE items(id INTEGER PRIMARY KEY, w TEXT NOT NULL, n INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE tags(name TEXT PRIMARY KEY, uses INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO items(w) VALUES ('seed');
    """

  static func uri(_ store: String, _ table: String, _ rowID: Int64? = nil) -> String {
    "x-groupsync://\(store)/\(table)" + (rowID.map { "/p\($0)" } ?? "")
  }

  /// Transaction i inserts row i+1, updates row i and deletes row i-1 (the
  /// seed row is 1), and bumps a WITHOUT ROWID counter.
  static let singleWriterTransaction = [
    "INSERT INTO items(w) VALUES ('a')",
    "UPDATE items SET n = n + 1 WHERE id = last_insert_rowid() - 1",
    "DELETE FROM items WHERE id = last_insert_rowid() - 2",
    "INSERT INTO tags(name, uses) VALUES ('a', 1) ON CONFLICT(name) DO UPDATE SET uses = uses + 1",
  ]

  /// One transaction of writer `w`: inserts a row, updates its previous
  /// one, deletes every fifth of its rows, and bumps its tag.
  static func concurrentWriterTransaction(_ w: String) -> [String] {
    [
      "INSERT INTO items(w) VALUES ('\(w)')",
      "UPDATE items SET n = n + 1 WHERE id = (SELECT max(id) FROM items WHERE w = '\(w)' AND id < last_insert_rowid())",
      "DELETE FROM items WHERE w = '\(w)' AND id % 5 = 0 AND id < last_insert_rowid()",
      "INSERT INTO tags(name, uses) VALUES ('\(w)', 1) ON CONFLICT(name) DO UPDATE SET uses = uses + 1",
    ]
  }

  /// Checks a `watch --json --count` process's output against the writers'.
  static func checkListener(
    _ name: String, _ result: CLI.Result, expected: [ChangeSetLine],
    sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    #expect(result.status == 0, "\(name) exited \(result.status): \(result.stderr)", sourceLocation: sourceLocation)
    let objects = try jsonLines(result.stdout)
    let resets = objects.filter { $0["reset"] != nil }
    #expect(resets.isEmpty, "\(name) reset: \(resets)", sourceLocation: sourceLocation)
    let lines = try objects.filter { $0["reset"] == nil }.map(ChangeSetLine.init(json:))
    #expect(lines.map(\.seq) == expected.map(\.seq), "\(name) sequences", sourceLocation: sourceLocation)
    #expect(lines == expected, "\(name) content", sourceLocation: sourceLocation)
  }

  @Test func oneWriterFourListenersReceiveEveryChangeSetInOrderWithTheWritersIDs() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let base = try await ProcessHarness.status(directory).sequence
    #expect(base == 1, "the schema's seed row is a change set of its own")
    let transactions = 40

    var listeners: [ChildProcess] = []
    for index in 1...4 {
      listeners.append(
        try await ProcessHarness.startWatch([directory, "--name", "l\(index)", "--json", "--count", String(transactions)]))
    }
    let written = try await ProcessHarness.exec(directory, repeat: transactions, Self.singleWriterTransaction)

    // The writer's own report, checked against what the statements do.
    try #require(written.count == transactions)
    let store = written[0].store
    #expect(written.map(\.seq) == Array((base + 1)...(base + Int64(transactions))))
    for (offset, line) in written.enumerated() {
      let i = Int64(offset + 1)
      #expect(line.store == store)
      #expect(line.inserted == [Self.uri(store, "items", i + 1)], "transaction \(i)")
      #expect(line.updated == [Self.uri(store, "items", i)], "transaction \(i)")
      #expect(line.deleted == (i >= 2 ? [Self.uri(store, "items", i - 1)] : []), "transaction \(i)")
      #expect(line.invalidatedTables == [Self.uri(store, "tags")], "transaction \(i)")
    }

    for (offset, result) in try await ProcessHarness.finishAll(listeners).enumerated() {
      try Self.checkListener("l\(offset + 1)", result, expected: written)
    }
  }

  @Test func twoConcurrentWritersThreeListenersSeeTheUnionGaplessAndInOrder() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let base = try await ProcessHarness.status(directory).sequence
    let perWriter = 50

    var listeners: [ChildProcess] = []
    for index in 1...3 {
      listeners.append(
        try await ProcessHarness.startWatch([directory, "--name", "c\(index)", "--json", "--count", String(2 * perWriter)]))
    }
    // Both writers start before either is awaited, so they commit concurrently.
    let writers = try ["a", "b"].map { w in
      try CLI.start(["exec", directory, "--json", "--repeat", String(perWriter)] + Self.concurrentWriterTransaction(w))
    }
    var perWriterLines: [[ChangeSetLine]] = []
    for result in try await ProcessHarness.finishAll(writers, timeout: 60) {
      try #require(result.status == 0, "a writer failed: \(result.stderr)")
      perWriterLines.append(try jsonLines(result.stdout).map(ChangeSetLine.init(json:)))
    }

    for lines in perWriterLines {
      #expect(lines.count == perWriter)
      #expect(lines.map(\.seq) == lines.map(\.seq).sorted(), "a writer's own commits are in its order")
      #expect(lines.allSatisfy { $0.inserted.count == 1 && $0.invalidatedTables.count == 1 })
    }
    let merged = perWriterLines.joined().sorted { $0.seq < $1.seq }
    #expect(merged.map(\.seq) == Array((base + 1)...(base + Int64(2 * perWriter))), "gapless across both writers")
    let insertedIDs = merged.flatMap(\.inserted)
    #expect(Set(insertedIDs).count == insertedIDs.count, "every transaction inserted a row of its own")

    for (offset, result) in try await ProcessHarness.finishAll(listeners).enumerated() {
      try Self.checkListener("c\(offset + 1)", result, expected: merged)
    }
  }

  /// Reads events with `for await` until `count` came, or the listener was
  /// closed by the watchdog after `timeout`.
  static func collect(_ listener: Listener, count: Int, timeout: Duration = .seconds(20)) async -> [ListenerEvent] {
    let watchdog = Task {
      try? await Task.sleep(for: timeout)
      if !Task.isCancelled { listener.close() }
    }
    defer { watchdog.cancel() }
    var events: [ListenerEvent] = []
    for await event in listener.events {
      events.append(event)
      if events.count == count { break }
    }
    return events
  }

  /// Listeners that come and go while a writer process commits: one that
  /// closed (its folder gone) between the writer's look at its lock and
  /// its delivery went away, and is no failure of the writer's.
  @Test func listenersClosingWhileAWriterDeliversAreNoDeliveryFailure() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let writer = try CLI.start(["exec", directory, "--repeat", "400"] + Self.singleWriterTransaction)
    var opened = 0
    while writer.isRunning {
      let listener = try group.listen()
      opened += 1
      listener.close()
    }
    let result = try await ProcessHarness.finish(writer)
    #expect(result.status == 0, "after \(opened) listeners opened and closed: \(result.stderr.suffix(2000))")
    #expect(!result.stderr.contains("not delivered"))
  }

  @Test func inProcessListenerReceivesAWriterProcesssChangeSetsFromDisk() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "inproc")
    defer { listener.close() }
    #expect(listener.startSequence == (try group.store.currentSequence()))

    let writer = try CLI.start(["exec", directory, "--json", "--repeat", "5"] + Self.singleWriterTransaction)
    let result = try await ProcessHarness.finish(writer)
    try #require(result.status == 0, "\(result.stderr)")
    let written = try jsonLines(result.stdout).map(ChangeSetLine.init(json:))
    try #require(written.count == 5)

    let events = await Self.collect(listener, count: 5)
    let changeSets = events.compactMap { event -> ChangeSet? in
      if case .changes(let changeSet) = event { return changeSet }
      return nil
    }
    #expect(changeSets.count == events.count, "no resets: \(events)")
    #expect(changeSets.map(ChangeSetLine.init) == written)
    #expect(changeSets.allSatisfy { $0.storeID == group.store.storeID })
    #expect(changeSets.allSatisfy { $0.writerProcessID == writer.pid }, "read from the writer's files")
    #expect(ProcessHarness.entries(group.layout.inbox("inproc")).isEmpty, "delivered files are removed")
  }

  @Test func aWritingListenerGetsItsOwnCommitsInMemoryAndOthersFromDiskInOrder() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "self")
    defer { listener.close() }
    let inbox = group.layout.inbox("self")

    // Nothing consumes events until the end, so any file published to this
    // listener's inbox stays there to be seen.
    var expected: [ChangeSetLine] = []
    var own: [ChangeSet] = []
    for round in 1...3 {
      let (_, mine) = try await group.store.writeAndReturnChangeSet { db in
        try db.execute(sql: "INSERT INTO items(w) VALUES ('self')")
        try db.execute(sql: "UPDATE items SET n = n + 1 WHERE id = 1")
      }
      let changeSet = try #require(mine)
      own.append(changeSet)
      expected.append(ChangeSetLine(changeSet))
      #expect(
        !ProcessHarness.entries(inbox).contains(GroupLayout.fileName(sequence: changeSet.sequence)),
        "round \(round): the process's own change set went to its inbox")

      let theirs = try await ProcessHarness.exec(directory, ["INSERT INTO items(w) VALUES ('other')", "DELETE FROM items WHERE id = 1"])
      try #require(theirs.count == 1)
      expected.append(theirs[0])
      #expect(
        ProcessHarness.entries(inbox).contains(GroupLayout.fileName(sequence: theirs[0].seq)),
        "round \(round): another process's change set arrives as a file")
    }
    #expect(ProcessHarness.entries(inbox).count == 3, "only the other process's three files: \(ProcessHarness.entries(inbox))")
    #expect(expected.map(\.seq) == Array(expected[0].seq...(expected[0].seq + 5)))

    let events = await Self.collect(listener, count: expected.count)
    let changeSets = events.compactMap { event -> ChangeSet? in
      if case .changes(let changeSet) = event { return changeSet }
      return nil
    }
    #expect(changeSets.count == events.count, "no resets: \(events)")
    #expect(changeSets.map(ChangeSetLine.init) == expected)
    let ownDelivered = changeSets.filter { $0.writerProcessID == getpid() }
    #expect(ownDelivered == own, "own change sets are handed over in memory, unchanged")
    #expect(ProcessHarness.entries(inbox).isEmpty)
  }
}
