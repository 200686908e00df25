import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// The folders that listeners of killed processes leave under `listeners/`:
/// an ephemeral one's goes, a durable one's stays.
@Suite(.serialized, .timed)
struct DeadListenerTests {
  /// The name a `groupsync watch` child listens as, from its stderr.
  private static func listenerName(_ child: ChildProcess) throws -> String {
    let line = try #require(child.stderr.split(separator: "\n").first { $0.contains("listening as ") })
    return String(line.split(separator: " ")[3])
  }

  @Test func statusRemovesAKilledEphemeralListenersFolderAndKeepsADurableOnes() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    let ephemeral = try await ProcessHarness.startWatch([directory])
    let durable = try await ProcessHarness.startWatch([directory, "--name", "keeper", "--durable"])
    let name = try Self.listenerName(ephemeral)
    #expect(GroupFolder.ephemeralProcessID(name) == ephemeral.pid)
    for child in [ephemeral, durable] {
      child.signal(SIGKILL)
      _ = try await ProcessHarness.finish(child, timeout: 10)
    }
    let listeners = directory + "/listeners"
    #expect(ProcessHarness.entries(listeners) == ["keeper", name].sorted(), "SIGKILL left both folders")
    // Another folder with an ephemeral name whose process is gone, holding
    // a cursor file: a durable place, kept.
    try FileManager.default.createDirectory(atPath: listeners + "/p\(ephemeral.pid)-0000beef", withIntermediateDirectories: false)
    try Data(DurableCursor.encode(0)).write(to: URL(fileURLWithPath: listeners + "/p\(ephemeral.pid)-0000beef/cursor"))

    let status = try await ProcessHarness.status(directory)
    #expect(status.listeners.map(\.name) == ["keeper", "p\(ephemeral.pid)-0000beef"])
    #expect(status.listeners.allSatisfy { !$0.isLive })
    #expect(ProcessHarness.entries(listeners) == ["keeper", "p\(ephemeral.pid)-0000beef"])
    #expect(ProcessHarness.entries(listeners + "/keeper").contains("cursor"), "the durable place is kept")
    let again = try await ProcessHarness.startWatch([directory, "--name", "keeper", "--durable", "--count", "1"])
    _ = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    #expect(try await ProcessHarness.finish(again, timeout: 20).stdout.contains("items"), "it resumes from its place")
  }

  @Test func aNewListenerRemovesAKilledEphemeralListenersFolderButNotALiveOnes() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    let killed = try await ProcessHarness.startWatch([directory])
    let live = try await ProcessHarness.startWatch([directory, "--count", "1"])
    let killedName = try Self.listenerName(killed)
    let liveName = try Self.listenerName(live)
    killed.signal(SIGKILL)
    _ = try await ProcessHarness.finish(killed, timeout: 10)
    #expect(ProcessHarness.exists(directory + "/listeners/" + killedName))

    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "fresh", options: ListenerFixture.options)
    defer { listener.close() }
    #expect(!ProcessHarness.exists(directory + "/listeners/" + killedName), "the dead one's folder went")
    #expect(ProcessHarness.exists(directory + "/listeners/" + liveName + "/lock"), "the live one's stays")
    // The live one still receives what is committed.
    _ = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    #expect(try await ProcessHarness.finish(live, timeout: 20).stdout.contains("items"))
  }

  @Test func onlyEphemeralNamesAreRecognized() {
    #expect(GroupFolder.ephemeralProcessID("p123-0a1b2c3d") == 123)
    #expect(GroupFolder.ephemeralProcessID(GroupFolder.ephemeralName()) == getpid())
    for name in ["ui", "p123", "p-0a1b2c3d", "p0-0a1b2c3d", "p12-0A1B2C3D", "p12-0a1b2c3", "q12-0a1b2c3d", "p12-0a1b-2c3d"] {
      #expect(GroupFolder.ephemeralProcessID(name) == nil, "\(name)")
    }
  }
}
