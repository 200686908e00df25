import ArgumentParser
import Foundation
import GroupSync

struct Log: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Print the store's history: each committed change set, oldest first.")

  @Argument(help: "The group folder.")
  var directory: String

  @OptionGroup var storeOption: StoreOption

  @Option(name: .long, help: "Print the change sets after this sequence number.")
  var since: Int64 = 0

  @Option(name: .long, help: "Print at most this many change sets.")
  var limit: Int?

  @Flag(name: .long, help: "Print one JSON object per line.")
  var json = false

  func validate() throws {
    guard since >= 0 else { throw ValidationError("--since must not be negative") }
    if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let store = try storeOption.store(of: GroupFolder(path: directory, create: false))
      var after = since
      var remaining = limit ?? Int.max
      while remaining > 0 {
        let page = try store.history(after: after, limit: min(remaining, 1000))
        guard let last = page.last else { break }
        for entry in page { printLine(json ? Self.jsonLine(entry, store: store) : Self.text(entry)) }
        after = last.sequence
        remaining -= page.count
      }
    }
  }

  static func text(_ entry: HistoryEntry) -> String {
    let time = ISO8601DateFormatter().string(
      from: Date(timeIntervalSince1970: Double(entry.committedAtNanoseconds) / 1e9))
    let who = "\(entry.author ?? "?") (pid \(entry.processID))"
    switch entry.changeSet {
    case .success(let changeSet):
      var line = "#\(entry.sequence) \(time) \(who): \(changeSet.inserted.count) inserted, "
        + "\(changeSet.updated.count) updated, \(changeSet.deleted.count) deleted"
      if !changeSet.invalidatedTableNames.isEmpty {
        line += ", tables invalidated: " + changeSet.invalidatedTableNames.sorted().map(\.name).joined(separator: ", ")
      }
      return line + " (\(entry.byteCount) bytes)"
    case .failure(let error):
      return "#\(entry.sequence) \(time) \(who): unreadable: \(error)"
    }
  }

  static func jsonLine(_ entry: HistoryEntry, store: Store) -> String {
    var object: [String: Any] = [
      "seq": entry.sequence, "store": store.storeID.uuidString, "committedAtNs": entry.committedAtNanoseconds,
      "author": entry.author ?? NSNull(), "pid": entry.processID, "bytes": entry.byteCount,
    ]
    switch entry.changeSet {
    case .success(let changeSet):
      object["inserted"] = changeSet.inserted.map(\.uri).sorted()
      object["updated"] = changeSet.updated.map(\.uri).sorted()
      object["deleted"] = changeSet.deleted.map(\.uri).sorted()
      object["invalidatedTables"] = changeSet.invalidatedTables.map(\.uri).sorted()
      let globalIDs = ChangeSetJSON.globalIDs(of: changeSet, in: store)
      if !globalIDs.isEmpty { object["globalIDs"] = ChangeSetJSON.globalIDs(globalIDs) }
    case .failure(let error):
      object["unreadable"] = "\(error)"
    }
    return ChangeSetJSON.encode(object)
  }
}
