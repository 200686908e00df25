import ArgumentParser
import Foundation
import GroupSync

struct Status: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show the store's UUID and sequence, and each listener with its backlog.")

  @Argument(help: "The group folder.")
  var directory: String

  @Flag(name: .long, help: "Print JSON.")
  var json = false

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let status = try GroupFolder(path: directory, create: false).status()
      if json {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        printLine(String(decoding: try encoder.encode(status), as: UTF8.self))
        return
      }
      printLine("group:    \(status.path)")
      printLine("store:    \(status.storeID.uuidString)")
      printLine("sequence: \(status.sequence)")
      printLine(
        "history:  \(status.history.count) change sets (\(status.history.oldest)...\(status.history.newest)), "
          + "\(status.history.bytes) bytes")
      printLine("capture:  \(status.usesPreUpdateHook ? "pre-update hook" : "GRDB's observer (fallback)")")
      if let foreign = status.lastForeignCommit {
        let time = ISO8601DateFormatter().string(
          from: Date(timeIntervalSince1970: Double(foreign.detectedAtNanoseconds) / 1e9))
        printLine("foreign:  a commit without a change set, seen by \(foreign.listener) at \(time) (after sequence \(foreign.sequence))")
      }
      if status.listeners.isEmpty { printLine("listeners: none") }
      for listener in status.listeners {
        let state = listener.isLive ? "live (pid \(listener.processID.map(String.init) ?? "?"))" : "dead"
        let place = listener.acknowledged.map { ", durable at \($0) (lag \(status.sequence - $0))" } ?? ""
        printLine("listener  \(listener.name): \(state), backlog \(listener.backlog)\(place)")
      }
    }
  }
}
