import ArgumentParser
import Foundation
import GroupSync

struct Exec: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Run SQL statements in one transaction; listeners are told what changed.")

  @Argument(help: "The group folder.")
  var directory: String

  @Argument(help: "SQL statements, run in order in one transaction.")
  var statements: [String]

  @Option(name: .long, help: "Run the transaction this many times, each committed on its own.")
  var `repeat`: Int = 1

  @Flag(name: .long, help: "Print each committed change set as one JSON object per line.")
  var json = false

  func validate() throws {
    guard !statements.isEmpty else { throw ValidationError("give at least one SQL statement") }
    guard `repeat` >= 1 else { throw ValidationError("--repeat must be at least 1") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      for _ in 0..<`repeat` {
        let (rows, changeSet) = try group.store.writeAndReturnChangeSet { db in
          var rows: [[DatabaseValue]] = []
          for sql in statements {
            let result = try db.rows(sql)
            if !result.isEmpty { rows = result }
          }
          return rows
        }
        if json {
          if let changeSet { printLine(ChangeSetJSON.line(changeSet)) }
          continue
        }
        for row in rows { printLine(row.map(\.sqlLiteral).joined(separator: "\t")) }
        if let changeSet {
          printLine(
            "committed sequence \(changeSet.sequence): \(changeSet.inserted.count) inserted, "
              + "\(changeSet.updated.count) updated, \(changeSet.deleted.count) deleted"
              + (changeSet.invalidatedTableNames.isEmpty
                ? "" : ", tables invalidated: \(changeSet.invalidatedTableNames.sorted().joined(separator: ", "))"))
        } else {
          printLine("committed; no rows changed")
        }
      }
    }
  }
}
