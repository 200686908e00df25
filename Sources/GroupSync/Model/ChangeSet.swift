import Foundation

/// The rows one committed transaction changed, as object IDs.
///
/// A change set may over-report (an ID whose row turns out unchanged or
/// gone) but never under-reports; re-read rows by ID from the store, which
/// is the source of truth. For example:
///
/// ```swift
/// for id in changeSet.updated where id.table == "notes" {
///   cache[id] = try store.read { try Note.fetchOne($0, key: id.rowID) }
/// }
/// ```
public struct ChangeSet: Sendable, Equatable {
  /// The store the transaction committed to.
  public let storeID: UUID
  /// The transaction's sequence number: gapless, in commit order across
  /// every writer of the store, starting at 1.
  public let sequence: Int64
  /// When the writer was about to COMMIT, in nanoseconds since 1970 (UTC):
  /// the same in the history, the inbox file and memory.
  public let committedAtNanoseconds: Int64
  /// The writer's process ID (informational).
  public let writerProcessID: Int32
  /// The changed rowids by table name.
  public let tables: [TableName: TableChanges]
  /// Tables whose rows cannot be named (WITHOUT ROWID tables): any of their
  /// rows may have changed.
  public let invalidatedTableNames: Set<TableName>
  /// The notes the transaction carried (group defaults changes,
  /// notifications), in the order they were added.
  public let notes: [ChangeSetNote]

  /// A change set as the library builds it; tables that list no row are
  /// left out.
  public init(
    storeID: UUID, sequence: Int64, committedAtNanoseconds: Int64, writerProcessID: Int32,
    tables: [TableName: TableChanges], invalidatedTableNames: Set<TableName>, notes: [ChangeSetNote] = []
  ) {
    self.notes = notes
    self.storeID = storeID
    self.sequence = sequence
    self.committedAtNanoseconds = committedAtNanoseconds
    self.writerProcessID = writerProcessID
    // Filtered only when needed: a decoded change set has no empty table,
    // and filtering makes a new dictionary for each one.
    self.tables = tables.values.contains(where: \.isEmpty) ? tables.filter { !$0.value.isEmpty } : tables
    self.invalidatedTableNames = invalidatedTableNames
  }

  /// Rows that did not exist before the transaction and exist after it.
  public var inserted: Set<ObjectID> { objectIDs(\.inserted) }
  /// Rows that existed before and after the transaction.
  public var updated: Set<ObjectID> { objectIDs(\.updated) }
  /// Rows that existed before the transaction and not after it.
  public var deleted: Set<ObjectID> { objectIDs(\.deleted) }
  /// Tables any row of which may have changed.
  public var invalidatedTables: Set<TableID> {
    Set(invalidatedTableNames.map { TableID(storeID: storeID, table: $0.name) })
  }

  /// When COMMIT returned in the writer.
  public var committedAt: Date {
    Date(timeIntervalSince1970: Double(committedAtNanoseconds) / 1e9)
  }

  /// The number of rows named (inserted, updated and deleted).
  public var rowCount: Int { tables.values.reduce(0) { $0 + $1.count } }

  /// Whether the change set names `id`, or invalidates its table.
  public func mayHaveChanged(_ id: ObjectID) -> Bool {
    guard id.storeID == storeID else { return false }
    if invalidatedTableNames.contains(TableName(id.table)) { return true }
    return tables[TableName(id.table)]?.contains(id.rowID) ?? false
  }

  private func objectIDs(_ keyPath: KeyPath<TableChanges, [Int64]>) -> Set<ObjectID> {
    var ids = Set<ObjectID>()
    for (table, changes) in tables {
      for rowID in changes[keyPath: keyPath] {
        ids.insert(ObjectID(storeID: storeID, table: table.name, rowID: rowID))
      }
    }
    return ids
  }
}

/// The rowids of one table that a transaction changed, each sorted.
public struct TableChanges: Sendable, Equatable {
  /// Rowids of rows that did not exist before the transaction and do after.
  public var inserted: [Int64]
  /// Rowids of rows that existed before and after (their content may not differ).
  public var updated: [Int64]
  /// Rowids of rows that existed before and not after.
  public var deleted: [Int64]

  /// The changes of one table, by rowid.
  public init(inserted: [Int64] = [], updated: [Int64] = [], deleted: [Int64] = []) {
    self.inserted = inserted
    self.updated = updated
    self.deleted = deleted
  }

  /// Whether no row is named.
  public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }
  /// How many rows are named.
  public var count: Int { inserted.count + updated.count + deleted.count }

  func contains(_ rowID: Int64) -> Bool {
    inserted.contains(rowID) || updated.contains(rowID) || deleted.contains(rowID)
  }
}
