import GRDB

/// Turns a transaction's captured rows into exactly what a reader can
/// observe, right before COMMIT, with the store at hand:
///
/// - rows are checked against the store, so that a savepoint rolled back
///   or a failed statement never makes an existing row reported deleted, or
///   a gone row updated or inserted;
/// - rows of WITHOUT ROWID tables have no rowid to name: those tables are
///   invalidated, decided from the schema;
/// - rows of a virtual table's shadow tables are reported under the
///   virtual table (by rowid where a shadow carries its rowids, else the
///   virtual table is invalidated); shadow tables are never reported;
/// - an external-content full-text table shows its content table's rows:
///   their changes are reported under it too (it is invalidated when its
///   rowids are not the content table's);
/// - a schema change invalidates the tables whose shape or existence
///   changed, or every table when the change cannot be told apart.
struct NetChangeResolver {
  let db: Database
  let before: SchemaSnapshot
  let after: SchemaSnapshot
  let statements: WriterStatements

  func resolve(
    _ netRows: [TableName: NetRows], invalidated budgetInvalidated: Set<TableName>
  ) throws -> (tables: [TableName: TableChanges], invalidated: Set<TableName>) {
    if let plain = try resolvePlain(netRows, invalidated: budgetInvalidated) { return plain }
    var invalidated = budgetInvalidated
    // Tables new in the transaction are invalidated (a renamed table's rows
    // come without a hook) and still have the rows the hook saw listed.
    var created = Set<TableName>()
    if after.version != before.version {
      if let (changed, new) = after.changedTables(since: before) {
        invalidated.formUnion(changed)
        created = new
      } else {
        invalidated.formUnion(before.readableTables + after.readableTables)
      }
    }
    var rowsByTable: [TableName: NetRows] = [:]
    // Rows of a full-text table's document sizes, where its content table
    // tells which rows exist: written, but not inserted or deleted by that.
    var sizesWritten: [TableName: [Int64]] = [:]
    for (table, rows) in netRows {
      switch after.kinds[table] ?? before.kinds[table] {
      case .rowID?, .virtual?:
        rowsByTable[table] = rows
      case .shadow(let owner?)?:
        let rowIDShadows = after.rowIDShadows[owner] ?? before.rowIDShadows[owner]
        if let rowIDShadows, Self.isSizes(table, of: owner, besideContentIn: rowIDShadows) {
          sizesWritten[owner, default: []] += rows.claimedPresent + rows.claimedGone
        } else if rowIDShadows?.contains(table) == true {
          // A full-text table's content and its document sizes both carry
          // its rowids: a write to either changes what it shows.
          rowsByTable[owner] = rowsByTable[owner].map { $0.merged(with: rows) } ?? rows
        } else if rowIDShadows == nil {
          invalidated.insert(owner)
        }  // else: an index shadow of a virtual table named by its rowid shadows
      case .shadow(nil)?:
        break  // an orphan shadow table: nothing a reader queries
      case .withoutRowID?, .view?, nil:
        invalidated.insert(table)  // no rowids, or a table gone meanwhile
      }
    }
    // Neither GroupSync's tables nor a relay's (``RelayTables``) are ever
    // reported, not even when the schema change made them.
    invalidated = Set(invalidated.compactMap(owner).filter { !$0.isInternal && !RelayTables.contains($0.name) })
    var tables: [TableName: TableChanges] = [:]
    for (table, rows) in rowsByTable where !invalidated.contains(table) || created.contains(table) {
      guard let changes = try verified(rows, in: table) else {
        invalidated.insert(table)  // its rowid cannot be named in SQL, or it cannot be read
        continue
      }
      if !changes.isEmpty { tables[table] = changes }
    }
    for (table, rows) in sizesWritten where !invalidated.contains(table) || created.contains(table) {
      guard let changes = try sizesOnly(rows, in: table, beside: tables[table]) else {
        invalidated.insert(table)
        tables[table] = nil
        continue
      }
      if !changes.isEmpty { tables[table] = changes }
    }
    // An external-content full-text table shows its content table's rows:
    // their changes are its own, even when no trigger fed its index.
    for (index, source) in after.externalContents where !invalidated.contains(index) {
      if after.kinds[source.content] == .view {
        // Rows read through a view: any change may show.
        if !tables.isEmpty || !invalidated.isEmpty {
          invalidated.insert(index)
          tables[index] = nil
        }
        continue
      }
      // The index's own rows show only through the content table: one the
      // content table did not insert in this transaction existed before.
      if let own = tables[index], !own.inserted.isEmpty {
        tables[index] = TableChanges(
          inserted: [], updated: (own.inserted + own.updated).sorted(), deleted: own.deleted)
      }
      let contentChanges = tables[source.content]
      guard contentChanges != nil || invalidated.contains(source.content) else { continue }
      guard source.sharesRowIDs, let contentChanges, !invalidated.contains(source.content) else {
        invalidated.insert(index)
        tables[index] = nil
        continue
      }
      tables[index] = (tables[index] ?? TableChanges()).overridden(by: contentChanges)
    }
    return (tables, invalidated)
  }

  /// The common commit, without the general case's bookkeeping: the schema
  /// did not move, nothing is invalidated, no full-text index shows
  /// another table's rows, and every table written is a rowid table. Nil
  /// for any other commit.
  private func resolvePlain(
    _ netRows: [TableName: NetRows], invalidated budgetInvalidated: Set<TableName>
  ) throws -> (tables: [TableName: TableChanges], invalidated: Set<TableName>)? {
    guard after.version == before.version, budgetInvalidated.isEmpty, after.externalContents.isEmpty,
      netRows.keys.allSatisfy({ after.kinds[$0] == .rowID })
    else { return nil }
    var tables: [TableName: TableChanges] = [:]
    var invalidated = Set<TableName>()
    for (table, rows) in netRows {
      guard let changes = try verified(rows, in: table) else {
        invalidated.insert(table)
        continue
      }
      // The first table as a literal: no growing an empty dictionary.
      if tables.isEmpty, !changes.isEmpty { tables = [table: changes] } else if !changes.isEmpty { tables[table] = changes }
    }
    return (tables, invalidated)
  }

  /// Whether `shadow` is the document sizes of full-text table `owner`
  /// that also keeps its content: the content tells which rows exist, and
  /// the sizes follow it (a `rebuild` deletes and writes them all again,
  /// and writes sizes missing for a row whose content was written
  /// directly).
  static func isSizes(_ shadow: TableName, of owner: TableName, besideContentIn rowIDShadows: Set<TableName>) -> Bool {
    shadow == TableName(owner.name + "_docsize") && rowIDShadows.contains(TableName(owner.name + "_content"))
  }

  /// `changes` with the rows whose document sizes alone were written: a
  /// row that exists was updated (it existed before, since its content was
  /// not written), one that does not was never there. Rows the content
  /// wrote are already in `changes`. Nil when the table cannot be read.
  private func sizesOnly(_ rows: [Int64], in table: TableName, beside changes: TableChanges?) throws -> TableChanges? {
    var changes = changes ?? TableChanges()
    let named = Set(changes.inserted).union(changes.updated).union(changes.deleted)
    let unnamed = Set(rows).subtracting(named).sorted()
    guard !unnamed.isEmpty else { return changes }
    let existing: [Int64]?
    do {
      existing = try existingRowIDs(among: unnamed, in: table)
    } catch let error as DatabaseError where error.resultCode == .SQLITE_ERROR {
      return nil
    }
    guard let existing else { return nil }
    changes.updated = (changes.updated + existing).sorted()
    return changes
  }

  /// The table readers query for `name`: a shadow table's virtual table.
  private func owner(_ name: TableName) -> TableName? {
    switch after.kinds[name] ?? before.kinds[name] {
    case .shadow(let owner)?: owner
    default: name
    }
  }

  /// The rows' net changes, checked against which of them exist now; nil
  /// when the table's rowid cannot be named, or the table cannot be read
  /// (an external-content full-text table whose content table is gone):
  /// the caller invalidates it rather than refuse the commit.
  private func verified(_ rows: NetRows, in table: TableName) throws -> TableChanges? {
    let present = rows.claimedPresent
    let gone = rows.claimedGone
    let all = gone.isEmpty ? present : (present + gone).sorted()
    let existing: [Int64]?
    do {
      // The bulk case, a dense range of rows the log says exist: counting
      // them is enough.
      if gone.isEmpty, try statements.allExist(present, in: table, schemaVersion: after.version, db) == true {
        return rows.changes()
      }
      existing = try existingRowIDs(among: all, in: table)
    } catch let error as DatabaseError where error.resultCode == .SQLITE_ERROR {
      return nil
    }
    guard let existing else { return nil }
    // The common case: the store agrees with the log.
    if existing == present { return rows.changes() }
    return rows.changes(existing: Set(existing))
  }

  /// Which of the sorted `rowIDs` exist in `table`, sorted.
  private func existingRowIDs(among rowIDs: [Int64], in table: TableName) throws -> [Int64]? {
    try statements.existingRowIDs(among: rowIDs, in: table, schemaVersion: after.version, db)
  }
}

extension TableChanges {
  /// These changes, with `other`'s category for every row `other` names.
  fileprivate func overridden(by other: TableChanges) -> TableChanges {
    let named = Set(other.inserted).union(other.updated).union(other.deleted)
    func merged(_ mine: [Int64], _ theirs: [Int64]) -> [Int64] { (mine.filter { !named.contains($0) } + theirs).sorted() }
    return TableChanges(
      inserted: merged(inserted, other.inserted), updated: merged(updated, other.updated),
      deleted: merged(deleted, other.deleted))
  }
}
