// Durable listeners: their place kept across runs, replay, expiry.
import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// Durable listeners keep their place while their process is not running,
/// replay what they missed from the history, and are told explicitly when
/// their place expired.
@Suite(.serialized, .timed)
struct DurableListenerTests {
  static let schema = ListenerFixture.schema
  static let insert = ListenerFixture.insert
  static var options: ListenerOptions { ListenerFixture.options }

  @Test func aDurableListenerWithoutANameIsRefusedAsSuch() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    #expect(throws: GroupSyncError.durableListenerNeedsName) { try group.listen(durable: true) }
    #expect(ProcessHarness.entries(group.layout.listeners).isEmpty, "nothing was created")
  }

  @Test func aKilledDurableWatchResumesExactlyWhereItLeftOff() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let first = try await ProcessHarness.startWatch([directory, "--name", "up", "--durable", "--json"])
    let before = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    try await ProcessHarness.waitForLines(first, 3)
    // It acknowledges the third once it asks for the next event.
    let deadline = ContinuousClock.now + .seconds(60)
    var backoff = PollBackoff()
    while try await ProcessHarness.status(directory).listeners.first(where: { $0.name == "up" })?.acknowledged
      != before.last?.seq, ContinuousClock.now < deadline
    {
      try await backoff.pause()
    }
    first.signal(SIGKILL)
    let killed = try await ProcessHarness.finish(first, timeout: 10)
    #expect(try jsonLines(killed.stdout).map(ChangeSetLine.init(json:)) == before)

    let missed = try await ProcessHarness.exec(directory, repeat: 1000, Self.insert)
    let status = try await ProcessHarness.status(directory)
    #expect(status.listeners.first { $0.name == "up" }?.acknowledged == before.last?.seq)

    let second = try await ProcessHarness.startWatch([directory, "--name", "up", "--durable", "--json", "--count", "1002"])
    try await ProcessHarness.waitForLines(second, 1000, timeout: 60)
    let live = try await ProcessHarness.exec(directory, repeat: 2, Self.insert)
    let resumed = try jsonLines(try await ProcessHarness.finish(second, timeout: 60).stdout).map(ChangeSetLine.init(json:))
    #expect(resumed.count == 1002)
    #expect(resumed == missed + live, "exactly the missed change sets, in order, then live ones, no duplicate")
  }

  @Test func softRetentionKeepsADurableListenersPlaceAndHardRetentionExpiresIt() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: Self.schema) }
    try group.store.setHistoryRetention(HistoryRetention(
      maximumAgeSeconds: nil, maximumCount: 10, maximumBytes: nil,
      hardMaximumAgeSeconds: nil, hardMaximumCount: nil, hardMaximumBytes: nil))
    let listener = try group.listen(as: "slow", durable: true, options: Self.options)
    let place = listener.startSequence
    listener.close()
    for _ in 0..<300 { try await group.store.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('y')") } }
    #expect(try group.store.oldestHistorySequence() == place + 1, "soft limits stop at the durable listener's place")
    let resumed = try group.listen(as: "slow", durable: true, options: Self.options)
    for expected in (place + 1)...(place + 300) {
      let changeSet = try await ListenerHarness.nextChanges(resumed)
      #expect(changeSet.sequence == expected)
      if changeSet.sequence != expected { break }
    }
    resumed.close()

    // A hard limit purges past it: the next start says the place expired.
    try group.store.setHistoryRetention(HistoryRetention(
      maximumAgeSeconds: nil, maximumCount: 10, maximumBytes: nil,
      hardMaximumAgeSeconds: nil, hardMaximumCount: 10, hardMaximumBytes: nil))
    for _ in 0..<300 { try await group.store.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('z')") } }
    let expired = try group.listen(as: "slow", durable: true, options: Self.options)
    defer { expired.close() }
    let reset = try await ListenerHarness.nextReset(expired)
    #expect(reset.isExpired && reset.reason.contains("expired"), "\(reset)")
    #expect(reset.sequence == (try group.store.currentSequence()))
    let (_, next) = try await group.store.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO items(body) VALUES ('w')") }
    #expect(try await ListenerHarness.nextChanges(expired).sequence == next?.sequence)
  }

  @Test func explicitAcknowledgementReplaysWhatWasNotAcknowledged() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: Self.schema) }
    var options = Self.options
    options.acknowledgement = .explicit
    let listener = try group.listen(as: "uploader", durable: true, options: options)
    var written: [Int64] = []
    for _ in 0..<4 {
      written.append(try await group.store.writeAndReturnChangeSet { try $0.execute(sql: Self.insert[0]) }.changeSet!.sequence)
    }
    for (index, sequence) in written.enumerated() {
      let changeSet = try await ListenerHarness.nextChanges(listener)
      #expect(changeSet.sequence == sequence)
      if index == 1 { try listener.acknowledge(changeSet) }  // uploaded two, then crashed
    }
    listener.close()
    let again = try group.listen(as: "uploader", durable: true, options: options)
    defer { again.close() }
    #expect(again.startSequence == written[1])
    #expect(try await ListenerHarness.nextChanges(again).sequence == written[2])
    #expect(try await ListenerHarness.nextChanges(again).sequence == written[3])
    let some = try #require(try group.store.history(after: written[2] - 1, limit: 1).first?.changeSet.get())
    await #expect(throws: GroupSyncError.acknowledgementOfOtherKind(listener: "uploader", placeKeptInStore: false)) {
      try await group.store.write { db in try again.acknowledge(some, in: db) }
    }
    let passing = try group.listen()
    defer { passing.close() }
    #expect(throws: GroupSyncError.listenerNotDurable(passing.name)) { try passing.acknowledge(some) }
  }

  @Test func aPlaceKeptInTheStoreCommitsWithTheConsumersChanges() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: Self.schema + "CREATE TABLE copies(seq INTEGER PRIMARY KEY);") }
    var options = Self.options
    options.acknowledgement = .inStore
    let listener = try group.listen(as: "indexer", durable: true, options: options)
    let other = try GroupFolder(path: folder.child("group"))  // another writer
    for _ in 0..<3 { try await other.store.write { try $0.execute(sql: Self.insert[0]) } }
    for index in 0..<3 {
      let changeSet = try await ListenerHarness.nextChanges(listener)
      struct Crash: Error {}
      // The consumer's state and its place commit together: a crash in the
      // middle (the third) rolls both back.
      _ = try? await group.store.write { db in
        try db.execute(sql: "INSERT INTO copies(seq) VALUES (?)", arguments: [changeSet.sequence])
        try listener.acknowledge(changeSet, in: db)
        if index == 2 { throw Crash() }
      }
    }
    listener.close()
    let copies = try await group.store.read { try Int64.fetchAll($0, sql: "SELECT seq FROM copies ORDER BY seq") }
    let again = try group.listen(as: "indexer", durable: true, options: options)
    defer { again.close() }
    #expect(again.startSequence == copies.last)
    let redelivered = try await ListenerHarness.nextChanges(again)
    #expect(redelivered.sequence == copies.last! + 1, "the change set whose handling rolled back comes again")
    #expect(throws: GroupSyncError.acknowledgementOfOtherKind(listener: "indexer", placeKeptInStore: true)) {
      try again.acknowledge(redelivered)
    }
    #expect(try await ProcessHarness.status(group.path).listeners.first { $0.name == "indexer" }?.acknowledged == copies.last)
  }

  @Test func aRemovedDurableListenerNoLongerHoldsHistory() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: Self.schema) }
    try group.store.setHistoryRetention(HistoryRetention(
      maximumAgeSeconds: nil, maximumCount: 10, maximumBytes: nil,
      hardMaximumAgeSeconds: nil, hardMaximumCount: nil, hardMaximumBytes: nil))
    let listener = try group.listen(as: "gone", durable: true)
    #expect(throws: GroupSyncError.listenerNameInUse("gone")) { try group.removeDurableListener("gone") }
    listener.close()
    try group.removeDurableListener("gone")
    #expect(!ProcessHarness.exists(group.layout.listenerFolder("gone")))
    for _ in 0..<300 { try await group.store.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('y')") } }
    #expect(try group.store.oldestHistorySequence() == 256 - 10 + 1)
    #expect(throws: GroupSyncError.self) { try group.listen(durable: true) }
  }
}
