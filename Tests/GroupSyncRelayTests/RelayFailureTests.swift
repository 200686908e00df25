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

/// Crashes, kills, outages, purges and refusals.
@Suite(.timed) struct RelayFailureTests {
  /// A writer committed everything: it exited 0, or 3 (committed, but a
  /// listener folder of a SIGKILLed relay vanished under its delivery;
  /// that listener reads history when it comes back).
  static func committed(_ result: ChildProcess.Result) -> Bool {
    !result.signalled && !result.timedOut && (result.status == 0 || result.status == 3)
  }

  /// Three hosts write overlapping rows at once while relays are SIGKILLed
  /// and restarted and the server crashes and comes back; afterwards every
  /// replica equals every other row by row, the log's positions are
  /// gapless, and every conflict settled was reported.
  @Test func threeHostsConvergeThroughRelayKillsAndAServerCrash() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let hosts = [
        try await GroupHost("a", root: root.path, server: server),
        try await GroupHost("b", root: root.path, server: server),
        try await GroupHost("c", root: root.path, server: server),
      ]
      for host in hosts { try await host.startRelay() }
      try await hosts[0].exec(["INSERT INTO note(title, body, n) VALUES ('seed-' || hex(randomblob(4)), 'seed', 0)"], repeat: 12)
      try await waitForConvergence(hosts, server: server)
      let writers = try hosts.map { host in
        try host.startWriter([
          "UPDATE note SET body = '\(host.name)-' || abs(random() % 1000), n = coalesce(n, 0) + 1 WHERE id IN (SELECT id FROM note ORDER BY random() LIMIT 2)",
          "INSERT INTO note(title, body) VALUES ('\(host.name)-' || hex(randomblob(6)), 'new')",
          "DELETE FROM note WHERE id = (SELECT id FROM note WHERE title NOT LIKE 'seed-%' AND abs(random() % 5) = 0 ORDER BY random() LIMIT 1)",
        ], repeat: 300)
      }
      // Faults while they write, each after the relays made progress.
      let b = hosts[1], c = hosts[2]
      let writing: @Sendable () -> Bool = { writers.contains { $0.isRunning } }
      let shippedBefore = b.events("shipped").count
      try await waitUntil("b ships") { b.events("shipped").count > shippedBefore + 1 || !writing() }
      try await b.killRelay()
      let appliedBefore = c.events("applied").count
      try await waitUntil("c applies") { c.events("applied").count > appliedBefore || !writing() }
      try server.crash()
      try await c.killRelay()
      try server.start()
      try await b.startRelay()
      try await c.startRelay()
      for writer in writers {
        let result = try await Executables.onThread { writer.finish(timeout: 120) }
        #expect(Self.committed(result), "\(writer.name): \(result.stderr)")
      }
      let content = try await waitForConvergence(hosts, server: server)
      #expect(content.count > 12)
      #expect(!content.keys.contains { $0.hasPrefix("unmapped") })
      // Positions: gapless from 1, one per (origin, origin sequence).
      let log = try server.query("SELECT count(*), coalesce(min(seq), 0), coalesce(max(seq), 0) FROM gs_change")
      #expect(log.first?[0] == log.first?[2] && log.first?[1] == "1")
      // Host a's relay ran throughout: it reported exactly the conflicts
      // the log settled.
      let settled = Set(try server.query("SELECT seq || '/' || gid FROM gs_conflict").compactMap { $0[0] })
      let reported = Set(hosts[0].events("conflict").filter { $0["rule"] as? String != "unique-key" }.compactMap {
        record -> String? in
        guard let seq = record["sequence"] as? Int, let gid = record["gid"] as? String else { return nil }
        return "\(seq)/\(gid)"
      })
      #expect(reported == settled)
      Swift.print("convergence: \(content.count) rows, log \(log.first?[2] ?? "?") entries, \(settled.count) conflicts")
    }
  }

  /// A relay killed right after PostgreSQL committed its shipment (before
  /// its own bookkeeping), and relays SIGKILLed again and again while a
  /// writer commits: nothing is lost, nothing lands twice.
  @Test func exactlyOnceThroughRelayKills() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      try await waitForConvergence([a, b], server: server)
      let watch = try ChildProcess(executable: Executables.groupsync, arguments: ["watch", b.folder, "--json"])
      defer { watch.signal(SIGKILL); _ = watch.finish(timeout: 10) }
      try await Executables.onThread { try watch.waitForStderr(containing: "listening as", timeout: 30) }
      try await a.stopRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('killed-after-commit', 'x')"])
      try await a.startRelay(environment: ["GROUPSYNC_RELAY_FAILPOINT": "kill-after-ship-commit:1"], waitConnected: false)
      let died = try await Executables.onThread { [relay = a.relay!] in relay.waitForExit(timeout: 30) }
      #expect(died)
      try await a.killRelay()
      #expect(try server.query("SELECT count(*) FROM gs_change WHERE origin_host = 'a' AND body LIKE '%killed-after-commit%'").first?[0] == "1")
      try await a.startRelay()
      // Now a writer and kills of both relays, each after some progress.
      let writer = try a.startWriter(["INSERT INTO note(title, body) VALUES ('w-' || hex(randomblob(8)), 'y')"], repeat: 400)
      for round in 0..<4 {
        let host = round % 2 == 0 ? a : b
        let kind = host === a ? "shipped" : "applied"
        let before = host.events(kind).count
        try await waitUntil("\(host.name) progresses") { host.events(kind).count > before || !writer.isRunning }
        try await host.killRelay()
        try await host.startRelay()
      }
      let result = try await Executables.onThread { writer.finish(timeout: 120) }
      #expect(Self.committed(result), "\(result.stderr)")
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 401)
      #expect(b.events("conflict").isEmpty && a.events("conflict").isEmpty)
      #expect(try server.query("SELECT count(*) FROM gs_row WHERE data IS NOT NULL").first?[0] == "401")
      // B's listener saw each row inserted exactly once.
      try await waitUntil("b's listener saw every row") {
        let inserted = watch.stdout.split(separator: "\n").compactMap {
          (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["inserted"] as? [String]
        }.joined().filter { $0.contains("/note/") }
        return inserted.count >= 401
      }
      let inserted = watch.stdout.split(separator: "\n").compactMap {
        (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["inserted"] as? [String]
      }.joined().filter { $0.contains("/note/") }
      #expect(inserted.count == 401 && Set(inserted).count == 401)
    }
  }

  /// A relay killed right after its shipment committed, a shipment that
  /// settled a conflict: the relay started again finds the shipment on the
  /// server, and tells the conflict then, once, as it would have told it
  /// right after the COMMIT; the other host tells it as it applies it.
  @Test func aShipmentFoundAfterAKillTellsTheConflictsItSettled() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }
      try await a.exec(["INSERT INTO note(title, body) VALUES ('shared', 'base')"])
      try await waitForConvergence([a, b], server: server)
      try await a.stopRelay()
      try await b.stopRelay()
      try await a.exec(["UPDATE note SET body = 'from a' WHERE title = 'shared'"])
      try await b.exec(["UPDATE note SET body = 'from b' WHERE title = 'shared'"])
      let shipped = a.events("shipped").count
      try await a.startRelay()
      try await waitUntil("a shipped") { a.events("shipped").count > shipped }
      // b ships after a: its shipment settles the body, and b dies before
      // its own bookkeeping.
      try await b.startRelay(environment: ["GROUPSYNC_RELAY_FAILPOINT": "kill-after-ship-commit:1"], waitConnected: false)
      let died = try await Executables.onThread { [relay = b.relay!] in relay.waitForExit(timeout: 30) }
      #expect(died)
      try await b.killRelay()
      #expect(b.events("conflict").isEmpty, "b died before telling")
      try await b.startRelay()
      try await waitForConvergence([a, b], server: server)
      try await waitUntil("both hosts told the conflict", timeout: .seconds(30)) {
        a.events("conflict").count >= 1 && b.events("conflict").count >= 1
      }
      #expect(a.events("conflict").count == 1 && b.events("conflict").count == 1)
      #expect(try server.query("SELECT count(*) FROM gs_conflict").first?[0] == "1")
    }
  }

  /// A host whose relay is down while the others commit thousands of
  /// change sets (and which commits on its own meanwhile) catches up, and
  /// its own commits reach the others.
  @Test func anOfflineHostCatchesUp() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      let c = try await GroupHost("c", root: root.path, server: server)
      try await a.startRelay()
      try await b.startRelay()
      let start = ContinuousClock.now
      // Half as many under a sanitizer, which slows every process down.
      let scale = ProcessInfo.processInfo.environment["GROUPSYNC_SANITIZER"] == nil ? 1 : 2
      let (many, few) = (1500 / scale, 200 / scale)
      let writers = [
        try a.startWriter(["INSERT INTO note(title, body) VALUES ('a-' || hex(randomblob(8)), 'a')"], repeat: many),
        try b.startWriter(["INSERT INTO note(title, body) VALUES ('b-' || hex(randomblob(8)), 'b')"], repeat: many),
        try c.startWriter(["INSERT INTO note(title, body) VALUES ('c-' || hex(randomblob(8)), 'c')"], repeat: few),
      ]
      for writer in writers {
        let result = try await Executables.onThread { writer.finish(timeout: 300) }
        #expect(Self.committed(result), "\(result.stderr)")
      }
      try await waitForConvergence([a, b], server: server, timeout: .seconds(120))
      // A clean run: two hosts shipping and applying at once never find
      // the log inconsistent, so neither reconnects nor reports an error.
      for host in [a, b] {
        #expect(host.events("error").isEmpty, "\(host.name): \(host.events("error"))")
        #expect(host.events("disconnected").isEmpty, "\(host.name): \(host.events("disconnected"))")
        #expect(host.events("connected").count == 1)
      }
      #expect(try c.content().count == few)
      try await c.startRelay()
      let content = try await waitForConvergence([a, b, c], server: server, timeout: .seconds(120))
      #expect(content.count == 2 * many + few)
      #expect(try c.content().values.filter { $0[1] == "\"c\"" }.count == few)
      Swift.print("offline: \(2 * many + few) commits on 3 hosts converged in \(ContinuousClock.now - start)")
    }
  }

  /// With a tiny retention, a host that comes back after its place was
  /// purged is told so (a resync event) and re-synchronised from the rows'
  /// current images; what it wrote meanwhile survives and ships.
  @Test func aPurgedPlaceIsResynchronised() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let c = try await GroupHost("c", root: root.path, server: server)
      a.retention = 2
      c.retention = 2
      try await a.startRelay()
      for round in 0..<6 {
        let before = a.events("shipped").count
        try await a.exec([
          "INSERT INTO note(title, body) VALUES ('r\(round)', 'v')", "UPDATE note SET n = \(round) WHERE title = 'r0'",
        ])
        try await waitUntil("a shipped round \(round)") { a.events("shipped").count > before }
      }
      try await a.exec(["DELETE FROM note WHERE title = 'r1'"])
      let purged = try server.query("SELECT purged_through FROM gs_clock WHERE grp = 'app'").first?[0].flatMap { Int64($0) }
      #expect((purged ?? 0) > 0)
      try await c.exec(["INSERT INTO note(title, body) VALUES ('offline-c', 'c')"])
      try await c.startRelay()
      let content = try await waitForConvergence([a, c], server: server)
      #expect(Set(content.values.map { $0[0] }) == ["\"r0\"", "\"r2\"", "\"r3\"", "\"r4\"", "\"r5\"", "\"offline-c\""])
      #expect(content.values.first { $0[0] == "\"r0\"" }?[2] == "5")
      let resync = c.events("resync")
      #expect(resync.count == 1)
      #expect((resync.first?["reason"] as? String)?.contains("purged") == true)
    }
  }

  /// The server down when the relay starts, and again while hosts write:
  /// hosts go on locally, the relay says it is not connected, and
  /// everything ships once the server is back.
  @Test func theServerUnreachableAtStartAndDuringWork() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      try server.crash()
      try await a.startRelay(waitConnected: false)
      try await waitUntil("a says disconnected") { !a.events("disconnected").isEmpty }
      try await a.exec(["INSERT INTO note(title, body) VALUES ('while-down', 'x')"])
      try await waitUntil("status says not connected") {
        guard let status = a.relayStatus() else { return false }
        return status.isLive && !status.isConnected && status.lastError?.contains("PQconnect") == true
          && (status.stores.first?.unshipped ?? 0) >= 1
      }
      try server.start()
      try await waitUntil("a connects") { !a.events("connected").isEmpty }
      try await b.startRelay()
      try await waitForConvergence([a, b], server: server)
      // Down again while both write.
      try server.crash()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('a-during', 'x')"], repeat: 1)
      try await b.exec(["INSERT INTO note(title, body) VALUES ('b-during', 'x')"], repeat: 1)
      try await waitUntil("b notices") { b.events("disconnected").count + b.events("error").count > 0 }
      try server.start()
      let content = try await waitForConvergence([a, b], server: server)
      #expect(Set(content.values.map { $0[0] }) == ["\"while-down\"", "\"a-during\"", "\"b-during\""])
    }
  }

  /// The pitfall: a `bigserial` hands out numbers before commit, so a
  /// reader asking for "after 2" never sees 1, committed later. The log's
  /// clock row makes a second shipper wait for the first's COMMIT, so
  /// positions appear in order, without gaps.
  @Test func positionsFollowCommitOrderWhereABigserialDoesNot() async throws {
    try await PostgresServer.with { server in
      let first = try server.connect(), second = try server.connect(), reader = try server.connect()
      try first.execute("CREATE TABLE pitfall(id bigserial PRIMARY KEY, v text)")
      try first.execute("BEGIN")
      try first.execute("INSERT INTO pitfall(v) VALUES ('first') RETURNING id")
      try second.execute("INSERT INTO pitfall(v) VALUES ('second')")
      var cursor = Int64(try reader.execute("SELECT max(id) FROM pitfall").first?[0].flatMap { $0 } ?? "0") ?? 0
      try first.execute("COMMIT")
      let missed = try reader.execute("SELECT id FROM pitfall WHERE id > $1", [String(cursor)])
      #expect(cursor == 2 && missed.isEmpty, "the reader moved past id 1 before it committed: lost for good")
      // The relay's way.
      try SharedLog(first).createTables()
      try first.execute("INSERT INTO gs_clock(grp, store) VALUES ('g', 'main')")
      try first.execute("BEGIN")
      let one = try first.execute("UPDATE gs_clock SET seq = seq + 1 WHERE grp = 'g' RETURNING seq")
      #expect(one.first?[0] == "1")
      let secondPID = second.backendProcessID
      let waiting = Task.detached { () throws -> String? in
        try second.transaction {
          let position = try second.execute("UPDATE gs_clock SET seq = seq + 1 WHERE grp = 'g' RETURNING seq")
          try second.execute(
            "INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body) VALUES ('g', 'main', $1, 'h2', 1, '{}')",
            [position.first?[0] ?? nil])
          return position.first?[0] ?? nil
        }
      }
      try await waitUntil("the second shipper waits for the clock row") {
        try reader.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", [String(secondPID)])
          .first?[0] == "Lock"
      }
      cursor = Int64(try reader.execute("SELECT coalesce(max(seq), 0) FROM gs_change WHERE grp = 'g'").first?[0].flatMap { $0 } ?? "0") ?? 0
      #expect(cursor == 0)
      try first.execute(
        "INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body) VALUES ('g', 'main', 1, 'h1', 1, '{}')")
      try first.execute("COMMIT")
      #expect(try await waiting.value == "2")
      let seen = try reader.execute("SELECT seq FROM gs_change WHERE grp = 'g' AND seq > $1 ORDER BY seq", [String(cursor)])
      #expect(seen.map { $0[0] } == ["1", "2"])
    }
  }

  /// One relay per host and group: a second one on the same folder stops
  /// at once; one on another folder under the same host name waits for
  /// the server's lock and takes over when the first dies.
  @Test func oneRelayPerHostAndGroup() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      try await a.startRelay()
      let again = try await Executables.onThread {
        try ChildProcess(
          executable: Executables.groupsync, arguments: ["relay", a.folder, "--postgres", server.conninfo, "--host", "a"]
        ).finish(timeout: 120)
      }
      #expect(again.status == 1 && again.stderr.contains("relays/a.lock is held"))
      let twin = try await GroupHost("twin", root: root.path, server: server)
      // Of the same transport as a: its guard is the session's advisory
      // lock (notify) or the host's lease (poll), which outlives a killed
      // relay for its duration.
      let poll = a.transport == "poll"
      let impostor = try ChildProcess(
        executable: Executables.groupsync,
        arguments: ["relay", twin.folder, "--postgres", twin.conninfo, "--host", "a", "--group", "app"]
          + (poll ? ["--transport", "poll", "--poll-interval", "0.05"] : []))
      defer { impostor.signal(SIGKILL); _ = impostor.finish(timeout: 10) }
      let refusal = poll ? "another relay holds the host's lease" : "advisory lock held"
      try await waitUntil("the twin is refused by the server") { impostor.stdout.contains(refusal) }
      #expect(!impostor.stdout.contains("\"connected\""))
      try await a.killRelay()
      try await waitUntil("the twin takes over") { impostor.stdout.contains("\"connected\"") }
    }
  }

  /// Two hosts insert the same value of a unique key while cut off: the
  /// row earlier in the log keeps it on every host, the other is reported.
  @Test func aUniqueKeyHitByTwoHostsIsAConflictNotAMerge() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      try await a.exec(["INSERT INTO note(title, body) VALUES ('dup', 'from a')"])
      try await b.exec(["INSERT INTO note(title, body) VALUES ('dup', 'from b')"])
      try await a.startRelay()
      try await waitUntil("a shipped") { a.events("shipped").contains { ($0["rows"] as? Int) == 1 } }
      try await b.startRelay()
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.values.map { $0[1] } == ["\"from a\""])
      for host in [a, b] {
        try await waitUntil("\(host.name) reports it") { host.events("conflict").contains { $0["rule"] as? String == "unique-key" } }
      }
    }
  }
}

extension RelayFailureTests {
  /// A deletes its newest row; before the deletion ships, A's relay
  /// applies a row from B, which SQLite would give the deleted row's rowid.
  /// The applier gives it a fresh one, so the deletion still ships under
  /// the deleted row's global ID and no host keeps the row. (The apply
  /// gate holds A's relay at the instant between its shipment and B's
  /// entry, every round.)
  @Test func aDeletionIsNotLostWhenTheApplierWouldReuseItsRowid() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      let gate = root.path + "/apply-gate"
      try await a.startRelay(environment: [RelayFailpoints.variable: "gate-before-apply:\(gate)"])
      try await b.startRelay()
      for round in 0..<3 {
        try await a.exec(["INSERT INTO note(title, body) VALUES ('doomed-\(round)', 'a')"])
        try await waitForConvergence([a, b], server: server)
        FileManager.default.createFile(atPath: gate, contents: nil)
        let gated = (a.relay?.stderr.components(separatedBy: "failpoint gate-before-apply").count ?? 1) - 1
        try await b.exec(["INSERT INTO note(title, body) VALUES ('from-b-\(round)', 'b')"])
        try await waitUntil("a's relay holds b's entry at the gate") {
          (a.relay?.stderr.components(separatedBy: "failpoint gate-before-apply").count ?? 1) - 1 > gated
        }
        try await a.exec(["DELETE FROM note WHERE title = 'doomed-\(round)'"])
        try FileManager.default.removeItem(atPath: gate)
        let content = try await waitForConvergence([a, b], server: server)
        #expect(!content.values.contains { $0[0] == "'doomed-\(round)'" || $0[0] == "\"doomed-\(round)\"" })
        #expect(content.count == round + 1)
      }
    }
  }
}
