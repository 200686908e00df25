import Foundation
import GRDB
@testable import GroupSync
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `Listener.startOnWatcherThread(_:)`: the consumer runs on the watcher
/// thread. The same promises as `events` (order, exactly once, gaps read
/// from the history, resets, acknowledgement), fed by `groupsync exec`
/// processes, by this process's own commits and by writers killed after
/// COMMIT.
@Suite(.serialized, .timed)
struct WatcherThreadDeliveryTests {
  static let insert = ListenerFixture.insert
  static var options: ListenerOptions { ListenerFixture.options }

  /// Events and the threads they came on.
  final class Received: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [ListenerEvent] = []
    private var threads = Set<UInt>()

    func record(_ event: ListenerEvent) {
      let thread = UInt(pthread_self())
      lock.withLock {
        events.append(event)
        threads.insert(thread)
      }
    }

    var all: [ListenerEvent] { lock.withLock { events } }
    var threadCount: Int { lock.withLock { threads.count } }

    var sequences: [Int64] {
      all.compactMap { if case .changes(let changeSet) = $0 { changeSet.sequence } else { nil } }
    }

    func waitFor(count: Int, timeout: Duration = .seconds(60)) async throws {
      try await waitUntil("\(count) events", timeout: timeout) { self.all.count >= count }
    }
  }

  /// A group folder made by `groupsync init`, opened in process.
  static func makeGroup() async throws -> (TemporaryFolder, String, GroupFolder) {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    return (folder, directory, try GroupFolder(path: directory, create: false))
  }

  @Test func otherProcessesChangeSetsArriveInOrderOnOneThread() async throws {
    let (folder, directory, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    let listener = try group.listen(as: "direct", options: Self.options)
    defer { listener.close() }
    let received = Received()
    listener.startOnWatcherThread { received.record($0) }

    let written = try await ProcessHarness.exec(directory, repeat: 20, Self.insert)
    try await received.waitFor(count: 20)
    let lines = received.all.map { event -> ChangeSetLine? in
      if case .changes(let changeSet) = event { return ChangeSetLine(changeSet) }
      return nil
    }
    #expect(lines == written.map { Optional($0) })
    #expect(received.threadCount == 1, "every event came on the watcher thread")
    // Delivered files are removed: at once, or, for one whose change set
    // came from the history first (it was linked late), by the inbox's
    // next scan.
    let inbox = group.layout.inbox("direct")
    try await waitUntil("delivered files are removed") { ProcessHarness.entries(inbox).isEmpty }
  }

  @Test func thisProcessesOwnCommitsWakeTheWatcherThread() async throws {
    let (folder, _, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    let listener = try group.listen(as: "own", options: Self.options)
    defer { listener.close() }
    let received = Received()
    listener.startOnWatcherThread { received.record($0) }

    var sequences: [Int64] = []
    for _ in 0..<5 {
      let (_, changeSet) = try await group.store.writeAndReturnChangeSet { db in try db.execute(sql: Self.insert[0]) }
      sequences.append(try #require(changeSet).sequence)
    }
    try await received.waitFor(count: 5)
    #expect(received.sequences == sequences)
    #expect(ProcessHarness.entries(group.layout.inbox("own")).isEmpty, "own commits came in memory")
  }

  @Test func changeSetsWaitingBeforeTheStartAreDelivered() async throws {
    let (folder, directory, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    let listener = try group.listen(as: "late-start", options: Self.options)
    defer { listener.close() }
    let written = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    let received = Received()
    listener.startOnWatcherThread { received.record($0) }
    try await received.waitFor(count: 3)
    #expect(received.sequences == written.map(\.seq))
  }

  /// Writers killed after COMMIT: the missing change sets are read from the
  /// history, in order, with no reset, by a timer's wake-up of the thread.
  @Test func changeSetsNobodyPublishedAreReadFromTheHistory() async throws {
    let (folder, directory, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    let listener = try group.listen(as: "gaps", options: Self.options)
    defer { listener.close() }
    let received = Received()
    listener.startOnWatcherThread { received.record($0) }

    var orphans: [ChangeSet] = []
    for index in 0..<3 {
      orphans.append(
        try ProcessHarness.commitWithoutPublishing(store: group.layout.store) { db in
          try db.execute(sql: "INSERT INTO items(body) VALUES (?)", arguments: ["orphan \(index)"])
          return ("items", db.lastInsertedRowID)
        })
    }
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await received.waitFor(count: 4)
    #expect(received.sequences == orphans.map(\.sequence) + written.map(\.seq))
    let fromHistory = received.all.prefix(3).compactMap { if case .changes(let c) = $0 { c } else { nil } }
    #expect(fromHistory == orphans, "the orphans as the history holds them")
  }

  @Test func closingInsideTheHandlerStopsDelivery() async throws {
    let (folder, directory, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    let listener = try group.listen(as: "closes-itself", options: Self.options)
    let received = Received()
    listener.startOnWatcherThread { event in
      received.record(event)
      listener.close()
    }
    _ = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    try await received.waitFor(count: 1)
    #expect(listener.isClosed)
    _ = try await ProcessHarness.exec(directory, Self.insert)
    try await Task.sleep(for: .milliseconds(300))
    #expect(received.all.count == 1, "nothing after close: \(received.all)")
    // The listener removes its folder once the handler returned; a change
    // set a writer delivered before that goes with it.
    try await waitUntil("the closed listener's inbox is gone or empty") {
      !ProcessHarness.exists(group.layout.listenerFolder("closes-itself"))
        || ProcessHarness.entries(group.layout.inbox("closes-itself")).isEmpty
    }
  }

  @Test func closeReleasesTheHandler() async throws {
    let (folder, _, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    final class Owner: Sendable {}
    weak var weakOwner: Owner?
    let listener = try group.listen(as: "releases", options: Self.options)
    do {
      let owner = Owner()
      weakOwner = owner
      listener.startOnWatcherThread { _ in withExtendedLifetime(owner) {} }
    }
    #expect(weakOwner != nil)
    listener.close()
    #expect(weakOwner == nil, "a closed listener still holds its handler")
  }

  /// Acknowledged when the handler returns: a durable listener restarted
  /// after its process was killed resumes after the last handled.
  @Test func aDurableListenerResumesAfterTheLastHandled() async throws {
    let (folder, directory, group) = try await Self.makeGroup()
    defer { withExtendedLifetime(folder) {} }
    let first = try group.listen(as: "resumes", durable: true, options: Self.options)
    let received = Received()
    first.startOnWatcherThread { received.record($0) }
    let written = try await ProcessHarness.exec(directory, repeat: 4, Self.insert)
    try await received.waitFor(count: 4)
    first.close()

    let more = try await ProcessHarness.exec(directory, repeat: 2, Self.insert)
    let second = try group.listen(as: "resumes", durable: true, options: Self.options)
    defer { second.close() }
    #expect(second.startSequence == written.last?.seq)
    let again = Received()
    second.startOnWatcherThread { again.record($0) }
    try await again.waitFor(count: 2)
    #expect(again.sequences == more.map(\.seq))
  }
}
