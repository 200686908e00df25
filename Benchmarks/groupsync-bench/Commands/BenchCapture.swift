import ArgumentParser
import Foundation

/// The capture-overhead workload on its own, for `valgrind --tool=callgrind`:
/// sets up a fresh store, runs two warm-up transactions, then
/// `--transactions` transactions of `--rows` rows: raw SQLite, plain GRDB,
/// or through GroupSync with either one's statement code. The benchmark runs
/// it with N and with 0 transactions and divides the difference in
/// instructions by the rows written.
struct BenchCapture: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "capture", abstract: "Child role: the capture-overhead workload (run under callgrind).")

  enum Mode: String, ExpressibleByArgument, Codable, CaseIterable {
    /// Raw SQLite, and `Store.write` stepping the same C statement.
    case plain, groupsync
    /// Plain GRDB (`pool.write`, cached statements), and `Store.write`
    /// running the same GRDB statements.
    case grdb, groupsyncGRDB = "groupsync-grdb"
    /// Plain GRDB with one no-op `TransactionObserver` for the connection's
    /// life: what GRDB itself charges any observer, per statement and per
    /// commit, which `Store.write` (an observer) cannot avoid.
    case grdbObserved = "grdb-observer"
  }

  @Option(name: .long, help: "plain, groupsync, grdb, groupsync-grdb or grdb-observer.")
  var mode: Mode

  @Option(name: .long, help: "insert or update.")
  var op: BenchWorkload.Operation = .insert

  @Option(name: .long, help: "Rows per transaction.")
  var rows = 1000

  @Option(name: .long, help: "Measured transactions (0: set-up only).")
  var transactions = 20

  @Option(name: .long, help: "A folder to create the store in (must not exist).")
  var directory: String

  func run() async throws {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    switch mode {
    case .plain:
      let writer = try BenchPlainWriter(path: directory + "/plain.sqlite")
      if op == .update { try writer.prepareUpdates() }
      for _ in 0..<2 { try writer.transaction(rows: rows, op) }
      try Self.measured(transactions) { try writer.transaction(rows: rows, op) }
    case .grdb, .grdbObserved:
      let writer = try BenchGRDBWriter(path: directory + "/grdb.sqlite", observed: mode == .grdbObserved)
      if op == .update { try writer.prepareUpdates() }
      for _ in 0..<2 { try writer.transaction(rows: rows, op) }
      try Self.measured(transactions) { try writer.transaction(rows: rows, op) }
    case .groupsync, .groupsyncGRDB:
      let writer = try BenchGroupWriter(
        path: directory + "/group", grdbStatements: mode == .groupsyncGRDB, stampsCommit: false)
      if op == .update { try writer.prepareUpdates() }
      for _ in 0..<2 { try writer.transaction(rows: rows, op) }
      try Self.measured(transactions) { try writer.transaction(rows: rows, op) }
    }
  }

  @inline(never)
  static func measured(_ count: Int, _ body: () throws -> Int64) throws {
    for _ in 0..<count { _ = try body() }
  }
}

extension BenchWorkload.Operation: ExpressibleByArgument {}
