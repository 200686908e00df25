import ArgumentParser
import Foundation
import GroupSync

struct Show: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Print a change set as JSON: a change-set file, or a history entry of a group's store.",
    discussion: "groupsync show FILE | groupsync show DIR --seq N")

  @Argument(help: "A change-set file, or a group folder (with --seq).")
  var path: String

  @OptionGroup var storeOption: StoreOption

  @Option(name: .long, help: "The sequence number of the history entry to print (with a group folder).")
  var seq: Int64?

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      if let seq {
        let store = try storeOption.store(of: GroupFolder(path: path, create: false))
        guard let entry = try store.history(after: seq - 1, limit: 1).first, entry.sequence == seq else {
          throw ValidationError("the history of '\(path)' has no change set \(seq)")
        }
        printLine(Log.jsonLine(entry, store: store))
        return
      }
      guard let data = FileManager.default.contents(atPath: path) else {
        throw ValidationError("cannot read '\(path)'")
      }
      printLine(ChangeSetJSON.line(try ChangeSetEncoding.decode([UInt8](data), name: path)))
    }
  }
}
