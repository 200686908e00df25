import Foundation
@testable import GroupSync
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// In-process listeners, fed by `groupsync exec` processes, by `groupsync
/// watch` processes that die, and by files crafted into their inboxes.
@Suite(.serialized, .timed)
struct ListenerTests {
  static let schema = """
    CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL DEFAULT '');
    CREATE TABLE tags(name TEXT PRIMARY KEY, uses INTEGER NOT NULL) WITHOUT ROWID;
    """

  static let insert = ListenerFixture.insert
  /// A short grace period, so that gaps are answered quickly.
  static var options: ListenerOptions { ListenerFixture.options }

  // MARK: Dead and restarted listeners

  @Test func aDeadListenersInboxIsSkipped() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    // A live listener that does not consume: proof that commits are published.
    let alive = try group.listen(as: "alive")
    defer { alive.close() }

    let watch = try await ProcessHarness.startWatch([directory, "--name", "dead", "--json"])
    watch.signal(SIGKILL)
    let killed = try await ProcessHarness.finish(watch, timeout: 10)
    #expect(killed.status == SIGKILL && killed.signalled)

    var sequences: [Int64] = []
    for _ in 1...3 {
      let written = try await ProcessHarness.exec(directory, Self.insert)
      sequences += written.map(\.seq)
    }
    try #require(sequences.count == 3)
    #expect(ProcessHarness.entries(group.layout.inbox("dead")).isEmpty, "a dead listener's inbox grew")
    #expect(
      ProcessHarness.entries(group.layout.inbox("alive")) == sequences.map { GroupLayout.fileName(sequence: $0) })

    let status = try await ProcessHarness.status(directory)
    let dead = try #require(status.listeners.first { $0.name == "dead" })
    #expect(!dead.isLive)
    #expect(dead.backlog == 0)
    #expect(dead.processID == nil)
    let live = try #require(status.listeners.first { $0.name == "alive" })
    #expect(live.isLive)
    #expect(live.backlog == 3)
    #expect(live.processID == getpid())
  }

  @Test func aRestartedListenerStartsFromAnEmptyInbox() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    _ = try await ProcessHarness.exec(directory, repeat: 2, Self.insert)

    let watch = try await ProcessHarness.startWatch([directory, "--name", "r", "--json"])
    watch.signal(SIGKILL)
    _ = try await ProcessHarness.finish(watch, timeout: 10)

    // Leftovers of the dead listener, and junk: all of it must go.
    let layout = GroupLayout(root: URL(fileURLWithPath: directory).resolvingSymlinksInPath().path)
    let store = try await ProcessHarness.status(directory)
    let current = store.sequence
    let inbox = layout.inbox("r")
    let forged = ChangeSetEncoding.encode(craftedChangeSet(store: store.storeID, sequence: current + 1))
    try ProcessHarness.placeAtomically(forged, at: inbox + "/" + GroupLayout.fileName(sequence: current + 1), staging: folder.path)
    try ProcessHarness.placeAtomically(
      ChangeSetEncoding.encode(craftedChangeSet(store: store.storeID, sequence: current)),
      at: inbox + "/" + GroupLayout.fileName(sequence: current), staging: folder.path)
    try ProcessHarness.placeAtomically(Array("junk\u{0}\u{1}".utf8), at: inbox + "/" + GroupLayout.fileName(sequence: current + 2), staging: folder.path)
    try ProcessHarness.placeAtomically(Array("notes".utf8), at: inbox + "/notes.txt", staging: folder.path)
    try FileManager.default.createDirectory(atPath: inbox + "/a-folder", withIntermediateDirectories: false)
    #expect(ProcessHarness.entries(inbox).count == 5)
    let before = try await ProcessHarness.status(directory)
    #expect(before.listeners.first { $0.name == "r" }?.isLive == false)
    #expect(before.listeners.first { $0.name == "r" }?.backlog == 5)

    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "r", options: Self.options)
    defer { listener.close() }
    #expect(ProcessHarness.entries(inbox).isEmpty, "the inbox is emptied on start")
    #expect(listener.startSequence == current)
    #expect(listener.startSequence == (try group.store.currentSequence()))

    let written = try await ProcessHarness.exec(directory, repeat: 2, Self.insert)
    try #require(written.map(\.seq) == [current + 1, current + 2])
    for line in written {
      let changeSet = try await ListenerHarness.nextChanges(listener)
      #expect(ChangeSetLine(changeSet) == line)
    }
    let extra = await ListenerHarness.next(listener, timeout: .milliseconds(400))
    #expect(extra == nil, "nothing but the later commits: \(String(describing: extra))")
  }

  // MARK: Bad inbox entries

  enum BadEntry: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case garbage, truncated, foreignStore, version99, oversized, unknownTable, symlink, fifo, directory, foreignName

    var testDescription: String { rawValue }

    static let maximumFileSize = 1024
  }

  /// Puts `entry` into the inbox, named like the next change set (or
  /// `notes.txt`); returns its path.
  static func place(_ entry: BadEntry, inbox: String, next: Int64, store: UUID, staging: String) throws -> String {
    let valid = ChangeSetEncoding.encode(craftedChangeSet(store: store, sequence: next))
    let path = inbox + "/" + (entry == .foreignName ? "notes.txt" : GroupLayout.fileName(sequence: next))
    switch entry {
    case .garbage:
      let bytes: [UInt8] = [0xFF, 0xFE, 0x00] + (0..<509).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
      try ProcessHarness.placeAtomically(bytes, at: path, staging: staging)
    case .truncated:
      try ProcessHarness.placeAtomically(Array(valid.prefix(valid.count / 2)), at: path, staging: staging)
    case .foreignStore:
      let foreign = ChangeSetEncoding.encode(craftedChangeSet(store: UUID(), sequence: next))
      try ProcessHarness.placeAtomically(foreign, at: path, staging: staging)
    case .version99:
      var bumped = valid
      bumped[4] = 99  // the version byte
      try ProcessHarness.placeAtomically(bumped, at: path, staging: staging)
    case .oversized:
      // Valid, only too large: a note of 4 KiB.
      var large = craftedChangeSet(store: store, sequence: next)
      large = ChangeSet(
        storeID: large.storeID, sequence: large.sequence, committedAtNanoseconds: large.committedAtNanoseconds,
        writerProcessID: large.writerProcessID, tables: large.tables, invalidatedTableNames: [],
        notes: [ChangeSetNote(name: "padding", payload: [UInt8](repeating: 0, count: 4 * BadEntry.maximumFileSize))])
      let padded = ChangeSetEncoding.encode(large)
      _ = try ChangeSetEncoding.decode(padded)
      try ProcessHarness.placeAtomically(padded, at: path, staging: staging)
    case .unknownTable:
      let bytes = ChangeSetEncoding.encode(craftedChangeSet(store: store, sequence: next, table: "no_such_table"))
      try ProcessHarness.placeAtomically(bytes, at: path, staging: staging)
    case .symlink:
      // Followed, it would be a perfectly valid change set.
      let target = staging + "/symlink-target.changeset"
      try Data(valid).write(to: URL(fileURLWithPath: target))
      try #require(symlink(target, path) == 0)
    case .fifo:
      try #require(mkfifo(path, 0o644) == 0)
    case .directory:
      try #require(mkdir(path, 0o755) == 0)
      try Data(valid).write(to: URL(fileURLWithPath: path + "/inside"))
    case .foreignName:
      try ProcessHarness.placeAtomically(valid, at: path, staging: staging)
    }
    return path
  }

  @Test(arguments: BadEntry.allCases)
  func aBadInboxEntryBecomesAResetAndDeliveryGoesOn(_ entry: BadEntry) async throws {
    let folder = try TemporaryFolder("bad-\(entry.rawValue)")
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    _ = try await ProcessHarness.exec(directory, Self.insert)
    let group = try GroupFolder(path: directory, create: false)
    var options = Self.options
    options.maximumFileSize = BadEntry.maximumFileSize
    let listener = try group.listen(as: "victim", options: options)
    defer { listener.close() }
    let start = listener.startSequence
    #expect(start == 2)
    let inbox = group.layout.inbox("victim")

    let path = try Self.place(entry, inbox: inbox, next: start + 1, store: group.store.storeID, staging: folder.path)
    #expect(ProcessHarness.exists(path))

    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.sequence == start, "the store did not move: \(reset)")
    #expect(!reset.reason.isEmpty)
    #expect(!ProcessHarness.exists(path), "the bad entry is removed")
    #expect(ProcessHarness.entries(inbox).isEmpty)
    if entry == .symlink {
      #expect(ProcessHarness.exists(folder.path + "/symlink-target.changeset"), "the symlink's target is left alone")
    }

    // The listener keeps running: a real commit is delivered as usual.
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try #require(written.count == 1 && written[0].seq == start + 1)
    let changeSet = try await ListenerHarness.nextChanges(listener)
    #expect(ChangeSetLine(changeSet) == written[0])
    #expect(try await group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") } == 2, "nothing in the store is lost")
  }

  @Test func anOverflowingInboxBecomesAResetAndDeliveryGoesOn() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    var options = Self.options
    options.maximumBacklog = 3
    let listener = try group.listen(as: "small", options: options)
    defer { listener.close() }

    // Nothing consumes while five change sets arrive.
    let flood = try await ProcessHarness.exec(directory, repeat: 5, Self.insert)
    #expect(ProcessHarness.entries(group.layout.inbox("small")).count == 5)

    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.sequence == flood.last?.seq, "the reset covers every change set in the store: \(reset)")
    #expect(ProcessHarness.entries(group.layout.inbox("small")).isEmpty)

    let written = try await ProcessHarness.exec(directory, Self.insert)
    let changeSet = try await ListenerHarness.nextChanges(listener)
    #expect(ChangeSetLine(changeSet) == written[0])
  }

  @Test func aBacklogLargerThanTheTrackingWindowIsDeliveredInOrder() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "behind", options: Self.options)
    defer { listener.close() }

    // Nothing consumes while more change sets arrive than the listener
    // tracks at once (4096): it must list the inbox again as it drains.
    let written = try await ProcessHarness.exec(directory, repeat: 5000, Self.insert)
    var received: [Int64] = []
    var iterator = listener.events.makeAsyncIterator()
    while received.count < written.count, let event = await iterator.next() {
      guard case .changes(let changeSet) = event else {
        Issue.record("unexpected \(event)")
        return
      }
      received.append(changeSet.sequence)
    }
    #expect(received == written.map(\.seq))
    #expect(ProcessHarness.entries(group.layout.inbox("behind")).isEmpty)
  }

  // MARK: Gaps

  @Test func aGapTurnsIntoAResetAfterTheGracePeriodAndDeliveryContinues() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "gappy", options: Self.options)
    defer { listener.close() }
    let start = listener.startSequence

    // Two commits whose writers died before publishing: the store is at
    // start + 2, and only the change set of start + 2 reaches the inbox.
    // The grace period runs from their commit.
    let committedAt = ContinuousClock.now
    try ProcessHarness.advanceSequenceWithoutPublishing(store: group.layout.store, by: 2)
    let next = start + 1
    let file = group.layout.inboxFile("gappy", sequence: next + 1)
    try ProcessHarness.placeAtomically(
      ChangeSetEncoding.encode(craftedChangeSet(store: group.store.storeID, sequence: next + 1)), at: file,
      staging: folder.path)

    let reset = try await ListenerHarness.nextReset(listener)
    let waited = ContinuousClock.now - committedAt
    #expect(waited >= Self.options.gracePeriod, "the gap was given its grace period (waited \(waited))")
    #expect(reset.sequence == start + 2, "the reset resumes after the store's sequence: \(reset)")
    #expect(!ProcessHarness.exists(file), "the change set the reset covers is removed")

    let written = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    try #require(written.map(\.seq) == [start + 3, start + 4, start + 5])
    for line in written {
      let changeSet = try await ListenerHarness.nextChanges(listener)
      #expect(ChangeSetLine(changeSet) == line)
    }
  }

  /// The grace period is the missing change set's own: one committed
  /// longer ago than it (its writer died after COMMIT while nobody was
  /// listening for it) is read from the history at once.
  @Test func aGapCommittedLongerAgoThanTheGracePeriodIsRepairedAtOnce() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    // A grace period of an hour, and a gap committed two hours ago: a
    // listener that waited for it would deliver nothing within a minute.
    var options = Self.options
    options.gracePeriod = .seconds(3600)
    let listener = try group.listen(as: "late", options: options)
    defer { listener.close() }
    let orphan = try ProcessHarness.commitWithoutPublishing(
      store: group.layout.store, committedAtNanoseconds: Store.nowNanoseconds() - 7_200_000_000_000
    ) { db in
      try db.execute(sql: "INSERT INTO items(body) VALUES ('orphan')")
      return ("items", db.lastInsertedRowID)
    }
    let written = try await ProcessHarness.exec(directory, Self.insert)
    #expect(try await ListenerHarness.nextChanges(listener, timeout: .seconds(60)) == orphan)
    #expect(ChangeSetLine(try await ListenerHarness.nextChanges(listener, timeout: .seconds(60))) == written[0])
  }

  @Test
  func aFileAheadOfTheStoreIsNeverDeliveredAsAChangeSet() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "gappy", options: Self.options)
    defer { listener.close() }
    let start = listener.startSequence

    // A valid-looking file for next + 1, which no writer has committed.
    let file = group.layout.inboxFile("gappy", sequence: start + 2)
    try ProcessHarness.placeAtomically(
      ChangeSetEncoding.encode(craftedChangeSet(store: group.store.storeID, sequence: start + 2, rowID: 4242)),
      at: file, staging: folder.path)
    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.sequence == start)

    // The real start + 1 is delivered...
    let first = try await ProcessHarness.exec(directory, Self.insert)
    try #require(first.map(\.seq) == [start + 1])
    #expect(ChangeSetLine(try await ListenerHarness.nextChanges(listener)) == first[0])
    // ...and nothing more until start + 2 is committed: the store is at start + 1.
    let early = await ListenerHarness.next(listener, timeout: .seconds(1))
    #expect(early == nil, "delivered while the store is at \(start + 1): \(String(describing: early))")
    guard early == nil else { return }

    let second = try await ProcessHarness.exec(directory, Self.insert)
    try #require(second.map(\.seq) == [start + 2])
    #expect(ChangeSetLine(try await ListenerHarness.nextChanges(listener)) == second[0])
  }

  @Test
  func aFileFarAheadOfTheStoreResetsOnceAndIsRemoved() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "ahead", options: Self.options)
    defer { listener.close() }
    let start = listener.startSequence

    let file = group.layout.inboxFile("ahead", sequence: start + 1000)
    try ProcessHarness.placeAtomically(
      ChangeSetEncoding.encode(craftedChangeSet(store: group.store.storeID, sequence: start + 1000)), at: file,
      staging: folder.path)
    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.sequence == start)
    // Five grace periods: a reset each time would be a reset loop.
    let extra = await ListenerHarness.next(listener, timeout: .seconds(1))
    #expect(extra == nil, "another event after the reset: \(String(describing: extra))")
    #expect(!ProcessHarness.exists(file), "the impossible file stays in the inbox")

    let written = try await ProcessHarness.exec(directory, Self.insert)
    let changeSet = try await ListenerHarness.nextChanges(listener)
    #expect(ChangeSetLine(changeSet) == written[0])
  }

  // MARK: Names

  @Test func aNameALiveListenerHoldsIsInUse() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)

    let first = try group.listen(as: "busy", options: Self.options)
    defer { first.close() }
    #expect(throws: GroupSyncError.listenerNameInUse("busy")) { try group.listen(as: "busy") }

    let watch = try await ProcessHarness.startWatch([directory, "--name", "busy2", "--json", "--count", "1"])
    #expect(throws: GroupSyncError.listenerNameInUse("busy2")) { try group.listen(as: "busy2") }

    // The failed attempts disturbed neither holder.
    let written = try await ProcessHarness.exec(directory, Self.insert)
    let changeSet = try await ListenerHarness.nextChanges(first)
    #expect(ChangeSetLine(changeSet) == written[0])
    let watched = try await ProcessHarness.finish(watch, timeout: 20)
    #expect(watched.status == 0)
    #expect(try jsonLines(watched.stdout).map(ChangeSetLine.init(json:)) == written)
  }

  @Test(arguments: ["", "../x", ".hidden", String(repeating: "a", count: 65), "a/b", "sp ace", "/abs"])
  func anInvalidListenerNameIsRejected(_ name: String) async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    #expect(throws: GroupSyncError.invalidListenerName(name)) { try group.listen(as: name) }
    #expect(ProcessHarness.entries(group.layout.listeners).isEmpty, "nothing was created for '\(name)'")
    #expect(!ProcessHarness.exists(folder.child("x")))
    #expect(!ProcessHarness.exists(group.path + "/x"))
  }

  @Test func theLongestValidNameIsAccepted() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let name = String(repeating: "a", count: 63) + "."
    let listener = try group.listen(as: name)
    defer { listener.close() }
    #expect(listener.name == name)
  }

  @Test
  func closeReleasesTheNameAndWritersStopDelivering() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "again")
    listener.close()
    // The closed listener stays referenced, as a user's property would keep it.
    defer { withExtendedLifetime(listener) {} }
    _ = try await ProcessHarness.exec(directory, Self.insert)
    #expect(ProcessHarness.entries(group.layout.inbox("again")).isEmpty, "a closed listener's inbox grew")
    let status = try await ProcessHarness.status(directory)
    #expect(status.listeners.first { $0.name == "again" }?.isLive == false)
    let second = try group.listen(as: "again")
    second.close()
  }

  /// A signal handler's thread closes while the consumer, its iteration
  /// ended, closes too and the process exits: the second close returns
  /// only once the first has removed the folder.
  @Test func aSecondCloseReturnsOnceTheFirstHasCleanedUp() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    for _ in 0..<30 {
      let listener = try group.listen()
      let listenerFolder = group.layout.listenerFolder(listener.name)
      let other = Thread { listener.close() }
      other.start()
      while !listener.isClosed { sched_yield() }  // the other close has begun
      listener.close()
      #expect(!FileManager.default.fileExists(atPath: listenerFolder))
    }
  }

  // MARK: Closing and the callback form

  /// Whether `task` finished within `timeout`; cancels it if not.
  static func finishes<T: Sendable>(_ task: Task<T, Never>, within timeout: Duration = .seconds(60)) async -> T? {
    await withTaskGroup(of: T?.self) { group in
      group.addTask { await task.value }
      group.addTask {
        try? await Task.sleep(for: timeout)
        return nil
      }
      let first = await group.next() ?? nil
      if first == nil { task.cancel() }
      group.cancelAll()
      return first
    }
  }

  @Test func closeEndsTheIterationOfEvents() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "closing", options: Self.options)

    let seen = Collected<ListenerEvent>()
    let consumer = Task { () -> [ListenerEvent] in
      var events: [ListenerEvent] = []
      for await event in listener.events {
        events.append(event)
        seen.append(event)
      }
      return events
    }
    let written = try await ProcessHarness.exec(directory, Self.insert)
    // Wait until the consumer has the change set, then close under it.
    try await waitUntil("the consumer has the change set") { seen.all.count == 1 }
    listener.close()
    let events = await Self.finishes(consumer)
    let received = try #require(events, "iteration did not end after close()")
    #expect(received.count == 1)
    if case .changes(let changeSet) = received.first {
      #expect(ChangeSetLine(changeSet) == written[0])
    } else {
      Issue.record("expected the change set, got \(received)")
    }
    #expect(listener.isClosed)
    var iterator = listener.events.makeAsyncIterator()
    #expect(await iterator.next() == nil, "a closed listener's events end at once")
  }

  @Test func theCallbackFormDeliversEvents() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "callback", options: Self.options)
    let collected = Collected<ListenerEvent>()
    let task = listener.start { collected.append($0) }

    let written = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    try await ProcessHarness.onThread {
      let deadline = Date().addingTimeInterval(10)
      while collected.all.count < 3 && Date() < deadline { usleep(5_000) }
    }
    let lines = collected.all.map { event -> ChangeSetLine? in
      if case .changes(let changeSet) = event { return ChangeSetLine(changeSet) }
      return nil
    }
    #expect(lines == written.map { Optional($0) })

    listener.close()
    #expect(await Self.finishes(task) != nil, "the callback task did not end after close()")
  }
}
