// The hosts of a fleet on this machine, shared by the fleet and scale
// phases: a group folder and a `groupsync-relay` per host, the latency from
// a commit on host 0 to the last other host, and waiting with a deadline.
import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

/// H group folders under one root, each with a table `item` and a
/// `groupsync-relay` of its own, all in one group. Hosts can be added to a
/// running fleet; `stop()` stops every relay (also from a `defer`).
final class BenchRelayFleet {
  let root: String
  let groupName: String
  let relay: String
  let conninfo: String
  /// Arguments every relay gets after the group's and host's.
  let relayArguments: [String]
  private(set) var groups: [GroupFolder] = []
  private(set) var folders: [String] = []
  private(set) var relays: [ChildProcess] = []

  var count: Int { relays.count }

  init(root: String, groupName: String, relay: String, conninfo: String, relayArguments: [String]) {
    self.root = root
    self.groupName = groupName
    self.relay = relay
    self.conninfo = conninfo
    self.relayArguments = relayArguments
    try? FileManager.default.removeItem(atPath: root)
  }

  deinit { stop() }

  /// Adds hosts until there are `total`, starts their relays, and waits
  /// until each says it is connected.
  func grow(to total: Int, timeout: Double = 120) throws {
    let first = relays.count
    for index in first..<max(first, total) {
      let folder = root + "/h\(index)/app"
      let group = try GroupFolder(path: folder)
      try group.store.write { db in
        try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, host INTEGER NOT NULL, body TEXT NOT NULL, stamp INTEGER NOT NULL)")
      }
      groups.append(group)
      folders.append(folder)
      relays.append(
        try ChildProcess(
          executable: relay,
          arguments: [folder, "--postgres", conninfo, "--host", "h\(index)", "--group", groupName] + relayArguments,
          name: "relay h\(index)"))
    }
    for child in relays[first...] {
      try benchWait("\(child.name) connected", timeout: timeout) {
        guard child.isRunning else {
          throw BenchError("\(child.name) exited before it connected: \(child.stderr.suffix(600))")
        }
        return child.stdout.contains("\"connected\"")
      }
    }
  }

  /// Waits until every host holds as many `item` rows as host 0.
  func waitConverged(timeout: Double) throws {
    let target = try rows(0)
    var pending = Set(groups.indices)
    try benchWait("every host holding host 0's \(target) rows", timeout: timeout) {
      for index in pending.sorted() where (try? rows(index)) ?? 0 >= target { pending.remove(index) }
      return pending.isEmpty
    }
  }

  func rows(_ index: Int) throws -> Int {
    try groups[index].store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? 0 }
  }

  /// Every relay asked to stop at once, then each waited for.
  func stop() {
    for child in relays { child.signal(SIGTERM) }
    for child in relays { _ = child.finish(timeout: 30) }
    relays = []
  }

  /// Latency from host 0 asking to commit a one-row insert to the last of
  /// the other hosts' listeners (in this process) receiving it: `warmUps`
  /// unmeasured commits, then `samples`; `measuring` runs between the two.
  /// Each commit waits for the previous one to reach every host, then
  /// `gap(index)` ms.
  func lastHostLatencies(
    samples: Int, warmUps: Int, timeout: Double = 15, gap: (Int) -> Int = { _ in 5 }, measuring: () -> Void = {}
  ) throws -> [Int64] {
    let hosts = groups.count
    struct Round {
      var round = 0
      var seen: [Int]
      var arrived = 0
      var last: Int64 = 0
    }
    let state = BenchBox(Round(seen: [Int](repeating: 0, count: hosts)))
    let everyone = DispatchSemaphore(value: 0)
    var listeners: [Listener] = []
    defer { for listener in listeners { listener.close() } }
    let others = hosts - 1
    for index in 1..<hosts {
      let listener = try groups[index].listen()
      listeners.append(listener)
      listener.startOnWatcherThread { event in
        guard case .changes(let changeSet) = event, changeSet.tables.keys.contains(where: { $0.name == "item" }) else {
          return
        }
        let now = BenchClock.realtime()
        let complete = state.withLock { round -> Bool in
          guard round.seen[index] != round.round else { return false }
          round.seen[index] = round.round
          round.arrived += 1
          round.last = max(round.last, now)
          return round.arrived == others
        }
        if complete { everyone.signal() }
      }
    }
    var latencies: [Int64] = []
    for index in 0..<(samples + warmUps) {
      if index == warmUps { measuring() }
      state.withLock { round in
        round.round = index + 1
        round.arrived = 0
        round.last = 0
      }
      let start = BenchClock.realtime()
      try groups[0].store.write { db in
        try db.execute(sql: "INSERT INTO item(host, body, stamp) VALUES (0, 'x', ?)", arguments: [start])
      }
      guard everyone.wait(timeout: .now() + timeout) == .success else {
        let missing = state.withLock { round in (1..<hosts).filter { round.seen[$0] != round.round } }
        throw BenchError(
          "not every host received commit \(index) within \(Int(timeout)) s (\(hosts) hosts; missing "
            + "\(missing.prefix(10).map { "h\($0)" }.joined(separator: ", "))\(missing.count > 10 ? ", ..." : ""))")
      }
      let end = state.withLock { $0.last }
      if index >= warmUps { latencies.append(end - start) }
      BenchClock.sleep(milliseconds: gap(index))
    }
    return latencies
  }
}

/// Waits until `condition` holds, checking every `every` ms; throws past
/// the deadline (or what `condition` throws).
func benchWait(_ what: String, timeout: Double, every: Int = 5, _ condition: () throws -> Bool) throws {
  let deadline = BenchClock.monotonic() + Int64(timeout * 1e9)
  while try !condition() {
    guard BenchClock.monotonic() < deadline else { throw BenchError("timed out waiting: \(what)") }
    BenchClock.sleep(milliseconds: every)
  }
}
