import Foundation

/// Several stores in one group: the main store (``GroupFolder/store``) and
/// named ones, writable or read-only, each with its own UUID, history and
/// sequence. Object IDs name their store by UUID, and route to it.
///
/// For example, user data beside a read-only store of shipped data:
///
/// ```swift
/// let group = try GroupFolder(path: "/srv/app/group")
/// let seed = try group.installReadOnlyStore(named: "seed", from: "/usr/share/app/seed.sqlite")
/// let cache = try group.store(named: "cache", create: true)
/// let store = try group.store(for: id)          // the store an object ID names
/// ```
extension GroupFolder {
  /// Store `name` of the group (`main` is ``store``).
  ///
  /// - Parameters:
  ///   - name: the store's name: 1-32 lowercase letters, digits, `-` and
  ///     `_`, the first a letter or digit.
  ///   - create: make a writable store of that name if the group has none.
  /// - Throws: ``GroupSyncError/unknownStore(_:)``,
  ///   ``GroupSyncError/invalidStoreName(_:)``.
  public func store(named name: String, create: Bool = false) throws -> Store {
    try directory.store(named: name, create: create)
  }

  /// Every store of the group, the main one first, then by name.
  public func allStores() throws -> [Store] { try directory.all() }

  /// The store whose UUID is `id`.
  /// - Throws: ``GroupSyncError/unknownStoreID(_:)``.
  public func store(withID id: UUID) throws -> Store { try directory.store(withID: id) }

  /// The store `id` names.
  /// - Throws: ``GroupSyncError/unknownStoreID(_:)``.
  public func store(for id: ObjectID) throws -> Store { try directory.store(withID: id.storeID) }

  /// Installs the SQLite database at `source` as read-only store `name`,
  /// or replaces the one installed: a consistent copy is made in `tmp/`
  /// and renamed over the store's file in one step, so no reader ever sees
  /// a half-written file. Every process reads the new file from its next
  /// read on; every listener gets one reset for this store. Its UUID stays
  /// the same, so object IDs that point into it stay valid.
  ///
  /// An application update may also rename a new file over
  /// `stores/NAME.readonly.sqlite` itself: it must then be in
  /// rollback-journal mode (not WAL).
  ///
  /// - Throws: ``GroupSyncError/storeKindMismatch(_:isReadOnly:)`` if a
  ///   writable store has the name; ``GroupSyncError/invalidStore(path:reason:)``
  ///   if `source` is not an SQLite database.
  @discardableResult
  public func installReadOnlyStore(named name: String, from source: String) throws -> Store {
    try directory.installReadOnly(name, from: source)
  }
}
