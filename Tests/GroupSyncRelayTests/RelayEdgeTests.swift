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

/// What the relay cannot ship row by row, stores beside the main one, and
/// settings it refuses.
@Suite(.timed) struct RelayEdgeTests {
  /// The store's history purged local change sets before the relay could
  /// ship them: which rows changed is unknown, so every table ships whole
  /// (never a silent skip), and rows the other host has are not deleted.
  @Test func historyPurgedBeforeShippingShipsWholeTables() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      try await b.startRelay()
      try await b.exec(["INSERT INTO note(title, body) VALUES ('from-b', 'b')"])
      do {
        let group = try GroupFolder(path: a.folder, create: false)
        try group.store.setHistoryRetention(
          HistoryRetention(maximumAgeSeconds: nil, maximumCount: 8, maximumBytes: nil, hardMaximumAgeSeconds: nil,
                           hardMaximumCount: 8, hardMaximumBytes: nil))
        group.store.close()
      }
      try await a.exec(["INSERT INTO note(title, body, n) VALUES ('a-' || hex(randomblob(6)), 'a', 1)"], repeat: 300)
      try await a.exec(["UPDATE note SET n = 2 WHERE rowid % 3 = 0"])
      let oldest = try await Executables.groupsync(["status", a.folder])
      #expect(!oldest.contains("(1..."), "the history was purged: \(oldest)")
      try await a.startRelay()
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 301)
      #expect(a.events("shipped").contains { ($0["rows"] as? Int ?? 0) >= 300 })
    }
  }

  /// A WITHOUT ROWID table has no rowid to map a global ID to: it is
  /// reported, and the other tables go on replicating.
  @Test func aWithoutRowIDTableIsReportedAndTheRestReplicates() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let schema = GroupHost.schema + "CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;"
      let a = try await GroupHost("a", root: root.path, server: server, schema: schema)
      let b = try await GroupHost("b", root: root.path, server: server, schema: schema)
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO kv VALUES ('k', 'v')", "INSERT INTO note(title) VALUES ('n')"])
      try await waitUntil("a reports kv") {
        a.events("error").contains { ($0["value"] as? String)?.contains("table 'kv' of store 'main' is not replicated") == true }
      }
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 1)
    }
  }

  /// A named store replicates beside the main one (`--store`), each in an
  /// order of its own.
  @Test func aNamedStoreReplicatesBesideTheMainOne() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      let schemaFile = root.path + "/cache.sql"
      try "CREATE TABLE entry(id INTEGER PRIMARY KEY, key TEXT);".write(toFile: schemaFile, atomically: true, encoding: .utf8)
      for host in [a, b] {
        try await Executables.groupsync(["init", host.folder, "--store", "cache", "--schema", schemaFile])
      }
      let relays = try [a, b].map { host in
        try ChildProcess(
          executable: Executables.groupsync,
          arguments: ["relay", host.folder, "--postgres", server.conninfo, "--host", host.name, "--store", "main",
                      "--store", "cache", "--poll-interval", "0.2"])
      }
      defer { for relay in relays { relay.signal(SIGKILL); _ = relay.finish(timeout: 10) } }
      try await Executables.groupsync(["exec", a.folder, "--store", "cache", "INSERT INTO entry(key) VALUES ('c1')", "INSERT INTO entry(key) VALUES ('c2')"])
      try await Executables.groupsync(["exec", b.folder, "INSERT INTO note(title) VALUES ('m1')"])
      try await waitUntil("b holds the cache rows") {
        let output = try? Executables.runSync(["query", b.folder, "--store", "cache", "SELECT count(*) FROM entry"])
        return output?.contains("| 2") == true
      }
      try await waitUntil("a holds the main row") { (try? a.content().count) == 1 }
      let stores = try server.query("SELECT store, seq FROM gs_clock WHERE grp = 'app' ORDER BY store")
      #expect(stores.map { $0[0] } == ["cache", "main"])
    }
  }

  /// Settings the relay refuses, each with a message naming it.
  @Test func badSettingsAreRefused() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      for (arguments, message) in [
        (["--host", "no/slash"], "host name 'no/slash'"),
        (["--host", "a", "--retention", "0"], "the group's settings on the server"),
        (["--host", "a", "--policy", "whoever-shouts"], "--policy"),
        (["--host", "a", "--store", "missing"], "no store named 'missing'"),
        (["--host", "a", "--dead-link-timeout", "0.2"], "timeout deadLink"),
        (["--host", "a", "--postgres", "hots=db password=hunter2"], "invalid connection option \"hots\""),
        (["--host", "a", "--postgres", "host='unterminated"], "the PostgreSQL connection string"),
      ] {
        let result = try await Executables.onThread {
          try ChildProcess(
            executable: Executables.groupsync, arguments: ["relay", a.folder, "--postgres", server.conninfo] + arguments
          ).finish(timeout: 120)
        }
        #expect(!result.stderr.contains("hunter2"), "a password in an error: \(result.stderr)")
        #expect(result.status != 0 && result.stderr.contains(message), "\(arguments): \(result.stderr)")
      }
      // A folder that is no group folder is named as such, and left as it was.
      let stranger = root.path + "/not-a-group"
      try FileManager.default.createDirectory(atPath: stranger, withIntermediateDirectories: true)
      let result = try await Executables.onThread {
        try ChildProcess(
          executable: Executables.groupsync, arguments: ["relay", stranger, "--postgres", server.conninfo, "--host", "a"]
        ).finish(timeout: 120)
      }
      #expect(result.status != 0 && result.stderr.contains("is not a group folder"), "\(result.stderr)")
      #expect(try FileManager.default.contentsOfDirectory(atPath: stranger).isEmpty)
    }
  }
}

extension RelayEdgeTests {
  /// Group defaults and notifications travel too: a notification posted on
  /// A reaches B's observers once (and is not posted again on A), a
  /// defaults change on either host ends on both, last in the log wins.
  @Test func defaultsAndNotificationsTravelAcrossHosts() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      let groupA = try GroupFolder(path: a.folder, create: false)
      let groupB = try GroupFolder(path: b.folder, create: false)
      let onA = Received(), onB = Received()
      let streams = [(try groupA.notifications.notifications(matching: "import."), onA),
                     (try groupB.notifications.notifications(matching: "import."), onB)]
      let tasks = streams.map { stream, received in
        Task { for await note in stream { received.add(note.name + "=" + String(decoding: note.payload, as: UTF8.self)) } }
      }
      defer { tasks.forEach { $0.cancel() } }
      try await Executables.groupsync(["post", a.folder, "import.finished", "--payload", "hello"])
      try await Executables.groupsync(["defaults", a.folder, "set", "theme", "dark"])
      try await waitUntil("b has the default") {
        (try? groupB.defaults(suite: "app").value(forKey: "theme")) == .string("dark")
          || (try? Executables.runSync(["defaults", b.folder, "get", "theme"]))?.contains("dark") == true
      }
      try await waitUntil("b got the notification") { onB.all == ["import.finished=hello"] }
      try await Executables.groupsync(["defaults", b.folder, "set", "theme", "light"])
      try await waitUntil("a has b's default") {
        (try? Executables.runSync(["defaults", a.folder, "get", "theme"]))?.contains("light") == true
      }
      try await waitForConvergence([a, b], server: server)
      #expect(onA.all == ["import.finished=hello"], "posted once on A, never again from the log")
      #expect(onB.all == ["import.finished=hello"])
    }
  }
}

/// Strings a task collects, read by the test.
final class Received: @unchecked Sendable {
  private let lock = NSLock()
  private var items: [String] = []
  func add(_ item: String) { lock.withLock { items.append(item) } }
  var all: [String] { lock.withLock { items } }
}

extension RelayEdgeTests {
  /// The server ends a relay's session (`pg_terminate_backend`): its
  /// LISTEN ends with it and nothing reconnects it but the relay, which
  /// does, takes its lock again, and goes on.
  @Test func aTerminatedSessionIsReconnected() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      try await a.exec(["INSERT INTO note(title) VALUES ('before')"])
      try await waitForConvergence([a, b], server: server)
      let terminated = try server.query("""
        SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted
        """)
      #expect(terminated.first?[0] == "2")
      try await waitUntil("both relays reconnect") {
        a.events("connected").count == 2 && b.events("connected").count == 2
      }
      try await a.exec(["INSERT INTO note(title) VALUES ('after')"])
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 2)
    }
  }
}

extension RelayEdgeTests {
  /// An entry of the shared log that cannot be decoded is refused with an
  /// error naming it; nothing moves past it until it is readable.
  @Test func anUnreadableEntryIsRefusedUntilRepaired() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      try await waitForConvergence([a, b], server: server)
      let connection = try server.connect()
      let position = try connection.transaction { () -> String in
        let seq = try connection.execute("UPDATE gs_clock SET seq = seq + 1 WHERE grp = 'app' RETURNING seq")[0][0]!
        try connection.execute(
          "INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body) VALUES ('app', 'main', $1, 'z', 1, 'not json')",
          [seq])
        try connection.execute("SELECT pg_notify('gs_changes', 'app/main:' || $1)", [seq])
        return seq
      }
      try await waitUntil("b refuses the entry") {
        b.events("error").contains { ($0["value"] as? String)?.contains("invalid entry #\(position) of store 'main'") == true }
      }
      try await a.exec(["INSERT INTO note(title) VALUES ('after')"])
      try await waitUntil("a shipped behind it") { (try? a.content().count) == 1 && a.relayStatus()?.stores.first?.unshipped == 0 }
      #expect(try b.content().isEmpty)
      try connection.execute("UPDATE gs_change SET body = '{\"t\":[],\"c\":[]}' WHERE seq = $1", [position])
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 1)
    }
  }
}

extension RelayEdgeTests {
  /// The relay's session bounds every wait on the server, and its
  /// client-side defaults apply only where the conninfo sets nothing: a
  /// conninfo's own value wins.
  @Test func theSessionIsBoundedAndTheConninfoOverridesTheDefaults() async throws {
    try await PostgresServer.with { server in
      let timeouts = RelayTimeouts(lock: .seconds(3), idleInTransaction: .seconds(4))
      let connection = try PostgresConnection(
        conninfo: server.conninfo, timeouts: timeouts, applicationName: "groupsync-relay t")
      try SharedLog(connection).configureSession(timeouts: timeouts)
      let shown = try connection.run([
        .init("SHOW lock_timeout"), .init("SHOW idle_in_transaction_session_timeout"), .init("SHOW statement_timeout"),
        .init("SHOW application_name"),
      ]).map { $0.first?.first ?? nil }
      #expect(shown == ["3s", "4s", "30s", "groupsync-relay t"])
      let own = try PostgresConnection(
        conninfo: server.conninfo + " application_name=mine", timeouts: timeouts, applicationName: "groupsync-relay t")
      #expect(try own.execute("SHOW application_name").first?.first == "mine")
      // A lock another session holds is waited for no longer than asked.
      let holder = try server.connect()
      try holder.execute("CREATE TABLE held(id int PRIMARY KEY)")
      try holder.execute("INSERT INTO held VALUES (1)")
      try holder.execute("BEGIN")
      try holder.execute("SELECT * FROM held FOR UPDATE")
      let start = ContinuousClock.now
      #expect { try connection.execute("UPDATE held SET id = 2") } throws: { SQLState.lockNotAvailable ~= $0 }
      let waited = ContinuousClock.now - start
      // The lock timeout fired, not the statement's (30 s), nor nothing.
      #expect(waited >= timeouts.lock && waited < timeouts.statement, "waited \(waited)")
      // The connection is still good after the refusal.
      #expect(try connection.execute("SELECT 1").first?.first == "1")
      try holder.execute("ROLLBACK")
    }
  }
}

extension RelayEdgeTests {
  /// A relay catching up on a backlog that is slow to apply (a trigger
  /// of A's own makes each of B's rows cost some 80 ms of CPU) cuts it
  /// into short local transactions, and A's own writer, running all the
  /// while, commits between them instead of waiting out the whole batch
  /// (SQLite's busy timeout, 10 s, would fail it on a slow machine).
  @Test func aSlowBacklogLetsTheHostsOwnWritersIn() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      // Each entry light (one row: a fraction of a second of CPU, which a
      // writer waits out even on a machine loaded thirty times over), the
      // backlog heavy (well past the relay's budget for a transaction).
      let (rounds, rowsPerRound) = (12, 1)
      let backlog = rounds * rowsPerRound
      try await a.exec([
        """
        CREATE TRIGGER slow_to_apply AFTER INSERT ON note WHEN NEW.body = 'slow'
        BEGIN SELECT length(replace(hex(zeroblob(6000000)), '00', 'ab')); END
        """
      ])
      try await b.startRelay()
      // One entry per round: each round is one local transaction, shipped
      // before the next.
      let insert = "INSERT INTO note(title, body) VALUES ('b-' || hex(randomblob(6)), 'slow')"
      let fromB = "SELECT seq FROM gs_change WHERE origin_host = 'b' AND body LIKE '%slow%' ORDER BY seq"
      for round in 1...rounds {
        try await b.exec(Array(repeating: insert, count: rowsPerRound))
        try await waitUntil("b ships round \(round)") {
          try server.query("SELECT count(*) FROM gs_row WHERE origin_host = 'b'").first?[0] == String(round * rowsPerRound)
        }
      }
      let backlogPositions = try server.query(fromB).compactMap { $0[0].flatMap { Int($0) } }
      #expect(backlogPositions.count == rounds)
      // A's relay reads the whole backlog, then waits at the gate.
      let gate = root.path + "/apply-gate"
      FileManager.default.createFile(atPath: gate, contents: nil)
      try await a.startRelay(environment: [RelayFailpoints.variable: "gate-before-apply:\(gate)"])
      try await waitUntil("a's relay holds the backlog at the gate") {
        a.relay?.stderr.contains("failpoint gate-before-apply") == true
      }
      let writer = try a.startWriter(["INSERT INTO note(title, body) VALUES ('a-' || hex(randomblob(6)), 'local')"], repeat: 400)
      try await waitUntil("a's writer commits") { writer.stdout.contains("committed sequence") }
      try FileManager.default.removeItem(atPath: gate)
      let written = try await Executables.onThread { writer.finish(timeout: 300) }
      #expect(written.status == 0, "a's writer: \(written.stderr)")
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == backlog + 400)

      // No transaction took the whole backlog, and the writer committed
      // between two of them.
      let applied = a.events("applied").filter { event in
        guard let last = event["position"] as? Int, let count = event["entries"] as? Int else { return false }
        return backlogPositions.contains { (last - count + 1)...last ~= $0 }
      }
      let largest = applied.map { event in
        let last = event["position"] as? Int ?? 0, count = event["entries"] as? Int ?? 0
        return backlogPositions.filter { (last - count + 1)...last ~= $0 }.count
      }.max() ?? 0
      #expect(largest < rounds, "one local transaction applied \(largest) of the \(rounds) entries: \(applied)")
      let relaySequences = applied.compactMap { $0["localSequence"] as? Int }.sorted()
      let writerSequences = written.stdout.split(separator: "\n").compactMap { line in
        line.split(separator: " ").dropFirst(2).first.flatMap { Int($0.trimmingCharacters(in: [":"])) }
      }
      let between = writerSequences.filter { sequence in
        relaySequences.contains { $0 < sequence } && relaySequences.contains { $0 > sequence }
      }
      #expect(!between.isEmpty, "the writer's commits \(writerSequences) and the relay's \(relaySequences)")
      Swift.print("slow backlog: \(rounds) entries applied in \(applied.count) transactions, \(between.count) local commits between them")
    }
  }
}
