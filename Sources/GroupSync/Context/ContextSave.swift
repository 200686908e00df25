import GRDB

extension Context {
  /// Writes every pending change in one ``Store/write(_:)-(Database)->T``,
  /// so that other processes get it as one change set, and returns it (nil
  /// when nothing was left to write).
  ///
  /// Before writing, each edited or deleted object's row is compared with
  /// the snapshot its edit was based on; a difference is a conflict, which
  /// ``mergePolicy`` resolves. Under ``MergePolicy/error`` the save throws
  /// ``MergeConflictError`` and nothing is written; the changes stay
  /// pending. Inserted objects get their permanent IDs.
  @discardableResult
  public func save() throws -> ChangeSet? {
    guard hasChanges else { return nil }
    let work = changedObjects
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
      ownSequences.insert(changeSet.sequence)
      changes.sequence = changeSet.sequence
      changes.inserted = changeSet.inserted
      changes.updated = changeSet.updated
      changes.deleted = changeSet.deleted
      changes.invalidated = changeSet.invalidatedTables
      for table in changeSet.invalidatedTableNames { tables.forget(table) }
      for controller in liveControllers() { try controller.apply(changeSet) }
    }
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
        conflicts.append(
          MergeConflict(
            objectID: object.objectID, snapshot: (base ?? RowValues()).dictionary, stored: stored?.dictionary,
            pending: object.pending.dictionary, isDelete: object.isDeleted))
        continue
      }
      outcomes.append(try resolve(object, table: table, base: base ?? RowValues(), stored: stored, db))
    }
    if !conflicts.isEmpty { throw MergeConflictError(conflicts: conflicts) }
    return outcomes
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
