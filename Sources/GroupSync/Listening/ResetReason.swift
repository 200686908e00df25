import Foundation

/// Why a listener reset: the condition it met, with what it knows of it.
///
/// Each case is one condition GroupSync detects; its ``description`` is the
/// text of ``Reset/reason``, and ``GroupSyncMetrics/ResetCause`` groups the
/// cases into the few values of the `reason` metric dimension. For example:
///
/// ```swift
/// case .reset(let reset):
///   if case .inboxOverflowed(let waiting, _) = reset.why { log("\(waiting) change sets dropped") }
///   cache.reload(store: reset.store)
/// ```
///
/// Errors are carried as their text (`String(describing:)`), so that a
/// reason stays `Sendable` and `Hashable`.
public enum ResetReason: Sendable, Hashable, CustomStringConvertible {
  // MARK: The inbox as a whole

  /// This process committed faster than the listener consumed: its change
  /// sets waiting in memory went over
  /// ``ListenerOptions/maximumInProcessBacklog`` or
  /// ``ListenerOptions/maximumInProcessRows``, and were dropped.
  case inProcessBacklogOverflowed
  /// The inbox held `waiting` change sets, over `maximum`
  /// (``ListenerOptions/maximumBacklog``): it was cleared.
  case inboxOverflowed(waiting: Int, maximum: Int)
  /// Entries of the inbox that are not change sets of the group's stores
  /// were removed: the first few `names` (printable), and how many `more`.
  case foreignEntries(names: [String], more: Int)
  /// The inbox could not be listed.
  case inboxUnlistable(error: String)
  /// The listener's inbox or folder was removed or replaced; made anew.
  case foldersReplaced
  /// The listener's folders were replaced and cannot be made again.
  case foldersUnrecoverable(error: String)

  // MARK: A change-set file

  /// The next change set's `file` could not be opened.
  case fileUnopenable(file: String, error: String)
  /// The next change set's `file` is `size` bytes, over `maximum`
  /// (``ListenerOptions/maximumFileSize``); not read.
  case fileTooLarge(file: String, size: Int64, maximum: Int)
  /// The next change set's `file` could not be read or decoded.
  case fileUnreadable(file: String, error: String)
  /// The next change set's `file` is of store `storeID`, not of the store
  /// it is named for, `expected`.
  case fileOfAnotherStore(file: String, storeID: UUID, expected: UUID)
  /// The next change set's `file` holds another `sequence`.
  case fileSequenceMismatch(file: String, sequence: Int64)
  /// The next change set's `file` names a `table` the store does not have.
  case fileUnknownTable(file: String, table: String)

  // MARK: The history

  /// Change set `sequence` did not arrive, and the history, which now
  /// starts at `oldest`, no longer holds it.
  case historyPurged(sequence: Int64, oldest: Int64)
  /// Change set `sequence` did not arrive and was never committed (only
  /// forged files claimed it).
  case notInHistory(sequence: Int64)
  /// Change set `sequence` did not arrive and its history entry cannot be
  /// decoded.
  case historyEntryUnreadable(sequence: Int64, error: String)
  /// Change set `sequence` did not arrive and the history cannot be read.
  case historyUnreadable(sequence: Int64, error: String)
  /// Change set `sequence`, replayed from the history (a durable
  /// listener's catch-up, or a store found after the listener started),
  /// cannot be decoded.
  case replayUnreadable(sequence: Int64, error: String)
  /// A change set of read-only `store` was missing, and such a store keeps
  /// no history.
  case noHistory(store: String)

  // MARK: The store

  /// The store changed without a change set: a program that does not use
  /// GroupSync wrote to it, or VACUUM ran.
  case foreignCommit
  /// Read-only `store`'s file was replaced.
  case readOnlyStoreReplaced(store: String)
  /// Read-only `store`'s file was removed.
  case readOnlyStoreRemoved(store: String)

  // MARK: A durable listener's place (its resets are expired ones)

  /// The place cannot be read.
  case placeUnreadable(error: String)
  /// The place is ahead of the store's sequence: the place of another
  /// store, maybe.
  case placeAhead(place: Int64, storeSequence: Int64)
  /// The history no longer reaches the place: it now starts at `oldest`.
  case placeExpired(place: Int64, oldest: Int64)
  /// Read-only `store` was replaced while the listener was not running.
  case readOnlyStoreReplacedWhileAway(store: String)

  // MARK: Made by hand

  /// A reason given as text, to ``Reset/init(reason:sequence:isExpired:store:storeID:)``;
  /// GroupSync itself never makes one.
  case text(String)

  /// The reason as ``Reset/reason`` says it, for people (logs, the
  /// command-line tool); match on the cases, not on this text.
  public var description: String {
    switch self {
    case .inProcessBacklogOverflowed:
      return "this process committed faster than the listener consumed (in-process backlog over its bounds)"
    case .inboxOverflowed(let waiting, let maximum):
      return "inbox overflowed: \(waiting) change sets waiting (maximum \(maximum))"
    case .foreignEntries(let names, let more):
      return "foreign entries in inbox, removed: \(names.joined(separator: ", "))\(more > 0 ? " and \(more) more" : "")"
    case .inboxUnlistable(let error): return "cannot list inbox: \(error)"
    case .foldersReplaced: return "its inbox or folder was removed or replaced; made anew"
    case .foldersUnrecoverable(let error): return "its folders were replaced and cannot be made again: \(error)"
    case .fileUnopenable(let file, let error): return "cannot open \(file): \(error)"
    case .fileTooLarge(let file, let size, let maximum):
      return "\(file) is \(size) bytes, over the \(maximum)-byte maximum"
    case .fileUnreadable(_, let error): return error
    case .fileOfAnotherStore(let file, let storeID, let expected):
      return "\(file) is from store \(storeID.uuidString), not \(expected.uuidString)"
    case .fileSequenceMismatch(let file, let sequence): return "\(file) holds sequence \(sequence)"
    case .fileUnknownTable(let file, let table): return "\(file) names table '\(table)', which the store does not have"
    case .historyPurged(let sequence, let oldest):
      return "change set \(sequence) did not arrive and the history no longer holds it (oldest \(oldest))"
    case .notInHistory(let sequence): return "change set \(sequence) did not arrive and is not in the history"
    case .historyEntryUnreadable(let sequence, let error):
      return "change set \(sequence) did not arrive and its history entry is unreadable: \(error)"
    case .historyUnreadable(let sequence, let error):
      return "change set \(sequence) did not arrive and the history cannot be read: \(error)"
    case .replayUnreadable(let sequence, let error): return "change set \(sequence) is unreadable in the history: \(error)"
    case .noHistory(let store): return "read-only store '\(store)' has no history"
    case .foreignCommit:
      return "the store changed without a change set (a program that does not use GroupSync, or VACUUM)"
    case .readOnlyStoreReplaced(let store): return "read-only store '\(store)' was replaced"
    case .readOnlyStoreRemoved(let store): return "read-only store '\(store)' was removed"
    case .placeUnreadable(let error): return "its place cannot be read (\(error))"
    case .placeAhead(let place, let storeSequence):
      return "its place \(place) is ahead of the store (\(storeSequence)): another store?"
    case .placeExpired(let place, let oldest): return "its place \(place) expired: the history now starts at \(oldest)"
    case .readOnlyStoreReplacedWhileAway(let store):
      return "read-only store '\(store)' was replaced while the listener was not running"
    case .text(let text): return text
    }
  }
}
