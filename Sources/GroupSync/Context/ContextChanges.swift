import Foundation

/// What one merge, or a save in one store, changed, as a context tells it
/// (Core Data's objects-did-change notification).
public struct ContextChanges: Sendable, Equatable {
  /// The store the changes are of; nil for a reset of every store (and
  /// for a merge or save that changed nothing).
  public var storeID: UUID?
  /// Rows the store gained (another process's inserts, or this context's
  /// saved inserts under their permanent IDs).
  public var inserted: Set<ObjectID> = []
  /// Rows whose values changed in the store.
  public var updated: Set<ObjectID> = []
  /// Rows deleted from the store.
  public var deleted: Set<ObjectID> = []
  /// Registered objects re-read because their table was invalidated or the
  /// context was reset.
  public var refreshed: Set<ObjectID> = []
  /// Tables any row of which may have changed.
  public var invalidated: Set<TableID> = []
  /// Whether everything of the store (of every store when ``storeID`` is
  /// nil) was refreshed: a listener's reset.
  public var isReset = false
  /// The change set merged or written, when there was one (sequences are
  /// per store).
  public var sequence: Int64?

  /// No change.
  public init() {}

  /// Whether nothing changed.
  public var isEmpty: Bool {
    inserted.isEmpty && updated.isEmpty && deleted.isEmpty && refreshed.isEmpty && invalidated.isEmpty && !isReset
  }
}
