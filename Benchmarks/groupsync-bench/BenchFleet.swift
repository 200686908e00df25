import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

/// A fleet of hosts on this machine (issue 28): H group folders, one
/// `groupsync-relay` each, one PostgreSQL server, one group, for H = 2, 4,
/// 8, 16. Latency from a commit on host 0 to the last other host; the
/// aggregate rate when every host writes at once; what the relays and the
/// server spend per log entry.
struct BenchFleetResult: Codable {
  /// CPU and round trips over one part of a point's run, summed over the
  /// relays (and the server's processes).
  struct Cost: Codable {
    var seconds: Double
    /// Log entries shipped (`shipped` events), the local change sets they
    /// carried, and entries applied (the `entries` of `applied` events,
    /// summed over relays: every relay reads every entry, its own too).
    var shippedEntries: Int
    var shippedChangeSets: Int
    var appliedEntries: Int
    /// utime + stime of every relay, µs (clock ticks of 10 ms).
    var relayCPUMicros: Double
    var relayCPUPerShippedEntry: Double
    var relayCPUPerAppliedEntry: Double
    /// Sparse part only (host 0 ships, the others apply): host 0's relay
    /// per entry it shipped, and the other relays per entry each applied.
    var shipperCPUPerEntry: Double?
    var applierCPUPerEntry: Double?
    /// The PostgreSQL server (postmaster, its children, and children that
    /// exited meanwhile), µs, and per shipped entry; nil when its PID was
    /// not found (the `.s.PGSQL.PORT.lock` beside the socket).
    var serverCPUMicros: Double?
    var serverCPUPerShippedEntry: Double?
    /// From the relays' status files, when they count them (nil: not):
    /// all round trips, and per entry shipped and applied (the shipping
    /// and the applying round trips when the relay tells them apart, else
    /// all of them over each).
    var roundTrips: Int64?
    var roundTripsPerShippedEntry: Double?
    var roundTripsPerAppliedEntry: Double?
    /// This process meanwhile (the writers, the listeners, the counting),
    /// µs, and the machine's busy share of all its CPUs (/proc/stat):
    /// near 1, the run was bound by CPU on this machine.
    var benchCPUMicros: Double?
    var machineBusyFraction: Double?
  }

  struct Point: Codable {
    var hosts: Int
    /// From host 0 asking to commit a one-row insert to the last of the
    /// other hosts' listeners receiving it, sparse commits, µs.
    var latency: BenchStats
    /// PostgreSQL NOTIFY alone to hosts − 1 listener processes (pgnotify).
    var notify: BenchStats?
    /// The server's CPU per NOTIFY in that run, µs (nil: not measured).
    var notifyServerCPUPerMessage: Double?
    var sparse: Cost
    /// Every host's own writer thread commits `commitsPerHost` one-row
    /// inserts at once; until every host holds every row.
    var commitsPerHost: Int
    var aggregateCommits: Int
    var aggregateSeconds: Double
    var aggregateCommitsPerSecond: Double
    /// When the last writer had committed its last row.
    var writersSeconds: Double
    var aggregate: Cost
    /// The point's wall time, relays' start to stop.
    var wallSeconds: Double
  }

  var points: [Point] = []
  /// GroupSync's local delivery (the latency phase, N=1 sparse), if run.
  var localDelivery: BenchStats?
  var notes: [String] = []
}

extension BenchRunner {
  func fleet() throws {
    guard let (conninfo, relay) = relaySetUp(phase: "fleet") else { return }
    var fleet = BenchFleetResult()
    fleet.localDelivery = results.latency.first { $0.listeners == 1 && $0.stream == "sparse" }?.groupsync
    // Sized for a 2-core machine (about 2 minutes in all): the same total
    // of commits at every size, so fewer per host as hosts are added.
    let sizes = options.quick ? [2, 4] : [2, 4, 8, 16]
    let samples = options.quick ? 30 : 150
    let totalCommits = options.quick ? 400 : 2000
    fleet.notes.append(
      "\(samples) sparse commits per size after 20 warm-ups; \(totalCommits) commits in all per size in the aggregate "
        + "run (\(totalCommits / sizes.last!) per host at \(sizes.last!) hosts)")
    results.fleet = fleet
    for hosts in sizes {
      let point = try fleetPoint(
        hosts: hosts, samples: samples, commitsPerHost: totalCommits / hosts, relay: relay, conninfo: conninfo)
      results.fleet?.points.append(point)
    }
  }

  private func fleetPoint(hosts: Int, samples: Int, commitsPerHost: Int, relay: String, conninfo: String) throws
    -> BenchFleetResult.Point
  {
    // NOTIFY alone to as many listeners, before the relays start.
    var notify: BenchStats?
    var notifyServerCPU: Double?
    if let pgnotify = options.pgnotify {
      let serverBefore = Self.serverCPUTicks(conninfo)
      let run = try ChildProcess.run(
        pgnotify,
        ["--conninfo", conninfo, "--listeners", String(hosts - 1), "--count", String(samples), "--interval-us", "5000",
         "--warmup", "20"],
        timeout: 300)
      guard run.succeeded else { throw BenchError("pgnotify failed: \(run.stderr.suffix(500))") }
      notify = BenchStats(nanoseconds: try JSONDecoder().decode(FloorResult.self, from: Data(run.stdout.utf8)).latencyNs)
      if let before = serverBefore, let after = Self.serverCPUTicks(conninfo) {
        notifyServerCPU = Double(after - before) * 10_000 / Double(samples + 20)
      }
    }

    let groupName = "fleet\(hosts)-\(getpid())-\(BenchClock.realtime() / 1_000_000_000)"
    let wallStart = BenchClock.monotonic()
    let fleet = BenchRelayFleet(
      root: options.workFolder + "/fleet/\(hosts)", groupName: groupName, relay: relay, conninfo: conninfo,
      relayArguments: ["--poll-interval", "1"])
    defer { fleet.stop() }
    try fleet.grow(to: hosts, timeout: 60)
    let (groups, folders, relays) = (fleet.groups, fleet.folders, fleet.relays)
    log("fleet: \(hosts) hosts, \(hosts) relays, group \(groupName)")

    // 1. Latency to the last of the other hosts: a listener on each.
    var sparseBefore: FleetSnapshot?
    let latencies: [Int64]
    do {
      latencies = try fleet.lastHostLatencies(
        samples: samples, warmUps: 20, measuring: { sparseBefore = fleetSnapshot(relays, folders: folders, hosts: hosts) })
    } catch { throw BenchError("fleet: \(error)") }
    let sparseAfter = fleetSnapshot(relays, folders: folders, hosts: hosts)
    var sparse = fleetCost(from: sparseBefore!, to: sparseAfter)
    // Host 0 ships; the others apply (and host 0 reads its own entries back).
    sparse.addShipperAndAppliers(from: sparseBefore!, to: sparseAfter)

    // 2. Every host writes at once; until every host holds every row.
    let target = try fleet.rows(0) + hosts * commitsPerHost
    let aggregateBefore = fleetSnapshot(relays, folders: folders, hosts: hosts)
    let failures = BenchBox<[String]>([])
    let writersDone = BenchBox<Int64>(0)
    let finished = DispatchGroup()
    let start = BenchClock.monotonic()
    for (index, group) in groups.enumerated() {
      let store = group.store
      finished.enter()
      let thread = Thread {
        defer { finished.leave() }
        do {
          for _ in 0..<commitsPerHost {
            try store.write { db in
              try db.execute(sql: "INSERT INTO item(host, body, stamp) VALUES (?, 'w', 0)", arguments: [index])
            }
          }
        } catch {
          failures.withLock { $0.append("host \(index): \(error)") }
        }
        let now = BenchClock.monotonic()
        writersDone.withLock { $0 = max($0, now) }
      }
      thread.start()
    }
    var pending = Set(groups.indices)
    let deadline = BenchClock.monotonic() + 180_000_000_000
    while !pending.isEmpty {
      for index in pending.sorted() where (try? fleet.rows(index)) ?? 0 >= target { pending.remove(index) }
      if pending.isEmpty { break }
      guard BenchClock.monotonic() < deadline else {
        throw BenchError("fleet: hosts \(pending.sorted()) did not hold all \(target) rows within 180 s (\(hosts) hosts)")
      }
      BenchClock.sleep(milliseconds: 10)
    }
    let end = BenchClock.monotonic()
    finished.wait()
    if let failure = failures.withLock({ $0.first }) { throw BenchError("fleet: a writer failed: \(failure)") }
    let seconds = Double(end - start) / 1e9
    // The status files are rewritten at most every 200 ms and on each
    // pass: let every relay write one past the end.
    let endRealtime = BenchClock.realtime()
    try? benchWait("status files written", timeout: 3) {
      folders.indices.allSatisfy { (fleetStatus(folders[$0], host: "h\($0)")?.updatedAtNanoseconds ?? .max) > endRealtime }
    }
    let aggregateAfter = fleetSnapshot(relays, folders: folders, hosts: hosts)
    var aggregate = fleetCost(from: aggregateBefore, to: aggregateAfter)
    aggregate.seconds = seconds
    let commits = hosts * commitsPerHost
    let point = BenchFleetResult.Point(
      hosts: hosts, latency: BenchStats(nanoseconds: latencies), notify: notify, notifyServerCPUPerMessage: notifyServerCPU,
      sparse: sparse,
      commitsPerHost: commitsPerHost, aggregateCommits: commits, aggregateSeconds: seconds,
      aggregateCommitsPerSecond: Double(commits) / seconds,
      writersSeconds: Double(writersDone.withLock { $0 } - start) / 1e9, aggregate: aggregate,
      wallSeconds: Double(BenchClock.monotonic() - wallStart) / 1e9)
    log(
      "fleet: \(hosts) hosts: to the last host p50 \(BenchFormat.us(point.latency.p50)), p99 \(BenchFormat.us(point.latency.p99)); "
        + "NOTIFY to \(hosts - 1) p50 \(notify.map { BenchFormat.us($0.p50) } ?? "-"); aggregate \(commits) commits in "
        + String(format: "%.2f s = %.0f/s; relay CPU %.0f us per shipped entry, %.0f per applied", seconds,
                 point.aggregateCommitsPerSecond, aggregate.relayCPUPerShippedEntry, aggregate.relayCPUPerAppliedEntry))
    return point
  }

  // MARK: Measuring the relays and the server


  /// What one relay had done and spent at an instant.
  struct FleetRelayFigures {
    var cpuTicks: Int64
    var shipped: Int
    var changeSets: Int
    var applied: Int
    /// From the status file: round trips, and the entries it counted
    /// beside them (nil: a relay that does not count them).
    var roundTrips: Int64?
    var shippingRoundTrips: Int64?
    var applyingRoundTrips: Int64?
    var statusShipped: Int64?
    var statusApplied: Int64?
  }

  struct FleetSnapshot {
    var at: Int64
    var relays: [FleetRelayFigures]
    var serverTicks: Int64?
    var benchNs: Int64
    /// The machine's (busy, total) jiffies from /proc/stat.
    var machine: (busy: Int64, total: Int64)?
  }

  func fleetSnapshot(_ relays: [ChildProcess], folders: [String], hosts: Int) -> FleetSnapshot {
    let figures = relays.indices.map { index -> FleetRelayFigures in
      var figures = FleetRelayFigures(
        cpuTicks: BenchProc.cpuTicks(pid: relays[index].pid) ?? 0, shipped: 0, changeSets: 0, applied: 0)
      let decoder = JSONDecoder()
      for line in relays[index].stdout.split(separator: "\n") {
        if line.hasPrefix("{\"shipped\"") {
          figures.shipped += 1
          figures.changeSets += (try? decoder.decode(FleetEvent.self, from: Data(line.utf8)))?.shipped?.changeSets ?? 0
        } else if line.hasPrefix("{\"applied\"") {
          figures.applied += (try? decoder.decode(FleetEvent.self, from: Data(line.utf8)))?.applied?.entries ?? 0
        }
      }
      let status = fleetStatus(folders[index], host: "h\(index)")
      figures.roundTrips = status?.roundTripCount
      figures.shippingRoundTrips = status?.shippingRoundTrips
      figures.applyingRoundTrips = status?.applyingRoundTrips
      figures.statusShipped = status?.shippedEntryCount
      figures.statusApplied = status?.appliedEntryCount
      return figures
    }
    var machine: (busy: Int64, total: Int64)?
    if let line = BenchProc.read("/proc/stat")?.split(separator: "\n").first, line.hasPrefix("cpu ") {
      // user nice system idle iowait irq softirq steal ...
      let values = line.split(separator: " ").dropFirst().compactMap { Int64($0) }
      if values.count >= 5 {
        let total = values.prefix(8).reduce(0, +)
        machine = (total - values[3] - values[4], total)
      }
    }
    return FleetSnapshot(
      at: BenchClock.monotonic(), relays: figures, serverTicks: options.postgresConninfo.flatMap(Self.serverCPUTicks),
      benchNs: benchOwnCPUNanoseconds(), machine: machine)
  }

  func fleetCost(from before: FleetSnapshot, to after: FleetSnapshot) -> BenchFleetResult.Cost {
    var shipped = 0, changeSets = 0, applied = 0
    var ticks: Int64 = 0
    var roundTrips: Int64? = 0
    var shippingRoundTrips: Int64? = 0
    var applyingRoundTrips: Int64? = 0
    var statusShipped: Int64? = 0
    var statusApplied: Int64? = 0
    func add(_ sum: inout Int64?, _ b: Int64?, _ a: Int64?) {
      if let b, let a, let total = sum { sum = total + a - b } else { sum = nil }
    }
    for (b, a) in zip(before.relays, after.relays) {
      shipped += a.shipped - b.shipped
      changeSets += a.changeSets - b.changeSets
      applied += a.applied - b.applied
      ticks += a.cpuTicks - b.cpuTicks
      add(&roundTrips, b.roundTrips, a.roundTrips)
      add(&shippingRoundTrips, b.shippingRoundTrips, a.shippingRoundTrips)
      add(&applyingRoundTrips, b.applyingRoundTrips, a.applyingRoundTrips)
      add(&statusShipped, b.statusShipped, a.statusShipped)
      add(&statusApplied, b.statusApplied, a.statusApplied)
    }
    let micros = Double(ticks) * 10_000
    let server = after.serverTicks.flatMap { a in before.serverTicks.map { Double(a - $0) * 10_000 } }
    func per(_ value: Double?, _ count: Int) -> Double? { value.flatMap { count > 0 ? $0 / Double(count) : nil } }
    return BenchFleetResult.Cost(
      seconds: Double(after.at - before.at) / 1e9, shippedEntries: shipped, shippedChangeSets: changeSets,
      appliedEntries: applied, relayCPUMicros: micros, relayCPUPerShippedEntry: per(micros, shipped) ?? .nan,
      relayCPUPerAppliedEntry: per(micros, applied) ?? .nan, serverCPUMicros: server,
      serverCPUPerShippedEntry: per(server, shipped), roundTrips: roundTrips,
      // Per the entries the status files counted beside the round trips
      // (the same instants), else per the events.
      roundTripsPerShippedEntry: per((shippingRoundTrips ?? roundTrips).map(Double.init), Int(statusShipped ?? Int64(shipped))),
      roundTripsPerAppliedEntry: per((applyingRoundTrips ?? roundTrips).map(Double.init), Int(statusApplied ?? Int64(applied))),
      benchCPUMicros: Double(after.benchNs - before.benchNs) / 1000,
      machineBusyFraction: after.machine.flatMap { a in
        before.machine.flatMap { b in a.total > b.total ? Double(a.busy - b.busy) / Double(a.total - b.total) : nil }
      })
  }

  /// The `key=value` pairs of a libpq connection string (no quoting).
  static func conninfoSettings(_ conninfo: String) -> [String: String] {
    var settings: [String: String] = [:]
    for pair in conninfo.split(separator: " ") {
      let parts = pair.split(separator: "=", maxSplits: 1)
      if parts.count == 2 { settings[String(parts[0])] = String(parts[1]) }
    }
    return settings
  }

  /// The PID of the PostgreSQL server behind `conninfo` (a unix socket
  /// folder: its `.s.PGSQL.PORT.lock` names the postmaster).
  static func serverPostmaster(_ conninfo: String) -> Int32? {
    let settings = conninfoSettings(conninfo)
    guard let host = settings["host"], host.hasPrefix("/"),
      let lock = BenchProc.read("\(host)/.s.PGSQL.\(settings["port"] ?? "5432").lock")
    else { return nil }
    return lock.split(separator: "\n").first.flatMap { Int32($0.trimmingCharacters(in: .whitespaces)) }
  }

  /// The postmaster's live children.
  private static func serverChildren(_ postmaster: Int32) -> [Int32] {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { name in
      guard let pid = Int32(name), let fields = statFields(pid), fields[1] == Int64(postmaster) else { return nil }
      return pid
    }
  }

  /// utime + stime of the PostgreSQL server behind `conninfo`: the
  /// postmaster with the children it reaped, and its live children.
  static func serverCPUTicks(_ conninfo: String) -> Int64? {
    guard let postmaster = serverPostmaster(conninfo), let own = statFields(postmaster) else { return nil }
    // utime, stime, cutime, cstime: fields 14-17.
    var total = own[11] + own[12] + own[13] + own[14]
    for pid in serverChildren(postmaster) {
      if let fields = statFields(pid) { total += fields[11] + fields[12] }
    }
    return total
  }

  /// The exact CPU time (schedstat) of the server's postmaster and live
  /// children, ns: children that exited meanwhile (a psql's session) are
  /// not counted; for windows where the same sessions live throughout.
  static func serverCPUNanoseconds(_ conninfo: String) -> Int64? {
    guard let postmaster = serverPostmaster(conninfo), let own = BenchProc.cpuNanoseconds(pid: postmaster) else {
      return nil
    }
    return serverChildren(postmaster).reduce(own) { $0 + (BenchProc.cpuNanoseconds(pid: $1) ?? 0) }
  }

  /// The numeric fields of /proc/PID/stat after the command (state as 0):
  /// [0] state, [1] ppid, ... [11] utime, [12] stime, [13] cutime, [14] cstime.
  static func statFields(_ pid: Int32) -> [Int64]? {
    guard let text = BenchProc.read("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: close)...].split(separator: " ").map { Int64($0) ?? 0 }
    return fields.count > 15 ? fields : nil
  }

}

extension BenchFleetResult.Cost {
  /// The sparse run's split: host 0's relay per entry it shipped, and the
  /// other relays per entry each applied (host 0 reads its own entries
  /// back, not counted there).
  mutating func addShipperAndAppliers(from before: BenchRunner.FleetSnapshot, to after: BenchRunner.FleetSnapshot) {
    let shipped = after.relays[0].shipped - before.relays[0].shipped
    if shipped > 0 {
      shipperCPUPerEntry = Double(after.relays[0].cpuTicks - before.relays[0].cpuTicks) * 10_000 / Double(shipped)
    }
    let others = 1..<after.relays.count
    let ticks = others.reduce(Int64(0)) { $0 + after.relays[$1].cpuTicks - before.relays[$1].cpuTicks }
    let applied = others.reduce(0) { $0 + after.relays[$1].applied - before.relays[$1].applied }
    if applied > 0 { applierCPUPerEntry = Double(ticks) * 10_000 / Double(applied) }
  }
}

/// The parts of a relay's stdout event the fleet counts.
private struct FleetEvent: Decodable {
  struct Shipped: Decodable { var changeSets: Int }
  struct Applied: Decodable { var entries: Int }
  var shipped: Shipped?
  var applied: Applied?
}

/// The parts of `relays/HOST.json` the fleet reads, the round-trip
/// counters optional (at the top or per store) until every relay has them.
private struct FleetRelayStatus: Decodable {
  struct Store: Decodable {
    var roundTrips: Int64?
    var shippedEntries: Int64?
    var appliedEntries: Int64?
  }
  var updatedAtNanoseconds: Int64
  var roundTrips: Int64?
  var shippingRoundTrips: Int64?
  var applyingRoundTrips: Int64?
  var shippedEntries: Int64?
  var appliedEntries: Int64?
  var stores: [Store]?

  /// The relay's counts: its own, else its stores' summed.
  var roundTripCount: Int64? { roundTrips ?? Self.sum((stores ?? []).compactMap(\.roundTrips)) }
  var shippedEntryCount: Int64? { shippedEntries ?? Self.sum((stores ?? []).compactMap(\.shippedEntries)) }
  var appliedEntryCount: Int64? { appliedEntries ?? Self.sum((stores ?? []).compactMap(\.appliedEntries)) }

  private static func sum(_ counts: [Int64]) -> Int64? { counts.isEmpty ? nil : counts.reduce(0, +) }
}

private func fleetStatus(_ folder: String, host: String) -> FleetRelayStatus? {
  guard let data = FileManager.default.contents(atPath: folder + "/relays/\(host).json") else { return nil }
  return try? JSONDecoder().decode(FleetRelayStatus.self, from: data)
}

extension BenchTable {
  /// Section 2d: the fleet phase.
  static func fleetSection(_ f: BenchFleetResult, line: (String) -> Void, row: ([(String, Int)]) -> Void) {
    func us(_ value: Double?) -> String { value.map { $0.isFinite ? BenchFormat.us($0) : "-" } ?? "-" }
    func ratio(_ value: Double?) -> String { value.map { String(format: "%.2f", $0) } ?? "-" }
    line("")
    line("2d. Fleet: H hosts on this machine (a group folder and a groupsync-relay each, one PostgreSQL server, one group).")
    line("    latency = host 0 asking to commit one row -> the last of the other H-1 hosts' listeners receiving it, sparse;")
    line("    NOTIFY = pgnotify to H-1 listener processes; aggregate = every host's writer commits one-row inserts at once,")
    line("    until every host holds every row. CPU in us (utime+stime, 10 ms ticks), summed over relays / the server.")
    row([("H", 4), ("n", 5), ("to the last host", 30), ("NOTIFY p50 / p99", 18), ("aggregate/s", 12), ("commits", 14),
         ("s", 7), ("entries", 8)])
    for p in f.points {
      row([(String(p.hosts), 4), (String(p.latency.n), 5), (p.latency.text, 30),
           (p.notify.map { "\(BenchFormat.us($0.p50)) / \(BenchFormat.us($0.p99))" } ?? "-", 18),
           (BenchFormat.count(p.aggregateCommitsPerSecond), 12), ("\(p.aggregateCommits) (\(p.commitsPerHost)/h)", 14),
           (String(format: "%.2f", p.aggregateSeconds), 7), (String(p.aggregate.shippedEntries), 8)])
    }
    line("    per log entry: sparse = the latency run (one commit per entry); aggregate = the everyone-writes run;")
    line("    ship = host 0's relay per entry shipped, apply = another relay per entry applied (sparse);")
    line("    relay/shipped, relay/applied = all relays' CPU over shipped entries, over applied entries (every relay")
    line("    applies every entry, its own too); server = PostgreSQL's CPU per shipped entry; RT = round trips per")
    line("    shipped / per applied entry, from the relays' status files when they count them (shipping round trips per")
    line("    shipped entry, applying round trips per applied entry, when the relay tells them apart).")
    row([("H", 4), ("part", 10), ("ship", 8), ("apply", 8), ("relay/shipped", 14), ("relay/applied", 14), ("server", 9),
         ("RT/shipped", 11), ("RT/applied", 11), ("machine busy", 12)])
    for p in f.points {
      for (name, c) in [("sparse", p.sparse), ("aggregate", p.aggregate)] {
        row([(String(p.hosts), 4), (name, 10), (us(c.shipperCPUPerEntry), 8), (us(c.applierCPUPerEntry), 8),
             (us(c.relayCPUPerShippedEntry), 14), (us(c.relayCPUPerAppliedEntry), 14), (us(c.serverCPUPerShippedEntry), 9),
             (ratio(c.roundTripsPerShippedEntry), 11), (ratio(c.roundTripsPerAppliedEntry), 11),
             (c.machineBusyFraction.map { String(format: "%.0f%%", $0 * 100) } ?? "-", 12)])
      }
    }
    line("    machine busy = share of all CPUs busy meanwhile (/proc/stat), whoever used them; server CPU per NOTIFY alone: "
      + f.points.map { "\($0.hosts - 1) listeners \(us($0.notifyServerCPUPerMessage))" }.joined(separator: ", "))
    if let local = f.localDelivery { line("    GroupSync local delivery (N=1, sparse): \(local.text)") }
    for note in f.notes { line("    \(note)") }
  }
}
