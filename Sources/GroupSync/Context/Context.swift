import Foundation
import GRDB

/// An in-memory working set of a group's rows: Core Data's managed object
/// context, on GRDB.
///
/// - **Identity**: at most one ``ManagedObject`` per ``ObjectID``.
/// - **Merging**: ``merge(_:)-(ChangeSet)`` re-reads only the registered
///   objects a change set names, one query per table; ``merge(from:isolation:)``
///   feeds the context from a listener (another process's commits, and this
///   process's other contexts' saves, which never touch a file).
/// - **Edits**: pending over each object's snapshot; ``save()`` is one
///   ``Store/write(_:)-(Database)->T`` with optimistic locking and a
///   ``MergePolicy``.
/// - **Notifications**: one ``ContextChanges`` after each merge or save, as
///   ``changes`` (an `AsyncStream`) and ``onChange(_:)``.
///
/// A context is not `Sendable`: use it from one actor or thread.
///
/// ```swift
/// let context = Context(group)
/// let notes = try context.fetch(FetchRequest(table: "note", orderBy: [.ascending("body")]))
/// try notes[0].set("body", to: "edited")
/// try context.save()                        // other processes get the change set
/// try await context.merge(from: listener)   // and this one merges theirs
/// ```
public final class Context {
  public let group: GroupFolder
  public var store: Store { group.store }
  /// How ``save()`` resolves conflicts with the store.
  public var mergePolicy: MergePolicy

  /// Registered objects with a permanent ID, by table and rowid.
  private var registry: [TableName: [Int64: ManagedObject]] = [:]
  /// Unsaved inserts, by temporary number.
  var insertedObjects: [Int64: ManagedObject] = [:]
  private var nextTemporaryNumber: Int64 = 1
  /// Objects with unsaved changes, in the order they were first changed.
  private(set) var changedObjects: [ManagedObject] = []
  private var changedIdentities: Set<ObjectIdentifier> = []
  /// Sequences this context wrote: merging them again would change nothing.
  var ownSequences: Set<Int64> = []
  private var observers: [(ContextChanges) -> Void] = []
  private var continuations: [UUID: AsyncStream<ContextChanges>.Continuation] = [:]
  private var controllers: [WeakController] = []
  let tables = TableInfoCache()

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
    if id.isTemporary { return id.storeID == store.storeID ? insertedObjects[id.rowID] : nil }
    return registry[TableName(id.table)]?[id.rowID]
  }

  /// The object for `id`: the registered one, else a fault registered now
  /// that reads its row on first access (and throws
  /// ``ContextError/objectGone(_:)`` then if the row is gone).
  public func object(with id: ObjectID) throws -> ManagedObject {
    guard id.storeID == store.storeID else { throw ContextError.foreignStore(id) }
    if let object = registeredObject(for: id) { return object }
    if id.isTemporary { throw ContextError.unknownTemporaryID(id) }
    // Registered under the schema's spelling of the table, as change sets
    // name it.
    let given = TableName(id.table)
    let table = try tables.cachedName(given) ?? store.read { db in try self.tables.info(given, db).name }
    let canonical = ObjectID(storeID: id.storeID, table: table, rowID: id.rowID)
    if let object = registeredObject(for: canonical) { return object }
    return register(ManagedObject(objectID: canonical, context: self, state: .fault))
  }

  /// The object for `id` with its row read: throws
  /// ``ContextError/objectNotFound(_:)`` if the store has no such row.
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

  /// Every registered object (faults included, unsaved inserts excluded).
  public var registeredObjects: [ManagedObject] {
    registry.values.flatMap(\.values)
  }

  /// The number of registered objects.
  public var registeredCount: Int { registry.values.reduce(0) { $0 + $1.count } }

  // MARK: Fetching

  /// The rows `request` selects, registered: an object already registered
  /// is returned as it is (its snapshot refreshed unless it has changes).
  public func fetch(_ request: FetchRequest) throws -> [ManagedObject] {
    let (rows, table) = try store.read { db in
      (try request.fetchRows(db, tables: self.tables), try self.tables.info(TableName(request.table), db).name)
    }
    return rows.map { register(rowID: $0.rowID, table: table, values: $0.values) }
  }

  /// Every row of `Record`'s table matching `filter`, registered.
  public func fetch<Record: TableRecord>(
    _ type: Record.Type, where filter: String? = nil, arguments: StatementArguments = [],
    orderBy: [SortDescriptor] = []
  ) throws -> [ManagedObject] {
    try fetch(FetchRequest(table: Record.databaseTableName, filter: filter, arguments: arguments, orderBy: orderBy))
  }

  // MARK: Edits

  /// A new object for `table` with `values`, saved by the next ``save()``;
  /// its ID is temporary until then.
  @discardableResult
  public func insert(into table: String, values: [String: (any DatabaseValueConvertible)?] = [:]) throws
    -> ManagedObject
  {
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

  /// A new object from one of the user's GRDB records, in its table.
  @discardableResult
  public func insert<Record: EncodableRecord & TableRecord>(_ record: Record) throws -> ManagedObject {
    let values = try record.databaseDictionary.mapValues { $0 as (any DatabaseValueConvertible)? }
    return try insert(into: Record.databaseTableName, values: values)
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

  /// Re-reads `object`'s row; `mergeChanges: true` keeps its pending edits
  /// on top of the new snapshot, `false` discards them.
  public func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
    if !mergeChanges {
      object.pending = RowValues()
      object.isDeleted = false
      forgetChanges(of: object)
    }
    guard !object.isInserted else { return }
    let id = object.objectID
    let rows = try store.read { db in try self.tables.rows(of: TableName(id.table), rowIDs: [id.rowID], db) }
    apply(rows[id.rowID], to: object)
  }

  // MARK: Merging

  /// Merges a change set of the store: registered objects it updated are
  /// re-read (one query per table), those it deleted are gone, those of an
  /// invalidated table are re-read; rows it inserted are registered only
  /// when something asks for them. Returns what changed, also told to
  /// observers and results controllers.
  @discardableResult
  public func merge(_ changeSet: ChangeSet) throws -> ContextChanges {
    guard changeSet.storeID == store.storeID else { return ContextChanges() }
    if !ownSequences.isEmpty {
      // Saves of this context come back through its listener: already merged.
      let own = ownSequences.contains(changeSet.sequence)
      ownSequences = ownSequences.filter { $0 > changeSet.sequence }
      if own { return ContextChanges() }
    }
    var changes = ContextChanges()
    changes.sequence = changeSet.sequence
    changes.inserted = changeSet.inserted
    changes.updated = changeSet.updated
    changes.deleted = changeSet.deleted
    changes.invalidated = changeSet.invalidatedTables
    var toReread: [TableName: [Int64]] = [:]
    for (table, tableChanges) in changeSet.tables {
      guard let objects = registry[table] else { continue }
      for rowID in tableChanges.deleted {
        if let object = objects[rowID] { markGone(object) }
      }
      // An inserted rowid can be registered: a fault taken for a row that
      // did not exist yet, or a rowid reused after a delete.
      let changed = (tableChanges.updated + tableChanges.inserted).filter { objects[$0].map { !$0.isFault } ?? false }
      if !changed.isEmpty { toReread[table] = changed }
    }
    for table in changeSet.invalidatedTableNames {
      tables.forget(table)
      guard let objects = registry[table] else { continue }
      let loaded = objects.values.filter { !$0.isFault && !$0.isGone }
      toReread[table] = loaded.map(\.objectID.rowID)
      changes.refreshed.formUnion(loaded.map(\.objectID))
    }
    try reread(toReread)
    for controller in liveControllers() { try controller.apply(changeSet) }
    notify(changes)
    return changes
  }

  /// Merges a listener's event: a change set, or a reset that refreshes
  /// every registered object and results controller.
  @discardableResult
  public func merge(_ event: ListenerEvent) throws -> ContextChanges {
    switch event {
    case .changes(let changeSet):
      return try merge(changeSet)
    case .reset(let reset):
      return try refreshAll(sequence: reset.sequence)
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

  /// Re-reads every loaded registered object and re-runs every results
  /// controller, keeping pending edits.
  @discardableResult
  public func refreshAll(sequence: Int64? = nil) throws -> ContextChanges {
    tables.forgetAll()
    var changes = ContextChanges()
    changes.isReset = true
    changes.sequence = sequence
    var toReread: [TableName: [Int64]] = [:]
    for (table, objects) in registry {
      let loaded = objects.values.filter { !$0.isFault && !$0.isGone }
      toReread[table] = loaded.map(\.objectID.rowID)
      changes.refreshed.formUnion(loaded.map(\.objectID))
    }
    try reread(toReread)
    for controller in liveControllers() { try controller.performFetch(notify: true) }
    notify(changes)
    return changes
  }

  // MARK: Notifications

  /// One ``ContextChanges`` per merge or save from now on, until the
  /// context is released.
  public var changes: AsyncStream<ContextChanges> {
    let (stream, continuation) = AsyncStream.makeStream(of: ContextChanges.self)
    let key = UUID()
    continuations[key] = continuation
    return stream
  }

  /// Calls `body` after each merge or save, before this method's caller
  /// goes on.
  public func onChange(_ body: @escaping (ContextChanges) -> Void) {
    observers.append(body)
  }

  func notify(_ changes: ContextChanges) {
    guard !changes.isEmpty else { return }
    for observer in observers { observer(changes) }
    for continuation in continuations.values { continuation.yield(changes) }
  }

  // MARK: Internals

  func addController(_ controller: ResultsController) {
    controllers.removeAll { $0.controller == nil }
    controllers.append(WeakController(controller: controller))
  }

  func liveControllers() -> [ResultsController] {
    controllers.compactMap(\.controller)
  }

  /// Reads a fault's row.
  func fulfill(_ object: ManagedObject) throws {
    let id = object.objectID
    let rows = try store.read { db in try self.tables.rows(of: TableName(id.table), rowIDs: [id.rowID], db) }
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

  /// The registered object of a row just read, registering it if needed;
  /// its snapshot is replaced unless it has changes.
  func register(rowID: Int64, table: String, values: RowValues) -> ManagedObject {
    let tableName = TableName(table)
    if let object = registry[tableName]?[rowID] {
      if !object.hasChanges || object.isFault { object.state = .snapshot(values) }
      return object
    }
    let id = ObjectID(storeID: store.storeID, table: table, rowID: rowID)
    return register(ManagedObject(objectID: id, context: self, state: .snapshot(values)))
  }

  @discardableResult
  func register(_ object: ManagedObject) -> ManagedObject {
    registry[TableName(object.objectID.table), default: [:]][object.objectID.rowID] = object
    return object
  }

  func unregister(_ object: ManagedObject) {
    registry[TableName(object.objectID.table)]?[object.objectID.rowID] = nil
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

  /// Re-reads registered objects, one query per table.
  private func reread(_ rowIDsByTable: [TableName: [Int64]]) throws {
    let wanted = rowIDsByTable.filter { !$0.value.isEmpty }
    guard !wanted.isEmpty else { return }
    let read = try store.read { db in
      try wanted.map { table, rowIDs in (table, rowIDs, try self.tables.rows(of: table, rowIDs: rowIDs, db)) }
    }
    for (table, rowIDs, found) in read {
      for rowID in rowIDs {
        if let object = registry[table]?[rowID] { apply(found[rowID], to: object) }
      }
    }
  }
}

private struct WeakController {
  weak var controller: ResultsController?
}
