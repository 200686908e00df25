import Foundation
import GRDB

extension Context {
  /// Writes every pending change, one `Store.write(_:)` per
  /// store with changes (the main store first, then by name), so that
  /// other processes get one change set per store, and returns the first
  /// change set written (nil when nothing was left to write; see
  /// ``saveAndReturnChangeSets()`` for each store's).
  ///
  /// Before writing, each edited or deleted object's row is compared with
  /// the snapshot its edit was based on; a difference is a conflict, which
  /// ``mergePolicy`` resolves. Under ``MergePolicy/error`` the save throws
  /// ``MergeConflictError`` and nothing is written; the changes stay
  /// pending. Inserted objects get their permanent IDs.
  ///
  /// Each store's changes commit atomically in that store, but stores are
  /// separate SQLite files, so a save over several stores is not one
  /// transaction. What can be checked before any store is written is:
  /// pending changes to a read-only store throw
  /// ``GroupSyncError/readOnlyStore(_:)``, an object of a store the group
  /// does not have throws ``ContextError/foreignStore(_:)``, and under
  /// ``MergePolicy/error`` the conflicts of every store are looked for
  /// first and throw ``MergeConflictError``, all with nothing written. If
  /// a store's write still fails after an earlier store committed (a
  /// constraint, a conflict that appeared meanwhile, I/O), the save throws
  /// ``PartialSaveError``: the earlier stores' changes are committed and
  /// published, the failing store's and the later stores' changes stay
  /// pending, and another ``save()`` writes only them. When the first
  /// store fails, its own error is thrown and nothing was written.
  @discardableResult
  public func save() throws -> ChangeSet? {
    try saveAndReturnChangeSets().first
  }

  /// Like ``save()``, and returns the change set of each store written, in
  /// the order written.
  @discardableResult
  public func saveAndReturnChangeSets() throws -> [ChangeSet] {
    guard hasChanges else { return [] }
    var work: [UUID: [ManagedObject]] = [:]
    var stores: [Store] = []
    for object in changedObjects {
      let storeID = object.objectID.storeID
      if work[storeID] == nil { stores.append(try store(for: object.objectID)) }
      work[storeID, default: []].append(object)
    }
    let main = group.store.storeID
    stores.sort { ($0.storeID == main ? 0 : 1, $0.name) < ($1.storeID == main ? 0 : 1, $1.name) }
    if let readOnly = stores.first(where: \.isReadOnly) { throw GroupSyncError.readOnlyStore(readOnly.name) }
    if stores.count > 1, mergePolicy == .error {
      // Conflicts there already are fail the save before any store is written.
      var conflicts: [MergeConflict] = []
      for store in stores {
        let writer = ContextWriter(policy: mergePolicy, tables: tables(store))
        let objects = work[store.storeID] ?? []
        conflicts += try store.read { db in try writer.conflicts(objects, db) }
      }
      if !conflicts.isEmpty { throw MergeConflictError(conflicts: conflicts) }
    }
    var changeSets: [ChangeSet] = []
    for (index, store) in stores.enumerated() {
      do {
        if let changeSet = try save(work[store.storeID] ?? [], in: store) { changeSets.append(changeSet) }
      } catch let error where index > 0 {
        throw PartialSaveError(
          savedStores: stores[..<index].map(\.name), changeSets: changeSets, failedStore: store.name,
          pendingStores: stores[index...].map(\.name), underlying: error)
      }
    }
    return changeSets
  }

  /// Writes the pending changes of `store`'s objects in one transaction,
  /// then brings the objects, the store's results controllers and the
  /// observers up to date.
  private func save(_ work: [ManagedObject], in store: Store) throws -> ChangeSet? {
    let tables = tables(store)
    let writer = ContextWriter(policy: mergePolicy, tables: tables)
    let (outcomes, changeSet) = try store.writeAndReturnChangeSet { db in
      try writer.write(work, db)
    }
    var changes = ContextChanges()
    for outcome in outcomes {
      let object = outcome.object
      if let rowID = outcome.insertedRowID {
        insertedObjects[object.objectID.rowID] = nil
        let table = tables.cachedName(TableName(object.objectID.table)) ?? object.objectID.table
        object.objectID = ObjectID(storeID: store.storeID, table: table, rowID: rowID)
        object.state = .fault
        register(object)
      }
      object.pending = outcome.keptPending ?? RowValues()
      object.isDeleted = false
      forgetChanges(of: object)
      if let values = outcome.values {
        if outcome.insertedRowID == nil, object.isGone { register(object) }  // inserted again
        object.state = .snapshot(values)
      } else {
        markGone(object)
      }
      if outcome.rolledBack { changes.refreshed.insert(object.objectID) }
    }
    if let changeSet {
      ownSequences[store.storeID, default: []].insert(changeSet.sequence)
      changes.sequence = changeSet.sequence
      changes.inserted = changeSet.inserted
      changes.updated = changeSet.updated
      changes.deleted = changeSet.deleted
      changes.invalidated = changeSet.invalidatedTables
      for table in changeSet.invalidatedTableNames { tables.forget(table) }
      for controller in liveControllers() where controller.store.storeID == store.storeID {
        try controller.apply(changeSet)
      }
    }
    if !changes.isEmpty { changes.storeID = store.storeID }
    notify(changes)
    return changeSet
  }
}

/// What became of one object in a save.
struct SaveOutcome {
  let object: ManagedObject
  /// The row as written (nil: deleted, or gone).
  let values: RowValues?
  /// The rowid of a saved insert.
  var insertedRowID: Int64?
  /// The context's changes were discarded (``MergePolicy/rollback``, or a
  /// delete cancelled by ``MergePolicy/storeTrump``).
  var rolledBack = false
  /// Edits that stay pending.
  var keptPending: RowValues?
}

/// Writes a context's changes inside the save's transaction: optimistic
/// locking, the merge policy, then the INSERT, UPDATE and DELETE statements.
struct ContextWriter {
  let policy: MergePolicy
  let tables: TableInfoCache

  func write(_ objects: [ManagedObject], _ db: Database) throws -> [SaveOutcome] {
    var conflicts: [MergeConflict] = []
    var outcomes: [SaveOutcome] = []
    for object in objects {
      let table = TableName(object.objectID.table)
      if object.isInserted {
        let rowID = try insert(object.pending, into: table, db)
        var outcome = SaveOutcome(object: object, values: try tables.row(of: table, rowID: rowID, db))
        outcome.insertedRowID = rowID
        outcomes.append(outcome)
        continue
      }
      let rowID = object.objectID.rowID
      let stored = try tables.row(of: table, rowID: rowID, db)
      // A fault edited blind has no snapshot to compare with.
      let base = object.isFault ? stored : object.baseValues
      if object.isDeleted && stored == nil {
        outcomes.append(SaveOutcome(object: object, values: nil))  // already gone: nothing to do
        continue
      }
      guard stored != base else {
        if object.isDeleted {
          try delete(rowID, from: table, db)
        } else {
          try update(rowID, in: table, set: object.pending, db)
        }
        outcomes.append(SaveOutcome(object: object, values: object.isDeleted ? nil : try tables.row(of: table, rowID: rowID, db)))
        continue
      }
      if policy == .error {
        conflicts.append(Self.conflict(object, base: base, stored: stored))
        continue
      }
      outcomes.append(try resolve(object, table: table, base: base ?? RowValues(), stored: stored, db))
    }
    if !conflicts.isEmpty { throw MergeConflictError(conflicts: conflicts) }
    return outcomes
  }

  /// The conflicts of `objects` with the store, without writing: the
  /// check ``write(_:_:)`` makes, for a save over several stores to make
  /// in every store before it writes any.
  func conflicts(_ objects: [ManagedObject], _ db: Database) throws -> [MergeConflict] {
    var conflicts: [MergeConflict] = []
    for object in objects where !object.isInserted {
      let stored = try tables.row(of: TableName(object.objectID.table), rowID: object.objectID.rowID, db)
      let base = object.isFault ? stored : object.baseValues
      if (object.isDeleted && stored == nil) || stored == base { continue }
      conflicts.append(Self.conflict(object, base: base, stored: stored))
    }
    return conflicts
  }

  private static func conflict(_ object: ManagedObject, base: RowValues?, stored: RowValues?) -> MergeConflict {
    MergeConflict(
      objectID: object.objectID, snapshot: (base ?? RowValues()).dictionary, stored: stored?.dictionary,
      pending: object.pending.dictionary, isDelete: object.isDeleted)
  }

  /// Applies the merge policy to one conflicting object.
  private func resolve(
    _ object: ManagedObject, table: TableName, base: RowValues, stored: RowValues?, _ db: Database
  ) throws -> SaveOutcome {
    let rowID = object.objectID.rowID
    func written() throws -> SaveOutcome {
      SaveOutcome(object: object, values: try tables.row(of: table, rowID: rowID, db))
    }
    switch policy {
    case .error:
      preconditionFailure("conflicts under .error are collected, not resolved")
    case .rollback:
      var outcome = SaveOutcome(object: object, values: stored)
      outcome.rolledBack = true
      return outcome
    case .storeTrump:
      guard let stored else { return SaveOutcome(object: object, values: nil) }  // the store's delete wins
      if object.isDeleted {
        var outcome = SaveOutcome(object: object, values: stored)
        outcome.rolledBack = true
        return outcome
      }
      var kept = RowValues()
      for (column, value) in object.pending.pairs where stored[column] == base[column] { kept[column] = value }
      try update(rowID, in: table, set: kept, db)
      return try written()
    case .objectTrump, .overwrite:
      if object.isDeleted {
        try delete(rowID, from: table, db)
        return SaveOutcome(object: object, values: nil)
      }
      let whole = base.overlaid(by: object.pending)
      guard stored != nil else {
        try insert(whole, into: table, rowID: rowID, db)
        return try written()
      }
      try update(rowID, in: table, set: policy == .overwrite ? whole : object.pending, db)
      return try written()
    }
  }

  /// Inserts a row; with `rowID`, under that rowid.
  @discardableResult
  private func insert(_ values: RowValues, into table: TableName, rowID: Int64? = nil, _ db: Database) throws -> Int64 {
    let info = try tables.info(table, db)
    let columns = values.columns.map(SQLIdentifier.quoted)
    var sql = "INSERT INTO \(info.quotedName)"
    sql += columns.isEmpty ? " DEFAULT VALUES" : "(\(columns.joined(separator: ", "))) VALUES (\(databaseQuestionMarks(count: columns.count)))"
    try db.execute(sql: sql, arguments: StatementArguments(values.values))
    let inserted = db.lastInsertedRowID
    if let rowID, inserted != rowID {
      try db.execute(
        sql: "UPDATE \(info.quotedName) SET \(info.rowIDName) = ? WHERE \(info.rowIDName) = ?", arguments: [rowID, inserted])
      return rowID
    }
    return inserted
  }

  private func update(_ rowID: Int64, in table: TableName, set values: RowValues, _ db: Database) throws {
    guard !values.isEmpty else { return }
    let info = try tables.info(table, db)
    let assignments = values.columns.map { "\(SQLIdentifier.quoted($0)) = ?" }.joined(separator: ", ")
    try db.execute(
      sql: "UPDATE \(info.quotedName) SET \(assignments) WHERE \(info.rowIDName) = ?",
      arguments: StatementArguments(values.values) + [rowID])
  }

  private func delete(_ rowID: Int64, from table: TableName, _ db: Database) throws {
    let info = try tables.info(table, db)
    try db.execute(sql: "DELETE FROM \(info.quotedName) WHERE \(info.rowIDName) = ?", arguments: [rowID])
  }
}
