import GRDB

/// How ``Context/save()`` resolves a conflict: an object edited or deleted
/// in the context whose row changed (or vanished) in the store since the
/// snapshot the edit was based on. Core Data's five policies.
public enum MergePolicy: Sendable, Equatable {
  /// Nothing is written; the save throws ``MergeConflictError`` listing each
  /// conflict with the snapshot, stored and pending values.
  case error
  /// Per column, the store's value wins: edits to columns the store changed
  /// are dropped, the others are written. A row deleted in the store stays
  /// deleted; a delete of a row changed in the store is cancelled.
  case storeTrump
  /// Per column, the context's value wins: the edited columns are written,
  /// columns the store changed and the context did not keep the store's
  /// value. A row deleted in the store is inserted again with the object's
  /// values.
  case objectTrump
  /// The whole in-memory object is written: every column, as the context
  /// has it. A row deleted in the store is inserted again.
  case overwrite
  /// The context's changes to conflicting objects are discarded and the
  /// objects refreshed from the store.
  case rollback
}

/// One object whose row changed in the store under an edit or delete.
public struct MergeConflict: Sendable, CustomStringConvertible {
  /// The object in conflict.
  public let objectID: ObjectID
  /// The row the edit was based on, by column.
  public let snapshot: [String: DatabaseValue]
  /// The row as the store has it now; nil when it was deleted.
  public let stored: [String: DatabaseValue]?
  /// The columns the context set (empty for a delete).
  public let pending: [String: DatabaseValue]
  /// Whether the context deleted the object.
  public let isDelete: Bool

  public var description: String {
    func text(_ values: [String: DatabaseValue]) -> String {
      "[" + values.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "]"
    }
    let what = isDelete ? "delete" : "edit \(text(pending))"
    return "\(objectID): \(what) based on \(text(snapshot)), store has \(stored.map(text) ?? "no row (deleted)")"
  }
}

/// A save under ``MergePolicy/error`` found conflicts; nothing was written
/// (in any store).
public struct MergeConflictError: Error, CustomStringConvertible {
  /// Every conflict the save found.
  public let conflicts: [MergeConflict]

  public var description: String {
    "save refused: \(conflicts.count) conflict(s) with the store (merge policy .error); nothing was written:\n"
      + conflicts.map { "  \($0)" }.joined(separator: "\n")
  }
}

/// A context operation that cannot be done, naming the object.
public enum ContextError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The object's row no longer exists in the store.
  case objectGone(ObjectID)
  /// `existingObject(with:)` found no row for the ID.
  case objectNotFound(ObjectID)
  /// The object was deleted in the context; it cannot be edited.
  case objectDeleted(ObjectID)
  /// The ID names a store UUID the group does not have.
  case foreignStore(ObjectID)
  /// A temporary ID the context does not know (made by another context, or
  /// its object was rolled back).
  case unknownTemporaryID(ObjectID)
  /// The object's context was released: a fault cannot be read, nor an
  /// edit saved.
  case contextReleased(ObjectID)
  /// The table is not a table of the store with rowids, or a column is
  /// unknown.
  case invalidRequest(String)

  public var description: String {
    switch self {
    case .objectGone(let id): "the row of \(id) no longer exists in the store"
    case .objectNotFound(let id): "no row exists for \(id)"
    case .objectDeleted(let id): "\(id) was deleted in this context; it cannot be edited"
    case .foreignStore(let id): "the group has no store with UUID \(id.storeID.uuidString) (named by \(id))"
    case .unknownTemporaryID(let id): "\(id) is a temporary ID this context does not know"
    case .contextReleased(let id): "the context of \(id) was released"
    case .invalidRequest(let reason): "invalid request: \(reason)"
    }
  }
}

/// A save that wrote its changes to some stores and then failed in
/// another: what the earlier stores committed stays committed (their
/// objects are saved, their change sets published); the failing store's
/// changes, and those of the stores after it, stay pending in the context,
/// and a later ``Context/save()`` writes only them.
public struct PartialSaveError: Error, CustomStringConvertible {
  /// The stores whose changes were committed, in order.
  public let savedStores: [String]
  /// Their change sets.
  public let changeSets: [ChangeSet]
  /// The store whose save failed.
  public let failedStore: String
  /// The stores whose changes stay pending: the failing one and those not
  /// tried after it.
  public let pendingStores: [String]
  /// Why the failing store's save failed (``MergeConflictError``, a GRDB
  /// `DatabaseError`, ...).
  public let underlying: any Error

  public var description: String {
    "save partly done: committed in store(s) \(savedStores.map { "'\($0)'" }.joined(separator: ", ")); "
      + "failed in store '\(failedStore)': \(underlying); "
      + "the changes to \(pendingStores.map { "'\($0)'" }.joined(separator: ", ")) stay pending"
  }
}
