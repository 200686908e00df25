import CoreMetrics
import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
import MetricsTestKit
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

#if canImport(Glibc)
import Glibc
#endif

/// What relays report through swift-metrics (``RelayMetrics``), against a
/// real server: relays in this process, each handed a MetricsTestKit
/// `TestMetrics` of its own through ``RelayConfiguration/metricsFactory``
/// (no global bootstrap), and the `groupsync-relay` process's
/// `--metrics-file`.
@Suite(.timed)
struct RelayMetricsTests {
  /// The dimensions of host `host`'s replica of the main store.
  private static func store(_ host: String) -> [(String, String)] {
    [("group", "app"), ("store", "main"), ("host", host)]
  }

  /// Starts a relay in this process for `host`'s folder, reporting to `metrics`.
  private static func startRelay(
    _ host: GroupHost, _ metrics: TestMetrics, references: [RowReference] = []
  ) throws -> Relay {
    var configuration = RelayConfiguration(folder: host.folder, conninfo: host.conninfo, host: host.name)
    configuration.pollInterval = .milliseconds(200)
    configuration.references = references
    configuration.metricsFactory = metrics
    let relay = try Relay(configuration)
    try relay.start()
    return relay
  }

  private static func counter(_ metrics: TestMetrics, _ label: String, _ dimensions: [(String, String)]) -> Int64 {
    (try? metrics.expectCounter(label, dimensions).totalValue) ?? -1
  }

  private static func gauge(_ metrics: TestMetrics, _ label: String, _ dimensions: [(String, String)]) -> Double? {
    try? metrics.expectGauge(label, dimensions).lastValue
  }

  /// The entries in the log, all of them or those `host` shipped.
  private static func logEntries(_ server: PostgresServer, origin host: String? = nil) throws -> Int64 {
    let filter = host.map { " AND origin_host = '\($0)'" } ?? ""
    return Int64(try server.query("SELECT count(*) FROM gs_change WHERE grp = 'app'\(filter)").first?[0] ?? "") ?? -1
  }

  /// Shipped and applied entries match the log exactly on each host; the
  /// lag gauges read 0 once caught up; a backend the server killed counts
  /// one reconnect per relay, and the relay goes on counting.
  @Test func entriesLagAndReconnectsAreCountedAsTheLogHasThem() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      let (metricsA, metricsB) = (TestMetrics(), TestMetrics())
      let relayA = try Self.startRelay(a, metricsA)
      defer { relayA.stop() }
      let relayB = try Self.startRelay(b, metricsB)
      defer { relayB.stop() }
      // Connected, and no reconnect yet.
      try await waitUntil("both relays connected") {
        Self.gauge(metricsA, RelayMetrics.connected, [("group", "app"), ("host", "a")]) == 1
          && Self.gauge(metricsB, RelayMetrics.connected, [("group", "app"), ("host", "b")]) == 1
      }
      for index in 0..<3 { try await a.exec(["INSERT INTO note(title) VALUES ('a\(index)')"]) }
      try await b.exec(["INSERT INTO note(title) VALUES ('b0')"])
      try await waitForConvergence([a, b], server: server)

      let head = try Self.logEntries(server)
      #expect(head >= 4)
      for (name, metrics, relay) in [("a", metricsA, relayA), ("b", metricsB, relayB)] {
        let shipped = Self.counter(metrics, RelayMetrics.entriesShipped, Self.store(name))
        #expect(shipped == (try Self.logEntries(server, origin: name)), "\(name)")
        #expect(shipped == relay.status().shippedEntries, "\(name)")
        // Every entry applied once, the host's own included.
        #expect(Self.counter(metrics, RelayMetrics.entriesApplied, Self.store(name)) == head, "\(name)")
        let shipTimes = try metrics.expectTimer(RelayMetrics.shipDuration, Self.store(name)).values
        #expect(shipTimes.count == Int(shipped) && shipTimes.allSatisfy { $0 > 0 }, "\(name)")
        #expect(try !metrics.expectTimer(RelayMetrics.applyDuration, Self.store(name)).values.isEmpty, "\(name)")
        #expect(Self.counter(metrics, RelayMetrics.reconnects, [("group", "app"), ("host", name)]) == 0)
        try await waitUntil("\(name)'s lag reads 0") {
          Self.gauge(metrics, RelayMetrics.lagEntries, Self.store(name)) == 0
            && Self.gauge(metrics, RelayMetrics.lagSeconds, Self.store(name)) == 0
        }
        for cause in RelayMetrics.HeldCause.allCases {
          #expect(Self.gauge(metrics, RelayMetrics.heldRows, Self.store(name) + [("reason", cause.rawValue)]) == 0)
        }
      }

      // The server ends both sessions: each relay reconnects, once.
      let terminated = try server.query("""
        SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted
        """)
      #expect(terminated.first?[0] == "2")
      try await waitUntil("both relays count a reconnect") {
        Self.counter(metricsA, RelayMetrics.reconnects, [("group", "app"), ("host", "a")]) == 1
          && Self.counter(metricsB, RelayMetrics.reconnects, [("group", "app"), ("host", "b")]) == 1
      }
      try await a.exec(["INSERT INTO note(title) VALUES ('after')"])
      try await waitForConvergence([a, b], server: server)
      let shippedByA = try Self.logEntries(server, origin: "a")
      #expect(Self.counter(metricsA, RelayMetrics.entriesShipped, Self.store("a")) == shippedByA)
      #expect(Self.counter(metricsB, RelayMetrics.entriesApplied, Self.store("b")) == (try Self.logEntries(server)))
      #expect(Self.counter(metricsA, RelayMetrics.reconnects, [("group", "app"), ("host", "a")]) == 1)
    }
  }

  /// A shipment that finds the row moved settles a conflict: the host
  /// that settled it counts it under its rule, and so does the host that
  /// applies the entry; the other rules stay at 0. (The stores are driven
  /// by hand, so that the two writes are concurrent for certain.)
  @Test func aConflictIsCountedUnderItsRule() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [(group: GroupFolder, context: ReplicaContext, log: SharedLog, metrics: TestMetrics)] = []
      for name in ["a", "b"] {
        let host = try await GroupHost(name, root: root.path, server: server)
        let group = try GroupFolder(path: host.folder, create: false)
        let metrics = TestMetrics()
        let context = try ReplicaContext(
          store: group.store, storeName: "main", group: "app", host: name, merge: MergeRules(policy: .objectTrump),
          author: "groupsync-relay@" + name, metricsFactory: metrics, emit: { _ in })
        let log = SharedLog(try server.connect())
        try log.createTables()
        _ = try log.enroll(context.replica, place: 0)
        hosts.append((group, context, log, metrics))
      }
      let (a, b) = (hosts[0], hosts[1])
      /// Applies everything the log holds on `host`.
      func catchUp(_ host: (group: GroupFolder, context: ReplicaContext, log: SharedLog, metrics: TestMetrics)) throws {
        host.context.mustReadLog = true
        while try Applier(context: host.context).apply(host.log) {}
      }
      #expect(try Shipper(context: a.context).ship(a.log) == .shipped)
      #expect(try Shipper(context: b.context).ship(b.log) == .shipped)
      try await a.group.store.write { db in try db.execute(sql: "INSERT INTO note(title, body) VALUES ('r', 'v0')") }
      #expect(try Shipper(context: a.context).ship(a.log) == .shipped)
      try catchUp(b)
      try await a.group.store.write { db in try db.execute(sql: "UPDATE note SET body = 'a'") }
      try await b.group.store.write { db in try db.execute(sql: "UPDATE note SET body = 'b'") }
      #expect(try Shipper(context: a.context).ship(a.log) == .shipped)
      #expect(try Shipper(context: b.context).ship(b.log) == .shipped)
      #expect(try server.query("SELECT count(*) FROM gs_conflict").first?[0] == "1")
      let rule = [("rule", ConflictPolicy.lastWriterWins.rawValue)]
      #expect(Self.counter(b.metrics, RelayMetrics.conflicts, Self.store("b") + rule) == 1)
      #expect(Self.counter(a.metrics, RelayMetrics.conflicts, Self.store("a") + rule) == 0)
      try catchUp(a)
      try catchUp(b)
      #expect(Self.counter(a.metrics, RelayMetrics.conflicts, Self.store("a") + rule) == 1)
      #expect(Self.counter(b.metrics, RelayMetrics.conflicts, Self.store("b") + rule) == 1)
      // a shipped 1, 3 and 4, b 2 and 5; each applied all 5, once each.
      for (name, host, shipped) in [("a", a, 3), ("b", b, 2)] {
        for other in RelayMetrics.conflictRules where other != rule[0].1 {
          #expect(Self.counter(host.metrics, RelayMetrics.conflicts, Self.store(name) + [("rule", other)]) == 0)
        }
        #expect(Self.counter(host.metrics, RelayMetrics.entriesShipped, Self.store(name)) == Int64(shipped))
        #expect(try Self.logEntries(server, origin: name) == Int64(shipped))
        #expect(Self.counter(host.metrics, RelayMetrics.entriesApplied, Self.store(name)) == 5)
        #expect(host.context.place.current.applied == 5)
        #expect(try host.metrics.expectTimer(RelayMetrics.shipDuration, Self.store(name)).values.count == shipped)
      }
    }
  }

  /// A row whose reference names a row the host does not have is held:
  /// the gauge shows it under its reason, and goes back to 0 once a newer
  /// image of the row (its deletion) supersedes it.
  @Test func aHeldRowIsShownWithItsReason() async throws {
    let schema = """
      CREATE TABLE folder(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
      CREATE TABLE item(id INTEGER PRIMARY KEY, folder_id INTEGER, label TEXT NOT NULL UNIQUE);
      """
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server, schema: schema)
      let b = try await GroupHost("b", root: root.path, server: server, schema: schema)
      let (metricsA, metricsB) = (TestMetrics(), TestMetrics())
      // Declared to the relays, not to SQLite: nothing stops a dangling one.
      let references = [RowReference(table: "item", column: "folder_id", parent: "folder")]
      let relayA = try Self.startRelay(a, metricsA, references: references)
      defer { relayA.stop() }
      let relayB = try Self.startRelay(b, metricsB, references: references)
      defer { relayB.stop() }
      // A reference to a row a does not have.
      try await a.exec(["INSERT INTO item(folder_id, label) VALUES (999, 'dangling')"])
      let missingRow = Self.store("b") + [("reason", RelayMetrics.HeldCause.missingRow.rawValue)]
      try await waitUntil("b shows the held row") { Self.gauge(metricsB, RelayMetrics.heldRows, missingRow) == 1 }
      #expect(try b.rows("SELECT count(*) FROM item WHERE label = 'dangling'") == ["0"])
      #expect(try b.rows("SELECT cause FROM gs_relay_held") == ["missing_row"])
      for cause in RelayMetrics.HeldCause.allCases where cause != .missingRow {
        #expect(Self.gauge(metricsB, RelayMetrics.heldRows, Self.store("b") + [("reason", cause.rawValue)]) == 0)
      }
      // a deletes the row: what b held is superseded, the gauge empties.
      try await a.exec(["DELETE FROM item WHERE label = 'dangling'"])
      try await waitUntil("b lets the held row go") { Self.gauge(metricsB, RelayMetrics.heldRows, missingRow) == 0 }
      #expect(try b.rows("SELECT count(*) FROM gs_relay_held") == ["0"])
    }
  }
}

/// The `groupsync-relay` process's `--metrics-file`, read as
/// node_exporter's textfile collector reads it.
extension RelayMetricsTests {
  /// The value of the sample of `name` whose labels include `labels`
  /// (`key="value"` each) in the text exposition `text`; nil when none.
  private static func sample(_ text: String, _ name: String, _ labels: [String]) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(name + "{") {
      guard let close = line.lastIndex(of: "}") else { continue }
      let labelText = line[line.index(line.startIndex, offsetBy: name.count + 1)..<close]
      let present = Set(labelText.split(separator: ",").map(String.init))
      guard labels.allSatisfy(present.contains) else { continue }
      return Double(line[line.index(after: close)...].trimmingCharacters(in: .whitespaces))
    }
    return nil
  }

  private static func read(_ path: String) -> String {
    (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
  }

  @Test func theRelayProcessWritesItsMetricsFileByRename() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      let folder = root.path + "/textfile"
      try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
      // a writes every 0.2 s; b only when it starts and when it stops.
      a.metricsFile = folder + "/groupsync-a.prom"
      b.metricsFile = folder + "/groupsync-b.prom"
      b.metricsInterval = 600
      try await a.startRelay()
      try await b.startRelay()
      #expect(FileManager.default.fileExists(atPath: folder + "/groupsync-b.prom"))
      for index in 0..<3 { try await a.exec(["INSERT INTO note(title) VALUES ('a\(index)')"]) }
      try await b.exec(["INSERT INTO note(title) VALUES ('b0')"])
      try await waitForConvergence([a, b], server: server)
      let shippedByA = try Self.logEntries(server, origin: "a")
      let storeOfA = ["group=\"app\"", "store=\"main\"", "host=\"a\""]
      try await waitUntil("a's file shows what a shipped") {
        Self.sample(Self.read(a.metricsFile!), RelayMetrics.entriesShipped, storeOfA) == Double(shippedByA)
      }
      let text = Self.read(a.metricsFile!)
      // Whole lines only (the collector refuses a file whose last line is cut).
      #expect(text.hasSuffix("\n"))
      for (name, type) in [
        (RelayMetrics.entriesShipped, "counter"), (RelayMetrics.entriesApplied, "counter"),
        (RelayMetrics.lagEntries, "gauge"), (RelayMetrics.lagSeconds, "gauge"), (RelayMetrics.conflicts, "counter"),
        (RelayMetrics.heldRows, "gauge"), (RelayMetrics.reconnects, "counter"), (RelayMetrics.connected, "gauge"),
        (RelayMetrics.shipDuration, "histogram"), (RelayMetrics.applyDuration, "histogram"),
        (RelayMetrics.formatHeld, "gauge"),
      ] {
        #expect(text.contains("# TYPE \(name) \(type)\n"), "\(name) in \(text)")
      }
      #expect(Self.sample(text, RelayMetrics.connected, ["group=\"app\"", "host=\"a\""]) == 1)
      #expect(Self.sample(text, RelayMetrics.heldRows, storeOfA + ["reason=\"missing_row\""]) == 0)
      #expect(Self.sample(text, RelayMetrics.conflicts, storeOfA + ["rule=\"object-trump\""]) == 0)
      #expect(Self.sample(text, RelayMetrics.shipDuration + "_count", storeOfA) == Double(shippedByA))
      var info = stat()
      #expect(stat(a.metricsFile!, &info) == 0 && info.st_mode & 0o777 == 0o644)

      // b's file is written once more at stop, with the final figures.
      try await b.exec(["INSERT INTO note(title) VALUES ('b1')"])
      try await waitForConvergence([a, b], server: server)
      try await b.stopRelay()
      try await a.stopRelay()
      let storeOfB = ["group=\"app\"", "store=\"main\"", "host=\"b\""]
      let final = Self.read(b.metricsFile!)
      let (shippedByB, entries) = (try Self.logEntries(server, origin: "b"), try Self.logEntries(server))
      #expect(Self.sample(final, RelayMetrics.entriesShipped, storeOfB) == Double(shippedByB))
      #expect(Self.sample(final, RelayMetrics.entriesApplied, storeOfB) == Double(entries))
      #expect(Self.sample(final, RelayMetrics.connected, ["group=\"app\"", "host=\"b\""]) == 0)
      // No PATH.tmp left behind.
      let left = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
      #expect(left == ["groupsync-a.prom", "groupsync-b.prom"])
    }
  }

  /// A metrics file whose folder does not exist, or is no folder, stops
  /// the relay as it starts, with an error naming the path.
  @Test(arguments: ["missing/relay.prom", "a-file/relay.prom"])
  func anUnwritableMetricsFileIsRefusedAtStart(path: String) async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      FileManager.default.createFile(atPath: root.path + "/a-file", contents: Data())
      let metricsFile = root.path + "/" + path
      let result = try await Executables.onThread {
        try ChildProcess(
          executable: Executables.relay,
          arguments: [a.folder, "--postgres", server.conninfo, "--host", "a", "--metrics-file", metricsFile]
        ).finish(timeout: 120)
      }
      #expect(!result.succeeded && result.stderr.contains("metrics file '\(metricsFile)'"), "\(result.stderr)")
      #expect(!result.stdout.contains("\"connected\""))
    }
  }

  /// `--trace`: each shipment and each applied batch, with its steps'
  /// times in their order, written when the relay stops.
  @Test func theRelayProcessWritesItsTraceAtStop() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      a.traceFile = root.path + "/trace-a.jsonl"
      b.traceFile = root.path + "/trace-b.jsonl"
      try await a.startRelay()
      try await b.startRelay()
      let before = try GroupFolder(path: a.folder, create: false).store.currentSequence()
      try await a.exec(["INSERT INTO note(title) VALUES ('traced')"])
      try await waitForConvergence([a, b], server: server)
      try await a.stopRelay()
      try await b.stopRelay()
      struct Record: Decodable {
        var kind: String
        var through, position, rung, passBegan, planned, encoded, shipped, recorded: Int64?
        var first, last, notified, decoded, applied: Int64?
      }
      func records(_ path: String) throws -> [Record] {
        try Self.read(path).split(separator: "\n").map { try JSONDecoder().decode(Record.self, from: Data($0.utf8)) }
      }
      let shipments = try records(a.traceFile!).filter { $0.kind == "ship" }
      let shipment = try #require(shipments.first { ($0.through ?? 0) > before }, "\(Self.read(a.traceFile!))")
      let position = try #require(shipment.position)
      // Each step after the one before (the ring came before the pass).
      let steps = [shipment.rung, shipment.passBegan, shipment.planned, shipment.encoded, shipment.shipped, shipment.recorded]
      #expect(steps.allSatisfy { ($0 ?? 0) > 0 }, "\(steps)")
      #expect(zip(steps.dropFirst(2), steps.dropFirst(3)).allSatisfy { $0! <= $1! }, "\(steps)")
      let applies = try records(b.traceFile!).filter { $0.kind == "apply" }
      let apply = try #require(applies.first { ($0.first ?? 0) <= position && position <= ($0.last ?? 0) })
      let applied = [apply.passBegan, apply.decoded, apply.applied]
      #expect(applied.allSatisfy { ($0 ?? 0) > 0 } && applied[0]! <= applied[1]! && applied[1]! <= applied[2]!)
      // B applied it after A's relay planned it.
      #expect(apply.applied! > shipment.planned!)
    }
  }

  /// A trace file that cannot be written stops the relay as it starts,
  /// naming the path (not when it stops, with the trace lost).
  @Test func anUnwritableTraceFileIsRefusedAtStart() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let traceFile = root.path + "/missing/trace.jsonl"
      let result = try await Executables.onThread {
        try ChildProcess(
          executable: Executables.relay,
          arguments: [a.folder, "--postgres", server.conninfo, "--host", "a", "--trace", traceFile]
        ).finish(timeout: 120)
      }
      #expect(!result.succeeded && result.stderr.contains("trace file '\(traceFile)'"), "\(result.stderr)")
      #expect(!result.stdout.contains("\"connected\""))
    }
  }
}
