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
    remove(ObjectIdentifier(inbox), group: group)
  }

  /// Removes the inbox `id` names (an `ObjectIdentifier` of it), also
  /// from its deinit, when no reference to it can be made any more.
  func remove(_ id: ObjectIdentifier, group: String) {
    entries.withLock { $0[group]?[id] = nil }
  }

  /// The live inboxes of this process in the group folder at `group`.
  func inboxes(in group: String) -> [any InProcessInbox] {
    entries.withLock { $0[group]?.values.compactMap(\.inbox) ?? [] }
  }
}
