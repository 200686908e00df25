// The peers: PostgreSQL LISTEN/NOTIFY beside GroupSync.
import CGroupSync
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

extension BenchRunner {
  // MARK: 2b. Peers: PostgreSQL LISTEN/NOTIFY

  /// GroupSync and PostgreSQL LISTEN/NOTIFY on the sparse stream, to the
  /// last of N listener processes, in alternating blocks, from the writer
  /// asking to commit to received, each side's COMMIT included: PostgreSQL
  /// signals its listeners before its COMMIT returns (see pgnotify.c).
  func peers() throws {
    guard let pgnotify = options.pgnotify, let conninfo = options.postgresConninfo else {
      results.notes.append("peers: PostgreSQL not measured (make bench-peers starts a server; --pgnotify, --postgres-conninfo)")
      return
    }
    var rows: [BenchPeersResult.Row] = []
    for count in settings.listenerCounts where count <= 16 {
      let folder = options.workFolder + "/peers-\(count)"
      let writer = try BenchGroupWriter(path: folder)
      log("peers: N=\(count) sparse: GroupSync and PostgreSQL LISTEN/NOTIFY in \(settings.rounds) alternating blocks")
      let listeners = try startListeners(count, folder: folder)
      defer { listeners.forEach { $0.quit() } }
      for _ in 0..<20 { try writer.transaction(rows: 1, .insert) }
      _ = try collect(listeners, until: try writer.group.store.currentSequence())
      let block = max(1, settings.sparseCommits / settings.rounds)
      let interval = settings.sparseIntervalMs * 1000
      var group: [Int64] = []
      var groupCPU: Int64 = 0
      var groupDeliveries = 0
      var postgres = FloorResult()
      for round in 0..<settings.rounds {
        func groupBlock() throws {
          var committed: [Int64: Int64] = [:]
          var next = BenchClock.monotonic()
          for _ in 0..<block {
            next += Int64(interval) * 1000
            BenchClock.sleep(untilMonotonic: next)
            let commit = try writer.commit(rows: 1, .insert)
            // From the writer asking to commit, as pgnotify stamps.
            committed[commit.sequence] = commit.commitRequestedAt
          }
          let reports = try collect(listeners, until: committed.keys.max()!)
          group += Self.lastListenerLatencies(committed: committed, reports: reports).0
          groupCPU += reports.reduce(0) { $0 + ($1.cpuDeltaNs ?? 0) }
          groupDeliveries += reports.reduce(0) { $0 + ($1.cpuDeltaNs == nil ? 0 : $1.delivered) }
        }
        func postgresBlock() throws {
          let run = try ChildProcess.run(
            pgnotify,
            ["--conninfo", conninfo, "--listeners", String(count), "--count", String(block), "--interval-us",
             String(interval), "--warmup", "20"], timeout: 300)
          guard run.succeeded else {
            throw BenchError("pgnotify failed (\(run.timedOut ? "timed out" : "status \(run.status)")): \(run.stderr.suffix(500))")
          }
          var result = try JSONDecoder().decode(FloorResult.self, from: Data(run.stdout.utf8))
          result.watchers = count
          postgres.append(result)
        }
        if round % 2 == 0 {
          try groupBlock()
          try postgresBlock()
        } else {
          try postgresBlock()
          try groupBlock()
        }
      }
      let groupStats = BenchStats(nanoseconds: group)
      let postgresStats = BenchStats(nanoseconds: postgres.latencyNs)
      rows.append(
        .init(
          listeners: count, stream: "sparse", groupsync: groupStats, postgres: postgresStats,
          ratioP50: groupStats.p50 / postgresStats.p50, ratioP99: groupStats.p99 / postgresStats.p99,
          groupsyncListenerCPUPerDelivery: Double(groupCPU) / Double(max(1, groupDeliveries)) / 1000,
          postgresListenerCPUPerMessage: postgres.cpuPerMessage))
    }
    results.peers = BenchPeersResult(rows: rows)
  }
}
