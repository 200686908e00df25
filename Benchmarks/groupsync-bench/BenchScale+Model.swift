// The model to 1,000 hosts (issue 40, item 4), from the scale phase's
// server-side coefficients.
import Foundation

/// Server CPU, connections, the write rate each transport keeps up with,
/// and the latency floor, for H = 128 to 1,000 hosts in one group, from
/// the coefficients measured at 32 to 128 hosts.
struct BenchScaleModel: Codable {
  struct Coefficients: Codable {
    var transport: BenchScaleResult.Transport
    /// The points the per-shipment fit used: every size, fsync off and on,
    /// less those whose figure came out negative (an idle rate taken in a
    /// lull).
    var fittedPoints: Int
    /// Server CPU per shipment = fixed + perHost × H, µs (least squares
    /// over the measured points, from the steady runs, poll's net of its
    /// idle rate): for notify, perHost
    /// is a listener woken; for poll, a host reading the entry.
    var serverPerShipmentFixed: Double
    var serverPerShipmentPerHost: Double
    /// Server CPU per host per second with nobody writing, µs (notify: the
    /// relay's fallback poll every second; poll: interval polls).
    var serverIdlePerHostPerSecond: Double
    /// Poll: the server's CPU per empty poll, µs (idle per host × interval).
    var serverPerPoll: Double?
    /// Server connections per host (notify), or the pool's (poll).
    var connectionsPerHost: Double?
    var connectionsFixed: Int?
    /// A relay's CPU per entry applied, µs (net of its idle), at the
    /// largest size: runs on each host, in parallel.
    var relayPerAppliedEntry: Double?
    /// The notify lock's hold per notifying commit, µs (pgbench, fsync on,
    /// the INSERT and pg_notify in one transaction: the design before relay
    /// 4), and the commits a second with the wake-up apart (relay 4: its
    /// own transaction, synchronous_commit off), the notify transport's cap.
    var lockHoldMicros: Double?
    var wakeApartCommitsPerSecond: Double?
    var pollIntervalSeconds: Double?
  }

  struct Row: Codable {
    var transport: BenchScaleResult.Transport
    var hosts: Int
    /// Server CPU at `writeRate` commits a second (all groups), in cores.
    var writeRate: Double
    var serverCores: Double
    var connections: Int
    /// Commits a second at which the server spends one core, or (notify)
    /// the notify lock's cap, whichever is lower; and which.
    var maxWriteRate: Double
    var bound: String
    /// The latency floor to a host, p50, ms; and to the last host.
    var latencyFloorMs: Double
    var latencyLastHostMs: Double
    /// Poll: the interval at which the hosts' empty polls take half a core.
    var pollIntervalForHalfCoreSeconds: Double?
  }

  var assumptions: [String]
  var coefficients: [Coefficients] = []
  var rows: [Row] = []
  /// Per size, the transport the model picks, and why.
  var picks: [String] = []

  static let sizes = [128, 256, 512, 1000]
  static let writeRate = 100.0

  init(result: BenchScaleResult, pollInterval: Double) {
    assumptions = [
      "one group of H hosts (every commit's group holds every host): the worst case; with a channel per group, a "
        + "shipment wakes only its group's members, so perHost x H becomes perHost x the group's size",
      "the server has one core for GroupSync and its CPU is the bound (2 cores here, shared with the relays); the "
        + "write rate is commits a second over the whole server, sparse (one commit per shipment)",
      "server CPU = H x idle per host + rate x (fixed + perHost x H), coefficients fitted over the measured sizes "
        + "(poll: net of idle); PgBouncer's CPU is not counted (it may run elsewhere; measured beside); for notify the "
        + "idle term (quiet reads) stops while commits flow, so counting it over-states notify at high rates",
      "notify: a notifying commit holds the notify lock through its commit, WAL flush included, so shipments that "
        + "notify in their own transaction are capped at 1 / hold server-wide (pgbench (b), fsync on); relay 4 sends "
        + "the wake-up apart (its own transaction, synchronous_commit off), capped at pgbench (c); poll: a group "
        + "whose members all poll sends no wake-up, no lock",
      "latency floor: notify = one wake-up commit (1 / pgbench (c)) + the server's per-host work on one core "
        + "(perHost x H: the listeners woken, and each relay's reads and writes for the entry) + one relay's "
        + "apply; poll = interval / 2 (one host) or the interval (the last of many) + one poll + one relay's apply; "
        + "the hosts' own local delivery (~0.5 ms) comes on top",
      "connections: notify = one session (or more, as measured) per relay; poll = the pool's server connections, "
        + "whatever H (max_connections 100 by default)",
    ]
    let hold = result.locks.first { $0.fsync }?.holdMicros
    let apart = result.locks.first { $0.fsync }?.insertThenNotifyPerSecond
    for transport in BenchScaleResult.Transport.allCases {
      let all = result.points.filter { $0.transport == transport }
      guard !all.isEmpty else { continue }
      let points = all
      let measured = points.compactMap { p in
        (p.serverCPUPerShipmentSteady ?? p.serverCPUPerShipmentNet).flatMap { $0 > 0 ? (Double(p.hosts), $0) : nil }
      }
      let fit = Self.fit(measured)
      let idle = Self.mean(points.compactMap(\.serverIdleCPUPerHostPerSecond)) ?? 0
      let largest = points.max { $0.hosts < $1.hosts }
      var c = Coefficients(
        transport: transport, fittedPoints: measured.count, serverPerShipmentFixed: fit.fixed,
        serverPerShipmentPerHost: fit.perHost, serverIdlePerHostPerSecond: idle,
        relayPerAppliedEntry: largest?.relayCPUPerAppliedEntryNet)
      if transport == .poll {
        c.pollIntervalSeconds = pollInterval
        c.serverPerPoll = idle * pollInterval
        c.connectionsFixed = points.compactMap { $0.poolerServers ?? $0.serverConnections }.max()
      } else {
        c.lockHoldMicros = hold
        c.wakeApartCommitsPerSecond = apart
        c.connectionsPerHost = Self.mean(points.compactMap { p in p.serverConnections.map { Double($0) / Double(p.hosts) } })
      }
      coefficients.append(c)
      for hosts in Self.sizes {
        let h = Double(hosts)
        let perShipment = max(1, c.serverPerShipmentFixed + c.serverPerShipmentPerHost * h)
        let idleCPU = idle * h
        let cores = (idleCPU + Self.writeRate * perShipment) / 1e6
        var maxRate = max(0, (1e6 - idleCPU) / perShipment)
        var bound = "server CPU"
        if transport == .notify, let apart, apart < maxRate {
          maxRate = apart
          bound = "notify lock"
        }
        let apply = (c.relayPerAppliedEntry ?? 0) / 1000
        let floor: Double
        let last: Double
        if transport == .notify {
          floor = (1e6 / (apart ?? 1e6) + c.serverPerShipmentPerHost * h) / 1000 + apply
          last = floor
        } else {
          let poll = (c.serverPerPoll ?? 0) / 1000
          floor = pollInterval * 1000 / 2 + poll + apply
          last = pollInterval * 1000 + poll + apply
        }
        let connections = transport == .notify
          ? Int((c.connectionsPerHost ?? 1) * h) : (c.connectionsFixed ?? 0)
        rows.append(
          Row(transport: transport, hosts: hosts, writeRate: Self.writeRate, serverCores: cores,
              connections: connections, maxWriteRate: maxRate, bound: bound, latencyFloorMs: floor,
              latencyLastHostMs: last,
              pollIntervalForHalfCoreSeconds: c.serverPerPoll.map { h * $0 / 0.5e6 }))
      }
    }
    for hosts in Self.sizes {
      let notify = rows.first { $0.transport == .notify && $0.hosts == hosts }
      let poll = rows.first { $0.transport == .poll && $0.hosts == hosts }
      switch (notify, poll) {
      case (let n?, let p?):
        if n.connections > 500 {
          picks.append("\(hosts) hosts: poll (notify needs \(n.connections) server sessions)")
        } else if p.maxWriteRate > n.maxWriteRate * 1.2 {
          picks.append(String(format: "%d hosts: poll (keeps up to %.0f commits/s, notify %.0f)", hosts, p.maxWriteRate,
                              n.maxWriteRate))
        } else {
          picks.append(String(format: "%d hosts: notify (latency %.1f ms against poll's %.0f ms; keeps up to %.0f/s)",
                              hosts, n.latencyFloorMs, p.latencyFloorMs, n.maxWriteRate))
        }
      default:
        picks.append("\(hosts) hosts: \(notify != nil ? "notify" : poll != nil ? "poll" : "none") (the other transport was not measured)")
      }
    }
  }

  /// Least squares of y = fixed + perHost × x (one point: through it and 0).
  private static func fit(_ points: [(Double, Double)]) -> (fixed: Double, perHost: Double) {
    guard let first = points.first else { return (0, 0) }
    guard points.count > 1 else { return (0, first.1 / first.0) }
    let n = Double(points.count)
    let mx = points.map(\.0).reduce(0, +) / n
    let my = points.map(\.1).reduce(0, +) / n
    let sxx = points.reduce(0) { $0 + ($1.0 - mx) * ($1.0 - mx) }
    let sxy = points.reduce(0) { $0 + ($1.0 - mx) * ($1.1 - my) }
    let slope = sxx > 0 ? sxy / sxx : 0
    // Noise can tilt a flat cost below zero: then no per-host term.
    if slope < 0 { return (my, 0) }
    let fixed = my - slope * mx
    return fixed < 0 ? (0, my / mx) : (fixed, slope)
  }

  private static func mean(_ values: [Double]) -> Double? {
    values.isEmpty ? nil : values.reduce(0, +) / Double(values.count)
  }
}
