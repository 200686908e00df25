import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

/// A thousand hosts on one PostgreSQL (issue 40), measured at 32, 64 and
/// 128 hosts on this machine: the notify transport (a session per relay,
/// LISTEN) beside the poll transport (the log read by position every
/// interval, through PgBouncer in transaction pooling mode), with the
/// server's `fsync` off and on; the notify lock's hold (pgbench); two
/// groups, one busy, one idle; and a model to 1,000 hosts from the
/// server-side coefficients.
struct BenchScaleResult: Codable {
  /// How the relays learn of each other's shipments (`--transport`).
  enum Transport: String, Codable, CaseIterable {
    /// A session per relay, LISTENing on the group's channel.
    case notify
    /// The log read by position every interval, through PgBouncer.
    case poll
  }

  struct Point: Codable {
    var transport: Transport
    var hosts: Int
    var fsync: Bool
    /// Poll transport: seconds between a relay's reads of the log.
    var pollIntervalSeconds: Double?
    /// From host 0 asking to commit a one-row insert to the last of the
    /// other hosts' listeners receiving it, sparse commits, µs.
    var latency: BenchStats
    /// The same samples in the order taken, ms.
    var latencySamplesMs: [Double]
    /// The latency run (one commit per entry): relays' and server's CPU.
    var sparse: BenchFleetResult.Cost
    /// The server's CPU per shipped entry, µs (schedstat: the postmaster
    /// and its live children): all of it over the latency run, and net of
    /// what it spends idle (poll: idle rate × the run's seconds; notify:
    /// nothing, its relays' quiet reads stop while commits flow).
    var serverCPUPerShipment: Double?
    var serverCPUPerShipmentNet: Double?
    /// PgBouncer's CPU per shipped entry, µs, net of its idle rate (poll).
    var poolerCPUPerShipmentNet: Double?
    /// The same from a steady run: host 0 commits `steadyCommitsPerSecond`
    /// for a few seconds, until every host has every row: more shipments
    /// against the same idle rate, so less noise (the model's figure).
    var steadyCommitsPerSecond: Double?
    var steadyShipments: Int?
    var serverCPUPerShipmentSteady: Double?
    /// Nobody writing for `idleSeconds`: the server's CPU per second, and
    /// per second per host (µs); the relays' per host; PgBouncer's.
    var idleSeconds: Double
    var serverIdleCPUPerSecond: Double?
    var serverIdleCPUPerHostPerSecond: Double?
    var relayIdleCPUPerHostPerSecond: Double
    var poolerIdleCPUPerSecond: Double?
    /// Another relay's CPU per entry applied (sparse), µs: all of it, and
    /// net of its idle rate.
    var relayCPUPerAppliedEntry: Double?
    var relayCPUPerAppliedEntryNet: Double?
    /// Client backends on the server (pg_stat_activity, the counting
    /// session left out), and through PgBouncer: its clients and its
    /// server connections (SHOW POOLS, SHOW SERVERS).
    var serverConnections: Int?
    var poolerClients: Int?
    var poolerServers: Int?
    /// The relays' resident memory (VmRSS), kB.
    var relayRSSMeanKB: Double
    var relayRSSMaxKB: Int64
    var wallSeconds: Double
  }

  /// The notify lock: one-row INSERTs a second with pgbench, 16 clients.
  struct Lock: Codable {
    var fsync: Bool
    var clients: Int
    var seconds: Double
    /// (a) the INSERT alone; (b) the INSERT and pg_notify in one
    /// transaction; (c) the INSERT committed, then pg_notify in a
    /// transaction of its own with synchronous_commit off.
    var insertPerSecond: Double
    var insertNotifyPerSecond: Double
    var insertThenNotifyPerSecond: Double
    /// 1 / (b): every notifying commit holds the lock through its flush, so
    /// (b) is the server-wide cap of notifying commits.
    var holdMicros: Double
  }

  /// What the server's checks of a shipment cost (issue 41): the median
  /// time of one call, one client, of gs_ship_5 and of gs_ship_3 (no
  /// checks) run alternately, for a shipment of `rows` rows.
  struct Checks: Codable {
    var rows: Int
    var rounds: Int
    var seconds: Double
    var ship3Micros: Double
    var ship5Micros: Double
  }

  /// Two groups on one server, one busy, one idle: the idle group's relays'
  /// CPU (exact, /proc/PID/task/*/schedstat), µs per second.
  struct Groups: Codable {
    var hostsPerGroup: Int
    var busyCommitsPerSecond: Double
    var busyCommits: Int
    var windowSeconds: Double
    /// The mean of two windows with both idle, before and after the busy one.
    var idleGroupCPUPerSecondBothIdle: Double
    var idleGroupCPUPerSecondBefore: Double
    var idleGroupCPUPerSecondAfter: Double
    var idleGroupCPUPerSecondOtherBusy: Double
    /// Busy over both idle; target ≤ 1.2.
    var ratio: Double?
  }

  var points: [Point] = []
  var locks: [Lock] = []
  var checks: [Checks] = []
  var groups: Groups?
  var model: BenchScaleModel?
  /// Limits raised for the phase, and restored after it.
  var limits: [String] = []
  var wallSeconds: Double = 0
  var notes: [String] = []
}

extension BenchRunner {
  /// The scale phase's settings: sizes, samples, windows.
  struct ScaleSettings {
    var sizes: [Int]
    var samples: Int
    var warmUps: Int
    var idleSeconds: Double
    var pollInterval: Double
    var poolSize: Int
    var lockSeconds: Int
    var checksSeconds: Int
    var checksRounds: Int
    var groupHosts: Int
    var groupWindow: Double
    var steadyRate: Double
    var steadySeconds: Double

    static let full = ScaleSettings(
      sizes: [32, 64, 128], samples: 20, warmUps: 5, idleSeconds: 2.5, pollInterval: 0.25, poolSize: 8, lockSeconds: 3,
      checksSeconds: 3, checksRounds: 3, groupHosts: 8, groupWindow: 3, steadyRate: 10, steadySeconds: 2)
    static let quick = ScaleSettings(
      sizes: [8, 16], samples: 8, warmUps: 3, idleSeconds: 1, pollInterval: 0.25, poolSize: 4, lockSeconds: 1,
      checksSeconds: 1, checksRounds: 1, groupHosts: 4, groupWindow: 1.5, steadyRate: 10, steadySeconds: 1)
  }

  func scale() throws {
    guard let (conninfo, relay) = relaySetUp(phase: "scale") else { return }
    let start = BenchClock.monotonic()
    let settings = options.quick ? ScaleSettings.quick : ScaleSettings.full
    results.scale = BenchScaleResult()
    var errors: [String] = []
    defer { results.scale?.wallSeconds = Double(BenchClock.monotonic() - start) / 1e9 }

    let limits = try ScaleLimits.raise(runner: self, conninfo: conninfo, hosts: settings.sizes.max()!)
    defer {
      results.scale?.limits = limits.restore()
      log("scale: limits restored: \(results.scale?.limits.joined(separator: "; ") ?? "")")
    }
    results.scale?.limits = limits.raised

    // 1. The notify lock, with pgbench (no relays running).
    do { results.scale?.locks = try scaleLock(conninfo, seconds: settings.lockSeconds) } catch {
      errors.append("the notify lock (pgbench): \(error)")
    }
    // 1b. What the server's checks of a shipment cost (pgbench).
    do {
      results.scale?.checks = try scaleChecks(
        conninfo, relay: relay, seconds: settings.checksSeconds, rounds: settings.checksRounds)
    } catch { errors.append("the shipment's checks (pgbench): \(error)") }
    // 2. Two groups, one busy, one idle.
    do {
      results.scale?.groups = try scaleGroups(
        conninfo: conninfo, relay: relay, hosts: settings.groupHosts, window: settings.groupWindow)
    } catch { errors.append("two groups: \(error)") }
    // 3. Both transports at every size, fsync off and on.
    for transport in BenchScaleResult.Transport.allCases {
      do { try scaleTransport(transport, conninfo: conninfo, relay: relay, settings: settings) } catch {
        log("scale: \(transport) FAILED: \(error)")
        errors.append("\(transport) transport: \(error)")
      }
    }
    // 4. The model to 1,000 hosts.
    let model = BenchScaleModel(result: results.scale!, pollInterval: settings.pollInterval)
    results.scale?.model = model
    for error in errors { results.scale?.notes.append("FAILED: \(error)") }
    if !errors.isEmpty { throw BenchError(errors.joined(separator: "; ")) }
  }

  /// Whether this build's relay has the poll transport (`--transport`).
  private func relayHasTransports(_ relay: String) -> Bool {
    guard let help = try? ChildProcess.run(relay, ["--help"], timeout: 30) else { return false }
    return (help.stdout + help.stderr).contains("--transport")
  }

  private func scaleTransport(_ transport: BenchScaleResult.Transport, conninfo: String, relay: String, settings: ScaleSettings) throws {
    let hasTransports = relayHasTransports(relay)
    var relayConninfo = conninfo
    var pooler: ScalePooler?
    defer { pooler?.stop() }
    var arguments: [String]
    switch transport {
    case .poll:
      guard hasTransports else {
        throw BenchError(
          "\(relay) has no --transport option: the poll transport is not in this build, so it was not measured")
      }
      pooler = try ScalePooler.start(
        folder: options.workFolder + "/scale/pgbouncer", conninfo: conninfo, poolSize: settings.poolSize)
      relayConninfo = pooler!.conninfo
      arguments = ["--transport", "poll", "--poll-interval", String(settings.pollInterval), "--no-prepared-statements"]
    case .notify:
      arguments = (hasTransports ? ["--transport", "notify"] : []) + ["--poll-interval", "1"]
    }
    let fleet = BenchRelayFleet(
      root: options.workFolder + "/scale/\(transport)",
      groupName: "scale-\(transport)-\(getpid())-\(BenchClock.realtime() / 1_000_000_000)", relay: relay,
      conninfo: relayConninfo, relayArguments: arguments)
    defer { fleet.stop() }
    for hosts in settings.sizes {
      let growStart = BenchClock.monotonic()
      try fleet.grow(to: hosts, timeout: 180)
      try fleet.waitConverged(timeout: 120)
      log(String(format: "scale: %@: %d hosts up and caught up in %.1f s", transport.rawValue, hosts,
                 Double(BenchClock.monotonic() - growStart) / 1e9))
      if transport == .notify && hosts == settings.sizes.first {
        try settleWakeUps(fleet)
      }
      for fsync in [false, true] {
        try setServerFsync(conninfo, on: fsync)
        let point = try scalePoint(
          fleet, transport: transport, fsync: fsync, pooler: pooler, conninfo: conninfo, settings: settings)
        results.scale?.points.append(point)
      }
      try setServerFsync(conninfo, on: false)
    }
  }

  /// Commits on host 0 until one reaches every host within half a second
  /// (at most 30 s). A relay reads which members listen when it announces
  /// itself, and again at its format check (every 10 s): host 0's, started
  /// with the others, may have found none listening yet and send no wake-up
  /// until then; the hosts learn of its shipments at their quiet read
  /// (`--poll-interval 1`), about 1.2 s after each commit.
  private func settleWakeUps(_ fleet: BenchRelayFleet) throws {
    let start = BenchClock.monotonic()
    var slow = 0
    while true {
      let latency = try fleet.lastHostLatencies(samples: 1, warmUps: 0, timeout: 30)[0]
      if latency < 500_000_000 { break }
      slow += 1
      guard BenchClock.monotonic() - start < 30_000_000_000 else {
        throw BenchError("notify: commits still took \(latency / 1_000_000) ms to the last host 30 s after the fleet started")
      }
    }
    if slow > 0 {
      let note = String(
        format: "notify: %d commits right after the fleet started took over 0.5 s to the last host (woken by the "
          + "relays' quiet read, not by a wake-up: host 0's relay had not yet seen a listening member), for %.1f s; "
          + "measured after", slow, Double(BenchClock.monotonic() - start) / 1e9)
      results.scale?.notes.append(note)
      log("scale: " + note)
    }
  }

  private func scalePoint(
    _ fleet: BenchRelayFleet, transport: BenchScaleResult.Transport, fsync: Bool, pooler: ScalePooler?, conninfo: String,
    settings: ScaleSettings
  ) throws -> BenchScaleResult.Point {
    let start = BenchClock.monotonic()
    let hosts = fleet.count
    let (folders, relays) = (fleet.folders, fleet.relays)
    // Commits at no fixed phase of the pollers' cycles: a random gap.
    let jitter = transport == .poll ? Int(settings.pollInterval * 1000) : 20
    var before: FleetSnapshot?
    var poolerBefore: Int64?
    var serverBefore: Int64?
    let latencies: [Int64]
    do {
      latencies = try fleet.lastHostLatencies(
        samples: settings.samples, warmUps: settings.warmUps, timeout: 30, gap: { _ in 5 + Int.random(in: 0...jitter) },
        measuring: {
          before = fleetSnapshot(relays, folders: folders, hosts: hosts)
          poolerBefore = pooler?.cpuNanoseconds()
          serverBefore = Self.serverCPUNanoseconds(conninfo)
        })
    } catch { throw BenchError("\(transport), \(hosts) hosts, fsync \(fsync ? "on" : "off"): \(error)") }
    let after = fleetSnapshot(relays, folders: folders, hosts: hosts)
    let poolerAfter = pooler?.cpuNanoseconds()
    let serverAfter = Self.serverCPUNanoseconds(conninfo)
    var sparse = fleetCost(from: before!, to: after)
    sparse.addShipperAndAppliers(from: before!, to: after)

    // Idle: nobody writes for a while.
    let idleBefore = fleetSnapshot(relays, folders: folders, hosts: hosts)
    let idlePoolerBefore = pooler?.cpuNanoseconds()
    let idleServerBefore = Self.serverCPUNanoseconds(conninfo)
    BenchClock.sleep(milliseconds: Int(settings.idleSeconds * 1000))
    let idleAfter = fleetSnapshot(relays, folders: folders, hosts: hosts)
    let idlePoolerAfter = pooler?.cpuNanoseconds()
    let idleServerAfter = Self.serverCPUNanoseconds(conninfo)
    let idle = fleetCost(from: idleBefore, to: idleAfter)
    // The server's and the pooler's CPU exactly (schedstat, ns), µs.
    func micros(_ before: Int64?, _ after: Int64?) -> Double? {
      guard let before, let after else { return nil }
      return Double(after - before) / 1000
    }
    let serverIdlePerSecond = micros(idleServerBefore, idleServerAfter).map { $0 / idle.seconds }
    let sparseServer = micros(serverBefore, serverAfter)
    let relayIdlePerHost = idle.relayCPUMicros / idle.seconds / Double(hosts)
    var poolerIdlePerSecond: Double?
    if let idlePooler = micros(idlePoolerBefore, idlePoolerAfter) { poolerIdlePerSecond = idlePooler / idle.seconds }

    let shipped = Double(sparse.shippedEntries)
    // A poll relay reads the log every interval whether or not anyone
    // writes: its idle rate goes on under the commits and comes off. A
    // notify relay reads it only after a quiet second, which commits every
    // few ms never leave: nothing comes off.
    let idleGoesOn = transport == .poll
    func net(_ total: Double?, idlePerSecond: Double?) -> Double? {
      guard let total, let idlePerSecond, shipped > 0 else { return nil }
      return (total - (idleGoesOn ? idlePerSecond * sparse.seconds : 0)) / shipped
    }
    let poolerNet = net(micros(poolerBefore, poolerAfter), idlePerSecond: poolerIdlePerSecond)
    // Another relay's CPU per entry applied, net of its idle rate (poll).
    var applierNet: Double?
    let others = 1..<hosts
    let otherApplied = others.reduce(0) { $0 + after.relays[$1].applied - before!.relays[$1].applied }
    if otherApplied > 0 {
      let ticks = others.reduce(Int64(0)) { $0 + after.relays[$1].cpuTicks - before!.relays[$1].cpuTicks }
      let idle = idleGoesOn ? relayIdlePerHost * Double(hosts - 1) * sparse.seconds : 0
      applierNet = (Double(ticks) * 10_000 - idle) / Double(otherApplied)
    }

    // Steady: host 0 commits at a steady rate, then every host catches up.
    let steadyBefore = fleetSnapshot(relays, folders: folders, hosts: hosts)
    let steadyServerBefore = Self.serverCPUNanoseconds(conninfo)
    let steadyStart = BenchClock.monotonic()
    for index in 0..<Int(settings.steadyRate * settings.steadySeconds) {
      try fleet.groups[0].store.write { db in
        try db.execute(sql: "INSERT INTO item(host, body, stamp) VALUES (0, 's', 0)")
      }
      BenchClock.sleep(untilMonotonic: steadyStart + Int64(Double(index + 1) / settings.steadyRate * 1e9))
    }
    try fleet.waitConverged(timeout: 60)
    let steady = fleetCost(from: steadyBefore, to: fleetSnapshot(relays, folders: folders, hosts: hosts))
    var steadyPerShipment: Double?
    if let total = micros(steadyServerBefore, Self.serverCPUNanoseconds(conninfo)), let serverIdlePerSecond,
      steady.shippedEntries > 0
    {
      steadyPerShipment =
        (total - (idleGoesOn ? serverIdlePerSecond * steady.seconds : 0)) / Double(steady.shippedEntries)
    }

    // Connections, on the server and through the pooler.
    let connections = (try? psql(
      conninfo, "SELECT count(*) - 1 FROM pg_stat_activity WHERE backend_type = 'client backend'")).flatMap { Int($0) }
    let pool = pooler?.pools()
    let rss = relays.compactMap { BenchProc.statusKilobytes(pid: $0.pid, "VmRSS") }

    let point = BenchScaleResult.Point(
      transport: transport, hosts: hosts, fsync: fsync,
      pollIntervalSeconds: transport == .poll ? settings.pollInterval : nil,
      latency: BenchStats(nanoseconds: latencies),
      latencySamplesMs: latencies.map { (Double($0) / 1e4).rounded() / 100 }, sparse: sparse,
      serverCPUPerShipment: sparseServer.flatMap { shipped > 0 ? $0 / shipped : nil },
      serverCPUPerShipmentNet: net(sparseServer, idlePerSecond: serverIdlePerSecond),
      poolerCPUPerShipmentNet: poolerNet, steadyCommitsPerSecond: settings.steadyRate,
      steadyShipments: steady.shippedEntries, serverCPUPerShipmentSteady: steadyPerShipment, idleSeconds: idle.seconds, serverIdleCPUPerSecond: serverIdlePerSecond,
      serverIdleCPUPerHostPerSecond: serverIdlePerSecond.map { $0 / Double(hosts) },
      relayIdleCPUPerHostPerSecond: relayIdlePerHost, poolerIdleCPUPerSecond: poolerIdlePerSecond,
      relayCPUPerAppliedEntry: sparse.applierCPUPerEntry, relayCPUPerAppliedEntryNet: applierNet,
      serverConnections: connections, poolerClients: pool?.clients, poolerServers: pool?.servers,
      relayRSSMeanKB: rss.isEmpty ? 0 : Double(rss.reduce(0, +)) / Double(rss.count), relayRSSMaxKB: rss.max() ?? 0,
      wallSeconds: Double(BenchClock.monotonic() - start) / 1e9)
    func us(_ value: Double?) -> String { value.map { String(format: "%.0f", $0) } ?? "-" }
    log(
      "scale: \(transport), \(hosts) hosts, fsync \(fsync ? "on" : "off"): to the last host p50 "
        + "\(BenchFormat.us(point.latency.p50)) p99 \(BenchFormat.us(point.latency.p99)); server \(us(point.serverCPUPerShipmentNet)) us "
        + "per shipment (sparse), \(us(steadyPerShipment)) (steady), idle \(us(point.serverIdleCPUPerHostPerSecond)) us/s per host; \(connections.map(String.init) ?? "-") "
        + "connections\(pool.map { " (pooler: \($0.clients) clients, \($0.servers) servers)" } ?? ""); relay RSS "
        + "\(Int(point.relayRSSMeanKB)) kB mean, \(point.relayRSSMaxKB) max; relay \(us(applierNet)) us per applied entry (net)")
    return point
  }
}

/// The limits 128 hosts need, raised for the phase and put back after it,
/// whatever happened: the kernel's inotify instances per user (every relay
/// and listener holds one) and the server's `max_connections` (every
/// notify relay holds a session; a restart); and the server's `fsync`,
/// which the phase turns on and off, left off.
final class ScaleLimits: @unchecked Sendable {
  // @unchecked: every mutable field is read and written under `lock`
  // (restore runs on the phase's thread, or on a signal's queue).
  private let lock = NSLock()
  private var signalSources: [DispatchSourceSignal] = []
  private let runner: BenchRunner
  private let conninfo: String
  private var inotifyBefore: Int?
  private var maxConnectionsBefore: Int?
  private var fsyncRestored = false
  private(set) var raised: [String] = []
  private static let inotifyPath = "/proc/sys/fs/inotify/max_user_instances"

  private init(runner: BenchRunner, conninfo: String) {
    self.runner = runner
    self.conninfo = conninfo
  }

  static func raise(runner: BenchRunner, conninfo: String, hosts: Int) throws -> ScaleLimits {
    let limits = ScaleLimits(runner: runner, conninfo: conninfo)
    let inotifyNeeded = max(4096, hosts * 8)
    if let text = BenchProc.read(inotifyPath), let current = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)),
      current < inotifyNeeded
    {
      if Self.sysctl(inotifyNeeded) {
        limits.inotifyBefore = current
        limits.raised.append("fs.inotify.max_user_instances \(current) -> \(inotifyNeeded)")
      } else {
        limits.raised.append("fs.inotify.max_user_instances \(current): could not raise it (not root?)")
      }
    }
    let connectionsNeeded = hosts * 2 + 64
    let current = Int(try runner.psql(conninfo, "SHOW max_connections")) ?? 100
    if current < connectionsNeeded {
      limits.maxConnectionsBefore = current
      do {
        _ = try runner.psql(conninfo, "ALTER SYSTEM SET max_connections = \(connectionsNeeded)")
        try limits.restartServer()
        limits.raised.append("the server's max_connections \(current) -> \(connectionsNeeded) (ALTER SYSTEM, restart)")
      } catch {
        _ = limits.restore()
        throw error
      }
    }
    limits.restoreOnSignals()
    return limits
  }

  /// SIGINT or SIGTERM during the phase (Ctrl-C on `make bench`): the
  /// limits put back, then the exit the signal would have made.
  private func restoreOnSignals() {
    for number in [SIGINT, SIGTERM] {
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      source.setEventHandler { [self] in
        for line in restore() { FileHandle.standardError.write(Data("groupsync-bench: scale: \(line)\n".utf8)) }
        // The signal is blocked for the dispatch source: exit as it would.
        _exit(128 + number)
      }
      source.resume()
      signalSources.append(source)
    }
  }

  /// Puts every raised limit back (once); says what it did.
  func restore() -> [String] {
    lock.lock()
    defer { lock.unlock() }
    if !signalSources.isEmpty {
      for source in signalSources { source.cancel() }
      signalSources = []
      signal(SIGINT, SIG_DFL)
      signal(SIGTERM, SIG_DFL)
    }
    var done: [String] = []
    if !fsyncRestored {
      // The phase turns the server's fsync on and off: off, as it was.
      fsyncRestored = true
      if (try? runner.setServerFsync(conninfo, on: false)) == nil { done.append("the server's fsync NOT set back to off") }
    }
    if let before = inotifyBefore {
      done.append("fs.inotify.max_user_instances back to \(before)" + (Self.sysctl(before) ? "" : ": FAILED"))
      inotifyBefore = nil
    }
    if let before = maxConnectionsBefore {
      do {
        _ = try runner.psql(conninfo, "ALTER SYSTEM RESET max_connections")
        try restartServer()
        let now = (try? runner.psql(conninfo, "SHOW max_connections")) ?? "?"
        done.append("the server's max_connections back to \(now) (was \(before))")
      } catch {
        done.append("the server's max_connections NOT restored to \(before): \(error)")
      }
      maxConnectionsBefore = nil
    }
    return raised + done
  }

  private static func sysctl(_ value: Int) -> Bool {
    guard let file = FileHandle(forWritingAtPath: inotifyPath) else { return false }
    defer { try? file.close() }
    guard (try? file.write(contentsOf: Data("\(value)\n".utf8))) != nil else { return false }
    return BenchProc.read(inotifyPath)?.trimmingCharacters(in: .whitespacesAndNewlines) == String(value)
  }

  /// `pg_ctl restart` of the server behind `conninfo`, as its owner,
  /// with the options it was started with (postmaster.opts); waits.
  private func restartServer() throws {
    let data = try runner.psql(conninfo, "SHOW data_directory")
    guard let version = try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql").sorted().last else {
      throw BenchError("no /usr/lib/postgresql/VERSION/bin/pg_ctl")
    }
    let pgCtl = "/usr/lib/postgresql/\(version)/bin/pg_ctl"
    let log = URL(fileURLWithPath: data).deletingLastPathComponent().appendingPathComponent("server.log").path
    var arguments = [pgCtl, "-D", data, "-l", log, "-w", "-m", "fast", "restart"]
    let executable: String
    if getuid() == 0 {
      executable = "/usr/sbin/runuser"
      arguments = ["-u", "postgres", "--"] + arguments
    } else {
      executable = arguments.removeFirst()
    }
    let run = try ChildProcess.run(executable, arguments, timeout: 120)
    guard run.succeeded else { throw BenchError("pg_ctl restart failed: \(run.stderr.suffix(400))") }
    try benchWait("the server back after its restart", timeout: 60) { (try? runner.psql(conninfo, "SELECT 1")) == "1" }
  }
}

/// A PgBouncer in transaction pooling mode in front of the benchmark's
/// server (Benchmarks/pgbouncer.sh), on a unix socket in `folder`.
struct ScalePooler {
  let folder: String
  let port: Int
  let script: String

  var conninfo: String { "host=\(folder) port=\(port) user=postgres dbname=postgres" }
  var adminConninfo: String { "host=\(folder) port=\(port) user=postgres dbname=pgbouncer" }

  static func start(folder: String, conninfo: String, poolSize: Int) throws -> ScalePooler {
    let settings = BenchRunner.conninfoSettings(conninfo)
    guard let host = settings["host"], host.hasPrefix("/") else {
      throw BenchError("the poll transport's pooler needs the server on a unix socket (host=/folder in the conninfo)")
    }
    let port = (Int(settings["port"] ?? "5432") ?? 5432) + 1
    // Benchmarks/pgbouncer.sh, beside this file's folder in the package.
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .appendingPathComponent("pgbouncer.sh").path
    guard FileManager.default.fileExists(atPath: script) else { throw BenchError("\(script) is missing") }
    let pooler = ScalePooler(folder: folder, port: port, script: script)
    let run = try ChildProcess.run(
      "/bin/sh", [script, "start", folder, String(port), host, settings["port"] ?? "5432", String(poolSize)], timeout: 300)
    guard run.succeeded else { throw BenchError("pgbouncer.sh start failed: \(run.stdout.suffix(300)) \(run.stderr.suffix(600))") }
    return pooler
  }

  func stop() {
    _ = try? ChildProcess.run("/bin/sh", [script, "stop", folder], timeout: 60)
  }

  /// PgBouncer's CPU time (one process), ns.
  func cpuNanoseconds() -> Int64? {
    guard let text = BenchProc.read(folder + "/pgbouncer.pid"),
      let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    else { return nil }
    return BenchProc.cpuNanoseconds(pid: pid)
  }

  /// The pool of the database `postgres`: clients (active + waiting) and
  /// server connections (SHOW SERVERS).
  func pools() -> (clients: Int, servers: Int)? {
    guard let pools = try? Self.table(adminConninfo, "SHOW POOLS"),
      let pool = pools.first(where: { $0["database"] == "postgres" }),
      let servers = try? Self.table(adminConninfo, "SHOW SERVERS")
    else { return nil }
    let clients = (Int(pool["cl_active"] ?? "") ?? 0) + (Int(pool["cl_waiting"] ?? "") ?? 0)
    return (clients, servers.filter { $0["database"] == "postgres" }.count)
  }

  /// Rows of `sql`'s answer by column name, through psql (unaligned).
  private static func table(_ conninfo: String, _ sql: String) throws -> [[String: String]] {
    let run = try ChildProcess.run("/usr/bin/psql", ["-d", conninfo, "-X", "-A", "-P", "footer=off", "-c", sql], timeout: 30)
    guard run.succeeded else { throw BenchError("psql \(sql): \(run.stderr.suffix(300))") }
    let lines = run.stdout.split(separator: "\n").map { $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init) }
    guard let header = lines.first else { return [] }
    return lines.dropFirst().map { Dictionary(zip(header, $0), uniquingKeysWith: { a, _ in a }) }
  }
}
