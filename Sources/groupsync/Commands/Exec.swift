import ArgumentParser
import Foundation
import GRDB
import GroupSync

struct Exec: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Run SQL statements in one transaction; listeners are told what changed.")

  @Argument(help: "The group folder.")
  var directory: String

  @Argument(help: "SQL statements, run in order in one transaction.")
  var statements: [String]

  @OptionGroup var storeOption: StoreOption

  @Option(name: .long, help: "Run the transaction this many times, each committed on its own.")
  var `repeat`: Int = 1

  @Flag(name: .long, help: "Print each committed change set as one JSON object per line.")
  var json = false

  @Flag(
    name: .long,
    help: "Run the statements outside a transaction (VACUUM, PRAGMA foreign_keys, ...), then tell listeners that every table may have changed. Statements that change rows are refused.")
  var noTransaction = false

  func validate() throws {
    guard !statements.isEmpty else { throw ValidationError("give at least one SQL statement") }
    guard `repeat` >= 1 else { throw ValidationError("--repeat must be at least 1") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      let store = try storeOption.store(of: group)
      if noTransaction {
        for _ in 0..<`repeat` {
          let (rows, changeSet) = try store.writeWithoutTransaction { db in try Self.run(statements, in: db) }
          report(rows, changeSet)
        }
        return
      }
      var undelivered = false
      for _ in 0..<`repeat` {
        let report = try store.writeAndReport { db in try Self.run(statements, in: db) }
        self.report(report.result, report.changeSet)
        if let changeSet = report.changeSet, !report.publishFailures.isEmpty {
          undelivered = true
          printError(
            "warning: sequence \(changeSet.sequence) committed, but was not delivered to "
              + report.publishFailures.map { $0.listener.map { "'\($0)'" } ?? "any listener" }.joined(separator: ", ")
              + " (they read it from the store's history): "
              + report.publishFailures.map { "\($0.error)" }.joined(separator: "; "))
        }
      }
      // Committed, yet not delivered everywhere: say so in the exit status.
      if undelivered { throw ExitCode(3) }
    }
  }

  /// Prints the rows, then what was committed.
  func report(_ rows: [Row], _ changeSet: ChangeSet?) {
    if json {
      if let changeSet { printLine(ChangeSetJSON.line(changeSet, storeName: storeOption.store)) }
      return
    }
    for row in rows { printLine(row.databaseValues.map(\.sqlLiteral).joined(separator: "\t")) }
    guard let changeSet else {
      printLine("committed; no rows changed")
      return
    }
    let counts = changeSet.tables.values.reduce(into: (0, 0, 0)) {
      $0.0 += $1.inserted.count
      $0.1 += $1.updated.count
      $0.2 += $1.deleted.count
    }
    printLine(
      "committed sequence \(changeSet.sequence): \(counts.0) inserted, \(counts.1) updated, \(counts.2) deleted"
        + (changeSet.invalidatedTableNames.isEmpty
          ? "" : ", tables invalidated: \(changeSet.invalidatedTableNames.sorted().map(\.name).joined(separator: ", "))"))
  }

  /// Runs every statement of every argument in order; returns the rows of
  /// the last statement that returned any.
  static func run(_ statements: [String], in db: Database) throws -> [Row] {
    var rows: [Row] = []
    for sql in statements {
      let cursor = try db.allStatements(sql: sql)
      while let statement = try cursor.next() {
        guard statement.columnCount > 0 else {
          try statement.execute()
          continue
        }
        let fetched = try Row.fetchAll(statement)
        if !fetched.isEmpty { rows = fetched }
      }
    }
    return rows
  }
}

extension DatabaseValue {
  /// The value as an SQL literal: NULL, 42, 1.5, 'text', X'0A0B'.
  var sqlLiteral: String {
    switch storage {
    case .null: "NULL"
    case .int64(let value): String(value)
    case .double(let value): String(value)
    case .string(let value): "'" + value.replacingOccurrences(of: "'", with: "''") + "'"
    case .blob(let data): "X'" + data.map { String(format: "%02X", $0) }.joined() + "'"
    }
  }
}
