// One replicated store's metrics: shipped and applied entries, lag,
// conflicts by rule, rows held by reason, durations.
import CoreMetrics

/// One replicated store's metrics (see ``RelayMetrics``), made once when
/// the relay starts.
///
/// `@unchecked Sendable`: used only on the relay's thread, as its
/// ``ReplicaContext`` is (the conflict counters of a rule not known in
/// advance are added there).
final class ReplicaMetrics: @unchecked Sendable {
  let shipped: Counter
  let applied: Counter
  let lagEntries: Gauge
  let lagSeconds: Gauge
  let shipDuration: Timer
  let applyDuration: Timer
  let formatHeld: Gauge
  private let held: [RelayMetrics.HeldCause: Gauge]
  private var conflicts: [String: Counter]
  private let dimensions: [(String, String)]
  private let factory: any MetricsFactory

  /// - Parameter factory: nil for the program's (`MetricsSystem.factory`).
  init(group: String, store: String, host: String, factory: (any MetricsFactory)?) {
    let dimensions = [("group", group), ("store", store), ("host", host)]
    let factory = factory ?? MetricsSystem.factory
    self.dimensions = dimensions
    self.factory = factory
    shipped = Counter(label: RelayMetrics.entriesShipped, dimensions: dimensions, factory: factory)
    applied = Counter(label: RelayMetrics.entriesApplied, dimensions: dimensions, factory: factory)
    lagEntries = Gauge(label: RelayMetrics.lagEntries, dimensions: dimensions, factory: factory)
    lagSeconds = Gauge(label: RelayMetrics.lagSeconds, dimensions: dimensions, factory: factory)
    shipDuration = Timer(label: RelayMetrics.shipDuration, dimensions: dimensions, factory: factory)
    applyDuration = Timer(label: RelayMetrics.applyDuration, dimensions: dimensions, factory: factory)
    formatHeld = Gauge(label: RelayMetrics.formatHeld, dimensions: dimensions, factory: factory)
    formatHeld.record(0)
    // Every series exists from the start (at 0), so that a rate or an
    // alert on it works before the first conflict or held row.
    var held: [RelayMetrics.HeldCause: Gauge] = [:]
    for cause in RelayMetrics.HeldCause.allCases {
      held[cause] = Gauge(
        label: RelayMetrics.heldRows, dimensions: dimensions + [("reason", cause.rawValue)], factory: factory)
    }
    self.held = held
    conflicts = [:]
    for rule in RelayMetrics.conflictRules { conflicts[rule] = counter(rule: rule) }
  }

  private func counter(rule: String) -> Counter {
    Counter(label: RelayMetrics.conflicts, dimensions: dimensions + [("rule", rule)], factory: factory)
  }

  /// A conflict settled under `rule`.
  func conflict(rule: String) {
    if let counter = conflicts[rule] { return counter.increment() }
    let counter = counter(rule: rule)
    conflicts[rule] = counter
    counter.increment()
  }

  /// The rows held back now, by cause (a cause missing holds none).
  func held(_ counts: [RelayMetrics.HeldCause: Int64]) {
    for (cause, gauge) in held { gauge.record(counts[cause] ?? 0) }
  }

  /// Records how long since `start` in `timer`.
  static func record(_ timer: Timer, since start: ContinuousClock.Instant) {
    let (seconds, attoseconds) = (ContinuousClock.now - start).components
    timer.recordNanoseconds(seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000)
  }
}
