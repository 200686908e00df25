import ArgumentParser
import Foundation
import GroupSync

struct Status: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show each store's UUID, sequence and history, and each listener with its backlog.")

  @Argument(help: "The group folder.")
  var directory: String

  @Flag(name: .long, help: "Print JSON.")
  var json = false

  @Flag(name: .long, help: "Keep a live view: stores, sequences, rates, each listener's lag as a bar (q quits).")
  var watch = false

  @Option(name: .long, help: "With --watch: seconds between redraws.")
  var interval: Double = 1

  @Option(name: .long, help: "With --watch: exit after this many redraws.")
  var updates: Int?

  func validate() throws {
    if watch && json { throw ValidationError("--watch draws a screen; it cannot be combined with --json") }
    if !watch && updates != nil { throw ValidationError("--updates needs --watch") }
    guard interval >= 0.05 && interval <= 3600 else { throw ValidationError("--interval must be 0.05 to 3600 seconds") }
    if let updates, updates < 1 { throw ValidationError("--updates must be at least 1") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      if watch {
        try await StatusWatch(group: try GroupFolder(path: directory, create: false), interval: interval, updates: updates)
          .run()
        return
      }
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
      for store in status.stores {
        if store.isReadOnly {
          let installed = store.fileModified.map { ISO8601DateFormatter().string(from: $0) } ?? "?"
          printLine(
            "store     \(store.name): read-only, \(store.storeID.uuidString), \(store.fileSize ?? 0) bytes, "
              + "installed \(installed)")
        } else {
          printLine(
            "store     \(store.name): sequence \(store.sequence), \(store.storeID.uuidString), history "
              + "\(store.history.count) change sets (\(store.history.oldest)...\(store.history.newest)), "
              + "\(store.history.bytes) bytes")
        }
      }
      if let foreign = status.lastForeignCommit {
        let time = ISO8601DateFormatter().string(
          from: Date(timeIntervalSince1970: Double(foreign.detectedAtNanoseconds) / 1e9))
        printLine("foreign:  a commit without a change set, seen by \(foreign.listener) at \(time) (after sequence \(foreign.sequence))")
      }
      if status.listeners.isEmpty { printLine("listeners: none") }
      for listener in status.listeners {
        let state = listener.isLive ? "live (pid \(listener.processID.map(String.init) ?? "?"))" : "dead"
        var place = listener.acknowledged.map { ", durable at \($0) (lag \(status.sequence - $0))" } ?? ""
        for (store, at) in listener.places.sorted(by: { $0.key < $1.key }) {
          let sequence = status.stores.first { $0.name == store }?.sequence ?? at
          place += ", \(store) at \(at) (lag \(sequence - at))"
        }
        printLine("listener  \(listener.name): \(state), backlog \(listener.backlog)\(place)")
      }
      for relay in status.relays {
        let state = relay.isLive
          ? "running (pid \(relay.processID)), \(relay.isConnected ? "connected" : "not connected")" : "dead"
        let updated = ISO8601DateFormatter().string(
          from: Date(timeIntervalSince1970: Double(relay.updatedAtNanoseconds) / 1e9))
        printLine("relay     \(relay.host) (group \(relay.group)): \(state), as of \(updated)")
        let transport =
          relay.pollIntervalSeconds.map { "poll, every " + String(format: "%g s", $0) } ?? (relay.transport ?? "notify")
        printLine("            transport: \(transport)")
        let reads = (relay.formatsRead ?? [1]).map(String.init).joined(separator: ", ")
        printLine(
          "            version \(relay.relayVersion ?? "1 (from before log formats)"), reads log formats \(reads)"
            + (relay.groupFormat.map { "; the group writes format \($0)" } ?? "")
            + (relay.writeFormat.map { ", this relay \($0)" } ?? ""))
        if let rules = relay.mergeRules { printLine("            merge rules: \(rules)") }
        if let differing = relay.differingMergeRules, !differing.isEmpty {
          let others = differing.sorted { $0.key < $1.key }.map { "\($0.key) has \($0.value)" }.joined(separator: "; ")
          printLine("            SHIPS NOTHING: other members announce other merge rules (\(others)) until they agree")
        }
        for store in relay.stores {
          if let position = store.heldAt, let format = store.heldFormat {
            printLine(
              "            \(store.name): HOLDS at entry \(position), in log format \(format), which this relay does "
                + "not read: upgrade it (nothing is skipped meanwhile)")
          }
          printLine(
            "            \(store.name): shipped \(store.shipped) of \(store.localSequence) (\(store.unshipped) unshipped), "
              + "applied \(store.applied) of \(store.logHead) (lag \(store.lagChangeSets), "
              + String(format: "%.1f s", store.lagSeconds) + "), \(store.conflicts) conflicts"
              + (store.heldRows.map { $0 > 0 ? ", \($0) rows held (waiting for rows they refer to)" : "" } ?? ""))
        }
        if let error = relay.lastError { printLine("            last error: \(error)") }
      }
    }
  }
}
