import ArgumentParser
import Foundation

/// `groupsync-bench`: the benchmarks, outside the product. `run` (the
/// default) measures; the other subcommands are the roles of the child
/// processes it starts of this same executable.
@main
struct BenchCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "groupsync-bench",
    abstract: "Benchmark GroupSync against the floor, polling, raw SQLite and plain GRDB.",
    subcommands: [BenchRun.self, BenchListener.self, BenchPoll.self, BenchCapture.self],
    defaultSubcommand: BenchRun.self)

  /// One line on stderr, prefixed with the program's name.
  static func printError(_ line: String) {
    FileHandle.standardError.write(Data(("groupsync-bench: " + line + "\n").utf8))
  }
}
