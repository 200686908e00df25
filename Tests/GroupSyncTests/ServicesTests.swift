import Foundation
import GRDB
import GroupSyncProcess
import GroupSyncServices
import Logging
import ServiceLifecycle
import UnixSignals
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// The services of GroupSyncServices under a real `ServiceGroup`, on a real
/// group folder written by other processes: they run until graceful
/// shutdown, then release their inboxes and keep the durable place.
@Suite(.serialized, .timed)
@MainActor
struct ServicesTests {
  /// What the services saw, from their handlers.
  private final class Seen: Sendable {
    let consumed = Collected<Int64>()
    let merged = Collected<ContextChanges>()
    let relayed = Collected<Int>()
  }

  private static func live(_ group: GroupFolder) throws -> [String: Bool] {
    Dictionary(uniqueKeysWithValues: try group.status().listeners.map { ($0.name, $0.isLive) })
  }

  /// Starts a durable consumer, a context merge and the GRDB relay in one
  /// `ServiceGroup`, commits from another process, and returns once every
  /// service saw it.
  private static func runServices(
    _ folder: TemporaryFolder, signals: [UnixSignal]
  ) async throws -> (
    group: GroupFolder, services: ServiceGroup, run: Task<Void, any Error>, seen: Seen, observation: AnyDatabaseCancellable
  ) {
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    let group = try GroupFolder(path: directory, create: false)
    _ = try await ProcessHarness.exec(directory, ["INSERT INTO items(id, body) VALUES (1, 'before')"])
    let seen = Seen()
    let context = Context(group)
    let row = ObjectID(storeID: group.store.storeID, table: "items", rowID: 1)
    #expect(try context.object(with: row).value("body") == "before".databaseValue)

    let consumer = ListenerService(group: group, name: "consumer", durable: true, options: ListenerFixture.options) {
      event, _ in
      if case .changes(let changeSet) = event { seen.consumed.append(changeSet.sequence) }
    }
    let merging = ContextMergeService(group: group, name: "ui", options: ListenerFixture.options, context: context) {
      seen.merged.append($0)
    }
    let relay = ObservationRelayService(group: group)
    let observation = DatabaseRegionObservation(tracking: Table("items"))
    let cancellable = observation.start(in: group.store.pool, onError: { _ in }, onChange: { _ in seen.relayed.append(1) })
    let services = ServiceGroup(
      services: [consumer, merging, relay], gracefulShutdownSignals: signals, cancellationSignals: [],
      logger: Logger(label: "services-test"))
    let run = Task { try await services.run() }
    try await waitUntil("three live listeners") {
      let status = (try? group.status().listeners) ?? []
      return status.filter(\.isLive).count == 3
    }
    let committed = try await ProcessHarness.exec(
      directory, ["UPDATE items SET body = 'after' WHERE id = 1", "INSERT INTO items(body) VALUES ('new')"])
    let last = try #require(committed.last).seq
    try await waitUntil("every service saw the commits through \(last)") {
      // One transaction: one change set, one notification of the relay.
      seen.consumed.all == [last] && seen.relayed.all.count == 1
        && seen.merged.all.contains { $0.updated.contains(row) }
    }
    #expect(try context.object(with: row).value("body") == "after".databaseValue, "merged into the context")
    return (group, services, run, seen, cancellable)
  }

  /// What a clean stop leaves: no live listener, the durable place at the
  /// last change set handled, the ephemeral relay's folder gone, and a
  /// restarted consumer resumes after it.
  private static func expectStoppedCleanly(_ group: GroupFolder, consumed: [Int64]) async throws {
    let listeners = try group.status().listeners
    #expect(listeners.map(\.name) == ["consumer", "ui"], "the relay's ephemeral folder was removed")
    #expect(listeners.allSatisfy { !$0.isLive }, "every lock was released")
    #expect(listeners.allSatisfy { $0.backlog == 0 }, "the inboxes were emptied")
    #expect(listeners.first?.acknowledged == consumed.last, "the durable place is the last change set handled")
    let restarted = try await ProcessHarness.startWatch([group.path, "--name", "consumer", "--durable", "--count", "1"])
    let next = try await ProcessHarness.exec(group.path, ListenerFixture.insert)
    let output = try await ProcessHarness.finish(restarted, timeout: 20).stdout
    #expect(output.hasPrefix("#\(next[0].seq) "), "nothing handled is delivered again: \(output)")
  }

  @Test func gracefulShutdownStopsEveryServiceCleanly() async throws {
    let folder = try TemporaryFolder()
    let (group, services, run, seen, observation) = try await Self.runServices(folder, signals: [])
    defer { observation.cancel() }
    await services.triggerGracefulShutdown()
    try await run.value
    try await Self.expectStoppedCleanly(group, consumed: seen.consumed.all)
  }

  @Test func sigtermStopsEveryServiceCleanly() async throws {
    var before = sigaction()
    sigaction(SIGTERM, nil, &before)
    try #require(before.__sigaction_handler.sa_handler == nil, "SIGTERM has its default action before the group runs")
    let folder = try TemporaryFolder()
    let (group, _, run, seen, observation) = try await Self.runServices(folder, signals: [.sigterm])
    defer { observation.cancel() }
    // The group takes SIGTERM over once it runs (the default action, which
    // ends the process, is replaced): only then is it sent, to this very
    // process.
    try await waitUntil("the group handles SIGTERM") {
      var action = sigaction()
      sigaction(SIGTERM, nil, &action)
      return action.__sigaction_handler.sa_handler != nil  // SIG_DFL is 0
    }
    kill(getpid(), SIGTERM)
    try await run.value
    try await Self.expectStoppedCleanly(group, consumed: seen.consumed.all)
  }

  @Test func aServiceWhoseNameIsTakenFailsTheGroup() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    let group = try GroupFolder(path: directory, create: false)
    let holder = try group.listen(as: "taken")
    defer { holder.close() }
    let service = ListenerService(group: group, name: "taken") { _, _ in }
    let services = ServiceGroup(services: [service], logger: Logger(label: "services-test"))
    await #expect(throws: GroupSyncError.listenerNameInUse("taken")) { try await services.run() }
  }
}
