/// The pauses between polls of a condition a test waits for: short at
/// first, so that what comes at once is seen at once, then doubling up to
/// `maximum`, so that a long wait costs the machine little (a condition
/// may parse a child's whole output, open a store or query a server, and
/// the tests beside this one need the cores).
///
/// For example:
/// ```swift
/// var backoff = PollBackoff()
/// while !done() { try await backoff.pause() }
/// ```
public struct PollBackoff: Sendable {
  private var next: Duration
  private let maximum: Duration

  public init(first: Duration = .milliseconds(5), maximum: Duration = .milliseconds(50)) {
    next = first
    self.maximum = maximum
  }

  /// Sleeps for the current pause, and makes the next one longer.
  public mutating func pause() async throws {
    try await Task.sleep(for: next)
    next = min(next * 2, maximum)
  }
}
