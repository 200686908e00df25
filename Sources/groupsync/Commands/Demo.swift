import ArgumentParser
import Foundation
import GroupSync
import GroupSyncProcess

/// The main job: real listener and writer processes of this binary on one
/// group folder, and a check that every listener saw every change in order.
struct Demo: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Run listener and writer processes on a fresh group folder and check what each listener received.")

  @Option(name: .long, help: "The group folder (default: a new temporary folder).")
  var directory: String?

  @Option(name: .long, help: "Listener processes.")
  var listeners = 4

  @Option(name: .long, help: "Writer processes, committing concurrently.")
  var writers = 2

  @Option(name: .long, help: "Transactions per writer.")
  var transactions = 50

  func validate() throws {
    guard (1...64).contains(listeners) else { throw ValidationError("--listeners must be 1...64") }
    guard (1...16).contains(writers) else { throw ValidationError("--writers must be 1...16") }
    guard transactions >= 1 else { throw ValidationError("--transactions must be at least 1") }
  }

  static let schema = """
    CREATE TABLE notes(id INTEGER PRIMARY KEY, writer TEXT NOT NULL, body TEXT NOT NULL);
    CREATE TABLE tags(name TEXT PRIMARY KEY, uses INTEGER NOT NULL) WITHOUT ROWID;
    """

  /// One writer transaction: inserts a note, edits the writer's previous
  /// one, deletes every fifth, and bumps a WITHOUT ROWID counter.
  static func transaction(writer: Int) -> [String] {
    [
      "INSERT INTO notes(writer, body) VALUES ('w\(writer)', 'note')",
      "UPDATE notes SET body = body || '+' WHERE id = (SELECT max(id) FROM notes WHERE writer = 'w\(writer)' AND id < last_insert_rowid())",
      "DELETE FROM notes WHERE writer = 'w\(writer)' AND id % 5 = 0",
      "INSERT INTO tags(name, uses) VALUES ('w\(writer)', 1) ON CONFLICT(name) DO UPDATE SET uses = uses + 1",
    ]
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let folder = directory ?? FileManager.default.temporaryDirectory
        .appendingPathComponent("groupsync-demo-\(UUID().uuidString.prefix(8))").path
      let executable = ChildProcess.currentExecutable
      let total = writers * transactions
      printLine("GroupSync demo: \(listeners) listeners, \(writers) writers x \(transactions) transactions, in \(folder)")

      let group = try GroupFolder(path: folder)
      try group.store.write { try $0.execute(sql: Self.schema) }
      let base = try group.store.currentSequence()

      var watchers: [ChildProcess] = []
      for index in 1...listeners {
        let child = try ChildProcess(
          executable: executable,
          arguments: ["watch", folder, "--name", "listener-\(index)", "--json", "--count", String(total)])
        try child.waitForStderr(containing: "listening as", timeout: 30)
        watchers.append(child)
      }
      printLine("started \(listeners) listeners; writing...")

      let clock = ContinuousClock.now
      var writerProcesses: [ChildProcess] = []
      for index in 1...writers {
        writerProcesses.append(
          try ChildProcess(
            executable: executable,
            arguments: ["exec", folder, "--json", "--repeat", String(transactions)] + Self.transaction(writer: index)))
      }
      var committed: [Int64: [String: AnyHashable]] = [:]
      for writer in writerProcesses {
        let result = writer.finish(timeout: 120)
        guard result.succeeded else { throw ValidationError("a writer failed: \(result.stderr)") }
        for object in try Self.objects(result.stdout) { committed[Self.sequence(object)] = Self.comparable(object) }
      }
      let writeTime = ContinuousClock.now - clock
      printLine("writers committed \(committed.count) change sets in \(writeTime)")

      var allGood = committed.count == total
      var sample: String?
      let expected = Array((base + 1)...(base + Int64(total)))
      printLine("")
      printLine("listener      received  in order  exact IDs  latency p50   p99      max")
      for (offset, watcher) in watchers.enumerated() {
        let index = offset + 1
        let result = watcher.finish(timeout: 120)
        let (output, errors) = (result.stdout, result.stderr)
        let objects = try Self.objects(output)
        let sequences = objects.map(Self.sequence)
        let inOrder = sequences == expected && !objects.contains { $0["reset"] != nil }
        let exact = objects.allSatisfy { committed[Self.sequence($0)] == Self.comparable($0) }
        let latencies = objects.compactMap { object -> Double? in
          guard let sent = object["committedAtNs"] as? Int64, let received = object["deliveredAtNs"] as? Int64
          else { return nil }
          return Double(received - sent) / 1000
        }.sorted()
        let good = result.succeeded && inOrder && exact && objects.count == total
        allGood = allGood && good
        printLine(
          "listener-\(index)".padding(toLength: 14, withPad: " ", startingAt: 0)
            + String(objects.count).padding(toLength: 10, withPad: " ", startingAt: 0)
            + (inOrder ? "yes" : "NO").padding(toLength: 10, withPad: " ", startingAt: 0)
            + (exact ? "yes" : "NO").padding(toLength: 11, withPad: " ", startingAt: 0)
            + Self.micros(latencies, 0.5) + Self.micros(latencies, 0.99) + Self.micros(latencies, 1.0))
        if !good && !errors.isEmpty { printError("listener-\(index): \(errors)") }
        if index == 1, let first = output.split(separator: "\n").first { sample = String(first) }
      }
      let status = try group.status()
      printLine("")
      if let sample { printLine("what listener-1 received first (watch --json):\n  \(sample)\n") }
      printLine("store \(status.storeID.uuidString) at sequence \(status.sequence); capture on the \(status.usesPreUpdateHook ? "pre-update" : "update") hook")
      printLine(allGood
        ? "OK: every listener received every change set exactly once, in commit order, with the committed IDs."
        : "FAILED: some listener missed, reordered or misreported change sets.")
      if !allGood { throw ExitCode.failure }
    }
  }

  static func objects(_ output: String) throws -> [[String: Any]] {
    try output.split(separator: "\n").map {
      guard let object = try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] else {
        throw ValidationError("not a JSON object: \($0)")
      }
      return object
    }
  }

  static func sequence(_ object: [String: Any]) -> Int64 { (object["seq"] as? Int64) ?? -1 }

  /// The parts of a change-set line that writer and listener must agree on.
  static func comparable(_ object: [String: Any]) -> [String: AnyHashable] {
    var result: [String: AnyHashable] = [:]
    for key in ["seq", "store", "inserted", "updated", "deleted", "invalidatedTables"] {
      if let value = object[key] as? AnyHashable { result[key] = value }
    }
    return result
  }

  static func micros(_ sorted: [Double], _ quantile: Double) -> String {
    guard !sorted.isEmpty else { return "-".padding(toLength: 9, withPad: " ", startingAt: 0) }
    let index = min(sorted.count - 1, Int((Double(sorted.count - 1) * quantile).rounded()))
    return String(format: "%6.0fus  ", sorted[index])
  }
}
