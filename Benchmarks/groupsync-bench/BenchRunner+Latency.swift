// Latency against the floor, fan-out to many listeners, and throughput.
import CGroupSync
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

extension BenchRunner {
  // MARK: 1, 2, 5, 6. Latency against the floor, fan-out, throughput

  func latencyAndFanOut() throws {
    var fanOutPoints: [BenchFanOutResult.Point] = []
    defer { results.fanOut = Self.fanOut(points: fanOutPoints) }
    for count in settings.listenerCounts {
      try phase("latency with \(count) listeners") {
        try latency(listeners: count, fanOutPoints: &fanOutPoints)
      }
    }
  }

  /// One listener count: GroupSync and the floor (link) on the same
  /// streams, in alternating blocks, so that both meet the same state of the
  /// machine and of the filesystem (on ext4 without a journal, creating a
  /// file gets slower the more files were deleted in the last 5-35 s); the
  /// rename variant, which creates N files per message, runs after both.
  /// With 64 listeners the floor's watchers and the listeners would together
  /// pass the default limit of 128 inotify instances per user, so the floor
  /// runs before the listeners start instead.
  func latency(listeners count: Int, fanOutPoints: inout [BenchFanOutResult.Point]) throws {
    let folder = options.workFolder + "/latency-\(count)"
    let writer = try BenchGroupWriter(path: folder)
    if count == settings.listenerCounts.first, settings.fanOutListenerCounts.contains(0) {
      log("fan-out: Store.write with no listener")
      for _ in 0..<20 { try writer.transaction(rows: 1, .insert) }
      var times: [Int64] = []
      for _ in 0..<settings.fanOutWrites { times.append(try writer.transaction(rows: 1, .insert)) }
      fanOutPoints.append(.init(listeners: 0, write: BenchStats(nanoseconds: times), floorPublish: nil))
    }
    let streams = ["busy", "sparse"]
    func commits(_ stream: String) -> Int { stream == "busy" ? settings.busyCommits : settings.sparseCommits }
    func interval(_ stream: String) -> Int { stream == "busy" ? 0 : settings.sparseIntervalMs * 1000 }
    let rounds = settings.rounds
    let interleaved = count <= 32
    var link: [String: FloorResult] = [:]
    var rename: [String: FloorResult] = [:]

    func floorBlock(_ stream: String, _ mode: String, _ messages: Int) throws {
      var result = try runFloor(listeners: count, commits: messages, intervalUs: interval(stream), mode: mode, group: folder)
      result.watchers = count
      if mode == "link" { link[stream, default: FloorResult()].append(result) } else { rename[stream, default: FloorResult()].append(result) }
    }

    if !interleaved {
      for stream in streams {
        log("floor: N=\(count) \(stream), link, \(commits(stream)) messages (before the listeners start)")
        try floorBlock(stream, "link", commits(stream))
      }
    }

    log("latency: starting \(count) listener process\(count == 1 ? "" : "es")")
    let listeners = try startListeners(count, folder: folder)
    var quitListeners = true
    defer { if quitListeners { listeners.forEach { $0.quit() } } }
    // Warm-up: page in code and the store on both sides.
    for _ in 0..<20 { try writer.transaction(rows: 1, .insert) }
    _ = try collect(listeners, until: try writer.group.store.currentSequence())

    var groupRows: [String: (latencies: [Int64], writes: [Int64], publishes: [Int64], resets: Int, missing: Int,
                             cpuNs: Int64, deliveries: Int)] = [:]
    func groupBlock(_ stream: String, _ messages: Int) throws {
      var committed: [Int64: Int64] = [:]
      var writes: [Int64] = []
      var publishes: [Int64] = []
      var next = BenchClock.monotonic()
      for _ in 0..<messages {
        if interval(stream) > 0 {
          next += Int64(interval(stream)) * 1000
          BenchClock.sleep(untilMonotonic: next)
        }
        let commit = try writer.commit(rows: 1, .insert)
        committed[commit.sequence] = commit.committedAt
        writes.append(commit.duration)
        publishes.append(commit.afterCommit)
      }
      let reports = try collect(listeners, until: committed.keys.max()!)
      let (latencies, missing) = Self.lastListenerLatencies(committed: committed, reports: reports)
      var row = groupRows[stream] ?? ([], [], [], 0, 0, 0, 0)
      // CPU of the listeners per delivery (it includes answering the
      // previous collect, about a microsecond per delivery).
      row.cpuNs += reports.reduce(0) { $0 + ($1.cpuDeltaNs ?? 0) }
      row.deliveries += reports.reduce(0) { $0 + ($1.cpuDeltaNs == nil ? 0 : $1.delivered) }
      row.latencies += latencies
      row.writes += writes
      row.publishes += publishes
      row.resets += reports.reduce(0) { $0 + $1.resets.count }
      row.missing += missing
      groupRows[stream] = row
    }

    for stream in streams {
      let block = max(1, commits(stream) / rounds)
      if interleaved {
        log("latency: N=\(count) \(stream): GroupSync and floor (link) in \(rounds) alternating blocks of \(block)")
        for round in 0..<rounds {
          // Alternate which goes first.
          if round % 2 == 0 {
            try groupBlock(stream, block)
            try floorBlock(stream, "link", block)
          } else {
            try floorBlock(stream, "link", block)
            try groupBlock(stream, block)
          }
        }
      } else {
        log("latency: N=\(count) \(stream): GroupSync, \(commits(stream)) commits")
        try groupBlock(stream, commits(stream))
      }
    }

    // Fan-out: the writer's cost with `count` live listeners, stopped with
    // SIGSTOP so that they do not compete for the CPUs; beside it the
    // floor's writer with as many stopped watchers, in alternating blocks.
    var fanOutGroup: [Int64] = []
    var fanOutFloor = FloorResult()
    let measureFanOut = settings.fanOutListenerCounts.contains(count)
    if measureFanOut {
      let fanRounds = interleaved ? max(1, settings.rounds / 2) : 1
      let perRound = max(1, settings.fanOutWrites / fanRounds)
      log("fan-out: Store.write with \(count) stopped listener\(count == 1 ? "" : "s")\(interleaved ? ", and the floor's writer, alternating" : "")")
      for _ in 0..<fanRounds {
        listeners.forEach { $0.suspend() }
        BenchClock.sleep(milliseconds: 50)
        for _ in 0..<perRound { fanOutGroup.append(try writer.transaction(rows: 1, .insert)) }
        listeners.forEach { $0.resume() }
        _ = try collect(listeners, until: try writer.group.store.currentSequence())
        if interleaved {
          fanOutFloor.append(
            try runFloor(listeners: count, commits: perRound, intervalUs: 0, mode: "link", group: folder, stopped: true))
        }
      }
    }

    if count == 4 {
      try phase("throughput") { try throughput(writer: writer, listeners: listeners) }
    }
    listeners.forEach { $0.quit() }
    quitListeners = false
    if measureFanOut && !interleaved {
      fanOutFloor.append(
        try runFloor(listeners: count, commits: settings.fanOutWrites, intervalUs: 0, mode: "link", group: folder, stopped: true))
    }
    if measureFanOut {
      fanOutPoints.append(
        .init(listeners: count, write: BenchStats(nanoseconds: fanOutGroup), floorPublish: BenchStats(nanoseconds: fanOutFloor.publishNs)))
    }

    for stream in streams {
      log("floor: N=\(count) \(stream), rename, \(commits(stream)) messages")
      try floorBlock(stream, "rename", commits(stream))
    }

    for stream in streams {
      guard let group = groupRows[stream], let linkResult = link[stream], let renameResult = rename[stream] else { continue }
      let groupStats = BenchStats(nanoseconds: group.latencies)
      let linkStats = BenchStats(nanoseconds: linkResult.latencyNs)
      results.latency.append(
        BenchLatencyRow(
          listeners: count, stream: stream, interleaved: interleaved, groupsync: groupStats, floorLink: linkStats,
          floorRename: BenchStats(nanoseconds: renameResult.latencyNs),
          ratioP50: groupStats.p50 / linkStats.p50, ratioP99: groupStats.p99 / linkStats.p99,
          groupsyncWrite: BenchStats(nanoseconds: group.writes), groupsyncPublish: BenchStats(nanoseconds: group.publishes),
          floorLinkPublish: BenchStats(nanoseconds: linkResult.publishNs),
          groupsyncListenerCPUPerDelivery: Double(group.cpuNs) / Double(max(1, group.deliveries)) / 1000,
          floorWatcherCPUPerMessage: linkResult.cpuPerMessage, resets: group.resets, missing: group.missing))
    }
  }

  func throughput(writer: BenchGroupWriter, listeners: [ChildProcess]) throws {
    let slots = listeners.indices.map { slotBase + $0 }
    let window = Int64(settings.throughputBacklogWindow)
    let seconds = settings.throughputSeconds

    log("throughput: 1-row change sets to \(listeners.count) listeners, backlog held under \(window)")
    // Elapsed times run to the last delivery the listeners stamped.
    func lastDelivery(_ reports: [BenchListenerReport]) -> Int64 {
      reports.compactMap { $0.deliveredAt.max() }.max() ?? BenchClock.realtime()
    }
    var start = BenchClock.monotonic()
    var startRealtime = BenchClock.realtime()
    var end = start + Int64(seconds * 1e9)
    var commits = 0
    var maxBacklog: Int64 = 0
    var last: Int64 = 0
    while BenchClock.monotonic() < end {
      let waitStart = BenchClock.monotonic()
      while true {
        let backlog = last == 0 ? 0 : last - slots.map { progress.load($0) }.min()!
        maxBacklog = max(maxBacklog, backlog)
        if backlog < window { break }
        if BenchClock.monotonic() - waitStart > 30_000_000_000 {
          throw BenchError("listeners stopped making progress (backlog \(backlog))")
        }
        usleep(20)
      }
      last = try writer.commit(rows: 1, .insert).sequence
      commits += 1
    }
    var elapsed = Double(lastDelivery(try collect(listeners, until: last)) - startRealtime) / 1e9
    var sustained = BenchThroughputResult.Sustained(
      listeners: listeners.count, backlogWindow: Int(window), changeSets: commits, seconds: elapsed,
      changeSetsPerSecond: Double(commits) / elapsed, rowsPerSecond: Double(commits) / elapsed, maxBacklog: maxBacklog)

    // The floor's own sustained rate, same window, same number of readers,
    // files created in the same tmp/ (the listeners idle meanwhile).
    log("throughput: the floor's sustained rate to \(listeners.count) watchers, backlog held under \(window)")
    do {
      let floor = try ChildProcess.run(
        options.floorPath,
        ["--dir", writer.group.path + "/floor-sustained", "--tmp", writer.group.path + "/tmp", "--watchers",
         String(listeners.count), "--count", "2000000", "--sustained", String(seconds), "--window", String(window)],
        timeout: 120)
      struct FloorSustained: Decodable {
        var messagesPerSecond: Double
        var maxBacklog: Int64
      }
      guard floor.succeeded else { throw BenchError("floor --sustained failed: \(floor.stderr.suffix(300))") }
      let result = try JSONDecoder().decode(FloorSustained.self, from: Data(floor.stdout.utf8))
      sustained.floorMessagesPerSecond = result.messagesPerSecond
      sustained.floorMaxBacklog = result.maxBacklog
      sustained.ratioToFloor = sustained.changeSetsPerSecond / result.messagesPerSecond
    } catch {
      log("FAILED: the floor's sustained rate: \(error)")
      results.notes.append("the floor's sustained rate could not be measured: \(error)")
    }

    log("throughput: writer flat out for \(seconds) s")
    start = BenchClock.monotonic()
    startRealtime = BenchClock.realtime()
    end = start + Int64(seconds * 1e9)
    commits = 0
    while BenchClock.monotonic() < end {
      last = try writer.commit(rows: 1, .insert).sequence
      commits += 1
    }
    let writerSeconds = Double(BenchClock.monotonic() - start) / 1e9
    let backlogAtEnd = last - slots.map { progress.load($0) }.min()!
    elapsed = Double(lastDelivery(try collect(listeners, until: last)) - startRealtime) / 1e9
    let openLoop = BenchThroughputResult.OpenLoop(
      listeners: listeners.count, seconds: writerSeconds, writerChangeSetsPerSecond: Double(commits) / writerSeconds,
      deliveredChangeSetsPerSecond: Double(commits) / elapsed, backlogAtEnd: backlogAtEnd)

    let rows = settings.bulkRows
    log("throughput: \(settings.bulkTransactions) transactions of \(rows) rows to \(listeners.count) listeners")
    var committed: [Int64: Int64] = [:]
    var writes: [Int64] = []
    startRealtime = BenchClock.realtime()
    for _ in 0..<settings.bulkTransactions {
      let commit = try writer.commit(rows: rows, .insert)
      committed[commit.sequence] = commit.committedAt
      writes.append(commit.duration)
    }
    let reports = try collect(listeners, until: committed.keys.max()!)
    let (latencies, _) = Self.lastListenerLatencies(committed: committed, reports: reports)
    let bulkSeconds = Double(lastDelivery(reports) - startRealtime) / 1e9
    let delivered = reports.map(\.rows).min() ?? 0
    let bulk = BenchThroughputResult.Bulk(
      listeners: listeners.count, transactions: settings.bulkTransactions, rowsPerTransaction: rows,
      rowsPerSecond: Double(delivered) / bulkSeconds, latency: BenchStats(nanoseconds: latencies),
      write: BenchStats(nanoseconds: writes))
    results.throughput = BenchThroughputResult(sustained: sustained, openLoop: openLoop, bulk: bulk)
  }
}
