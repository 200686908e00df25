import ArgumentParser
import Foundation
import GroupSync

struct Init: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Create a group folder and its main store, or add a store to it; optionally run a schema.")

  @Argument(help: "The group folder to create (parents are created too).")
  var directory: String

  @Option(name: .long, help: "An SQL file to run in one transaction, e.g. CREATE TABLE statements.")
  var schema: String?

  @Option(name: .long, help: "The store to create (default: main); a name of 1-32 lowercase letters, digits, '-', '_'.")
  var store: String = "main"

  @Option(
    name: .customLong("read-only"),
    help: "Install this SQLite file as read-only store --store (a copy, swapped in atomically; again to replace it).")
  var readOnly: String?

  func validate() throws {
    if readOnly != nil && store == "main" { throw ValidationError("--read-only needs --store NAME: the main store is writable") }
    if readOnly != nil && schema != nil { throw ValidationError("--schema cannot change a read-only store") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let sql = try schema.map { path in
        guard let text = FileManager.default.contents(atPath: path).flatMap({ String(data: $0, encoding: .utf8) })
        else { throw ValidationError("cannot read schema file '\(path)'") }
        return text
      }
      let group = try GroupFolder(path: directory)
      if let readOnly {
        let installed = try group.installReadOnlyStore(named: store, from: readOnly)
        printLine("installed read-only store \(installed.name) in \(group.path) (store \(installed.storeID.uuidString))")
        return
      }
      let target = try group.store(named: store, create: true)
      if let sql { try target.write { try $0.execute(sql: sql) } }
      printLine(
        "initialized \(group.path) (store \(store == "main" ? "" : "\(store) ")\(target.storeID.uuidString), "
          + "sequence \(try target.currentSequence()))")
    }
  }
}
