import Foundation
import Testing

/// Prints how long each test case itself ran, as
/// `test-time SECONDS SUITE/TEST`, for `make test`'s summary
/// (Scripts/test-summary.sh).
///
/// Swift Testing's own "passed after" also counts the time a test waited
/// for a free slot (at most `--experimental-maximum-parallelization-width`
/// test cases run at once), which says nothing of the test. This trait's
/// scope opens once the case runs. Every suite carries it:
///
/// ```swift
/// @Suite(.timed) struct ListenerTests { ... }
/// ```
public struct TimedTrait: SuiteTrait, TestTrait, TestScoping {
  public var isRecursive: Bool { true }

  public func provideScope(
    for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
  ) async throws {
    guard testCase != nil else { return try await function() }
    let start = ContinuousClock.now
    defer {
      let elapsed = ContinuousClock.now - start
      let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
      // The suite's and the test's names, without the module or the source location.
      let name = test.id.nameComponents.joined(separator: "/")
      print("test-time \(String(format: "%.3f", seconds)) \(name)")
    }
    try await function()
  }
}

extension Trait where Self == TimedTrait {
  /// Prints each test case's own running time (see ``TimedTrait``).
  public static var timed: TimedTrait { TimedTrait() }
}
