// The hosts phase's budget: where each microsecond of A → B goes, from
// the two relays' traces (`groupsync-relay --trace`) joined to the
// benchmark's own stamps of each sparse commit.
import Foundation

struct BenchHostsTrace: Codable {
  struct Step: Codable {
    var name: String
    /// p50 of the time from A's write asked for to this step, µs.
    var sinceCommit: Double
    /// p50 of the time from the step before to this one, µs.
    var sinceStepBefore: Double
  }

  /// The commits found in both traces.
  var samples: Int
  var steps: [Step]
}

/// One sparse commit on A as the benchmark saw it: its local sequence,
/// when its write was asked for and returned, and when B's listener had
/// it (CLOCK_REALTIME, ns).
struct BenchHostsSample {
  var sequence: Int64
  var asked: Int64
  var written: Int64
  var received: Int64
}

extension BenchRunner {
  private struct TracedShipment: Decodable {
    var kind: String
    var through: Int64?
    var position: Int64?
    var rung, passBegan, planned, encoded, shipped, recorded: Int64?
    var first, last: Int64?
    var notified, decoded, applied: Int64?
  }

  /// Joins `samples` to the shipments in A's trace (by local sequence) and
  /// the applies in B's (by log position).
  static func hostsTrace(samples: [BenchHostsSample], shipping: String, applying: String) throws -> BenchHostsTrace {
    func records(_ path: String) throws -> [TracedShipment] {
      let text = try String(contentsOfFile: path, encoding: .utf8)
      return try text.split(separator: "\n").map { try JSONDecoder().decode(TracedShipment.self, from: Data($0.utf8)) }
    }
    let shipments = try records(shipping).filter { $0.kind == "ship" }.sorted { ($0.through ?? 0) < ($1.through ?? 0) }
    let applies = try records(applying).filter { $0.kind == "apply" }
    let names = [
      "A's write returned", "A's relay rung (its doorbell)", "A's relay pass began", "planned (local read)",
      "encoded", "shipped (gs_ship_3 answered)", "recorded in A's store", "B's relay notified",
      "B's relay pass began", "decoded", "applied (B's commit)", "B's listener",
    ]
    var offsets = Array(repeating: [Double](), count: names.count)
    var deltas = Array(repeating: [Double](), count: names.count)
    var joined = 0
    for sample in samples {
      guard let shipment = shipments.first(where: { ($0.through ?? 0) >= sample.sequence }),
        let position = shipment.position,
        let apply = applies.first(where: { ($0.first ?? 0) <= position && position <= ($0.last ?? 0) })
      else { continue }
      let stamps: [Int64?] = [
        sample.written, shipment.rung, shipment.passBegan, shipment.planned, shipment.encoded, shipment.shipped,
        shipment.recorded, apply.notified, apply.passBegan, apply.decoded, apply.applied, sample.received,
      ]
      guard stamps.allSatisfy({ ($0 ?? 0) > 0 }) else { continue }
      joined += 1
      var before = sample.asked
      for (index, stamp) in stamps.enumerated() {
        offsets[index].append(Double(stamp! - sample.asked) / 1000)
        deltas[index].append(Double(stamp! - before) / 1000)
        before = stamp!
      }
    }
    func median(_ values: [Double]) -> Double { values.isEmpty ? .nan : BenchStats(micros: values).p50 }
    return BenchHostsTrace(
      samples: joined,
      steps: names.indices.map { .init(name: names[$0], sinceCommit: median(offsets[$0]), sinceStepBefore: median(deltas[$0])) })
  }
}
