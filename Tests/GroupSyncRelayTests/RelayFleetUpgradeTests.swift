import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// A fleet upgraded one host at a time while every host writes: from the
/// relay of the commit before log formats were versioned (`make
/// legacy-relay` builds it) to this one, then to a build that speaks a
/// newer format with a change of meaning, one host rolled back on the
/// way. At each step the writers pause and the replicas must agree; no
/// entry is ever in a format some running relay does not read.
@Suite(.timed) struct RelayFleetUpgradeTests {
  /// Writer processes, one per host, that pause on request: the test
  /// writes a generation number to `pause`, and each writer, between two
  /// of its commits, copies it to `paused-NAME` and waits.
  final class Writers: @unchecked Sendable {
    let folder: String
    let processes: [ChildProcess]
    let names: [String]
    private var generation = 0

    init(_ hosts: [GroupHost], folder: String) throws {
      self.folder = folder
      names = hosts.map(\.name)
      processes = try hosts.map { host in
        let statements = [
          "INSERT INTO note(title, body) VALUES ('\(host.name)-' || hex(randomblob(6)), 'new')",
          "UPDATE note SET body = '\(host.name)-' || abs(random() % 100) WHERE id = (SELECT id FROM note ORDER BY random() LIMIT 1)",
        ].map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let paused = "\(folder)/paused-\(host.name)"
        let script = """
          until [ -e \(folder)/stop ]; do
            if [ -e \(folder)/pause ]; then cat \(folder)/pause > \(paused).tmp && mv \(paused).tmp \(paused); sleep 0.02; continue; fi
            \(Executables.groupsync) exec \(host.folder) --repeat 3 \(statements) || exit 1
          done
          """
        return try ChildProcess(executable: "/bin/sh", arguments: ["-c", script], name: "writer \(host.name)")
      }
    }

    /// Waits until every writer stands between two commits.
    func pause() async throws {
      generation += 1
      let text = String(generation)
      try text.write(toFile: folder + "/pause.tmp", atomically: false, encoding: .utf8)
      guard rename(folder + "/pause.tmp", folder + "/pause") == 0 else { throw RelayTestFailure("rename pause") }
      let (folder, names, processes) = (self.folder, self.names, self.processes)
      try await waitUntil("the writers pause") {
        guard processes.allSatisfy(\.isRunning) else { throw RelayTestFailure("a writer exited") }
        return names.allSatisfy { (try? String(contentsOfFile: folder + "/paused-\($0)", encoding: .utf8)) == text }
      }
    }

    func resume() { unlink(folder + "/pause") }

    /// Stops the writers, requiring that each wrote throughout.
    func finish() async throws {
      resume()
      _ = FileManager.default.createFile(atPath: folder + "/stop", contents: nil)
      for writer in processes {
        let result = try await Executables.onThread { writer.finish(timeout: 300) }
        #expect(result.succeeded, "\(result.stderr)")
      }
    }

    deinit {
      for writer in processes where writer.isRunning {
        writer.signal(SIGKILL)
        _ = writer.finish(timeout: 10)
      }
    }
  }

  static let notes = "SELECT title, body, n, x, hex(b) FROM note"

  @Test func aFleetIsUpgradedOneHostAtATimeFromTheRelayBeforeVersions() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [GroupHost] = []
      for name in ["a", "b", "c"] {
        let host = try await GroupHost(name, root: root.path, server: server)
        host.build = .legacy
        try await host.startRelay()
        hosts.append(host)
      }
      let (a, b, c) = (hosts[0], hosts[1], hosts[2])
      try await a.exec(["INSERT INTO note(title, body) VALUES ('seed-1', 's'), ('seed-2', 's')"])
      try await waitForConvergence(hosts, server: server, query: Self.notes)
      #expect(try server.query("SELECT to_regclass('gs_schema') IS NULL") == [["t"]], "relays before versions made none")
      let shipSource = "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure('\(SharedSchema.ship1Signature)')"
      let legacyShip = try server.query(shipSource)
      #expect(legacyShip == [[SharedSchema.functions[0].source]], "the legacy relay's gs_ship is version 1's, verbatim")

      // What relays before version 4 are woken by: their channel, which
      // names the group and store, and on which this build ships too
      // while such a relay is a member.
      let spy = SharedLog(try server.connect())
      try spy.listen(on: [SharedLog.legacyChannel])
      let spyReplica = SharedLog.Replica(group: "app", store: "main", host: "spy")
      var legacyWakes: [Int64] = []
      let writers = try Writers(hosts, folder: root.path)
      var steps: [String] = []
      /// Pauses the writers, waits for the replicas to agree, checks that
      /// no entry is in a format some running relay does not read, resumes.
      func step(_ label: String, groupFormat: Int = 1) async throws {
        try await writers.pause()
        try await waitForConvergence(hosts, server: server, query: Self.notes)
        // (Before the first upgrade the server has no formats: all are 1.)
        if try server.query("SELECT to_regclass('gs_schema') IS NOT NULL") == [["t"]] {
          let formats = try server.query("SELECT DISTINCT format FROM gs_change WHERE grp = 'app' ORDER BY 1")
            .compactMap { $0[0] }
          if groupFormat == 1 { #expect(formats == ["1"], "\(label): entries in formats \(formats)") }
          #expect(try RelayFormatTests.groupFormat(server) == groupFormat, "\(label)")
        }
        for host in hosts {
          #expect(host.events("formatHeld").isEmpty, "\(label): \(host.name) held")
          let invalid = host.eventLines.filter { $0.contains("invalid entry") }
          #expect(invalid.isEmpty, "\(label): \(host.name): \(invalid)")
        }
        legacyWakes += try spy.notifications().compactMap { SharedLog.Hint.parseLegacy($0.payload, for: spyReplica)?.position }
        steps.append(label)
        writers.resume()
      }
      /// The hosts whose entries were told on the legacy channel.
      func wokeOlderRelays() throws -> [String] {
        let positions = "{" + legacyWakes.map(String.init).joined(separator: ",") + "}"
        return try server.query(
          "SELECT DISTINCT origin_host FROM gs_change WHERE grp = 'app' AND seq = ANY($1::bigint[]) ORDER BY 1",
          [positions]
        ).compactMap { $0[0] }
      }
      func run(_ host: GroupHost, _ build: RelayBuild) async throws {
        try await host.stopRelay()
        host.build = build
        try await host.startRelay()
      }

      try await step("all on the relay before versions")
      // The first host upgraded migrates the server forward under the others.
      try await run(a, .current)
      // What a's legacy relay shipped before it stopped is told by now.
      try spy.connection.execute("SELECT 1")
      _ = try spy.notifications()
      legacyWakes = []
      // One commit surely shipped by a's new relay (a slow writer may
      // commit nothing more before the step pauses it).
      let shippedBefore = a.events("shipped").count
      try await a.exec(["INSERT INTO note(title, body) VALUES ('a-upgraded', 'new')"])
      try await waitUntil("a's new relay ships") { a.events("shipped").count > shippedBefore }
      try await step("a upgraded")
      // a, upgraded, wakes b and c, still before versions, on their channel.
      #expect(try wokeOlderRelays().contains("a"), "\(legacyWakes.count) wake-ups")
      #expect(try server.query("SELECT version, serves_from FROM gs_schema") == [[String(SharedSchema.version), "1"]])
      #expect(try server.query(shipSource) == legacyShip, "gs_ship, which the older relays use, was replaced")
      // The migration (schema 5, by a's relay) left every older function as
      // it was, and added the checked ones with their owner's rights and a
      // fixed search_path.
      for (signature, source) in SharedSchema.functions {
        let found = try server.query(
          "SELECT prosrc, prosecdef, array_to_string(proconfig, ',') FROM pg_proc WHERE oid = to_regprocedure($1)",
          [signature])
        #expect(found.first?[0] == source, "\(signature) is not as its version made it")
        if SharedSchema.checkedFunctions5.contains(signature) {
          #expect(found.first?[1] == "t" && found.first?[2] == "search_path=public, pg_temp", "\(signature): \(found)")
        }
      }
      // An older relay (re)connects to the migrated server and works on.
      try await run(c, .legacy)
      try await step("c restarted, still before versions")
      try await run(b, .current)
      try await step("b upgraded")
      try await run(c, .current)
      // Every member reads format 2 now: the group moves up, and merges by
      // property from then on.
      try await waitUntil("the group moves up to format 2") { try RelayFormatTests.groupFormat(server) == 2 }
      try await step("c upgraded: every host on this build", groupFormat: 2)
      #expect(try server.query(shipSource) == legacyShip)
      // A build that reads a newer format, one host at a time; one rolled
      // back before the group moved up.
      try await run(a, .testingFormat)
      try await step("a on the next format", groupFormat: 2)
      try await run(b, .testingFormat)
      try await step("b on the next format", groupFormat: 2)
      try await run(b, .current)
      try await step("b rolled back", groupFormat: 2)
      try await run(b, .testingFormat)
      try await step("b on the next format again", groupFormat: 2)
      try await run(c, .testingFormat)
      // The last member upgraded: the group moves up by itself, and the
      // relays write the new format.
      try await waitUntil("the group moves up") { try RelayFormatTests.groupFormat(server) == LogFormat.testing.rawValue }
      try await waitUntil("entries come in the new format", timeout: .seconds(90)) {
        try RelayFormatTests.newestEntryFormat(server) == LogFormat.testing.rawValue
      }
      try await step("c on the next format: the group moved up", groupFormat: LogFormat.testing.rawValue)
      try await writers.finish()
      let content = try await waitForConvergence(hosts, server: server, query: Self.notes)
      #expect(steps.count == 10)
      // Every row as its writer wrote it (a value in another column would
      // show as a title or body no writer writes).
      let foreign = content.filter { row in
        let fields = row.split(separator: "|", omittingEmptySubsequences: false)
        return !(fields[0].hasPrefix("seed-") || ["a-", "b-", "c-"].contains { fields[0].hasPrefix($0) })
          || fields[2] != "NULL" || fields[3] != "NULL"
      }
      #expect(foreign.isEmpty, "\(foreign.prefix(5))")
      #expect(content.count > 2 + 3 * 10, "the writers wrote throughout: \(content.count) rows")

      // c rolled back two versions, to the relay from before formats,
      // after the group moved up: it cannot decode the new format and
      // stops there, misapplying nothing (it is not a version the fleet
      // supports beside this one; this shows it fails safe).
      try await run(c, .legacy)
      try await a.exec(["INSERT INTO note(title, body) VALUES ('a-after-the-move', 'new')"])
      try await waitUntil("c refuses the new format") {
        c.eventLines.contains { $0.contains("invalid entry") && $0.contains("\"error\"") }
      }
      #expect(try c.rows(Self.notes) == content, "c changed its rows after the group moved up")
      for host in hosts { try await host.stopRelay() }
    }
  }
}
