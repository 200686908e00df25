// Polling PRAGMA data_version and idle CPU; a listener's memory under a
// backlog.
import CGroupSync
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

extension BenchRunner {
  // MARK: 3. Polling PRAGMA data_version, and idle CPU

  func polling() throws {
    log("polling: a GroupSync listener and PRAGMA data_version pollers (1 ms, 10 ms)")
    let folder = options.workFolder + "/polling"
    let writer = try BenchGroupWriter(path: folder)
    try writer.transaction(rows: 1, .insert)
    let listeners = try startListeners(2, folder: folder, extraFor: { $0 == 1 ? ["--rescan-ms", "3600000"] : [] })
    let listener = listeners[0]
    defer { listeners.forEach { $0.quit() } }
    var pollers = try [1000, 10_000].map { interval in
      try startChild(name: "poll-\(interval / 1000)ms", ["poll", folder + "/store.sqlite", "--interval-us", String(interval)])
    }
    pollers.append(try startChild(name: "inotify-wal", ["poll", folder + "/store.sqlite", "--inotify-wal"]))
    defer { pollers.forEach { $0.quit() } }
    var lastRow: Int64 = 0
    var lastSequence: Int64 = 0
    for _ in 0..<10 {
      let commit = try writer.commit(rows: 1, .insert)
      (lastRow, lastSequence) = (commit.lastRowID, commit.sequence)
    }
    _ = try collect(listeners, until: lastSequence)
    for poller in pollers {
      poller.send("collect \(lastRow)")
      _ = try poller.read(BenchPollReport.self, timeout: 30)
    }

    // Idle: nobody writes; how much CPU does each reader burn? Each child
    // reports its own getrusage (every thread, to the nanosecond). The
    // figure includes answering one query (tens of µs over the window): an
    // upper bound.
    BenchClock.sleep(milliseconds: 500)
    let processes: [(String, ChildProcess)] = [
      ("GroupSync listener", listener), ("poll every 1 ms", pollers[0]), ("poll every 10 ms", pollers[1]),
      ("inotify on -wal, re-query", pollers[2]), ("GroupSync, no rescan", listeners[1]),
    ]
    func cpu(_ child: ChildProcess) throws -> Int64 {
      child.send("rusage")
      return try child.read(BenchCPU.self, timeout: 30).cpuNs
    }
    var second: [Int64] = []
    for (_, child) in processes {
      _ = try cpu(child)  // warm the answering path
      second.append(try cpu(child))
    }
    let ticksBefore = processes.map { BenchProc.cpuTicks(pid: $0.1.pid) ?? 0 }
    let windowStart = BenchClock.monotonic()
    BenchClock.sleep(milliseconds: Int(settings.idleWindowSeconds * 1000))
    var third: [Int64] = []
    for (_, child) in processes { third.append(try cpu(child)) }
    let window = Double(BenchClock.monotonic() - windowStart) / 1e9
    let ticksAfter = processes.map { BenchProc.cpuTicks(pid: $0.1.pid) ?? 0 }
    var idle: [BenchPollingResult.Idle] = []
    for (index, process) in processes.enumerated() {
      let used = Double(third[index] - second[index]) / 1000 / window
      idle.append(.init(process: process.0, cpuMicrosPerSecond: used, cpuPercentOfCore: used / 1e4,
                        clockTicks: ticksAfter[index] - ticksBefore[index]))
    }

    // Detection: sparse commits at jittered intervals (5-15 ms), so that
    // the pollers' period cannot lock onto the writer's.
    var generator = SystemRandomNumberGenerator()
    var committedByRow: [(row: Int64, at: Int64)] = []
    var committed: [Int64: Int64] = [:]
    var next = BenchClock.monotonic()
    for _ in 0..<settings.pollCommits {
      next += Int64.random(in: 5_000_000...15_000_000, using: &generator)
      BenchClock.sleep(untilMonotonic: next)
      let commit = try writer.commit(rows: 1, .insert)
      committedByRow.append((commit.lastRowID, commit.committedAt))
      committed[commit.sequence] = commit.committedAt
      (lastRow, lastSequence) = (commit.lastRowID, commit.sequence)
    }
    let reports = try collect(listeners, until: lastSequence).prefix(1).map { $0 }
    var detection = [BenchPollingResult.Detection(
      reader: "GroupSync listener", latency: BenchStats(nanoseconds: Self.lastListenerLatencies(committed: committed, reports: reports).0))]
    for (index, poller) in pollers.enumerated() {
      poller.send("collect \(lastRow)")
      let report = try poller.read(BenchPollReport.self, timeout: 30)
      // Each commit is detected by the first poll that saw its row or a later one.
      var latencies: [Int64] = []
      var cursor = 0
      for (row, at) in committedByRow {
        while cursor < report.newestRow.count && report.newestRow[cursor] < row { cursor += 1 }
        if cursor < report.newestRow.count { latencies.append(report.detectedAt[cursor] - at) }
      }
      detection.append(.init(reader: processes[index + 1].0, latency: BenchStats(nanoseconds: latencies)))
      if latencies.count < committedByRow.count {
        results.notes.append("\(processes[index + 1].0): \(committedByRow.count - latencies.count) commits never detected")
      }
    }
    results.polling = BenchPollingResult(
      idleWindowSeconds: window, idle: idle, commitIntervalMs: "uniform 5-15", detection: detection)
  }

  // MARK: 6b. Listener memory under a backlog

  func memory() throws {
    let folder = options.workFolder + "/memory"
    let writer = try BenchGroupWriter(path: folder)
    let listener = try startListeners(1, folder: folder, extra: ["--no-samples"])[0]
    defer { listener.quit() }
    for _ in 0..<100 { try writer.transaction(rows: 1, .insert) }
    _ = try collect([listener], until: try writer.group.store.currentSequence())
    let baseline = BenchProc.statusKilobytes(pid: listener.pid, "VmHWM") ?? -1
    var rows: [BenchMemoryResult.Row] = []
    for backlog in settings.memoryBacklogs {
      log("memory: \(backlog) change sets written to a stopped listener, then drained")
      listener.suspend()
      BenchClock.sleep(milliseconds: 50)
      let start = BenchClock.monotonic()
      var last: Int64 = 0
      for _ in 0..<backlog { last = try writer.commit(rows: 1, .insert).sequence }
      let written = BenchClock.monotonic()
      listener.resume()
      let report = try collect([listener], until: last, timeout: 600)[0]
      let drained = BenchClock.monotonic()
      let drainSeconds = Double(drained - written) / 1e9
      rows.append(
        .init(
          backlog: backlog, writeSeconds: Double(written - start) / 1e9, drainSeconds: drainSeconds,
          drainChangeSetsPerSecond: Double(report.delivered) / drainSeconds,
          peakKB: BenchProc.statusKilobytes(pid: listener.pid, "VmHWM") ?? -1,
          rssAfterKB: BenchProc.statusKilobytes(pid: listener.pid, "VmRSS") ?? -1, resets: report.resets.count))
    }
    results.memory = BenchMemoryResult(baselinePeakKB: baseline, rows: rows)
  }
}
