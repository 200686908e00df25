/// A named note a transaction carries besides its rows: a group-defaults
/// change, a notification posted in the transaction. Notes are committed,
/// numbered and delivered with the change set, so they arrive exactly once,
/// in commit order with data changes.
public struct ChangeSetNote: Sendable, Equatable, Hashable {
  /// What the note is, e.g. `defaults/ui` or `notify/import.finished`.
  public let name: String
  /// Its content, opaque to the change set.
  public let payload: [UInt8]

  /// A note named `name` carrying `payload`.
  public init(name: String, payload: [UInt8]) {
    self.name = name
    self.payload = payload
  }
}
