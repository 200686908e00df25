import Foundation
import GRDB

/// An in-memory working set of a group's rows, in any of its stores: Core
/// Data's managed object context, over one coordinator of several stores.
///
/// - **Identity**: at most one ``ManagedObject`` per ``ObjectID``; an ID
///   routes by its store UUID to that store of the group (the main store,
///   a named one, or a read-only one).
/// - **Merging**: ``merge(_:)-(ChangeSet)`` re-reads only the registered
///   objects of the change set's store that it names, one query per table;
///   ``merge(from:isolation:)`` feeds the context from a listener (another
///   process's commits, and this process's other contexts' saves, which
///   never touch a file). A reset of one store re-reads only that store's
///   objects and results controllers.
/// - **Edits**: pending over each object's snapshot; ``save()`` is one
///   `Store.write(_:)` per store with changes, with
///   optimistic locking and a ``MergePolicy``.
/// - **Notifications**: one ``ContextChanges`` per store after each merge
///   or save, as ``changes`` (an `AsyncStream`) and ``onChange(_:)``.
///
/// A context is not `Sendable`: use it from one actor or thread.
///
/// ```swift
/// let context = Context(group)
/// let notes = try context.fetch(FetchRequest(table: "note", orderBy: [.ascending("body")]))
/// let shipped = try context.fetch(FetchRequest(table: "template", store: "seed"))
/// try notes[0].set("body", to: "edited")
/// try context.save()                        // other processes get the change set
/// try await context.merge(from: listener)   // and this one merges theirs
/// ```
///
/// Stores do not share relationships: a row refers to a row of another
/// store by its object ID, kept as a URI (``ObjectID/uri``) and resolved
/// with ``existingObject(with:)``.
public final class Context {
  /// The group whose stores the context reads and saves to.
  public let group: GroupFolder
  /// The group's main store (``FetchRequest``, ``insert(into:store:values:)``
  /// and ``fetch(_:store:where:arguments:orderBy:)`` name another by name).
  public var store: Store { group.store }
  /// How ``save()`` resolves conflicts with the store.
  public var mergePolicy: MergePolicy

  /// Registered objects with a permanent ID, by store, table and rowid.
  private var registry: [UUID: [TableName: [Int64: ManagedObject]]] = [:]
  /// Unsaved inserts of every store, by temporary number (unique in the
  /// context).
  var insertedObjects: [Int64: ManagedObject] = [:]
  private var nextTemporaryNumber: Int64 = 1
  /// Objects with unsaved changes, in the order they were first changed.
  private(set) var changedObjects: [ManagedObject] = []
  private var changedIdentities: Set<ObjectIdentifier> = []
  /// Sequences this context wrote, by store (each store numbers its own):
  /// merging them again would change nothing.
  var ownSequences: [UUID: Set<Int64>] = [:]
  private var observers: [(ContextChanges) -> Void] = []
  private var continuations: [UUID: AsyncStream<ContextChanges>.Continuation] = [:]
  private var controllers: [WeakController] = []
  /// The stores the context has used, by UUID.
  private var stores: [UUID: Store] = [:]
  /// Table information, per store.
  private var tableCaches: [UUID: TableInfoCache] = [:]

  /// Makes an empty context on `group`; `mergePolicy` resolves the conflicts a save finds.
  public init(_ group: GroupFolder, mergePolicy: MergePolicy = .error) {
    self.group = group
    self.mergePolicy = mergePolicy
  }

  deinit {
    for continuation in continuations.values { continuation.finish() }
  }

  // MARK: Identity and lookup

  /// The registered object for `id`, without I/O; nil if not registered.
  public func registeredObject(for id: ObjectID) -> ManagedObject? {
    if id.isTemporary {
      guard let object = insertedObjects[id.rowID], object.objectID.storeID == id.storeID else { return nil }
      return object
    }
    return registry[id.storeID]?[TableName(id.table)]?[id.rowID]
  }

  /// The object for `id`, in whichever store of the group it names: the
  /// registered one, else a fault registered now that reads its row on
  /// first access (and throws ``ContextError/objectGone(_:)`` then if the
  /// row is gone).
  ///
  /// - Throws: ``ContextError/foreignStore(_:)`` if the group has no store
  ///   with the ID's UUID; ``ContextError/unknownTemporaryID(_:)``;
  ///   ``ContextError/invalidRequest(_:)`` if the store has no such table.
  public func object(with id: ObjectID) throws -> ManagedObject {
    let store = try store(for: id)
    if let object = registeredObject(for: id) { return object }
    if id.isTemporary { throw ContextError.unknownTemporaryID(id) }
    // Registered under the schema's spelling of the table, as change sets
    // name it.
    let given = TableName(id.table)
    let tables = tables(store)
    let table = try tables.cachedName(given) ?? store.read { db in try tables.info(given, db).name }
    let canonical = ObjectID(storeID: id.storeID, table: table, rowID: id.rowID)
    if let object = registeredObject(for: canonical) { return object }
    return register(ManagedObject(objectID: canonical, context: self, state: .fault))
  }

  /// The object for the row a relay's global ID names in `table` of the
  /// store `store` names (the main store by default): the same row on
  /// every host, whatever its rowid here (see ``Store/globalID(of:)``).
  /// nil when this host does not have that row (not arrived yet, or
  /// deleted).
  ///
  /// - Throws: ``GroupSyncError/unknownStore(_:)`` for a store the group
  ///   does not have; what ``object(with:)`` throws.
  public func object(globalID: String, table: String, store name: String? = nil) throws -> ManagedObject? {
    let store = try name.map { try group.store(named: $0) } ?? group.store
    return try store.objectID(table: table, globalID: globalID).map { try object(with: $0) }
  }

  /// The object for `id` with its row read: throws
  /// ``ContextError/objectNotFound(_:)`` if its store has no such row (and
  /// what ``object(with:)`` throws).
  ///
  /// A row of one store refers to a row of another by its ID's URI:
  ///
  /// ```swift
  /// let uri: String = try note.row()["template"]    // a row of the seed store
  /// let template = try context.existingObject(with: ObjectID(uri: uri))
  /// ```
  public func existingObject(with id: ObjectID) throws -> ManagedObject {
    let object = try object(with: id)
    if object.isFault {
      do {
        try fulfill(object)
      } catch ContextError.objectGone(let gone) {
        throw ContextError.objectNotFound(gone)
      }
    }
    if object.isGone { throw ContextError.objectNotFound(id) }
    return object
  }

  /// Every registered object of every store (faults included, unsaved
  /// inserts excluded).
  public var registeredObjects: [ManagedObject] {
    registry.values.flatMap { $0.values.flatMap(\.values) }
  }

  /// The number of registered objects.
  public var registeredCount: Int { registry.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.count } } }

  // MARK: Fetching

  /// The rows `request` selects in its store, registered: an object already
  /// registered is returned as it is (its snapshot refreshed unless it has
  /// changes).
  ///
  /// - Throws: ``GroupSyncError/unknownStore(_:)`` if the group has no
  ///   store named `request.store`; ``ContextError/invalidRequest(_:)``.
  public func fetch(_ request: FetchRequest) throws -> [ManagedObject] {
    let store = try store(named: request.store)
    let tables = tables(store)
    let (rows, table) = try store.read { db in
      (try request.fetchRows(db, tables: tables), try tables.info(TableName(request.table), db).name)
    }
    return rows.map { register(rowID: $0.rowID, table: table, storeID: store.storeID, values: $0.values) }
  }

  /// Every row of `Record`'s table in store `store` (the main store by
  /// default) matching `filter`, registered.
  public func fetch<Record: TableRecord>(
    _ type: Record.Type, store: String = "main", where filter: String? = nil, arguments: StatementArguments = [],
    orderBy: [SortDescriptor] = []
  ) throws -> [ManagedObject] {
    try fetch(
      FetchRequest(
        table: Record.databaseTableName, store: store, filter: filter, arguments: arguments, orderBy: orderBy))
  }

  // MARK: Edits

  /// A new object for `table` of store `store` (the main store by default)
  /// with `values`, saved by the next ``save()``; its ID is temporary until
  /// then, and names the store's UUID.
  ///
  /// - Throws: ``GroupSyncError/unknownStore(_:)``;
  ///   ``GroupSyncError/readOnlyStore(_:)`` for a read-only store.
  @discardableResult
  public func insert(
    into table: String, store storeName: String = "main", values: [String: (any DatabaseValueConvertible)?] = [:]
  ) throws -> ManagedObject {
    let store = try store(named: storeName)
    if store.isReadOnly { throw GroupSyncError.readOnlyStore(store.name) }
    let id = ObjectID(storeID: store.storeID, table: table, rowID: nextTemporaryNumber, isTemporary: true)
    nextTemporaryNumber += 1
    let object = ManagedObject(objectID: id, context: self, state: .new)
    for (column, value) in values.sorted(by: { $0.key < $1.key }) {
      object.pending[column] = value?.databaseValue ?? .null
    }
    insertedObjects[id.rowID] = object
    objectDidChange(object)
    return object
  }

  /// A new object from one of the user's GRDB records, in its table of
  /// store `store` (the main store by default).
  @discardableResult
  public func insert<Record: EncodableRecord & TableRecord>(_ record: Record, store: String = "main") throws
    -> ManagedObject
  {
    let values = try record.databaseDictionary.mapValues { $0 as (any DatabaseValueConvertible)? }
    return try insert(into: Record.databaseTableName, store: store, values: values)
  }

  /// Marks `object` deleted; the next ``save()`` deletes its row. An unsaved
  /// insert is simply dropped.
  public func delete(_ object: ManagedObject) {
    if object.isInserted {
      insertedObjects[object.objectID.rowID] = nil
      object.state = .gone(last: nil)
      forgetChanges(of: object)
      return
    }
    object.isDeleted = true
    objectDidChange(object)
  }

  /// Whether any object has unsaved edits, or there are unsaved inserts or
  /// deletes.
  public var hasChanges: Bool { !changedObjects.isEmpty }

  /// Discards every unsaved change: edits, inserts and deletes.
  public func rollback() {
    for object in changedObjects {
      object.pending = RowValues()
      object.isDeleted = false
      if object.isInserted {
        insertedObjects[object.objectID.rowID] = nil
        object.state = .gone(last: nil)
      }
    }
    changedObjects = []
    changedIdentities = []
  }

  /// Re-reads `object`'s row from its store; `mergeChanges: true` keeps its
  /// pending edits on top of the new snapshot, `false` discards them.
  public func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
    if !mergeChanges {
      object.pending = RowValues()
      object.isDeleted = false
      forgetChanges(of: object)
    }
    guard !object.isInserted else { return }
    let id = object.objectID
    let store = try store(for: id)
    let tables = tables(store)
    let rows = try store.read { db in try tables.rows(of: TableName(id.table), rowIDs: [id.rowID], db) }
    apply(rows[id.rowID], to: object)
  }

  // MARK: Merging

  /// Merges a change set of any store of the group: registered objects of
  /// that store it updated are re-read (one query per table), those it
  /// deleted are gone, those of an invalidated table are re-read; rows it
  /// inserted are registered only when something asks for them. Returns
  /// what changed, also told to observers and to the results controllers
  /// of that store. A change set of a store the group does not have
  /// changes nothing.
  @discardableResult
  public func merge(_ changeSet: ChangeSet) throws -> ContextChanges {
    let store: Store
    do {
      store = try self.store(withID: changeSet.storeID)
    } catch GroupSyncError.unknownStoreID(_) {
      return ContextChanges()
    }
    let storeID = store.storeID
    if let own = ownSequences[storeID], !own.isEmpty {
      // Saves of this context come back through its listener: already merged.
      ownSequences[storeID] = own.filter { $0 > changeSet.sequence }
      if own.contains(changeSet.sequence) { return ContextChanges() }
    }
    var changes = ContextChanges()
    changes.storeID = storeID
    changes.sequence = changeSet.sequence
    changes.inserted = changeSet.inserted
    changes.updated = changeSet.updated
    changes.deleted = changeSet.deleted
    changes.invalidated = changeSet.invalidatedTables
    var toReread: [TableName: [Int64]] = [:]
    for (table, tableChanges) in changeSet.tables {
      guard let objects = registry[storeID]?[table] else { continue }
      for rowID in tableChanges.deleted {
        if let object = objects[rowID] { markGone(object) }
      }
      // An inserted rowid can be registered: a fault taken for a row that
      // did not exist yet, or a rowid reused after a delete.
      let changed = (tableChanges.updated + tableChanges.inserted).filter { objects[$0].map { !$0.isFault } ?? false }
      if !changed.isEmpty { toReread[table] = changed }
    }
    for table in changeSet.invalidatedTableNames {
      tableCaches[storeID]?.forget(table)
      guard let objects = registry[storeID]?[table] else { continue }
      let loaded = objects.values.filter { !$0.isFault && !$0.isGone }
      toReread[table] = loaded.map(\.objectID.rowID)
      changes.refreshed.formUnion(loaded.map(\.objectID))
    }
    try reread(toReread, in: store)
    for controller in liveControllers() where controller.store.storeID == storeID { try controller.apply(changeSet) }
    notify(changes)
    return changes
  }

  /// Merges a listener's event: a change set, or a reset that refreshes
  /// the registered objects and results controllers of the store it
  /// concerns (``Reset/storeID``; every store when nil).
  @discardableResult
  public func merge(_ event: ListenerEvent) throws -> ContextChanges {
    switch event {
    case .changes(let changeSet):
      return try merge(changeSet)
    case .reset(let reset):
      return try refreshStores(reset.storeID, sequence: reset.sequence)
    }
  }

  /// Merges every event of `listener` until it closes or the task is
  /// cancelled, on the caller's actor.
  public func merge(from listener: Listener, isolation: isolated (any Actor)? = #isolation) async throws {
    for await event in listener.events {
      try Task.checkCancellation()
      try merge(event)
    }
  }

  /// Re-reads every loaded registered object of every store and re-runs
  /// every results controller, keeping pending edits.
  @discardableResult
  public func refreshAll(sequence: Int64? = nil) throws -> ContextChanges {
    try refreshStores(nil, sequence: sequence)
  }

  /// Re-reads every loaded registered object of store `storeID` (nil:
  /// every store) and re-runs its results controllers, keeping pending
  /// edits. Objects whose rows are no longer there (a read-only store's
  /// file replaced by one without them) are gone.
  private func refreshStores(_ storeID: UUID?, sequence: Int64?) throws -> ContextChanges {
    if let storeID { tableCaches[storeID]?.forgetAll() } else { for cache in tableCaches.values { cache.forgetAll() } }
    var changes = ContextChanges()
    changes.isReset = true
    changes.sequence = sequence
    changes.storeID = storeID
    var toReread: [UUID: [TableName: [Int64]]] = [:]
    for (id, tables) in registry where storeID == nil || id == storeID {
      for (table, objects) in tables {
        let loaded = objects.values.filter { !$0.isFault && !$0.isGone }
        toReread[id, default: [:]][table] = loaded.map(\.objectID.rowID)
        changes.refreshed.formUnion(loaded.map(\.objectID))
      }
    }
    for (id, rowIDsByTable) in toReread where rowIDsByTable.contains(where: { !$0.value.isEmpty }) {
      try reread(rowIDsByTable, in: try store(withID: id))
    }
    for controller in liveControllers() where storeID == nil || controller.store.storeID == storeID {
      try controller.refetch()
    }
    notify(changes)
    return changes
  }

  // MARK: Notifications

  /// One ``ContextChanges`` per merge, and per store written by a save,
  /// from now on, until the context is released.
  public var changes: AsyncStream<ContextChanges> {
    let (stream, continuation) = AsyncStream.makeStream(of: ContextChanges.self)
    let key = UUID()
    continuations[key] = continuation
    return stream
  }

  /// Calls `body` after each merge, and for each store a save wrote,
  /// before this method's caller goes on.
  public func onChange(_ body: @escaping (ContextChanges) -> Void) {
    observers.append(body)
  }

  func notify(_ changes: ContextChanges) {
    guard !changes.isEmpty else { return }
    for observer in observers { observer(changes) }
    for continuation in continuations.values { continuation.yield(changes) }
  }

  // MARK: Stores

  /// The store of the group `id` names.
  /// - Throws: ``ContextError/foreignStore(_:)`` if the group has none.
  func store(for id: ObjectID) throws -> Store {
    do {
      return try store(withID: id.storeID)
    } catch GroupSyncError.unknownStoreID(_) {
      throw ContextError.foreignStore(id)
    }
  }

  /// The store of the group with UUID `storeID`.
  /// - Throws: ``GroupSyncError/unknownStoreID(_:)``.
  func store(withID storeID: UUID) throws -> Store {
    if let store = stores[storeID] { return store }
    let store = try group.store(withID: storeID)
    stores[storeID] = store
    return store
  }

  /// The store of the group named `name`.
  /// - Throws: ``GroupSyncError/unknownStore(_:)``.
  func store(named name: String) throws -> Store {
    let store = try group.store(named: name)
    if stores[store.storeID] == nil { stores[store.storeID] = store }
    return store
  }

  /// What the context knows of `store`'s tables.
  func tables(_ store: Store) -> TableInfoCache {
    if let cache = tableCaches[store.storeID] { return cache }
    let cache = TableInfoCache(storeName: store.name)
    tableCaches[store.storeID] = cache
    return cache
  }

  // MARK: Internals

  func addController(_ controller: ResultsController) {
    controllers.removeAll { $0.controller == nil }
    controllers.append(WeakController(controller: controller))
  }

  func liveControllers() -> [ResultsController] {
    controllers.compactMap(\.controller)
  }

  /// Reads a fault's row from its store.
  func fulfill(_ object: ManagedObject) throws {
    let id = object.objectID
    let store = try store(for: id)
    let tables = tables(store)
    let rows = try store.read { db in try tables.rows(of: TableName(id.table), rowIDs: [id.rowID], db) }
    apply(rows[id.rowID], to: object)
    if object.isGone { throw ContextError.objectGone(id) }
  }

  func objectDidChange(_ object: ManagedObject) {
    if changedIdentities.insert(ObjectIdentifier(object)).inserted { changedObjects.append(object) }
  }

  func forgetChanges(of object: ManagedObject) {
    guard changedIdentities.remove(ObjectIdentifier(object)) != nil else { return }
    changedObjects.removeAll { $0 === object }
  }

  /// The registered object of a row just read from store `storeID`,
  /// registering it if needed; its snapshot is replaced unless it has
  /// changes.
  @discardableResult
  func register(rowID: Int64, table: String, storeID: UUID, values: RowValues) -> ManagedObject {
    if let object = registry[storeID]?[TableName(table)]?[rowID] {
      if !object.hasChanges || object.isFault { object.state = .snapshot(values) }
      return object
    }
    let id = ObjectID(storeID: storeID, table: table, rowID: rowID)
    return register(ManagedObject(objectID: id, context: self, state: .snapshot(values)))
  }

  @discardableResult
  func register(_ object: ManagedObject) -> ManagedObject {
    let id = object.objectID
    registry[id.storeID, default: [:]][TableName(id.table), default: [:]][id.rowID] = object
    return object
  }

  func unregister(_ object: ManagedObject) {
    let id = object.objectID
    registry[id.storeID]?[TableName(id.table)]?[id.rowID] = nil
  }

  /// The row is gone from the store: an object without changes leaves the
  /// registry; one with pending edits stays, for its save to resolve.
  func markGone(_ object: ManagedObject) {
    object.state = .gone(last: object.baseValues)
    if !object.hasChanges { unregister(object) }
  }

  /// Sets an object's snapshot from a row read (nil: the row is gone).
  func apply(_ values: RowValues?, to object: ManagedObject) {
    if let values { object.state = .snapshot(values) } else { markGone(object) }
  }

  /// Re-reads registered objects of `store`, one query per table; a table
  /// the store no longer has (a read-only store's new file) has no rows.
  private func reread(_ rowIDsByTable: [TableName: [Int64]], in store: Store) throws {
    let wanted = rowIDsByTable.filter { !$0.value.isEmpty }
    guard !wanted.isEmpty else { return }
    let tables = tables(store)
    let read = try store.read { db in
      try wanted.map { table, rowIDs in
        (table, rowIDs, try tables.exists(table, db) ? try tables.rows(of: table, rowIDs: rowIDs, db) : [:])
      }
    }
    for (table, rowIDs, found) in read {
      for rowID in rowIDs {
        if let object = registry[store.storeID]?[table]?[rowID] { apply(found[rowID], to: object) }
      }
    }
  }
}

private struct WeakController {
  weak var controller: ResultsController?
}
