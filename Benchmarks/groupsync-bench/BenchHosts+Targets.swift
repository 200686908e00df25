// Issue 39's targets across hosts: each built from terms measured in the
// same run (L, W, S, R_1, R_w, c_L, NOTIFY), so that they hold on any
// machine; each printed with its terms, its figure and met / missed.
import Foundation

extension BenchRunner {
  func hostsTargets() -> [BenchTarget] {
    var targets: [BenchTarget] = []
    func us(_ value: Double) -> String {
      let text = BenchFormat.us(value)
      return text.hasSuffix("ms") ? text : text + " us"
    }
    guard let h = results.hosts else { return targets }
    let terms = h.terms
    if let terms, let ship = terms.ship, let p50Limit = h.targetP50, let p99Limit = h.targetP99 {
      let (l, w) = (terms.localDelivery, terms.write)
      targets.append(
        BenchTarget(
          target: "A → B p50 <= 2·L + S + 2·W + 0.3 ms",
          figure: "A → B p50 \(us(h.latency.p50)); L \(us(l.p50)), S \(us(ship.p50)), W \(us(w.p50)): limit \(us(p50Limit))",
          met: h.latency.p50 <= p50Limit))
      targets.append(
        BenchTarget(
          target: "A → B p99 <= 2·L99 + S99 + 2·W99 + 1 ms",
          figure: "A → B p99 \(us(h.latency.p99)); L99 \(us(l.p99)), S99 \(us(ship.p99)), W99 \(us(w.p99)): limit \(us(p99Limit))",
          met: h.latency.p99 <= p99Limit))
    } else {
      targets.append(
        BenchTarget(
          target: "A → B p50 <= 2·L + S + 2·W + 0.3 ms, p99 <= 2·L99 + S99 + 2·W99 + 1 ms",
          figure: "A → B p50 \(us(h.latency.p50)), p99 \(us(h.latency.p99)); S not measured (pgnotify missing)", met: nil))
    }
    if let terms, let inProcess = h.inProcess, let limit = h.inProcessTargetP50 {
      targets.append(
        BenchTarget(
          target: "A → B, A's relay in A's process: p50 <= L + S + 2·W + 0.3 ms",
          figure: "p50 \(us(inProcess.p50)) (p99 \(us(inProcess.p99))); L \(us(terms.localDelivery.p50)): limit \(us(limit))",
          met: inProcess.p50 <= limit))
    }
    if let terms {
      let (rw, r1) = (terms.rateWithDoorbell, terms.rateWithListener)
      targets.append(
        BenchTarget(
          target: "A → B throughput >= 0.7 x R_w (one-row commits/s)",
          figure: "\(BenchFormat.count(h.throughputChangeSetsPerSecond))/s = \(BenchFormat.ratio(h.throughputChangeSetsPerSecond / rw)) "
            + "R_w \(BenchFormat.count(rw))/s (\(h.throughputCommits) commits, \(h.throughputLogEntries) log entries)",
          met: h.throughputChangeSetsPerSecond >= 0.7 * rw))
      targets.append(
        BenchTarget(
          target: "R_w >= 0.95 x R_1: ringing a relay costs a writer no more than ringing a listener",
          figure: "R_w \(BenchFormat.count(rw))/s, R_1 \(BenchFormat.count(r1))/s: \(BenchFormat.ratio(rw / r1))",
          met: rw >= 0.95 * r1))
      let w = terms.write.p50
      if let applying = h.applyingCPUPerEntry, let shipping = h.shippingCPUPerEntry {
        targets.append(
          BenchTarget(
            target: "relay CPU per applied entry <= 1.5·W, per shipped entry <= 3·W (sparse)",
            figure: "applied \(us(applying)) (\(BenchFormat.ratio(applying / w)) W), shipped \(us(shipping)) "
              + "(\(BenchFormat.ratio(shipping / w)) W); W \(us(w))",
            met: applying <= 1.5 * w && shipping <= 3 * w))
      }
      if let fleet = results.fleet, let point = fleet.points.max(by: { $0.hosts < $1.hosts }), point.hosts > 2 {
        let size = point.hosts == 16 ? "16 hosts" : "\(point.hosts) hosts (16 not measured in this run)"
        let rowsApplied = Double(point.aggregateCommits * (point.hosts - 1))
        let perSecond = rowsApplied / (point.aggregate.relayCPUMicros / 1e6)
        targets.append(
          BenchTarget(
            target: "\(size): rows applied per second of relay CPU >= 1 / (1.5·W)",
            figure: "\(BenchFormat.count(perSecond))/s (\(Int(rowsApplied)) rows applied, every host writing); "
              + "1 / (1.5·W) = \(BenchFormat.count(1e6 / (1.5 * w)))/s",
            met: perSecond >= 1e6 / (1.5 * w)))
        if let limitAB = h.targetP50, let notifyMany = point.notify, let notifyOne = h.notify,
          let cL = terms.listenerCPUPerChangeSet
        {
          let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
          let limit = limitAB + (notifyMany.p50 - notifyOne.p50) + Double(point.hosts - 2) * (cL + 1.5 * w) / cores
          targets.append(
            BenchTarget(
              target: "\(size): p50 to the last host <= A → B's limit + (NOTIFY to H−1 − NOTIFY to 1) + (H−2)·(c_L + 1.5·W)/cores",
              figure: "p50 \(us(point.latency.p50)) (p99 \(us(point.latency.p99))); A → B limit \(us(limitAB)), NOTIFY to "
                + "\(point.hosts - 1) \(us(notifyMany.p50)), to 1 \(us(notifyOne.p50)), c_L \(us(cL)), W \(us(w)), "
                + "\(Int(cores)) cores: limit \(us(limit))",
              met: point.latency.p50 <= limit))
        }
        targets.append(
          BenchTarget(
            target: "\(size): aggregate, every host writing (reported)",
            figure: "\(BenchFormat.count(point.aggregateCommitsPerSecond)) commits/s (\(point.aggregateCommits) one-row commits, "
              + "\(point.commitsPerHost) per host, in \(String(format: "%.2f", point.aggregateSeconds)) s)",
            met: nil))
      }
    }
    if let fsync = h.fsyncOn {
      targets.append(
        BenchTarget(
          target: "A → B with the server's fsync on (reported)",
          figure: "p50 \(us(fsync.latency.p50)), p99 \(us(fsync.latency.p99)) (off: \(us(h.latency.p50)), \(us(h.latency.p99))); "
            + "+\(us(fsync.latency.p50 - h.latency.p50)) at p50; one synced 8 kB write (pg_test_fsync, "
            + "\(fsync.method ?? "-")): \(fsync.syncMicros.map(us) ?? "not measured")",
          met: nil))
    }
    if let merge = h.mergeCost {
      targets.append(
        BenchTarget(
          target: "one-column update merging by property: entry no larger and A → B p50 within +10% of whole rows",
          figure: "entry \(Int(merge.byPropertyEntryBytes)) bytes vs \(Int(merge.rowLevelEntryBytes)); A → B p50 "
            + "\(us(merge.byProperty.p50)) vs \(us(merge.rowLevel.p50)) (\(BenchFormat.ratio(merge.latencyRatio)); "
            + "\(merge.updates) updates each, alternating)",
          met: merge.byPropertyEntryBytes <= merge.rowLevelEntryBytes && merge.latencyRatio <= 1.10))
    }
    return targets
  }
}
