import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// What the listeners of each host's group are told of the relay's own
/// tables (`gs_relay_*`): nothing. The relay's setup and its bookkeeping
/// after a shipment are quiet commits (no change set, no history row, no
/// file in any inbox, and no listener resets); an apply's change set
/// names the user's rows only.
@Suite(.timed)
struct RelayCaptureTests {
  /// A listener's lines (`groupsync watch --json`), decoded.
  static func lines(_ output: String) -> [[String: Any]] {
    output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
  }

  /// Every URI a change set line names (rows and invalidated tables).
  static func uris(_ line: [String: Any]) -> [String] {
    ["inserted", "updated", "deleted", "invalidatedTables"].flatMap { line[$0] as? [String] ?? [] }
  }

  @Test func listenersAreToldNothingOfTheRelaysOwnTables() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      // The listeners start before the relays: the relays' setup of their
      // tables is seen too.
      let watches = try [a, b].map { host in
        try ChildProcess(executable: Executables.groupsync, arguments: ["watch", host.folder, "--json"])
      }
      defer { for watch in watches { watch.signal(SIGKILL); _ = watch.finish(timeout: 10) } }
      for watch in watches {
        try await Executables.onThread { try watch.waitForStderr(containing: "listening as", timeout: 30) }
      }
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('t1', 'one'), ('t2', 'two')"])
      try await waitForConvergence([a, b], server: server)
      try await Executables.onThread { try watches[1].waitForLines(1, timeout: 30) }
      // What this waits for is nothing happening: a few of the listeners'
      // store checks (one a second, on their rescan tick) pass after the
      // relays' last commits, and a commit without a change set that was
      // not counted as quiet would make them reset. No event tells that a
      // check ran, and a foreign commit as a marker would fold into the
      // same check's reset: the time is what is tested.
      try await Task.sleep(for: .seconds(3))
      let outputs = watches.map { watch in
        watch.signal(SIGTERM)
        return watch.finish(timeout: 30).stdout
      }
      let (seenOnA, seenOnB) = (Self.lines(outputs[0]), Self.lines(outputs[1]))

      // A's listener: the user's commit alone; nothing of the relay's
      // setup or of its bookkeeping after the shipment.
      #expect(seenOnA.allSatisfy { $0["reset"] == nil }, "a's listener reset: \(outputs[0])")
      #expect(seenOnA.count == 1, "a's listener: \(outputs[0])")
      #expect(seenOnA.flatMap(Self.uris).allSatisfy { $0.contains("/note/") }, "a's listener: \(outputs[0])")
      #expect(try a.rows("SELECT count(*) FROM groupsync_history WHERE author = 'groupsync-relay@a'") == ["0"])
      // Its bookkeeping counted itself as quiet.
      #expect(Int(try a.rows("SELECT count FROM groupsync_quiet_commits").first ?? "") ?? 0 > 0)

      // B's listener: the applied change set, with the user's rows only.
      #expect(seenOnB.allSatisfy { $0["reset"] == nil }, "b's listener reset: \(outputs[1])")
      #expect(seenOnB.count == 1, "b's listener: \(outputs[1])")
      let applied = seenOnB.first ?? [:]
      #expect((applied["inserted"] as? [String])?.count == 2, "b's listener: \(outputs[1])")
      #expect(Self.uris(applied).allSatisfy { $0.contains("/note/") }, "b's listener: \(outputs[1])")
      // B's history holds that one change set of its relay.
      #expect(try b.rows("SELECT count(*) FROM groupsync_history WHERE author = 'groupsync-relay@b'") == ["1"])
      let localSequences = b.events("applied").compactMap { $0["localSequence"] as? Int }
      #expect(localSequences == [applied["seq"] as? Int ?? -1], "\(b.eventLines)")
      // Every table the relay made in the store is one the core's capture
      // ignores, by name.
      for host in [a, b] {
        let made = try host.rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND substr(name, 1, 9) = 'gs_relay_'")
        #expect(made == RelayTables.all.sorted(), "\(host.name)")
      }
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }
}
