import CoreMetrics
import Foundation

/// What a listener delivers.
public enum ListenerEvent: Sendable, Equatable {
  /// The next committed change set, in sequence order.
  case changes(ChangeSet)
  /// Something may have been missed: refetch everything from the store.
  case reset(Reset)
}

/// A "refetch everything" event: why, which store, and where delivery
/// resumes.
public struct Reset: Sendable, Equatable, CustomStringConvertible {
  /// Why the listener could not go on change set by change set: the
  /// condition it met, as a value to match on.
  public let why: ResetReason
  /// Why the listener could not go on change set by change set, in words
  /// (``ResetReason/description``).
  public var reason: String { why.description }
  /// The store's sequence when the reset was decided: every change up to
  /// it is in the store; the next change set delivered is `sequence + 1`
  /// (0 for a read-only store, which has no sequence; the main store's for
  /// a reset of the whole group).
  public let sequence: Int64
  /// A durable listener's place was purged from the history while it was
  /// not running (Core Data's "token expired"): it missed change sets that
  /// can no longer be told.
  public let isExpired: Bool
  /// The store to refetch, by name; nil: every store of the group (the
  /// listener's inbox itself was tampered with or overflowed).
  public let store: String?
  /// The store's UUID; nil with `store`.
  public let storeID: UUID?

  /// A reset of `store` (nil: every store) decided at `sequence`, for
  /// the reason `why`.
  ///
  /// For example:
  ///
  /// ```swift
  /// let reset = Reset(.foreignCommit, sequence: 42, store: "main", storeID: group.store.storeID)
  /// ```
  public init(
    _ why: ResetReason, sequence: Int64, isExpired: Bool = false, store: String? = nil, storeID: UUID? = nil
  ) {
    self.why = why
    self.sequence = sequence
    self.isExpired = isExpired
    self.store = store
    self.storeID = storeID
  }

  /// A reset of `store` (nil: every store) decided at `sequence`, for a
  /// reason given as text (``ResetReason/text(_:)``).
  public init(
    reason: String, sequence: Int64, isExpired: Bool = false, store: String? = nil, storeID: UUID? = nil
  ) {
    self.init(.text(reason), sequence: sequence, isExpired: isExpired, store: store, storeID: storeID)
  }

  /// Two resets are equal when they say the same: the same ``reason``
  /// text, sequence, expiry and store.
  public static func == (lhs: Reset, rhs: Reset) -> Bool {
    lhs.reason == rhs.reason && lhs.sequence == rhs.sequence && lhs.isExpired == rhs.isExpired
      && lhs.store == rhs.store && lhs.storeID == rhs.storeID
  }

  /// Whether the reset concerns store `id` (a reset of a whole group
  /// concerns every store).
  public func concerns(_ id: UUID) -> Bool { storeID == nil || storeID == id }

  public var description: String {
    "reset\(store.map { " of store '\($0)'" } ?? "") at \(sequence)\(isExpired ? " (place expired)" : ""): \(reason)"
  }
}

/// How a listener behaves.
public struct ListenerOptions: Sendable {
  /// How long a missing change set may stay missing while later ones are
  /// there before the listener gives up on it with a reset.
  public var gracePeriod: Duration = .seconds(1)
  /// How often the inbox is rescanned besides inotify's wake-ups, which
  /// the kernel may drop.
  public var rescanInterval: Duration = .seconds(1)
  /// Change-set files larger than this are rejected unread.
  public var maximumFileSize: Int = ChangeSetEncoding.defaultMaximumSize
  /// Change sets of this process waiting in memory, at most, and their
  /// rows; past either, they are dropped and the listener resets.
  public var maximumInProcessBacklog: Int = 4096
  public var maximumInProcessRows: Int = 4_000_000
  /// When a durable listener's place moves on.
  public var acknowledgement: Acknowledgement = .automatic
  /// An inbox holding more files than this is cleared with a reset.
  public var maximumBacklog: Int = 1_000_000
  /// Remove the listener's folder when it closes (its inbox is always
  /// emptied). Listeners without an explicit name always remove it.
  public var removeFolderOnClose: Bool = false
  /// Where the listener's metrics go (see ``GroupSyncMetrics``); nil: the
  /// factory bootstrapped with `MetricsSystem.bootstrap(_:)`.
  public var metricsFactory: (any MetricsFactory)?

  /// The default options.
  public init() {}
}

/// When a durable listener acknowledges a change set (its place moves on).
public enum Acknowledgement: Sendable, Equatable {
  /// When the consumer asks for the next event, the previous one is
  /// acknowledged: what was handled is never delivered again, what was not
  /// is replayed after a crash (at least once, in order).
  case automatic
  /// Only by ``Listener/acknowledge(_:)``.
  case explicit
  /// Only by ``Listener/acknowledge(_:in:)`` inside the consumer's own
  /// `store.write`: the place commits with the consumer's changes, so a
  /// consumer whose state lives in the store handles each change set
  /// exactly once.
  case inStore
}
