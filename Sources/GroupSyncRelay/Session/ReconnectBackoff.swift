/// The relay's wait before it tries the server again: 50 ms after the
/// last success, doubled after each failure, up to a maximum
/// (``RelayConfiguration/maximumReconnectDelay``). After a refusal for the
/// server's limits (``ServerRefusal``) from seconds up to half a minute,
/// each wait drawn between half and all of it, so that a fleet refused at
/// once does not come back at once.
struct ReconnectBackoff {
  static let first = Duration.milliseconds(50)
  let first: Duration
  let maximum: Duration
  let jitter: Bool
  private var delay: Duration

  init(first: Duration = Self.first, maximum: Duration, jitter: Bool = false) {
    self.first = first
    self.maximum = max(maximum, first)
    self.jitter = jitter
    delay = first
  }

  /// The wait before the next try; the one after it is twice as long.
  mutating func next() -> Duration {
    defer { delay = min(delay * 2, maximum) }
    return jitter ? delay * Double.random(in: 0.5...1) : delay
  }

  /// Starts over after a success.
  mutating func reset() { delay = first }
}
