import Foundation
import GRDB
import GroupSync

/// A durable listener's catch-up from the history.
struct BenchCatchUpResult: Codable {
  var changeSets: Int
  var seconds: Double
  var changeSetsPerSecond: Double
  /// History bytes per change set, for the 1-row change sets replayed.
  var historyBytesPerChangeSet: Double
}

extension BenchRunner {
  /// Issue 8: how fast a durable listener replays what it missed.
  func catchUp() throws {
    let changeSets = options.quick ? 1000 : 10_000
    let folder = options.workFolder + "/catchup"
    try? FileManager.default.removeItem(atPath: folder)
    let writer = try BenchGroupWriter(path: folder)
    let group = writer.group
    log("catch-up: a durable listener replays \(changeSets) change sets from the history")
    let first = try group.listen(as: "durable", durable: true)
    first.close()
    for _ in 0..<changeSets { try writer.transaction(rows: 1, .insert) }
    let bytes = try group.store.read { db in
      try Double.fetchOne(db, sql: "SELECT avg(length(payload)) FROM groupsync_history WHERE seq > ?", arguments: [first.startSequence])
    } ?? 0
    let start = BenchClock.monotonic()
    let listener = try group.listen(as: "durable", durable: true)
    defer { listener.close() }
    let target = try group.store.currentSequence()
    let done = BenchBox(false)
    let task = Task {
      for await event in listener.events {
        if case .changes(let changeSet) = event, changeSet.sequence >= target { break }
      }
      done.withLock { $0 = true }
    }
    while !done.withLock({ $0 }) { usleep(1000) }
    task.cancel()
    let seconds = Double(BenchClock.monotonic() - start) / 1e9
    results.catchUp = BenchCatchUpResult(
      changeSets: changeSets, seconds: seconds, changeSetsPerSecond: Double(changeSets) / seconds,
      historyBytesPerChangeSet: bytes)
  }
}
