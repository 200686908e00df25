import ArgumentParser
import Foundation
import GroupSync

struct Watch: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Listen and print every change set other processes commit, in order.")

  @Argument(help: "The group folder.")
  var directory: String

  @Option(name: .long, help: "The listener's name (default: a unique name, removed on exit).")
  var name: String?

  @Option(name: .long, help: "Exit after this many change sets.")
  var count: Int?

  @Flag(name: .long, help: "Print one JSON object per line.")
  var json = false

  @Option(name: .long, help: "Milliseconds a missing change set may stay missing before a reset.")
  var graceMs: Int = 1000

  func validate() throws {
    if let count, count < 1 { throw ValidationError("--count must be at least 1") }
    guard graceMs >= 0 else { throw ValidationError("--grace-ms must not be negative") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      var options = ListenerOptions()
      options.gracePeriod = .milliseconds(graceMs)
      let listener = try group.listen(as: name, options: options)
      let stopper = SignalStopper { listener.close() }
      defer { withExtendedLifetime(stopper) {} }
      FileHandle.standardError.write(
        Data("groupsync: listening as \(listener.name) from sequence \(listener.startSequence)\n".utf8))
      var delivered = 0
      for await event in listener.events {
        switch event {
        case .changes(let changeSet):
          let now = Int64(Date().timeIntervalSince1970 * 1e9)
          printLine(json ? ChangeSetJSON.line(changeSet, deliveredAtNs: now) : Self.text(changeSet))
          delivered += 1
        case .reset(let reset):
          printLine(json ? ChangeSetJSON.line(reset, store: group.store.storeID) : "reset: \(reset)")
        }
        if let count, delivered >= count { break }
      }
      listener.close()
    }
  }

  static func text(_ changeSet: ChangeSet) -> String {
    var lines = ["#\(changeSet.sequence)"]
    for (label, ids) in [("inserted", changeSet.inserted), ("updated", changeSet.updated), ("deleted", changeSet.deleted)]
    where !ids.isEmpty {
      lines.append("  \(label): " + ids.map(\.uri).sorted().joined(separator: " "))
    }
    if !changeSet.invalidatedTables.isEmpty {
      lines.append("  invalidated: " + changeSet.invalidatedTables.map(\.uri).sorted().joined(separator: " "))
    }
    return lines.joined(separator: "\n")
  }
}

/// Turns SIGINT and SIGTERM into a call of `stop`, for a clean exit.
final class SignalStopper {
  private let sources: [any DispatchSourceSignal]

  init(_ stop: @escaping @Sendable () -> Void) {
    sources = [SIGINT, SIGTERM].map { signalNumber in
      signal(signalNumber, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
      source.setEventHandler(handler: stop)
      source.resume()
      return source
    }
  }
}
