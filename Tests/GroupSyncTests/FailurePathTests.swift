// Failure paths: each gives a clear error or a reset, and loses nothing.
import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// Failure paths not covered elsewhere: each gives a clear error or a
/// reset, and nothing in the store is lost.
@Suite(.serialized, .timed)
struct FailurePathTests {
  /// A watch that cannot start names the libuv call that failed and its
  /// error: here a descriptor that is not open, so /proc/self/fd names
  /// nothing for the inotify watch.
  @Test func aWatchThatCannotStartNamesTheLibuvCallAndItsError() throws {
    // Well above any descriptor in use, and closed again: the kernel
    // hands out the lowest free number, so nothing reopens it meanwhile.
    let missing = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 900)
    try #require(missing >= 900)
    close(missing)
    #expect(throws: GroupSyncError.system(call: "uv_fs_event_start", path: "/missing", errno: ENOENT)) {
      _ = try FolderWatcher.shared.watch(descriptor: missing, path: "/missing", rescanMilliseconds: 10) { _ in }
    }
  }

  @Test func anInProcessBacklogOverItsBoundIsOneReset() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: "CREATE TABLE t(x)") }
    var options = ListenerOptions()
    options.maximumInProcessBacklog = 5
    let listener = try group.listen(as: "slow", options: options)
    defer { listener.close() }
    for index in 0..<10 { try await group.store.write { try $0.execute(sql: "INSERT INTO t VALUES (?)", arguments: [index]) } }
    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.reason.contains("in-process backlog"))
    #expect(reset.sequence == (try group.store.currentSequence()))
    // Delivery goes on after it.
    let (_, next) = try await group.store.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO t VALUES (99)") }
    #expect(try await ListenerHarness.nextChanges(listener).sequence == next?.sequence)
    #expect(try await group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 11)
  }

  /// GRDB releases its transaction observers after it closed the writer
  /// connection: the capture then freed itself by uninstalling its hook on
  /// the closed connection, a use after free that crashed the suite about
  /// one run in three (and that AddressSanitizer reports).
  @Test func storesClosedOrReleasedNeverTouchAClosedConnection() throws {
    let folder = try TemporaryFolder()
    for round in 0..<40 {
      let group = try GroupFolder(path: folder.child("group"))
      try group.store.write { db in
        try db.execute(sql: "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v); INSERT INTO t(v) VALUES (?)", arguments: [round])
      }
      if round % 2 == 0 { group.store.close() }  // else released with the group
    }
    let group = try GroupFolder(path: folder.child("group"))
    #expect(try group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 40)
  }

  @Test func aStoreThatIsASymlinkIsRefused() throws {
    let folder = try TemporaryFolder()
    let decoy = folder.child("elsewhere.sqlite")
    try Data("not mine".utf8).write(to: URL(fileURLWithPath: decoy))
    let directory = folder.child("group")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: directory + "/store.sqlite", withDestinationPath: decoy)
    #expect {
      try GroupFolder(path: directory)
    } throws: { error in
      guard case GroupSyncError.unsafeEntry(_, let reason) = error else { return false }
      return reason.contains("not a regular file")
    }
    #expect(try Data(contentsOf: URL(fileURLWithPath: decoy)) == Data("not mine".utf8))
  }

  @Test func aTornCursorIsAnExpiredResetNotASilentSkip() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: "CREATE TABLE t(x)") }
    let listener = try group.listen(as: "durable", durable: true)
    listener.close()
    try await group.store.write { try $0.execute(sql: "INSERT INTO t VALUES (1)") }
    try Data([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16])
      .write(to: URL(fileURLWithPath: group.layout.listenerFolder("durable") + "/cursor"))
    let again = try group.listen(as: "durable", durable: true)
    defer { again.close() }
    let reset = try await ListenerHarness.nextReset(again)
    #expect(reset.isExpired && reset.reason.contains("cannot be read"), "\(reset)")
  }

  @Test func aTransactionEndedByTheClosureIsAClearError() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { try $0.execute(sql: "CREATE TABLE t(x)") }
    let before = try group.store.currentSequence()
    #expect(throws: GroupSyncError.transactionEndedByClosure) {
      try group.store.write { try $0.execute(sql: "ROLLBACK") }
    }
    #expect(try group.store.currentSequence() == before)
    try group.store.write { try $0.execute(sql: "INSERT INTO t VALUES (1)") }
  }
}
