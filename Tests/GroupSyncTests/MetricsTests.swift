import CoreMetrics
import Foundation
import GRDB
import GroupSyncProcess
import MetricsTestKit
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// What writers and listeners report through swift-metrics, checked with
/// MetricsTestKit's backend: each test hands a `TestMetrics` of its own to
/// the store and listener options; one test checks the process-wide
/// factory, bootstrapped once for the whole test process.
@Suite(.serialized, .timed)
struct MetricsTests {
  /// A group whose stores report to `metrics`.
  private static func group(_ folder: TemporaryFolder, metrics: TestMetrics) async throws -> GroupFolder {
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    var options = StoreOptions()
    options.metricsFactory = metrics
    return try GroupFolder(path: directory, create: false, options: options)
  }

  private static func listenerOptions(_ metrics: TestMetrics) -> ListenerOptions {
    var options = ListenerFixture.options
    options.metricsFactory = metrics
    return options
  }

  @Test func writersCountChangeSetsRowsCommitTimeAndFailedDeliveries() async throws {
    let folder = try TemporaryFolder()
    let metrics = TestMetrics()
    let group = try await Self.group(folder, metrics: metrics)
    let store = [("store", "main")]
    for count in [1, 3] {
      try await group.store.write { db in
        for _ in 0..<count { try db.execute(sql: "INSERT INTO items(body) VALUES ('x')") }
      }
    }
    try await group.store.write { _ in }  // no rows: no change set, nothing counted
    #expect(try metrics.expectCounter(GroupSyncMetrics.changeSetsPublished, store).totalValue == 2)
    #expect(try metrics.expectRecorder(GroupSyncMetrics.captureRows, store).values == [1, 3])
    #expect(try metrics.expectTimer(GroupSyncMetrics.commitDuration, store).values.count == 2)
    #expect(try metrics.expectTimer(GroupSyncMetrics.publishDuration, store).values.count == 2)
    #expect(try metrics.expectTimer(GroupSyncMetrics.commitDuration, store).values.allSatisfy { $0 > 0 })
    #expect(metrics.counterTotal(label: GroupSyncMetrics.deliveriesFailed) == 0)

    // A live listener in another process whose inbox was replaced by a
    // symlink: the delivery to it fails (it reads the change set from the
    // history), and the counter says so. The listener is stopped meanwhile
    // (it still holds its lock, so it counts as live): running, it would
    // notice its inbox replaced and make it anew, maybe before the write.
    let victim = try await ProcessHarness.startWatch([group.path, "--name", "victim"])
    victim.signal(SIGSTOP)
    try await waitUntil("the victim stopped", timeout: .seconds(30)) { CrashCampaignTests.isStopped(victim.pid) }
    let inbox = group.layout.inbox("victim")
    try FileManager.default.removeItem(atPath: inbox)
    try FileManager.default.createSymbolicLink(atPath: inbox, withDestinationPath: folder.path)
    let report = try group.store.writeAndReport { db in try db.execute(sql: "INSERT INTO items(body) VALUES ('y')") }
    victim.signal(SIGCONT)
    #expect(report.publishFailures.map(\.listener) == ["victim"])
    #expect(try metrics.expectCounter(GroupSyncMetrics.deliveriesFailed, store).totalValue == 1)
    #expect(try metrics.expectCounter(GroupSyncMetrics.changeSetsPublished, store).totalValue == 3)
    victim.signal(SIGTERM)
    _ = try await ProcessHarness.finish(victim, timeout: 10)
  }

  @Test func aListenerReportsDeliveriesBacklogAndLag() async throws {
    let folder = try TemporaryFolder()
    let metrics = TestMetrics()
    let group = try await Self.group(folder, metrics: metrics)
    let listener = try group.listen(as: "reader", options: Self.listenerOptions(metrics))
    defer { listener.close() }
    let base = listener.startSequence
    // Five change sets from another process wait in the inbox before the
    // listener looks: its first look sees a backlog of five, five behind.
    let beforeCommits = Date()
    _ = try await ProcessHarness.exec(group.path, repeat: 5, ListenerFixture.insert)
    let dimensions = [("listener", "reader"), ("store", "main")]
    let first = try await ListenerHarness.nextChanges(listener)
    #expect(first.sequence == base + 1)
    #expect(try metrics.expectGauge(GroupSyncMetrics.backlog, dimensions).values.first == 5)
    let lag = try metrics.expectGauge(GroupSyncMetrics.lagSequences, dimensions)
    #expect(lag.values == [5, 4], "five behind at the first look, four after the first delivery")
    let seconds = try #require(try metrics.expectGauge(GroupSyncMetrics.lagSeconds, dimensions).lastValue)
    // No older than the first of the five commits (to the second).
    #expect(seconds >= 0 && seconds <= Date().timeIntervalSince(beforeCommits) + 1)
    for sequence in 2...5 { #expect(try await ListenerHarness.nextChanges(listener).sequence == base + Int64(sequence)) }
    #expect(try metrics.expectCounter(GroupSyncMetrics.changeSetsDelivered, dimensions).totalValue == 5)
    #expect(lag.lastValue == 0)
    #expect(metrics.counterTotal(label: GroupSyncMetrics.gapRepairs) == 0)
    #expect(metrics.counterTotal(label: GroupSyncMetrics.resets) == 0)
  }

  @Test func aChangeSetReadFromTheHistoryIsAGapRepair() async throws {
    let folder = try TemporaryFolder()
    let metrics = TestMetrics()
    let group = try await Self.group(folder, metrics: metrics)
    let listener = try group.listen(as: "mender", options: Self.listenerOptions(metrics))
    defer { listener.close() }
    // Committed with its history row, never published: what a writer
    // killed right after COMMIT leaves.
    let lost = try ProcessHarness.commitWithoutPublishing(store: group.layout.store) { db in
      try db.execute(sql: "INSERT INTO items(body) VALUES ('lost')")
      return ("items", db.lastInsertedRowID)
    }
    #expect(try await ListenerHarness.nextChanges(listener).sequence == lost.sequence)
    let dimensions = [("listener", "mender"), ("store", "main")]
    #expect(try metrics.expectCounter(GroupSyncMetrics.gapRepairs, dimensions).totalValue == 1)
    #expect(try metrics.expectCounter(GroupSyncMetrics.changeSetsDelivered, dimensions).totalValue == 1)
  }

  @Test func resetsAreCountedByAFixedReason() async throws {
    let folder = try TemporaryFolder()
    let metrics = TestMetrics()
    let group = try await Self.group(folder, metrics: metrics)
    let listener = try group.listen(options: Self.listenerOptions(metrics))
    defer { listener.close() }
    // A corrupt file where the next change set belongs.
    try ProcessHarness.placeAtomically(
      Array("not a change set".utf8), at: group.layout.inboxFile(listener.name, sequence: listener.startSequence + 1), staging: folder.path)
    let reset = try await ListenerHarness.nextReset(listener)
    #expect(GroupSyncMetrics.ResetCause(reset) == .badFile, "\(reset)")
    let counters = metrics.counters(label: GroupSyncMetrics.resets)
    #expect(counters.count == 1)
    let dimensions = try #require(counters.first).dimensions
    #expect(dimensions.map(\.0) == ["listener", "store", "reason"])
    #expect(dimensions.map(\.1) == [GroupSyncMetrics.ephemeralListener, "main", "bad_file"], "no made-up name")
    #expect(counters.first?.totalValue == 1)
  }

  @Test(arguments: [
    (ResetReason.historyPurged(sequence: 7, oldest: 9),
     "change set 7 did not arrive and the history no longer holds it (oldest 9)",
     GroupSyncMetrics.ResetCause.historyUnavailable),
    (.replayUnreadable(sequence: 7, error: "SQLite error 11"),
     "change set 7 is unreadable in the history: SQLite error 11", .historyUnavailable),
    (.foreignCommit,
     "the store changed without a change set (a program that does not use GroupSync, or VACUUM)", .storeChanged),
    (.readOnlyStoreReplaced(store: "seed"), "read-only store 'seed' was replaced", .storeChanged),
    (.inboxOverflowed(waiting: 12, maximum: 10), "inbox overflowed: 12 change sets waiting (maximum 10)", .overflow),
    (.inProcessBacklogOverflowed,
     "this process committed faster than the listener consumed (in-process backlog over its bounds)", .overflow),
    (.foreignEntries(names: ["x.changeset"], more: 0), "foreign entries in inbox, removed: x.changeset", .folder),
    (.foldersReplaced, "its inbox or folder was removed or replaced; made anew", .folder),
    (.fileUnreadable(
      file: "00000000000000000001.changeset",
      error: "invalid change-set file '00000000000000000001.changeset': truncated"),
     "invalid change-set file '00000000000000000001.changeset': truncated", .badFile),
    (.fileSequenceMismatch(file: "00000000000000000001.changeset", sequence: 2),
     "00000000000000000001.changeset holds sequence 2", .badFile),
    (.text("something new"), "something new", .other),
  ])
  func resetCausesComeFromAFixedSet(why: ResetReason, reason: String, cause: GroupSyncMetrics.ResetCause) {
    // The metric is the reason's group, and the text what it always was.
    #expect(Reset(why, sequence: 1).reason == reason)
    #expect(GroupSyncMetrics.ResetCause(Reset(why, sequence: 1)) == cause)
    #expect(GroupSyncMetrics.ResetCause(Reset(why, sequence: 1, isExpired: true)) == .expired)
  }

  /// The factory bootstrapped for the whole test process, once.
  static let processMetrics: TestMetrics = {
    let metrics = TestMetrics()
    MetricsSystem.bootstrap(metrics)
    return metrics
  }()

  @Test func withoutAFactoryInTheOptionsTheBootstrappedOneIsUsed() async throws {
    let metrics = Self.processMetrics
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    let group = try GroupFolder(path: directory, create: false)
    let name = "bootstrapped-\(UUID().uuidString.prefix(8))"
    let listener = try group.listen(as: name, options: ListenerFixture.options)
    defer { listener.close() }
    _ = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    _ = try await ListenerHarness.nextChanges(listener)
    #expect(try metrics.expectCounter(GroupSyncMetrics.changeSetsDelivered, [("listener", name), ("store", "main")]).totalValue == 1)
  }
}
