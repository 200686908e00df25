// The terms the hosts phase's targets are built from (issue 39), measured
// in the same phase as A → B so that the targets hold on any machine:
// GroupSync's local delivery L, a one-row write W, the writer's rate with
// one listener (R_1) and with a relay's doorbell (R_w), and S, the
// server's own part of a shipment.
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

struct BenchHostsTerms: Codable {
  /// L: from a commit to another process's listener, sparse commits 5 ms
  /// apart (the latency phase's measure, N = 1), µs.
  var localDelivery: BenchStats
  /// c_L: that listener's CPU per change set, µs.
  var listenerCPUPerChangeSet: Double?
  /// W: a one-row `Store.write` with one listener attached (stopped, so
  /// that it takes no CPU), back to back, µs.
  var write: BenchStats
  /// The same write 5 ms apart, the listener live (L's commits): what A's
  /// sparse commits pay, caches cold after each pause, µs.
  var sparseWrite: BenchStats?
  /// R_1: that writer's one-row commits a second, as fast as it commits;
  /// R_w: the same writer's with a relay's doorbell attached instead, the
  /// relay stopped. Measured in alternating blocks.
  var rateWithListener: Double
  var rateWithDoorbell: Double
  /// S: the server's part of a shipment: a C client calls the prepared
  /// shipping function for a one-row entry, from the call sent to a C
  /// listener stamping its notification (`pgnotify --ship`), µs.
  var ship: BenchStats?
}

extension BenchRunner {
  /// Measures L, c_L, W, R_1, R_w (and S when pgnotify is here) in
  /// `root/local` and `root/rate`, the latter with a relay of group
  /// `group` host `r` that is stopped while the writer runs.
  func hostsTerms(conninfo: String, relay: String, root: String, group: String) throws -> BenchHostsTerms {
    let sparse = options.quick ? 60 : 300
    let rateCommits = options.quick ? 300 : 1500
    let local = try BenchGroupWriter(path: root + "/local")
    let rate = try BenchGroupWriter(path: root + "/rate")
    let listeners = try startListeners(1, folder: root + "/local")
    defer { listeners.forEach { $0.quit() } }
    let rateRelay = try ChildProcess(
      executable: relay,
      arguments: [root + "/rate", "--postgres", conninfo, "--host", "r", "--group", group, "--poll-interval", "1"],
      name: "relay r")
    defer {
      rateRelay.resume()
      rateRelay.signal(SIGTERM)
      _ = rateRelay.finish(timeout: 30)
    }
    try waitUntil("relay r connected", timeout: 30) { rateRelay.stdout.contains("\"connected\"") }
    // One one-row entry of host r in the log: S ships its like.
    try rate.transaction(rows: 1, .insert)
    try waitUntil("relay r shipped a row", timeout: 30) { rateRelay.stdout.contains("{\"shipped\"") }

    // L and c_L: sparse commits to a live listener.
    for _ in 0..<20 { try local.transaction(rows: 1, .insert) }
    _ = try collect(listeners, until: try local.group.store.currentSequence())
    var committed: [Int64: Int64] = [:]
    var sparseWrites: [Int64] = []
    var next = BenchClock.monotonic()
    for _ in 0..<sparse {
      next += 5_000_000
      BenchClock.sleep(untilMonotonic: next)
      let commit = try local.commit(rows: 1, .insert)
      committed[commit.sequence] = commit.committedAt
      sparseWrites.append(commit.duration)
    }
    let reports = try collect(listeners, until: committed.keys.max()!)
    let (latencies, _) = Self.lastListenerLatencies(committed: committed, reports: reports)
    let listenerCPU = reports.first.flatMap { report in
      report.cpuDeltaNs.map { Double($0) / 1000 / Double(max(report.delivered, 1)) }
    }

    // W, R_1 and R_w: as fast as the writer commits, the listener and the
    // relay stopped, in alternating blocks.
    listeners.forEach { $0.suspend() }
    rateRelay.suspend()
    try waitUntil("listener and relay r stopped", timeout: 10) {
      BenchProc.isStopped(pid: listeners[0].pid) && BenchProc.isStopped(pid: rateRelay.pid)
    }
    var writes: [Int64] = []
    var withListener: (commits: Int, ns: Int64) = (0, 0)
    var withDoorbell: (commits: Int, ns: Int64) = (0, 0)
    for round in 0..<4 {
      let writer = round % 2 == 0 ? local : rate
      let start = BenchClock.monotonic()
      for _ in 0..<(rateCommits / 2) {
        let duration = try writer.transaction(rows: 1, .insert)
        if writer === local { writes.append(duration) }
      }
      let elapsed = BenchClock.monotonic() - start
      if writer === local {
        withListener = (withListener.commits + rateCommits / 2, withListener.ns + elapsed)
      } else {
        withDoorbell = (withDoorbell.commits + rateCommits / 2, withDoorbell.ns + elapsed)
      }
    }
    listeners.forEach { $0.resume() }
    rateRelay.resume()
    _ = try collect(listeners, until: try local.group.store.currentSequence())

    var terms = BenchHostsTerms(
      localDelivery: BenchStats(nanoseconds: latencies), listenerCPUPerChangeSet: listenerCPU,
      write: BenchStats(nanoseconds: writes), sparseWrite: BenchStats(nanoseconds: sparseWrites),
      rateWithListener: Double(withListener.commits) / (Double(withListener.ns) / 1e9),
      rateWithDoorbell: Double(withDoorbell.commits) / (Double(withDoorbell.ns) / 1e9))
    // S, on the same group: relay r registered host r and its store; its
    // shipments stop before pgnotify ships under its name.
    rateRelay.signal(SIGTERM)
    _ = rateRelay.finish(timeout: 30)
    if let pgnotify = options.pgnotify {
      terms.ship = try shipFloor(pgnotify: pgnotify, conninfo: conninfo, group: group, host: "r", count: sparse)
    }
    log(
      "hosts: terms: L p50 \(BenchFormat.us(terms.localDelivery.p50)), W p50 \(BenchFormat.us(terms.write.p50)), "
        + "S p50 \(terms.ship.map { BenchFormat.us($0.p50) } ?? "-"), R_1 \(Int(terms.rateWithListener))/s, "
        + "R_w \(Int(terms.rateWithDoorbell))/s")
    return terms
  }

  /// S: `pgnotify --ship` for the group's host `host` (registered by its
  /// relay, which is stopped), one listener.
  func shipFloor(pgnotify: String, conninfo: String, group: String, host: String, count: Int) throws -> BenchStats {
    let run = try ChildProcess.run(
      pgnotify,
      ["--ship", "--conninfo", conninfo, "--group", group, "--store", "main", "--host", host, "--listeners", "1",
       "--count", String(count), "--interval-us", "5000", "--warmup", "20"],
      timeout: 300)
    guard run.succeeded else { throw BenchError("pgnotify --ship failed: \(run.stderr.suffix(500))") }
    return BenchStats(nanoseconds: try JSONDecoder().decode(FloorResult.self, from: Data(run.stdout.utf8)).latencyNs)
  }

  func waitUntil(_ what: String, timeout: Double, _ condition: () -> Bool) throws {
    try benchWait(what, timeout: timeout, every: 2, condition)
  }
}
