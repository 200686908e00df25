/// What a listener delivers.
public enum ListenerEvent: Sendable, Equatable {
  /// The next committed change set, in sequence order.
  case changes(ChangeSet)
  /// Something may have been missed: refetch everything from the store.
  case reset(Reset)
}

/// A "refetch everything" event: why, and where delivery resumes.
public struct Reset: Sendable, Equatable, CustomStringConvertible {
  /// Why the listener could not go on change set by change set.
  public let reason: String
  /// The store's sequence when the reset was decided: every change up to
  /// it is in the store; the next change set delivered is `sequence + 1`.
  public let sequence: Int64

  public var description: String { "reset at \(sequence): \(reason)" }
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
  /// An inbox holding more files than this is cleared with a reset.
  public var maximumBacklog: Int = 1_000_000
  /// Remove the listener's folder when it closes (its inbox is always
  /// emptied). Listeners without an explicit name always remove it.
  public var removeFolderOnClose: Bool = false

  public init() {}
}
