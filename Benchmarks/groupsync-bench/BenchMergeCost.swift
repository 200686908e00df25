import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What merging by property costs a one-column update across hosts, side
/// by side in one run with settling whole rows: two groups of two hosts,
/// one whose relays keep log format 1 (`--log-format 1`: whole images,
/// whole rows), one in format 2 (changed columns with their base), the
/// same updates alternating between them.
struct BenchMergeCost: Codable {
  /// Updates measured per group.
  var updates: Int
  /// From the writer on A asking to commit a one-column update of a
  /// five-column row to B's listener receiving it, µs.
  var rowLevel: BenchStats
  var byProperty: BenchStats
  /// Bytes of the log entry one such update ships as (the `bytes` of the
  /// shipping relay's `shipped` events), mean.
  var rowLevelEntryBytes: Double
  var byPropertyEntryBytes: Double
  /// byProperty.p50 / rowLevel.p50.
  var latencyRatio: Double
}

extension BenchRunner {
  func mergeCost(conninfo: String, relay: String) throws -> BenchMergeCost {
    let root = options.workFolder + "/merge"
    try? FileManager.default.removeItem(atPath: root)
    let stamp = "\(getpid())-\(BenchClock.realtime() / 1_000_000_000)"
    var relays: [ChildProcess] = []
    defer {
      for child in relays {
        child.signal(SIGTERM)
        _ = child.finish(timeout: 30)
      }
    }
    /// One group of two hosts; returns A's folder, B's, and A's relay.
    func pair(_ name: String, arguments: [String]) throws -> (GroupFolder, GroupFolder, ChildProcess) {
      var folders: [GroupFolder] = []
      var shipper: ChildProcess?
      for host in ["a", "b"] {
        let folder = root + "/\(name)-\(host)/app"
        let group = try GroupFolder(path: folder)
        try group.store.write { db in
          try db.execute(sql: """
            CREATE TABLE doc(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL, tags TEXT NOT NULL,
              owner TEXT NOT NULL, stamp INTEGER NOT NULL)
            """)
        }
        folders.append(group)
        let child = try ChildProcess(
          executable: relay,
          arguments: [folder, "--postgres", conninfo, "--host", host, "--group", "merge-\(name)-\(stamp)",
                      "--poll-interval", "1"] + arguments,
          name: "relay \(name) \(host)")
        relays.append(child)
        try waitUntil("\(child.name) connected", timeout: 30) { child.stdout.contains("\"connected\"") }
        shipper = shipper ?? child
      }
      return (folders[0], folders[1], shipper!)
    }
    let groups = [try pair("rows", arguments: ["--log-format", "1"]), try pair("columns", arguments: [])]
    log("hosts: one-column updates, whole rows (log format 1) beside changed columns (format 2)")

    // B's listeners, in this process; each arrival stamped.
    var listeners: [Listener] = []
    var tasks: [Task<Void, Never>] = []
    defer {
      for task in tasks { task.cancel() }
      for listener in listeners { listener.close() }
    }
    let arrivals = Mutex<[Int64]>([0, 0])
    let arrived = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
    for (index, (_, b, _)) in groups.enumerated() {
      let listener = try b.listen()
      listeners.append(listener)
      let signal = arrived[index]
      tasks.append(listener.start { event in
        guard case .changes(let changeSet) = event, changeSet.tables.keys.contains(where: { $0.name == "doc" }) else {
          return
        }
        let now = BenchClock.realtime()
        arrivals.withLock { $0[index] = now }
        signal.signal()
      })
    }
    // One row each, on both hosts, before measuring.
    for (index, (a, _, _)) in groups.enumerated() {
      try a.store.write { db in
        try db.execute(sql: """
          INSERT INTO doc(title, body, tags, owner, stamp)
          VALUES ('A title of a document', 'A body of some length, as documents have', 'one,two,three', 'someone', 0)
          """)
      }
      guard arrived[index].wait(timeout: .now() + 10) == .success else { throw BenchError("merge: B did not get the row") }
    }
    let count = options.quick ? 50 : 300
    var latencies: [[Int64]] = [[], []]
    var shippedBefore = groups.map { shippedBytes($0.2).count }
    var bytes: [[Int]] = [[], []]
    for round in 0..<(count + 20) {
      for (index, (a, _, shipper)) in groups.enumerated() {
        let start = BenchClock.realtime()
        try a.store.write { db in try db.execute(sql: "UPDATE doc SET stamp = ?", arguments: [start]) }
        guard arrived[index].wait(timeout: .now() + 10) == .success else {
          throw BenchError("merge: B did not receive update \(round)")
        }
        let end = arrivals.withLock { $0[index] }
        if round >= 20 {  // the first 20 warm up
          latencies[index].append(end - start)
          let shipped = shippedBytes(shipper)
          bytes[index] += shipped.dropFirst(shippedBefore[index])
        }
        shippedBefore[index] = shippedBytes(shipper).count
        BenchClock.sleep(milliseconds: 5)
      }
    }
    func mean(_ values: [Int]) -> Double { values.isEmpty ? .nan : Double(values.reduce(0, +)) / Double(values.count) }
    let rowLevel = BenchStats(nanoseconds: latencies[0]), byProperty = BenchStats(nanoseconds: latencies[1])
    let result = BenchMergeCost(
      updates: count, rowLevel: rowLevel, byProperty: byProperty, rowLevelEntryBytes: mean(bytes[0]),
      byPropertyEntryBytes: mean(bytes[1]), latencyRatio: byProperty.p50 / rowLevel.p50)
    log(
      "hosts: one-column update A → B p50 \(BenchFormat.us(byProperty.p50)) by property, "
        + "\(BenchFormat.us(rowLevel.p50)) whole rows; entry \(Int(result.byPropertyEntryBytes)) vs "
        + "\(Int(result.rowLevelEntryBytes)) bytes")
    return result
  }

  /// The `bytes` of every `shipped` event `relay` printed so far, in order.
  private func shippedBytes(_ relay: ChildProcess) -> [Int] {
    relay.stdout.split(separator: "\n").compactMap { line -> Int? in
      guard line.hasPrefix("{\"shipped\""), let range = line.range(of: "\"bytes\":") else { return nil }
      return Int(line[range.upperBound...].prefix { $0.isNumber })
    }
  }
}
