import CGroupSync
import Foundation
import GRDB
import Logging

/// GroupSync's transaction observer on a store's writer connection: it
/// turns what the capture recorded into the transaction's change set,
/// refuses commits that got no sequence number, and hands committed change
/// sets to the publisher.
///
/// Added from `Configuration.prepareDatabase` with the `.databaseLifetime`
/// extent, so it lives exactly as long as the connection. GRDB calls it on
/// the writer's queue only, which is also where ``prepareChangeSet(_:)``
/// runs: that confinement is why it is `@unchecked Sendable`.
final class CaptureObserver: TransactionObserver, @unchecked Sendable {
  let capture: ChangeCapture
  private let storeID: UUID
  private let didCommit: @Sendable (ChangeSet, _ encoded: [UInt8], _ claimed: Bool) -> Void
  /// The open transaction's change set as stored in the history.
  var preparedPayload: [UInt8]?
  private let schema: SchemaCache
  /// The statements run on every commit, prepared once.
  let statements: WriterStatements

  /// Whether rows come from GRDB's observer (no pre-update hook, or ours
  /// was replaced). The fallback cannot see REPLACE deletes.
  private(set) var isFallback: Bool
  /// Tables the statements of the open transaction wrote, as GRDB's
  /// authorizer told: the fallback's WITHOUT ROWID tables and virtual
  /// tables whose writes no hook sees (a contentless full-text index).
  /// (An array, appended only when the name differs from the last one:
  /// GRDB asks on every statement, and hashing into a set cost most of it.)
  private var writtenTables: [String] = []
  /// Written tables whose rows the hook names (rowid tables, virtual
  /// tables with a rowid shadow) as of schema `plainTablesVersion`: most
  /// commits write only those, and look none up by name.
  private var plainTables: [String] = []
  private var plainTablesVersion: Int64 = -1
  /// Shadow tables already told to the capture to ignore.
  private var ignoredShadowTables = Set<TableName>()
  private var shadowsIgnoredAtVersion: Int64 = -1
  private var sequencedWrittenTables = 0
  /// The change set of the open transaction, once sequenced.
  private var prepared: ChangeSet?
  /// Notes added by the open `Store.write`.
  private var pendingNotes: [ChangeSetNote] = []
  private var isInStoreWrite = false
  /// While `Store.migrate` runs: a TEMP trigger on `grdb_migrations`
  /// allocates each migration's sequence number (see Store+Migrations).
  var isMigrating = false
  /// While other processes' changes are notified to GRDB's observers
  /// (`notifyChanges`): those are not writes of this connection.
  var isRelayingOtherProcesses = false
  private var migrationRecorded = false
  /// This connection's last change set, as committed: the data version
  /// right after its COMMIT, its sequence and the schema it left.
  private var lastCommit: (dataVersion: UInt32, sequence: Int64, schemaVersion: Int64)?
  /// The history's last sequence, when the open transaction began where
  /// `lastCommit` left off.
  private var knownLastSequence: Int64?

  init(capture: ChangeCapture, storeID: UUID, didCommit: @escaping @Sendable (ChangeSet, _ encoded: [UInt8], _ claimed: Bool) -> Void) {
    self.capture = capture
    self.storeID = storeID
    statements = WriterStatements(connection: capture.connection)
    schema = SchemaCache(statements: statements)
    self.didCommit = didCommit
    isFallback = !capture.usesPreUpdateHook
  }

  /// Builds the open transaction's change set, numbered by `nextSequence`,
  /// inside the transaction; nil when nothing GroupSync reports changed.
  /// Runs right before COMMIT; the caller appends it to the history.
  func prepareChangeSet(_ db: Database, nextSequence: (Database) throws -> Int64) throws -> ChangeSet? {
    if !isFallback && !capture.isHookIntact {
      isFallback = true
      Logger.groupSync.error(
        "the SQLite pre-update hook was replaced by another party; capturing through GRDB's observer from now on")
      throw GroupSyncError.captureUnavailable(
        reason: "another party replaced the SQLite pre-update hook during this transaction (a GRDB built with "
          + "SQLITE_ENABLE_PREUPDATE_HOOK, or the session extension), so rows may have been missed; the transaction "
          + "was rolled back and GroupSync now captures through GRDB's observer: retry it")
    }
    // One read of the schema version for the whole step.
    let snapshot = try schema.snapshot(db)
    if snapshot.version != plainTablesVersion {
      plainTables.removeAll()
      plainTablesVersion = snapshot.version
    }
    for table in writtenTables where !plainTables.contains(where: { TableName.sameBytes($0, table) }) {
      let name = TableName(table)
      switch snapshot.kinds[name] {
      case .rowID?: plainTables.append(table)
      case .virtual? where snapshot.rowIDShadows[name] != nil: plainTables.append(table)
      case .virtual?: capture.invalidate(table)
      default: if isFallback { capture.invalidate(table) }
      }
    }
    ignoreNonRowIDShadowTables(snapshot)
    let schemaChanged = snapshot.version != schema.baseline?.version
    guard capture.hasChanges || schemaChanged || !pendingNotes.isEmpty else { return nil }
    if capture.overflowed { throw GroupSyncError.captureOutOfMemory }
    let changeSet = try makeChangeSet(db, sequence: nextSequence(db), schema: snapshot)
    capture.markSequenced()
    sequencedWrittenTables = writtenTables.count
    prepared = changeSet
    return changeSet
  }

  /// Marks every table a reader can query as changed, in the open
  /// transaction.
  func invalidateEveryTable(_ db: Database) throws {
    for table in try schema.snapshot(db).readableTables where !table.isInternal {
      capture.invalidate(table.name)
    }
  }

  /// Remembers the schema the transaction starts from, to tell what it
  /// changed in it. Runs at the start of every `Store.write`.
  func transactionWillBegin(_ db: Database) throws {
    // Nothing moved since this connection's last change set committed
    // (the data version moves with every commit of any connection, seen
    // once this transaction began): the schema is the one that change set
    // left, and the history's last sequence is its own.
    if let last = lastCommit, sqlite3_get_autocommit(capture.connection) == 0,
      statements.dataVersion() == last.dataVersion, schema.baseline?.version == last.schemaVersion
    {
      knownLastSequence = last.sequence
    } else {
      schema.baseline = try schema.snapshot(db)
      knownLastSequence = nil
    }
    lastCommit = nil
    isInStoreWrite = true
  }

  /// The sequence number of the open transaction's change set: one past
  /// the history's last, read in the transaction unless this connection
  /// committed it and nothing moved since.
  func nextSequence() throws -> Int64 {
    try (knownLastSequence ?? statements.lastSequence()) + 1
  }

  /// Adds a note to the open `Store.write`'s change set.
  func addNote(_ note: ChangeSetNote, _ db: Database) throws {
    guard isInStoreWrite, db.isInsideTransaction else { throw GroupSyncError.noteOutsideWrite }
    pendingNotes.append(note)
  }

  /// Full-text indexes write their index shadow tables while the
  /// transaction commits, after it got its number: those tables name no
  /// row a reader queries, so the capture ignores them.
  private func ignoreNonRowIDShadowTables(_ snapshot: SchemaSnapshot) {
    // Once per schema version, not on every commit.
    guard snapshot.version != shadowsIgnoredAtVersion else { return }
    shadowsIgnoredAtVersion = snapshot.version
    for (table, kind) in snapshot.kinds where !ignoredShadowTables.contains(table) {
      guard case .shadow(let owner) = kind, !(owner.flatMap { snapshot.rowIDShadows[$0]?.contains(table) } ?? false)
      else { continue }
      capture.ignore(table.name)
      ignoredShadowTables.insert(table)
    }
  }

  private func makeChangeSet(_ db: Database, sequence: Int64, schema after: SchemaSnapshot) throws -> ChangeSet {
    let (netRows, budgetInvalidated) = try capture.pendingChanges()
    let (tables, invalidated) = try NetChangeResolver(
      db: db, before: schema.baseline ?? after, after: after, statements: statements
    ).resolve(netRows, invalidated: budgetInvalidated)
    schema.baseline = after
    return ChangeSet(
      storeID: storeID, sequence: sequence, committedAtNanoseconds: Store.nowNanoseconds(),
      writerProcessID: System.processID, tables: tables, invalidatedTableNames: invalidated, notes: pendingNotes)
  }

  /// A migration's transaction committed with the sequence number its
  /// trigger allocated and an empty history payload: build its change set
  /// now (SQL is allowed here) and store it. Until then, or if that fails,
  /// the history row reads as unreadable, which listeners answer with a
  /// reset: nothing is skipped silently.
  private func migrationChangeSet(_ db: Database) -> ChangeSet? {
    do {
      guard let sequence = try Int64.fetchOne(db, sql: "SELECT seq FROM \(Store.migrationSequenceTable)") else {
        return nil
      }
      let after = try schema.snapshot(db)
      ignoreNonRowIDShadowTables(after)
      let changeSet = try makeChangeSet(db, sequence: sequence, schema: after)
      try db.execute(
        sql: "UPDATE \(StoreState.historyTable) SET payload = ? WHERE seq = ?",
        arguments: [Data(ChangeSetEncoding.encode(changeSet)), sequence])
      return changeSet
    } catch {
      Logger.groupSync.error("cannot build the change set of a migration: \(error)")
      return nil
    }
  }

  // MARK: TransactionObserver

  func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
    // GRDB asks before every statement: the common answer (the table the
    // last statement wrote) costs one compare of bytes and no allocation.
    if isMigrating, case .insert(tableName: Store.migrationsTable) = eventKind { return true }
    guard !isRelayingOtherProcesses else { return false }
    let table = eventKind.tableName
    if let last = writtenTables.last, TableName.sameBytes(last, table) { return isFallback }
    guard !TableName(table).isInternal else {
      // The history written through GRDB (not by the commit's own insert):
      // its last sequence is read again, not assumed.
      if TableName.sameBytes(table, StoreState.historyTable) { knownLastSequence = nil }
      return false
    }
    writtenTables.append(table)
    return isFallback
  }

  func databaseDidChange(with event: DatabaseEvent) {
    // A `temp` table's rows are this connection's alone, even when its
    // name is a table of the store's.
    guard event.databaseName == "main" else { return }
    if event.tableName == Store.migrationsTable {
      migrationRecorded = isMigrating
      return
    }
    let operation: RowOperation = switch event.kind {
    case .insert: .insert
    case .update: .update
    case .delete: .delete
    }
    capture.record(operation, table: event.tableName, rowID: event.rowID)
  }

  func databaseWillCommit() throws {
    // The migration trigger gave this transaction its number.
    if migrationRecorded && prepared == nil {
      capture.markSequenced()
      sequencedWrittenTables = writtenTables.count
    }
    if let refusal = capture.commitRefusal { throw refusal }
    if isFallback && writtenTables.count != sequencedWrittenTables && prepared == nil {
      throw GroupSyncError.unsequencedCommit
    }
    Failpoint.stop(if: Failpoint.stopBeforeCommit)
  }

  func databaseDidCommit(_ db: Database) {
    var changeSet = prepared
    let payload = preparedPayload
    let claimed = changeSet != nil
    if changeSet == nil && migrationRecorded {
      // Cleared first: storing the payload commits again, which comes back here.
      migrationRecorded = false
      changeSet = migrationChangeSet(db)
    }
    endTransaction()
    if claimed, let changeSet, let version = statements.dataVersion(), let schemaVersion = schema.baseline?.version {
      lastCommit = (version, changeSet.sequence, schemaVersion)
    }
    guard let changeSet else { return }
    didCommit(changeSet, payload ?? ChangeSetEncoding.encode(changeSet), claimed)
  }

  func databaseDidRollback(_ db: Database) {
    endTransaction()
    lastCommit = nil
  }

  private func endTransaction() {
    prepared = nil
    preparedPayload = nil
    knownLastSequence = nil
    pendingNotes.removeAll()
    isInStoreWrite = false
    migrationRecorded = false
    writtenTables.removeAll(keepingCapacity: true)
    sequencedWrittenTables = 0
    capture.transactionEnded()
  }
}

/// The schema, read again only when its version moves; and the schema a
/// transaction started from.
private final class SchemaCache {
  private var current: SchemaSnapshot?
  var baseline: SchemaSnapshot?
  private let statements: WriterStatements

  init(statements: WriterStatements) {
    self.statements = statements
  }

  func snapshot(_ db: Database) throws -> SchemaSnapshot {
    let version = try statements.schemaVersion()
    if let current, current.version == version { return current }
    let snapshot = try SchemaSnapshot.read(db)
    current = snapshot
    return snapshot
  }
}
