import ArgumentParser
import CGroupSync
import Foundation

/// The naive alternatives to GroupSync, as a benchmark child: a reader that
/// polls `PRAGMA data_version` every interval on its own read-only
/// connection, and on a change reads which row is the newest; or, with
/// `--inotify-wal`, one that sleeps in inotify on the store's `-wal` file
/// and runs the same check on each write to it. (Naive indeed: the last
/// write to the WAL can come before the commit is visible in the WAL index,
/// so such a commit is only seen at the next write; the file replaced after
/// a checkpoint by the last connection closing loses the watch.)
///
/// Protocol: prints `{"ready":true,...}`; `collect ROWID` waits until a
/// poll saw that row and prints the detections since the last collect;
/// `quit` exits.
struct BenchPoll: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "poll", abstract: "Child role: poll PRAGMA data_version.")

  @Argument(help: "The SQLite store to poll.")
  var store: String

  @Option(name: .long, help: "Microseconds to sleep between polls.")
  var intervalUs: Int = 1000

  @Flag(name: .long, help: "Instead of polling, wait in inotify for writes to the store's -wal file, then check.")
  var inotifyWal = false

  func run() async throws {
    var handle: OpaquePointer?
    guard sqlite3_open_v2(store, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK,
      let connection = handle
    else { throw BenchError("cannot open \(store)") }
    sqlite3_busy_timeout(connection, 10_000)
    let version = try Self.prepare(connection, "PRAGMA data_version")
    let newest = try Self.prepare(connection, "SELECT max(id) FROM items")
    let detections = BenchDetections()
    var lastVersion = Self.scalar(version)
    detections.start(at: Self.scalar(newest))

    benchStartControlThread { line in
      guard let line, line != "quit" else { Foundation.exit(0) }
      let words = line.split(separator: " ")
      if words.first == "collect", words.count == 2, let target = Int64(words[1]) {
        // The inotify reader may never see the last commit (see above):
        // give up soon and report what it saw.
        benchEmit(detections.collect(until: target, timeoutSeconds: inotifyWal ? 2 : 60))
      } else if line == "rusage" {
        benchEmit(BenchCPU(cpuNs: benchOwnCPUNanoseconds()))
      }
    }
    benchEmit(BenchReady(ready: true, pid: getpid(), startSequence: 0))

    if inotifyWal {
      let inotify = inotify_init1(Int32(IN_CLOEXEC))
      guard inotify >= 0, inotify_add_watch(inotify, store + "-wal", UInt32(IN_MODIFY)) >= 0 else {
        throw BenchError("cannot watch \(store)-wal: \(String(cString: strerror(errno)))")
      }
      var buffer = [UInt8](repeating: 0, count: 4096)
      while true {
        let count = buffer.withUnsafeMutableBytes { read(inotify, $0.baseAddress, $0.count) }
        if count < 0 && errno != EINTR { throw BenchError("read inotify: \(String(cString: strerror(errno)))") }
        let current = Self.scalar(version)
        if current != lastVersion {
          let detectedAt = BenchClock.realtime()
          lastVersion = current
          detections.record(newestRow: Self.scalar(newest), at: detectedAt)
        }
      }
    }
    let interval = Int64(intervalUs) * 1000
    while true {
      let current = Self.scalar(version)
      if current != lastVersion {
        let detectedAt = BenchClock.realtime()
        lastVersion = current
        detections.record(newestRow: Self.scalar(newest), at: detectedAt)
      }
      BenchClock.sleep(untilMonotonic: BenchClock.monotonic() + interval)
    }
  }

  static func prepare(_ connection: OpaquePointer, _ sql: String) throws -> OpaquePointer {
    var statement: OpaquePointer?
    guard sqlite3_prepare_v2(connection, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
      throw BenchError("prepare \(sql): \(String(cString: sqlite3_errmsg(connection)))")
    }
    return statement
  }

  static func scalar(_ statement: OpaquePointer) -> Int64 {
    defer { sqlite3_reset(statement) }
    return sqlite3_step(statement) == SQLITE_ROW ? sqlite3_column_int64(statement, 0) : -1
  }
}

/// What a poller reports: for each poll that saw a change, when, and the
/// newest row it could see then.
struct BenchPollReport: Codable {
  var newestRow: [Int64] = []
  var detectedAt: [Int64] = []
  var timedOut = false
}

final class BenchDetections: @unchecked Sendable {
  private let condition = NSCondition()
  private var report = BenchPollReport()
  private var newest: Int64 = 0

  func start(at row: Int64) { condition.withLock { newest = row } }

  func record(newestRow: Int64, at time: Int64) {
    condition.lock()
    report.newestRow.append(newestRow)
    report.detectedAt.append(time)
    newest = max(newest, newestRow)
    condition.broadcast()
    condition.unlock()
  }

  func collect(until row: Int64, timeoutSeconds: Double) -> BenchPollReport {
    condition.lock()
    defer { condition.unlock() }
    let deadline = Date().addingTimeInterval(timeoutSeconds)
    var timedOut = false
    while newest < row {
      if !condition.wait(until: deadline) {
        timedOut = newest < row
        break
      }
    }
    var result = report
    result.timedOut = timedOut
    report = BenchPollReport()
    return result
  }
}
