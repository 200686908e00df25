import ArgumentParser
import Foundation
import GroupSync

struct MigrateStore: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "migrate-store",
    abstract: "Copy the rows of one store into another, in one transaction published as one change set.")

  @Argument(help: "The group folder.")
  var directory: String

  @Option(name: .long, help: "The store to copy from (left unchanged; may be read-only).")
  var from: String

  @Option(name: .long, help: "The writable store to copy into.")
  var to: String = "main"

  @Option(name: .long, help: "A table to copy (repeat for several; default: every table of --from).")
  var table: [String] = []

  @Flag(name: .long, help: "Print the committed change set as one JSON object.")
  var json = false

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      let migration = try group.migrateStore(from, into: to, tables: table.isEmpty ? nil : table)
      if json {
        if let changeSet = migration.changeSet { printLine(ChangeSetJSON.line(changeSet, storeName: to)) }
        return
      }
      let rows = migration.rowCounts.values.reduce(0, +)
      let tables = migration.rowCounts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
      printLine(
        "migrated \(rows) rows of \(migration.rowCounts.count) tables from \(from) into \(to)"
          + (tables.isEmpty ? "" : " (\(tables.joined(separator: ", ")))")
          + (migration.changeSet.map { ": committed sequence \($0.sequence)" } ?? ": nothing to commit"))
    }
  }
}
