/// The relay's wait before it tries the server again: 50 ms after the
/// last success, doubled after each failure, up to a maximum
/// (``RelayConfiguration/maximumReconnectDelay``).
struct ReconnectBackoff {
  static let first = Duration.milliseconds(50)
  let maximum: Duration
  private var delay = Self.first

  init(maximum: Duration) {
    self.maximum = maximum
  }

  /// The wait before the next try; the one after it is twice as long.
  mutating func next() -> Duration {
    defer { delay = min(delay * 2, maximum) }
    return delay
  }

  /// Starts over after a success.
  mutating func reset() { delay = Self.first }
}
