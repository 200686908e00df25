import Foundation
import GRDB
import GroupSync

/// Reads in the writing process while it writes back to back and fans out
/// to listener processes, beside the same reads on a separate connection.
struct BenchReadLatencyResult: Codable {
  var listeners: Int
  /// The read, through `Int64.fetchOne(db, sql:)` on both sides.
  var statement: String
  /// `store.read` (the store's `DatabasePool` readers) in the writing
  /// process, while a thread of it commits 1-row transactions back to back.
  var storeRead: BenchStats
  /// The same read on a separate read-only GRDB `DatabaseQueue` on the same
  /// file, in the same process, under the same writer, in alternating blocks.
  var separateConnection: BenchStats
  /// storeRead / separateConnection, at p50 and p99.
  var ratioP50: Double
  var ratioP99: Double
  /// What the writer thread did while the reads ran.
  var commits: Int
  var seconds: Double
  var commitsPerSecond: Double
  /// `Store.write` wall time per commit (COMMIT, change set, fan-out).
  var write: BenchStats
  var writeFailures: Int
  /// Change sets each listener received by the end (all of them, unless
  /// some were covered by a reset), and resets over all listeners.
  var deliveredPerListener: Int
  var resets: Int
}

extension BenchRunner {
  /// Issue 7: a read in the writing process never waits for the write lock
  /// or for fan-out. A thread commits 1-row transactions back to back
  /// through `Store.write` to live listener processes; this thread reads,
  /// alternating blocks of `store.read` and of the same read on a separate
  /// connection, so that both meet the same load.
  func readLatency() throws {
    let count = settings.readLatencyListeners
    let reads = settings.readLatencyReads
    let folder = options.workFolder + "/reads"
    let writer = try BenchGroupWriter(path: folder)
    let store = writer.group.store
    log("read latency: store.read vs a separate connection, busy writer, \(count) listener processes")
    let listeners = try startListeners(count, folder: folder)
    defer { listeners.forEach { $0.quit() } }
    for _ in 0..<20 { try writer.transaction(rows: 1, .insert) }
    _ = try collect(listeners, until: try store.currentSequence())

    var configuration = Configuration()
    configuration.readonly = true
    configuration.busyMode = .timeout(10)
    let separate = try DatabaseQueue(path: store.path, configuration: configuration)
    let sql = "SELECT count(*) FROM items WHERE id <= 10"
    func timed(_ read: () throws -> Int64?) throws -> Int64 {
      let start = BenchClock.monotonic()
      guard try read() != nil else { throw BenchError("the read returned no row") }
      return BenchClock.monotonic() - start
    }
    // Warm both readers (the pool opens its reader connections lazily).
    for _ in 0..<50 {
      _ = try timed { try store.read { try Int64.fetchOne($0, sql: sql) } }
      _ = try timed { try separate.read { try Int64.fetchOne($0, sql: sql) } }
    }

    struct WriterReport {
      var times: [Int64] = []
      var failures = 0
      var lastError: String?
    }
    let stop = BenchBox(false)
    let report = BenchBox(WriterReport())
    let finished = DispatchSemaphore(value: 0)
    let writerThread = Thread {
      var local = WriterReport()
      while !stop.withLock({ $0 }) {
        let start = BenchClock.monotonic()
        do {
          try store.write { db in
            try db.cachedStatement(sql: BenchWorkload.insertSQL).execute(arguments: [1, BenchGRDBRows.text])
          }
          local.times.append(BenchClock.monotonic() - start)
        } catch {
          local.failures += 1
          local.lastError = "\(error)"
        }
      }
      report.withLock { $0 = local }
      finished.signal()
    }
    let start = BenchClock.monotonic()
    writerThread.start()
    BenchClock.sleep(milliseconds: 100)  // the writer and the listeners at full speed

    // Reads are paced (a pause of 100-300 us, uniformly random, before
    // each) so that they sample every phase of the writer's commits and
    // fan-out over a window of seconds.
    var generator = SystemRandomNumberGenerator()
    func pause() {
      BenchClock.sleep(untilMonotonic: BenchClock.monotonic() + Int64.random(in: 100_000...300_000, using: &generator))
    }
    var storeTimes: [Int64] = []
    var separateTimes: [Int64] = []
    let block = 50
    var round = 0
    while storeTimes.count < reads {
      func storeBlock() throws {
        for _ in 0..<block {
          pause()
          storeTimes.append(try timed { try store.read { try Int64.fetchOne($0, sql: sql) } })
        }
      }
      func separateBlock() throws {
        for _ in 0..<block {
          pause()
          separateTimes.append(try timed { try separate.read { try Int64.fetchOne($0, sql: sql) } })
        }
      }
      // Alternate which goes first.
      if round % 2 == 0 {
        try storeBlock()
        try separateBlock()
      } else {
        try separateBlock()
        try storeBlock()
      }
      round += 1
    }
    stop.withLock { $0 = true }
    finished.wait()
    let seconds = Double(BenchClock.monotonic() - start) / 1e9
    let written = report.withLock { $0 }
    if written.failures > 0 {
      results.notes.append("read latency: \(written.failures) writes failed, last: \(written.lastError ?? "?")")
    }

    // Every listener must have received what was written (else they were
    // not live listeners the writer fanned out to).
    let reports = try collect(listeners, until: try store.currentSequence(), timeout: 600)
    let storeStats = BenchStats(nanoseconds: storeTimes)
    let separateStats = BenchStats(nanoseconds: separateTimes)
    results.readLatency = BenchReadLatencyResult(
      listeners: count, statement: sql, storeRead: storeStats, separateConnection: separateStats,
      ratioP50: storeStats.p50 / separateStats.p50, ratioP99: storeStats.p99 / separateStats.p99,
      commits: written.times.count, seconds: seconds, commitsPerSecond: Double(written.times.count) / seconds,
      write: BenchStats(nanoseconds: written.times), writeFailures: written.failures,
      deliveredPerListener: reports.map(\.delivered).min() ?? 0, resets: reports.reduce(0) { $0 + $1.resets.count })
  }
}
