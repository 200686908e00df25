// Groups that do not wake each other (issue 40, item 1): two groups on one
// server, one busy, one idle; what the idle group's relays spend.
import Foundation
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

extension BenchRunner {
  /// Two groups of `hosts` hosts (notify transport): the idle group's
  /// relays' CPU a second while both are idle, then while host 0 of the
  /// other commits 200 one-row inserts a second, then both idle again
  /// (the two idle windows averaged).
  func scaleGroups(conninfo: String, relay: String, hosts: Int, window: Double) throws -> BenchScaleResult.Groups {
    let stamp = "\(getpid())-\(BenchClock.realtime() / 1_000_000_000)"
    let fleets = ["busy", "idle"].map { name in
      BenchRelayFleet(
        root: options.workFolder + "/scale/groups/\(name)", groupName: "scale-\(name)-\(stamp)", relay: relay,
        conninfo: conninfo, relayArguments: ["--poll-interval", "1"])
    }
    defer { for fleet in fleets { fleet.stop() } }
    for fleet in fleets { try fleet.grow(to: hosts, timeout: 120) }
    let (busy, idle) = (fleets[0], fleets[1])
    // A few commits through each group first: every relay past start-up.
    for fleet in fleets { _ = try fleet.lastHostLatencies(samples: 1, warmUps: 2) }
    func idleGroupNs() -> Int64 { idle.relays.reduce(0) { $0 + (BenchProc.cpuNanoseconds(pid: $1.pid) ?? 0) } }
    func idleWindow() -> Double {
      let (start, cpu) = (BenchClock.monotonic(), idleGroupNs())
      BenchClock.sleep(milliseconds: Int(window * 1000))
      return Double(idleGroupNs() - cpu) / 1000 / (Double(BenchClock.monotonic() - start) / 1e9)
    }
    let quiet1 = idleWindow()
    // Busy: paced one-row commits on host 0 of the busy group.
    let rate = 200.0
    let (start, cpu) = (BenchClock.monotonic(), idleGroupNs())
    let count = Int(rate * window)
    let store = busy.groups[0].store
    for index in 0..<count {
      try store.write { db in
        try db.execute(sql: "INSERT INTO item(host, body, stamp) VALUES (0, 'busy', 0)")
      }
      BenchClock.sleep(untilMonotonic: start + Int64(Double(index + 1) / rate * 1e9))
    }
    let busySeconds = Double(BenchClock.monotonic() - start) / 1e9
    let busyCPU = Double(idleGroupNs() - cpu) / 1000 / busySeconds
    // The busy group drains before the second idle window.
    try busy.waitConverged(timeout: 60)
    let quiet2 = idleWindow()
    let quiet = (quiet1 + quiet2) / 2
    let groups = BenchScaleResult.Groups(
      hostsPerGroup: hosts, busyCommitsPerSecond: Double(count) / busySeconds, busyCommits: count,
      windowSeconds: window, idleGroupCPUPerSecondBothIdle: quiet, idleGroupCPUPerSecondBefore: quiet1,
      idleGroupCPUPerSecondAfter: quiet2, idleGroupCPUPerSecondOtherBusy: busyCPU,
      ratio: quiet > 0 ? busyCPU / quiet : nil)
    log(String(format: "scale: two groups of %d hosts: the idle group's relays %.0f us/s while both idle, %.0f us/s "
                 + "while the other commits %.0f/s: %.2f x", hosts, quiet, busyCPU, groups.busyCommitsPerSecond,
               groups.ratio ?? .nan))
    return groups
  }
}
