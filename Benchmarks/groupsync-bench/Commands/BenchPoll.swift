import ArgumentParser
import CGroupSync
import Foundation

/// The naive alternative to GroupSync, as a benchmark child: a reader that
/// polls `PRAGMA data_version` every interval on its own read-only
/// connection, and on a change reads which row is the newest.
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
        benchEmit(detections.collect(until: target, timeoutSeconds: 60))
      } else if line == "rusage" {
        benchEmit(BenchCPU(cpuNs: benchOwnCPUNanoseconds()))
      }
    }
    benchEmit(BenchReady(ready: true, pid: getpid(), startSequence: 0))

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
