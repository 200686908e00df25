/// Bad input reaches an inbox in acts: a flood of junk, forged change sets
/// dropped one after another while the listener keeps removing them. A
/// listener answers each act with one reset, however long it lasts:
/// bad input seen within `quiet` of the last is the same act, cleaned up
/// and logged without another reset. Nothing is lost meanwhile: a change
/// set whose file went with the junk is read from the history, as any
/// missing one is.
///
/// Used only by the listener's consuming task.
final class HostileActs {
  private let quiet: Duration
  private var endsAt: ContinuousClock.Instant?
  private(set) var suppressed = 0

  init(quiet: Duration) { self.quiet = quiet }

  /// Notes bad input seen now, by a look that started at `lookStarted`
  /// (a listing of a flooded inbox takes long). True when it continues an
  /// act that was already answered with a reset (the caller then cleans up
  /// without another); false when it starts one (the caller resets).
  func continues(lookStarted: ContinuousClock.Instant = .now) -> Bool {
    let now = ContinuousClock.now
    defer { endsAt = now + quiet }
    guard let endsAt, lookStarted < endsAt else {
      suppressed = 0
      return false
    }
    suppressed += 1
    return true
  }
}
