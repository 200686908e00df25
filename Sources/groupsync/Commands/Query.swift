import ArgumentParser
import Foundation
import GRDB
import GroupSync

struct Query: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Print a query's result; with --live, keep it current as other processes commit.",
    discussion: """
      With --live the table is redrawn in place for each change set that touches a table the query
      reads: rows that appeared are marked '+', changed '~', vanished '-' (rows are matched by their
      first column: select the key first). q, Ctrl-C or SIGTERM exits. When standard output is not a
      terminal, each update is printed below the previous one.
      """)

  @Argument(help: "The group folder.")
  var directory: String

  @Argument(help: "The query (one SELECT statement).")
  var sql: String

  @OptionGroup var storeOption: StoreOption

  @Flag(name: .long, help: "Keep the result current until q, Ctrl-C or SIGTERM.")
  var live = false

  @Option(name: .long, help: "With --live: exit after this many updates.")
  var updates: Int?

  func validate() throws {
    if let updates, updates < 1 { throw ValidationError("--updates must be at least 1") }
    if updates != nil && !live { throw ValidationError("--updates needs --live") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      // Listen first, so that no commit between the first run and the
      // listener's start is missed.
      let listener = live ? try group.listen() : nil
      // Signals are handled before the first output, which tells a caller
      // that the query runs.
      let stopper = listener.map { listener in SignalStopper { listener.close() } }
      var query = try LiveQuery(store: storeOption.store(of: group), sql: sql)
      let screen = LiveQueryScreen(isTerminal: isatty(STDOUT_FILENO) == 1)
      screen.draw(query, change: LiveQuery.Change(), deletedRows: [], summary: "\(query.rows.count) rows")
      guard let listener else { return }
      let keys = screen.isTerminal && isatty(STDIN_FILENO) == 1 ? QuitKey { listener.close() } : nil
      defer { withExtendedLifetime((stopper, keys)) {} }
      var shown = 0
      for await event in listener.events {
        let before = query.rows
        let change: LiveQuery.Change
        let label: String
        switch event {
        case .changes(let changeSet):
          change = try query.update(for: changeSet)
          label = "#\(changeSet.sequence)"
        case .reset(let reset):
          change = try query.update(for: nil)
          label = "reset at \(reset.sequence)"
        }
        guard !change.isEmpty else { continue }
        let deletedRows = before.filter { change.deleted.contains($0.first ?? .null) }
        let summary = "\(label): +\(change.inserted.count) ~\(change.updated.count) -\(change.deleted.count), \(query.rows.count) rows"
        screen.draw(query, change: change, deletedRows: deletedRows, summary: summary)
        shown += 1
        if let updates, shown >= updates { break }
      }
      listener.close()
      keys?.restore()
    }
  }
}

/// Draws a live query's table: in place on a terminal, appended otherwise.
struct LiveQueryScreen {
  let isTerminal: Bool

  func draw(_ query: LiveQuery, change: LiveQuery.Change, deletedRows: [[DatabaseValue]], summary: String) {
    var lines: [[String]] = [[" "] + query.columns]
    let inserted = Set(change.inserted), updated = Set(change.updated)
    for row in query.rows {
      let key = row.first ?? .null
      let mark = inserted.contains(key) ? "+" : (updated.contains(key) ? "~" : " ")
      lines.append([mark] + row.map(Self.text))
    }
    for row in deletedRows { lines.append(["-"] + row.map(Self.text)) }
    let widths = (0..<(query.columns.count + 1)).map { column in
      lines.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0
    }
    var output = isTerminal ? "\u{1B}[H\u{1B}[2J" : ""
    for line in lines {
      output += zip(line, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: " | ")
      output += "\n"
    }
    output += summary + (isTerminal ? "  (q quits)" : "") + "\n"
    FileHandle.standardOutput.write(Data(output.utf8))
  }

  static func text(_ value: DatabaseValue) -> String {
    switch value.storage {
    case .null: "NULL"
    case .int64(let number): String(number)
    case .double(let number): String(number)
    case .string(let text): text
    case .blob(let data): "x'" + data.map { String(format: "%02x", $0) }.joined() + "'"
    }
  }
}

/// Puts the terminal in raw mode and calls `quit` when q is pressed.
final class QuitKey: Sendable {
  private let saved: termios

  init(_ quit: @escaping @Sendable () -> Void) {
    var settings = termios()
    tcgetattr(STDIN_FILENO, &settings)
    saved = settings
    settings.c_lflag &= ~tcflag_t(ICANON | ECHO)
    tcsetattr(STDIN_FILENO, TCSANOW, &settings)
    Thread.detachNewThread {
      var byte: UInt8 = 0
      while true {
        let count = read(STDIN_FILENO, &byte, 1)
        if count < 0 && errno == EINTR { continue }
        if count <= 0 || byte == UInt8(ascii: "q") { break }
      }
      quit()
    }
  }

  func restore() {
    var settings = saved
    tcsetattr(STDIN_FILENO, TCSANOW, &settings)
  }

  deinit { restore() }
}
