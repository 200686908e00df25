import Foundation

extension BenchTable {
  /// Section 2e: the scale phase (issue 40).
  static func scaleSection(_ s: BenchScaleResult, line: (String) -> Void, row: ([(String, Int)]) -> Void) {
    func us(_ value: Double?) -> String { value.map { $0.isFinite ? BenchFormat.us($0) : "-" } ?? "-" }
    func ms(_ micros: Double) -> String { String(format: "%.1f", micros / 1000) }
    line("")
    line("2e. Scale (issue 40): H hosts on this machine in one group, notify (a session per relay, LISTEN) beside poll")
    line("    (the log read by position every interval, through PgBouncer in transaction pooling mode), fsync off and on.")
    line("    latency = host 0 asking to commit one row -> the last of the other H-1 hosts' listeners, sparse, ms; on 2 cores")
    line("    the time to the 128th host is mostly scheduling. server/ship = the server's CPU per shipment, in the latency run")
    line("    (sparse) and while host 0 commits 10 a second (steady; poll: net of its idle rate, as its polls go on under the")
    line("    commits; notify: all of it, its quiet reads stop), us; idle/host = the")
    line("    server's CPU per second per host, nobody writing, us; conns = client backends (poll: PgBouncer's clients /")
    line("    server connections); RSS = relays' VmRSS mean / max, MB; apply = another relay's CPU per entry applied (poll:")
    line("    net of idle), us; bouncer = PgBouncer's CPU per shipment (net of idle), us.")
    row([("transport", 10), ("H", 4), ("fsync", 6), ("n", 4), ("p50 ms", 8), ("p99 ms", 8), ("server/ship sparse / steady", 28),
         ("idle/host", 10), ("conns", 14), ("RSS MB", 12), ("apply", 8), ("bouncer", 8), ("s", 5)])
    for p in s.points {
      let pooled = p.poolerClients.map { " (\($0)/\(p.poolerServers ?? 0))" } ?? ""
      let connections = (p.serverConnections.map(String.init) ?? "-") + pooled
      row([(p.transport.rawValue, 10), (String(p.hosts), 4), (p.fsync ? "on" : "off", 6), (String(p.latency.n), 4),
           (ms(p.latency.p50), 8), (ms(p.latency.p99), 8), ("\(us(p.serverCPUPerShipmentNet)) / \(us(p.serverCPUPerShipmentSteady))", 28),
           (us(p.serverIdleCPUPerHostPerSecond), 10),
           (connections, 14),
           (String(format: "%.1f / %.1f", p.relayRSSMeanKB / 1024, Double(p.relayRSSMaxKB) / 1024), 12),
           (us(p.relayCPUPerAppliedEntryNet), 8), (us(p.poolerCPUPerShipmentNet), 8),
           (String(format: "%.0f", p.wallSeconds), 5)])
    }
    if let interval = s.points.first(where: { $0.pollIntervalSeconds != nil })?.pollIntervalSeconds {
      line(String(format: "    poll interval %.2f s: a host waits interval/2 on average, the last of H about the interval.", interval))
    }
    if !s.locks.isEmpty {
      line("    The notify lock (pgbench, 16 clients, one-row INSERTs a second): (a) alone, (b) with pg_notify in the same")
      line("    transaction, (c) committed, then pg_notify apart (own transaction, synchronous_commit off); hold = 1 / (b).")
      row([("fsync", 6), ("(a) INSERT/s", 13), ("(b) +NOTIFY/s", 14), ("(c) apart/s", 12), ("hold us", 8)])
      for l in s.locks {
        row([(l.fsync ? "on" : "off", 6), (BenchFormat.count(l.insertPerSecond), 13),
             (BenchFormat.count(l.insertNotifyPerSecond), 14), (BenchFormat.count(l.insertThenNotifyPerSecond), 12),
             (String(format: "%.0f", l.holdMicros), 8)])
      }
    }
    if let g = s.groups {
      line(String(format: "    Two groups of %d hosts: the idle group's relays %.0f us/s while both idle (%.0f before, %.0f after),"
                    + " %.0f us/s while the other commits %.0f/s: %@ x (target <= 1.2)", g.hostsPerGroup,
                  g.idleGroupCPUPerSecondBothIdle, g.idleGroupCPUPerSecondBefore, g.idleGroupCPUPerSecondAfter,
                  g.idleGroupCPUPerSecondOtherBusy, g.busyCommitsPerSecond, g.ratio.map { String(format: "%.2f", $0) } ?? "-"))
    }
    if let model = s.model {
      line("    The model to 1,000 hosts (one group of H hosts; the server's CPU bound at one core):")
      for c in model.coefficients {
        line("      \(c.transport) (\(c.fittedPoints) points): server per shipment \(us(c.serverPerShipmentFixed)) + "
          + String(format: "%.2f", c.serverPerShipmentPerHost) + " x H us; idle \(us(c.serverIdlePerHostPerSecond)) us/s per host"
          + (c.serverPerPoll.map { "; \(us($0)) us per poll" } ?? "")
          + (c.lockHoldMicros.map { "; lock hold \(us($0)) us" } ?? "")
          + (c.wakeApartCommitsPerSecond.map { "; wake-up apart \(BenchFormat.count($0))/s" } ?? "")
          + (c.connectionsPerHost.map { String(format: "; %.2f connections per host", $0) } ?? "")
          + (c.connectionsFixed.map { "; \($0) pooled connections" } ?? ""))
      }
      row([("transport", 10), ("H", 6), ("cores at \(Int(BenchScaleModel.writeRate))/s", 14), ("conns", 7),
           ("max commits/s", 14), ("bound", 12), ("latency floor ms", 17), ("to the last ms", 15),
           ("poll s for idle <= 0.5 core", 27)])
      for r in model.rows {
        row([(r.transport.rawValue, 10), (String(r.hosts), 6), (String(format: "%.2f", r.serverCores), 14), (String(r.connections), 7),
             (BenchFormat.count(r.maxWriteRate), 14), (r.bound, 12), (String(format: "%.1f", r.latencyFloorMs), 17),
             (String(format: "%.1f", r.latencyLastHostMs), 15),
             (r.pollIntervalForHalfCoreSeconds.map { String(format: "%.2f", $0) } ?? "-", 27)])
      }
      for pick in model.picks { line("      pick: \(pick)") }
      for assumption in model.assumptions { line("      - \(assumption)") }
    }
    for limit in s.limits { line("    limits: \(limit)") }
    line(String(format: "    phase wall time %.0f s", s.wallSeconds))
    for note in s.notes { line("    \(note)") }
  }
}
