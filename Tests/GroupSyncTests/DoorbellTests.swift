import Foundation
@testable import GroupSync
import GroupSyncTestSupport
import Testing

/// `GroupFolder.doorbell(_:)`: rings on each commit, of this process or
/// another, and empties its inbox without reading what arrives.
@Suite(.serialized, .timed)
struct DoorbellTests {
  /// Rings counted, and waited for.
  final class Rings: Sendable {
    private let count = Locked(0)

    func ring() { count.withLock { $0 += 1 } }

    var value: Int { count.withLock { $0 } }

    /// Waits until at least `expected` rings came, or `timeout` passed.
    func wait(for expected: Int, timeout: Duration = .seconds(60)) async -> Bool {
      await DoorbellTests.eventually(within: timeout) { value >= expected }
    }
  }

  /// A group of items made by the command-line tool and opened here, with
  /// a doorbell that counts its rings (closed when released).
  final class Bell {
    let folder: TemporaryFolder
    let directory: String
    let group: GroupFolder
    let rings = Rings()
    let doorbell: Doorbell
    var inbox: String { group.layout.inbox(doorbell.name) }

    init(_ label: String = #function, ignoringAuthor: String? = nil) async throws {
      folder = try TemporaryFolder(label)
      directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
      group = try GroupFolder(path: directory, create: false)
      doorbell = try group.doorbell(rescanInterval: .milliseconds(200), ignoringAuthor: ignoringAuthor) { [rings] in
        rings.ring()
      }
    }

    deinit { doorbell.close() }
  }

  @Test func ringsOnEachCommitOfAnotherProcessAndLeavesTheInboxEmpty() async throws {
    let bell = try await Bell()
    #expect(ProcessHarness.exists(bell.inbox))
    for round in 1...3 {
      _ = try await ProcessHarness.exec(bell.directory, ListenerFixture.insert)
      #expect(await bell.rings.wait(for: round), "no ring for commit \(round)")
    }
    #expect(await Self.eventually { ProcessHarness.entries(bell.inbox).isEmpty }, "\(ProcessHarness.entries(bell.inbox))")
  }

  @Test func ringsOnThisProcesssCommitsInMemory() async throws {
    let bell = try await Bell()
    try await bell.group.store.write { db in try db.execute(sql: ListenerFixture.insert[0]) }
    #expect(await bell.rings.wait(for: 1))
    #expect(ProcessHarness.entries(bell.inbox).isEmpty)
  }

  /// Takes this process's change sets in memory and keeps their authors.
  final class AuthorLog: InProcessInbox, @unchecked Sendable {
    let name = "author-log"
    let authors = Locked<[String?]>([])
    func receiveInProcess(_ changeSet: ChangeSet, store: String, author: String?) {
      authors.withLock { $0.append(author) }
    }
  }

  /// A relay's own commits do not wake it: this process's commits under
  /// the author the doorbell ignores do not ring, any other's do. Fan-out
  /// hands each in-process inbox the author the write named, on the
  /// committing thread (the doorbell's own ticks and rescans may ring
  /// besides, so its rings are not counted through writes).
  @Test func thisProcesssCommitsUnderTheIgnoredAuthorDoNotRing() async throws {
    let bell = try await Bell(ignoringAuthor: "groupsync-relay@a")
    let log = AuthorLog()
    LocalListeners.shared.add(log, group: bell.group.layout.root)
    defer { LocalListeners.shared.remove(log, group: bell.group.layout.root) }
    try await bell.group.store.write(author: "groupsync-relay@a") { db in try db.execute(sql: ListenerFixture.insert[0]) }
    try await bell.group.store.write(author: "someone") { db in try db.execute(sql: ListenerFixture.insert[0]) }
    #expect(log.authors.withLock { $0 } == ["groupsync-relay@a", "someone"])

    let changeSet = try #require(try bell.group.store.history(after: 0, limit: 100).last?.changeSet.get())
    let before = bell.rings.value
    bell.doorbell.receiveInProcess(changeSet, store: "main", author: "groupsync-relay@a")
    #expect(bell.rings.value == before)
    bell.doorbell.receiveInProcess(changeSet, store: "main", author: "someone")
    bell.doorbell.receiveInProcess(changeSet, store: "main", author: nil)
    #expect(bell.rings.value >= before + 2)
  }

  @Test func aFileThatIsNoChangeSetJustRingsAndIsRemovedUnread() async throws {
    let bell = try await Bell()
    // Garbage where the next change set belongs, and a name no writer
    // makes: a listener would reset; the doorbell reads neither.
    try ProcessHarness.placeAtomically(
      Array("not a change set".utf8), at: bell.group.layout.inboxFile(bell.doorbell.name, sequence: 1),
      staging: bell.folder.path)
    #expect(await bell.rings.wait(for: 1))
    try ProcessHarness.placeAtomically(Array("junk".utf8), at: bell.inbox + "/junk", staging: bell.folder.path)
    #expect(await bell.rings.wait(for: 2))
    #expect(await Self.eventually { ProcessHarness.entries(bell.inbox).isEmpty }, "\(ProcessHarness.entries(bell.inbox))")

    // And it goes on ringing for real commits.
    let before = bell.rings.value
    _ = try await ProcessHarness.exec(bell.directory, ListenerFixture.insert)
    #expect(await bell.rings.wait(for: before + 1))
  }

  @Test func closeRemovesItsFolderAndStopsTheRinging() async throws {
    let bell = try await Bell()
    let listenerFolder = bell.group.layout.listenerFolder(bell.doorbell.name)
    #expect(ProcessHarness.exists(listenerFolder))
    bell.doorbell.close()
    bell.doorbell.close()
    #expect(bell.doorbell.isClosed)
    #expect(!ProcessHarness.exists(listenerFolder))

    _ = try await ProcessHarness.exec(bell.directory, ListenerFixture.insert)
    try await bell.group.store.write { db in try db.execute(sql: ListenerFixture.insert[0]) }
    try await Task.sleep(for: .milliseconds(300))
    #expect(bell.rings.value == 0)
  }

  /// Whether `condition` holds within `timeout`.
  static func eventually(within timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
      guard ContinuousClock.now < deadline else { return false }
      try? await Task.sleep(for: .milliseconds(10))
    }
    return true
  }
}
