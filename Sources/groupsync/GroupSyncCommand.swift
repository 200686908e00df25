import ArgumentParser
import Foundation
import GroupSync

@main
struct GroupSyncCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "groupsync",
    abstract: "Keep processes that share an SQLite store in step.",
    subcommands: [
      Init.self, Exec.self, Watch.self, Query.self, Status.self, Log.self, Show.self, MigrateStore.self,
      DefaultsCommand.self, Post.self, Demo.self, RelayCommand.self,
    ])

  /// Runs `body`, turning any error into one line on stderr and exit 1.
  static func reportingErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
      return try await body()
    } catch let error as ExitCode {
      throw error
    } catch let error as CleanExit {
      throw error
    } catch {
      // One line, whatever the error holds (SQL often spans several).
      let message = "\(error)".split(whereSeparator: \.isNewline)
        .map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
      FileHandle.standardError.write(Data("groupsync: \(message)\n".utf8))
      throw ExitCode.failure
    }
  }
}

/// Prints one line and flushes it, so pipes see each line at once.
func printLine(_ line: String) {
  FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func printError(_ line: String) {
  FileHandle.standardError.write(Data(("groupsync: " + line + "\n").utf8))
}
