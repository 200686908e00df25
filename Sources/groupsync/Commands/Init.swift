import ArgumentParser
import Foundation
import GroupSync

struct Init: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Create a group folder and its store, optionally running a schema.")

  @Argument(help: "The group folder to create (parents are created too).")
  var directory: String

  @Option(name: .long, help: "An SQL file to run in one transaction, e.g. CREATE TABLE statements.")
  var schema: String?

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let sql = try schema.map { path in
        guard let text = FileManager.default.contents(atPath: path).flatMap({ String(data: $0, encoding: .utf8) })
        else { throw ValidationError("cannot read schema file '\(path)'") }
        return text
      }
      let group = try GroupFolder(path: directory)
      if let sql { try group.store.write { try $0.execute(sql: sql) } }
      printLine("initialized \(group.path) (store \(group.store.storeID.uuidString), sequence \(try group.store.currentSequence()))")
    }
  }
}
