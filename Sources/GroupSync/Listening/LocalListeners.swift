/// The listeners of this process (and its doorbells), by group folder, so
/// that fan-out hands them change sets in memory and skips their inboxes.
final class LocalListeners: Sendable {
  static let shared = LocalListeners()

  private let entries = Locked<[String: [ObjectIdentifier: WeakInbox]]>([:])

  private struct WeakInbox: @unchecked Sendable {
    weak var inbox: (any InProcessInbox)?
  }

  func add(_ inbox: any InProcessInbox, group: String) {
    entries.withLock { $0[group, default: [:]][ObjectIdentifier(inbox)] = WeakInbox(inbox: inbox) }
  }

  func remove(_ inbox: any InProcessInbox, group: String) {
    entries.withLock { $0[group]?[ObjectIdentifier(inbox)] = nil }
  }

  /// The live inboxes of this process in the group folder at `group`.
  func inboxes(in group: String) -> [any InProcessInbox] {
    entries.withLock { $0[group]?.values.compactMap(\.inbox) ?? [] }
  }
}
