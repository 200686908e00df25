/// Bad input reaches an inbox in acts: a flood of junk, forged change sets
/// dropped one after another while the listener keeps removing them. A
/// listener answers each act with one reset, however long it lasts:
/// bad input that arrived within `quiet` of the last is the same act,
/// cleaned up and logged without another reset. Nothing is lost meanwhile:
/// a change set whose file went with the junk is read from the history,
/// as any missing one is.
///
/// When the bad input arrived is told by its files' change times (a
/// rename into the inbox sets it), not by when the listener looked: a
/// listener that a busy machine kept from looking for seconds still sees
/// one act where junk kept coming. Without a change time, the look's own
/// time stands for it.
///
/// Used only by the listener's consuming task.
final class HostileActs {
  private let quiet: Duration
  /// When the act ends by the listener's looks (monotonic).
  private var endsAt: ContinuousClock.Instant?
  /// When the newest bad input of the act arrived (ns since 1970).
  private var lastArrival: Int64?
  private(set) var suppressed = 0

  init(quiet: Duration) { self.quiet = quiet }

  /// Notes bad input seen now, by a look that started at `lookStarted`
  /// (a listing of a flooded inbox takes long), which arrived within
  /// `arrived` (change times, ns since 1970; nil: unknown). True when it
  /// continues an act that was already answered with a reset (the caller
  /// then cleans up without another); false when it starts one (the
  /// caller resets).
  func continues(lookStarted: ContinuousClock.Instant = .now, arrived: ClosedRange<Int64>? = nil) -> Bool {
    let now = ContinuousClock.now
    let previousArrival = lastArrival
    defer {
      endsAt = now + quiet
      lastArrival = max(previousArrival ?? .min, arrived?.upperBound ?? Store.nowNanoseconds())
    }
    let byLook = endsAt.map { lookStarted < $0 } ?? false
    let quietNanoseconds = quiet.components.seconds * 1_000_000_000 + quiet.components.attoseconds / 1_000_000_000
    let byArrival = previousArrival.flatMap { last in arrived.map { $0.lowerBound <= last &+ quietNanoseconds } } ?? false
    guard byLook || byArrival else {
      suppressed = 0
      return false
    }
    suppressed += 1
    return true
  }

  /// Notes bad input removed after the look that judged it (it arrived
  /// within `arrived`): the act lasts at least until then.
  func noteArrived(_ arrived: ClosedRange<Int64>?) {
    guard let arrived, let last = lastArrival else { return }
    lastArrival = max(last, arrived.upperBound)
  }
}

/// The change times of bad entries seen in one look, as a range.
struct ArrivalRange {
  private(set) var range: ClosedRange<Int64>?

  mutating func add(_ time: Int64?) {
    guard let time else { return }
    range = range.map { min($0.lowerBound, time)...max($0.upperBound, time) } ?? time...time
  }
}
