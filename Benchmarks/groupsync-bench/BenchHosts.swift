import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
import GroupSyncRelay
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Two hosts through PostgreSQL: group folders `hosts/a` and `hosts/b`,
/// each with its own `groupsync-relay` process (beside this executable).
struct BenchHostsResult: Codable {
  /// From the writer on A asking to commit to B's in-process listener
  /// receiving the change set the relay applied there, sparse commits, µs.
  var latency: BenchStats
  /// PostgreSQL NOTIFY alone in the same run (pgnotify, one listener).
  var notify: BenchStats?
  /// GroupSync's local delivery (L), measured in this phase.
  var localDelivery: BenchStats?
  /// The targets for `latency` (issue 39): 2·L + S + 2·W + 0.3 ms at p50,
  /// 2·L99 + S99 + 2·W99 + 1 ms at p99, µs.
  var targetP50: Double?
  var targetP99: Double?
  /// L, W, S, R_1, R_w and c_L, measured in this phase.
  var terms: BenchHostsTerms?
  /// Relay CPU over the sparse commits: A's per entry shipped, B's per
  /// entry applied, µs (clock ticks of 10 ms).
  var shippingCPUPerEntry: Double?
  var applyingCPUPerEntry: Double?
  /// Each step's p50 from the relays' traces.
  var trace: BenchHostsTrace?
  /// A → B with A's relay inside A's writing process (`Relay.start(in:)`,
  /// one local delivery less), and its target: the p50 one's minus L.
  var inProcess: BenchStats?
  var inProcessTargetP50: Double?
  var inProcessTrace: BenchHostsTrace?
  /// The same A → B with the server's `fsync` on, beside pg_test_fsync's
  /// time of one 8 kB write with the server's `wal_sync_method`.
  var fsyncOn: BenchHostsFsync?
  /// One-row commits on A, as fast as A commits them, until B holds
  /// every row: change sets per second through both relays.
  var throughputCommits: Int
  var throughputChangeSetsPerSecond: Double
  /// Log entries those commits shipped as (a shipment covers everything
  /// pending at its snapshot).
  var throughputLogEntries: Int
  /// The same number of one-row commits of a row with a foreign key to
  /// `item` (translated to the parent's global ID when shipped, back to a
  /// local rowid when applied), measured right after: change sets/s.
  var referenceThroughputChangeSetsPerSecond: Double?
  /// One-column updates merging by property beside whole rows (log format
  /// 1), side by side in the same run.
  var mergeCost: BenchMergeCost?
}

struct BenchHostsFsync: Codable {
  var latency: BenchStats
  /// pg_test_fsync: µs per 8 kB write synced with `method` on the disk
  /// of the benchmark's folder (nil: not measured).
  var syncMicros: Double?
  var method: String?
}

extension BenchRunner {
  /// The server's conninfo and the relay beside this executable, for the
  /// phase `phase`; nil (and a note saying why) when either is missing.
  func relaySetUp(phase: String) -> (conninfo: String, relay: String)? {
    guard let conninfo = options.postgresConninfo else {
      results.notes.append("\(phase): not measured (no PostgreSQL server; make bench starts one)")
      return nil
    }
    let relay = URL(fileURLWithPath: executable).deletingLastPathComponent()
      .appendingPathComponent("groupsync-relay").path
    guard FileManager.default.isExecutableFile(atPath: relay) else {
      results.notes.append("\(phase): not measured (\(relay) missing: make bench-tools builds it)")
      return nil
    }
    return (conninfo, relay)
  }

  func hosts() throws {
    guard let (conninfo, relay) = relaySetUp(phase: "hosts") else { return }
    let root = options.workFolder + "/hosts"
    try? FileManager.default.removeItem(atPath: root)
    let groupName = "bench-\(getpid())-\(BenchClock.realtime() / 1_000_000_000)"
    log("hosts: the terms (L, W, R_1, R_w, S) in \(root)/local and \(root)/rate")
    let terms = try hostsTerms(conninfo: conninfo, relay: relay, root: root, group: groupName + "-rate")
    var groups: [GroupFolder] = []
    var relays: [ChildProcess] = []
    defer {
      for child in relays {
        child.signal(SIGTERM)
        _ = child.finish(timeout: 30)
      }
    }
    for host in ["a", "b"] {
      let folder = root + "/" + host + "/app"
      let group = try GroupFolder(path: folder)
      try group.store.write { db in
        try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, body TEXT NOT NULL, stamp INTEGER NOT NULL)")
        try db.execute(sql: """
          CREATE TABLE part(id INTEGER PRIMARY KEY, item_id INTEGER NOT NULL REFERENCES item(id), body TEXT NOT NULL)
          """)
      }
      groups.append(group)
      let child = try ChildProcess(
        executable: relay,
        arguments: [folder, "--postgres", conninfo, "--host", host, "--group", groupName, "--poll-interval", "1",
                    "--trace", root + "/trace-\(host).jsonl"],
        name: "relay \(host)")
      relays.append(child)
    }
    for child in relays { try waitUntil("\(child.name) connected", timeout: 30) { child.stdout.contains("\"connected\"") } }
    let (a, b) = (groups[0], groups[1])
    log("hosts: A → B through two relays and PostgreSQL (group \(groupName))")

    // Latency: B's listener, in this process; each arrival stamped.
    let listener = try b.listen()
    defer { listener.close() }
    let arrivals = Mutex<[Int64]>([])
    let arrived = DispatchSemaphore(value: 0)
    let task = listener.start { event in
      guard case .changes(let changeSet) = event, changeSet.tables.keys.contains(where: { $0.name == "item" }) else {
        return
      }
      let now = BenchClock.realtime()
      arrivals.withLock { $0.append(now) }
      arrived.signal()
    }
    defer { task.cancel() }
    let count = options.quick ? 50 : 300
    func sparseCommits(_ count: Int) throws -> [BenchHostsSample] {
      var samples: [BenchHostsSample] = []
      for index in 0..<(count + 20) {
        let start = BenchClock.realtime()
        try a.store.write { db in try db.execute(sql: "INSERT INTO item(body, stamp) VALUES ('x', ?)", arguments: [start]) }
        let written = BenchClock.realtime()
        let sequence = try a.store.currentSequence()
        // B's change set arrives after its commit was asked for: earlier
        // signals are what the throughput runs left.
        var end: Int64 = 0
        while end <= start {
          guard arrived.wait(timeout: .now() + 10) == .success else { throw BenchError("hosts: B did not receive commit \(index)") }
          end = arrivals.withLock { $0.last ?? 0 }
        }
        // The first 20 warm up.
        if index >= 20 { samples.append(.init(sequence: sequence, asked: start, written: written, received: end)) }
        BenchClock.sleep(milliseconds: 5)
      }
      return samples
    }
    let cpuBefore = relays.map { BenchProc.cpuTicks(pid: $0.pid) ?? 0 }
    let (shippedBefore, appliedBefore) = (try countEntries(relays[0]), appliedEntries(relays[1]))
    let samples = try sparseCommits(count)
    let cpuAfter = relays.map { BenchProc.cpuTicks(pid: $0.pid) ?? 0 }
    let (shipped, applied) = (try countEntries(relays[0]) - shippedBefore, appliedEntries(relays[1]) - appliedBefore)
    let latency = BenchStats(nanoseconds: samples.map { $0.received - $0.asked })
    var notify: BenchStats?
    if let pgnotify = options.pgnotify {
      let run = try ChildProcess.run(
        pgnotify,
        ["--conninfo", conninfo, "--listeners", "1", "--count", String(count), "--interval-us", "5000", "--warmup", "20"],
        timeout: 300)
      guard run.succeeded else { throw BenchError("pgnotify failed: \(run.stderr.suffix(500))") }
      notify = BenchStats(nanoseconds: try JSONDecoder().decode(FloorResult.self, from: Data(run.stdout.utf8)).latencyNs)
    }
    // The same with the server's fsync on.
    var fsyncOn: BenchHostsFsync?
    do {
      try setServerFsync(conninfo, on: true)
      defer { try? setServerFsync(conninfo, on: false) }
      fsyncOn = BenchHostsFsync(latency: BenchStats(nanoseconds: try sparseCommits(count / 2).map { $0.received - $0.asked }))
    } catch {
      results.notes.append("hosts: A → B with fsync on not measured: \(error)")
    }

    // Throughput: one-row commits on A as fast as they go, until B has
    // every row.
    let commits = options.quick ? 1000 : 5000
    let entriesBefore = try countEntries(relays[0])
    let target = try b.store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? 0 } + commits
    let start = BenchClock.monotonic()
    for _ in 0..<commits {
      try a.store.write { db in try db.execute(sql: "INSERT INTO item(body, stamp) VALUES ('y', 0)") }
    }
    try waitUntil("B holds every row", timeout: 300) {
      (try? b.store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? 0 }) ?? 0 >= target
    }
    let seconds = Double(BenchClock.monotonic() - start) / 1e9
    let plainEntries = try countEntries(relays[0]) - entriesBefore
    // The same with a reference in each row, side by side.
    let parts = try b.store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM part") ?? 0 } + commits
    let referenceStart = BenchClock.monotonic()
    for _ in 0..<commits {
      try a.store.write { db in
        try db.execute(sql: "INSERT INTO part(item_id, body) VALUES ((SELECT max(id) FROM item), 'p')")
      }
    }
    try waitUntil("B holds every part", timeout: 300) {
      (try? b.store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM part") ?? 0 }) ?? 0 >= parts
    }
    let referenceSeconds = Double(BenchClock.monotonic() - referenceStart) / 1e9
    let broken = try b.store.read { db in
      try Int.fetchOne(db, sql: "SELECT count(*) FROM part p WHERE NOT EXISTS (SELECT 1 FROM item i WHERE i.id = p.item_id)")
    }
    guard broken == 0 else { throw BenchError("hosts: \(broken ?? -1) parts on B point at no item") }
    var hosts = BenchHostsResult(
      latency: latency, notify: notify, localDelivery: terms.localDelivery, terms: terms,
      fsyncOn: fsyncOn, throughputCommits: commits,
      throughputChangeSetsPerSecond: Double(commits) / seconds,
      throughputLogEntries: plainEntries,
      referenceThroughputChangeSetsPerSecond: Double(commits) / referenceSeconds)
    if shipped > 0 { hosts.shippingCPUPerEntry = Double(cpuAfter[0] - cpuBefore[0]) * 10_000 / Double(shipped) }
    if applied > 0 { hosts.applyingCPUPerEntry = Double(cpuAfter[1] - cpuBefore[1]) * 10_000 / Double(applied) }
    if let ship = terms.ship {
      hosts.targetP50 = 2 * terms.localDelivery.p50 + ship.p50 + 2 * terms.write.p50 + 300
      hosts.targetP99 = 2 * terms.localDelivery.p99 + ship.p99 + 2 * terms.write.p99 + 1000
      hosts.inProcessTargetP50 = hosts.targetP50.map { $0 - terms.localDelivery.p50 }
    }
    // A's relay in A's own process: A's commits ring it in memory.
    relays[0].signal(SIGTERM)
    _ = relays[0].finish(timeout: 30)
    var configuration = RelayConfiguration(folder: a.path, conninfo: conninfo, group: groupName, host: "a")
    configuration.traceFile = root + "/trace-a-in-process.jsonl"
    let connected = DispatchSemaphore(value: 0)
    let inProcess = try Relay(configuration) { event in if case .connected = event { connected.signal() } }
    try inProcess.start(in: a)
    guard connected.wait(timeout: .now() + 30) == .success else { throw BenchError("hosts: the in-process relay did not connect") }
    let inProcessSamples = try sparseCommits(count)
    inProcess.stop()
    hosts.inProcess = BenchStats(nanoseconds: inProcessSamples.map { $0.received - $0.asked })
    for child in relays {
      child.signal(SIGTERM)
      _ = child.finish(timeout: 30)
    }
    relays = []
    do {
      hosts.trace = try Self.hostsTrace(
        samples: samples, shipping: root + "/trace-a.jsonl", applying: root + "/trace-b.jsonl")
      hosts.inProcessTrace = try Self.hostsTrace(
        samples: inProcessSamples, shipping: root + "/trace-a-in-process.jsonl", applying: root + "/trace-b.jsonl")
    } catch {
      results.notes.append("hosts: the relays' traces could not be read: \(error)")
    }
    if fsyncOn != nil, let (method, micros) = syncTime() {
      hosts.fsyncOn?.method = method
      hosts.fsyncOn?.syncMicros = micros
    }
    hosts.mergeCost = try mergeCost(conninfo: conninfo, relay: relay)
    results.hosts = hosts
    log(
      "hosts: A → B p50 \(BenchFormat.us(latency.p50)), p99 \(BenchFormat.us(latency.p99)); NOTIFY alone p50 "
        + "\(notify.map { BenchFormat.us($0.p50) } ?? "-"); \(commits) commits in \(String(format: "%.2f", seconds)) s = "
        + "\(Int(hosts.throughputChangeSetsPerSecond)) change sets/s")
  }

  /// The entries a relay applied so far (the `entries` of its `applied` events).
  private func appliedEntries(_ relay: ChildProcess) -> Int {
    relay.stdout.split(separator: "\n").filter { $0.hasPrefix("{\"applied\"") }.reduce(0) { total, line in
      guard let range = line.range(of: "\"entries\":") else { return total }
      return total + (Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0)
    }
  }

  /// The `shipped` events a relay printed so far.
  private func countEntries(_ relay: ChildProcess) throws -> Int {
    relay.stdout.split(separator: "\n").filter { $0.hasPrefix("{\"shipped\"") }.count
  }

}
