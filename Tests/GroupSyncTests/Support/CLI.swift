import Foundation
import GroupSyncProcess

/// Runs the project's own `groupsync` binary, as users and other processes do.
enum CLI {
  /// The built binary: $GROUPSYNC_BIN, else next to the test bundle, else
  /// in .build/debug of the package.
  static let executable = ChildProcess.projectExecutable("groupsync")

  typealias Result = ChildProcess.Result

  /// Runs `groupsync args...` to completion (signalled after `timeout` seconds).
  static func run(_ arguments: [String], timeout: Double = 300, measuringPeakMemory: Bool = false) throws -> Result {
    try start(arguments, measuringPeakMemory: measuringPeakMemory).finish(timeout: timeout)
  }

  /// Starts `groupsync args...` in the background.
  static func start(_ arguments: [String], measuringPeakMemory: Bool = false) throws -> ChildProcess {
    try ChildProcess(executable: executable, arguments: arguments, measuringPeakMemory: measuringPeakMemory)
  }
}

struct TestFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// Parses JSON lines into objects.
func jsonLines(_ text: String) throws -> [[String: Any]] {
  try text.split(separator: "\n").map {
    guard let object = try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] else {
      throw TestFailure("not a JSON object: \($0)")
    }
    return object
  }
}
