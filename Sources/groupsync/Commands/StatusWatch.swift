import Foundation
import GroupSync
import Synchronization

/// `groupsync status --watch`: the group's status read again every
/// interval and drawn as one screen, in place on a terminal (ANSI: cursor
/// home, each line cleared to its end, the rest of the screen cleared),
/// one frame after another otherwise.
struct StatusWatch {
  let group: GroupFolder
  let interval: Double
  let updates: Int?

  func run() async throws {
    let isTerminal = isatty(STDOUT_FILENO) == 1
    let stop = StopFlag()
    let stopper = SignalStopper { stop.set() }
    let keys = isTerminal && isatty(STDIN_FILENO) == 1 ? QuitKey { stop.set() } : nil
    defer { withExtendedLifetime((stopper, keys)) {} }
    var screen = StatusScreen()
    if isTerminal { FileHandle.standardOutput.write(Data("\u{1B}[?25l\u{1B}[2J".utf8)) }  // hide the cursor
    defer {
      keys?.restore()
      if isTerminal { FileHandle.standardOutput.write(Data("\u{1B}[?25h".utf8)) }
    }
    var drawn = 0
    while !stop.isSet {
      let status = try group.status()
      let lines = screen.frame(status, at: Date(), interval: interval, isTerminal: isTerminal)
      let text = isTerminal
        ? "\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\n") + "\n\u{1B}[J"
        : lines.joined(separator: "\n") + "\n\n"
      FileHandle.standardOutput.write(Data(text.utf8))
      drawn += 1
      if let updates, drawn >= updates { break }
      // Sleeps in short steps, so that q and signals act at once.
      let deadline = ContinuousClock.now + .milliseconds(Int64(interval * 1000))
      while !stop.isSet && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    }
  }
}

/// Set from another thread (a signal's, the q key's), read by the loop.
final class StopFlag: Sendable {
  private let flag = Atomic<Bool>(false)
  func set() { flag.store(true, ordering: .releasing) }
  var isSet: Bool { flag.load(ordering: .acquiring) }
}

/// Draws status frames and remembers the last one's sequences, for rates.
struct StatusScreen {
  /// The last frame's sequence of each store, and when it was read.
  private var last: (time: Date, sequences: [String: Int64])?
  static let barWidth = 20

  /// The lines of one frame.
  mutating func frame(_ status: GroupStatus, at time: Date, interval: Double, isTerminal: Bool) -> [String] {
    let clock = ISO8601DateFormatter.string(from: time, timeZone: .current, formatOptions: [.withTime, .withColonSeparatorInTime])
    var lines = [
      "groupsync status  \(status.path)  \(clock)  every \(String(format: "%.1f", interval)) s"
        + (isTerminal ? ", q quits" : "")
    ]
    lines.append("")
    var storeRows = [["STORE", "SEQUENCE", "RATE/S", "HISTORY"]]
    let elapsed = last.map { time.timeIntervalSince($0.time) } ?? 0
    for store in status.stores {
      let rate: String
      if store.isReadOnly {
        rate = "-"
      } else if let before = last?.sequences[store.name], elapsed > 0 {
        rate = String(format: "%.1f", Double(store.sequence - before) / elapsed)
      } else {
        rate = "…"
      }
      storeRows.append([
        store.name, store.isReadOnly ? "read-only" : String(store.sequence), rate,
        store.isReadOnly ? "-" : "\(store.history.count) change set\(store.history.count == 1 ? "" : "s")",
      ])
    }
    lines += Self.table(storeRows)
    last = (time, Dictionary(uniqueKeysWithValues: status.stores.map { ($0.name, $0.sequence) }))
    lines.append("")
    guard !status.listeners.isEmpty else { return lines + ["no listeners"] }
    // A durable listener's lag is how far its place is behind the store;
    // a live listener's, the change sets waiting in its inbox.
    let lags = status.listeners.map { Self.lag(of: $0, in: status) }
    let scale = max(lags.max() ?? 0, 10)
    var listenerRows = [["LISTENER", "STATE", "LAG", String(repeating: " ", count: Self.barWidth + 2), "BACKLOG"]]
    for (listener, lag) in zip(status.listeners, lags) {
      let state = listener.isLive
        ? "live" + (listener.processID.map { " (pid \($0))" } ?? "")
        : (listener.acknowledged != nil ? "stopped, durable" : "dead")
      listenerRows.append([listener.name, state, String(lag), Self.bar(lag, scale: scale), String(listener.backlog)])
    }
    lines += Self.table(listenerRows)
    return lines
  }

  static func lag(of listener: GroupStatus.ListenerStatus, in status: GroupStatus) -> Int64 {
    var lag = listener.acknowledged.map { max(0, status.sequence - $0) } ?? 0
    for (store, place) in listener.places {
      let sequence = status.stores.first { $0.name == store }?.sequence ?? place
      lag += max(0, sequence - place)
    }
    return max(lag, Int64(listener.backlog))
  }

  /// `[####......]`: `value` of `scale`, at least one mark when not 0.
  static func bar(_ value: Int64, scale: Int64) -> String {
    let marks = value == 0 ? 0 : max(1, Int((Double(value) / Double(scale) * Double(barWidth)).rounded()))
    return "[" + String(repeating: "#", count: min(marks, barWidth)) + String(repeating: ".", count: barWidth - min(marks, barWidth)) + "]"
  }

  /// Rows as left-aligned columns.
  static func table(_ rows: [[String]]) -> [String] {
    let widths = (0..<(rows.first?.count ?? 0)).map { column in rows.map { $0[column].count }.max() ?? 0 }
    return rows.map { row in
      zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
        .trimmingCharacters(in: .whitespaces)
    }
  }
}
