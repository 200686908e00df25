// A store's commit recorder: what a write records from BEGIN to the
// committed change set, as GRDB's transaction observer.
import CGroupSync
import Foundation
import GRDB
import Logging

/// The one door between a store's writer and its capture: everything a
/// write records, from BEGIN to the committed change set.
///
/// `Store.transaction` reads begin / body / finish / publish:
/// ``begin(_:author:)`` remembers the schema and the author, ``addNote(_:_:)``
/// collects notes, ``finish(_:)`` numbers the change set, encodes it,
/// appends it to the history and purges; at COMMIT the recorder hands one
/// ``CommittedChangeSet`` to the ``CommitPublisher``. Migrations (a
/// trigger numbers each of GRDB's migration transactions) and the relaying
/// of other processes' changes to GRDB's observers are modes of it too.
/// Nothing else touches the capture or GRDB's observer.
///
/// It is GRDB's transaction observer on the writer connection, added with
/// the `.databaseLifetime` extent so that it lives exactly as long as the
/// connection. GRDB calls it on the writer's queue only, which is also
/// where every method runs: that confinement is why it is
/// `@unchecked Sendable`.
final class CommitRecorder: TransactionObserver, @unchecked Sendable {
  private let capture: ChangeCapture
  private let storeID: UUID
  private let publisher: CommitPublisher
  /// The lowest sequence a durable listener still needs, for purges.
  private let durableFloor: (@Sendable (Database) -> Int64?)?
  private let schema: SchemaCache
  /// The statements run on every commit, prepared once.
  private let statements: WriterStatements

  /// Whether rows come from GRDB's observer (no pre-update hook, or ours
  /// was replaced). The fallback cannot see REPLACE deletes.
  private(set) var isFallback: Bool
  /// Tables the statements of the open transaction wrote, as GRDB's
  /// authorizer told: the fallback's WITHOUT ROWID tables and virtual
  /// tables whose writes no hook sees (a contentless full-text index).
  /// (An array, appended only when the name differs from the last one:
  /// GRDB asks on every statement, and hashing into a set cost most of it.)
  private var writtenTables: [String] = []
  /// The last table `observes` found not internal, kept across
  /// transactions: most writes hit the table the last one wrote, and its
  /// check is then one compare of bytes.
  private var lastExternalTable: String?
  /// Written tables whose rows the hook names (rowid tables, virtual
  /// tables with a rowid shadow) as of schema `plainTablesVersion`: most
  /// commits write only those, and look none up by name.
  private var plainTables: [String] = []
  private var plainTablesVersion: Int64 = -1
  /// Shadow tables the capture ignores: those of schema
  /// `shadowsIgnoredAtVersion`.
  private var ignoredShadowTables = Set<TableName>()
  private var shadowsIgnoredAtVersion: Int64 = -1
  private var sequencedWrittenTables = 0
  /// The change set of the open transaction, once sequenced, and its
  /// encoding as stored in the history.
  private var prepared: (changeSet: ChangeSet, encoded: [UInt8])?
  /// The author of the open `Store.write`, recorded in the history.
  private var author: String?
  /// Notes added by the open `Store.write`.
  private var pendingNotes: [ChangeSetNote] = []
  /// The connection's count of changed rows when the open `Store.write`
  /// began: moved at its end without a change set, it wrote only
  /// GroupSync's own tables (a quiet commit).
  private var changesAtBegin: Int64 = 0
  /// While `Store.migrate` runs: a TEMP trigger on `grdb_migrations`
  /// allocates each migration's sequence number.
  private var isMigrating = false
  /// While other processes' changes are notified to GRDB's observers:
  /// those are not writes of this connection.
  private var isRelayingOtherProcesses = false
  private var migrationRecorded = false
  /// This connection's last change set, as committed: the data version
  /// right after its COMMIT, its sequence and the schema it left.
  private var lastCommit: (dataVersion: UInt32, sequence: Int64, schemaVersion: Int64)?
  /// The history's last sequence, when the open transaction began where
  /// `lastCommit` left off.
  private var knownLastSequence: Int64?

  /// `grdb_migrations`, GRDB's record of applied migrations.
  static let migrationsTable = "grdb_migrations"
  /// A TEMP table of the writer connection holding the sequence number the
  /// migration trigger allocated last.
  static let migrationSequenceTable = "temp.groupsync_migration_sequence"

  private init(
    capture: ChangeCapture, storeID: UUID, publisher: CommitPublisher,
    durableFloor: (@Sendable (Database) -> Int64?)?
  ) {
    self.capture = capture
    self.storeID = storeID
    self.publisher = publisher
    self.durableFloor = durableFloor
    statements = WriterStatements(connection: capture.connection)
    schema = SchemaCache(statements: statements)
    isFallback = !capture.usesPreUpdateHook
  }

  /// Installs the capture and the recorder on `db`, the writer connection,
  /// for as long as it lives (GRDB releases the recorder after close).
  static func install(
    on db: Database, path: String, storeID: UUID, options: StoreOptions, publisher: CommitPublisher,
    durableFloor: (@Sendable (Database) -> Int64?)?
  ) throws -> CommitRecorder {
    guard let connection = db.sqliteConnection else { throw GroupSyncError.storeClosed(path: path) }
    let capture = try ChangeCapture(
      connection: connection, withoutPreUpdateHook: options.captureWithoutPreUpdateHook, rowBudget: options.rowBudget)
    let recorder = CommitRecorder(capture: capture, storeID: storeID, publisher: publisher, durableFloor: durableFloor)
    db.add(transactionObserver: recorder, extent: .databaseLifetime)
    return recorder
  }

  /// Finalizes the statements and uninstalls the hook, on the writer queue
  /// while the connection is open (GRDB closes only a connection without
  /// prepared statements).
  func detach() {
    statements.finalize()
    capture.detach()
  }

  /// Whether the writer connection has a transaction open.
  var isInTransaction: Bool { sqlite3_get_autocommit(capture.connection) == 0 }

  // MARK: A write, from BEGIN to COMMIT

  /// Remembers the schema the transaction starts from, to tell what it
  /// changed in it, and the author the history will record. Runs right
  /// after BEGIN of every `Store.write`.
  func begin(_ db: Database, author: String) throws {
    try rememberSchema(db)
    self.author = author
    changesAtBegin = sqlite3_total_changes64(capture.connection)
  }

  private func rememberSchema(_ db: Database) throws {
    // Nothing moved since this connection's last change set committed
    // (the data version moves with every commit of any connection, seen
    // once this transaction began): the schema is the one that change set
    // left, and the history's last sequence is its own.
    if let last = lastCommit, isInTransaction, statements.dataVersion() == last.dataVersion,
      schema.baseline?.version == last.schemaVersion
    {
      knownLastSequence = last.sequence
    } else {
      let baseline = try schema.snapshot(db)
      schema.baseline = baseline
      knownLastSequence = nil
      // Another process, or a rollback, may have changed the schema since
      // the capture was told its shadow tables.
      ignoreNonRowIDShadowTables(baseline, wroteWhileIgnored: false)
    }
    lastCommit = nil
  }

  /// Adds a note to the open `Store.write`'s change set.
  func addNote(_ note: ChangeSetNote, _ db: Database) throws {
    guard author != nil, db.isInsideTransaction else { throw GroupSyncError.noteOutsideWrite }
    pendingNotes.append(note)
  }

  /// Numbers the open transaction's change set, encodes it, appends it to
  /// the history and purges what the retention lets go; right before
  /// COMMIT. Returns its sequence, or nil when nothing GroupSync reports
  /// changed (a transaction that wrote GroupSync's own tables or a relay's
  /// only is then counted as a quiet commit).
  func finish(_ db: Database) throws -> Int64? {
    guard isInTransaction else { throw GroupSyncError.transactionEndedByClosure }
    guard let changeSet = try prepareChangeSet(db) else {
      if sqlite3_total_changes64(capture.connection) != changesAtBegin { try StoreState.countQuietCommit(db) }
      return nil
    }
    let encoded = ChangeSetEncoding.encode(changeSet)
    try statements.appendHistory(changeSet, payload: encoded, author: author)
    prepared = (changeSet, encoded)
    if changeSet.sequence % History.purgeInterval == 0 {
      try History.purge(
        db, newest: changeSet.sequence, floor: { self.durableFloor?(db) }, now: changeSet.committedAtNanoseconds)
    }
    return changeSet.sequence
  }

  /// Builds the open transaction's change set, numbered one past the
  /// history's last, inside the transaction; nil when nothing GroupSync
  /// reports changed.
  private func prepareChangeSet(_ db: Database) throws -> ChangeSet? {
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
    ignoreNonRowIDShadowTables(snapshot, wroteWhileIgnored: true)
    let schemaChanged = snapshot.version != schema.baseline?.version
    guard capture.hasChanges || schemaChanged || !pendingNotes.isEmpty else { return nil }
    if capture.overflowed { throw GroupSyncError.captureOutOfMemory }
    let changeSet = try makeChangeSet(db, sequence: nextSequence(), schema: snapshot)
    capture.markSequenced()
    sequencedWrittenTables = writtenTables.count
    return changeSet
  }

  /// Marks every table a reader can query as changed, in the open
  /// transaction (after `VACUUM`, which may renumber rowids).
  func invalidateEveryTable(_ db: Database) throws {
    for table in try schema.snapshot(db).readableTables where !table.isInternal {
      capture.invalidate(table.name)
    }
  }

  /// The sequence number of the open transaction's change set: one past
  /// the history's last, read in the transaction unless this connection
  /// committed it and nothing moved since.
  private func nextSequence() throws -> Int64 {
    try (knownLastSequence ?? statements.lastSequence()) + 1
  }

  /// Full-text indexes write their index shadow tables while the
  /// transaction commits, after it got its number: those tables name no
  /// row a reader queries, so the capture ignores them, and only them: a
  /// name no shadow in `snapshot` (its virtual table dropped, or created in
  /// a transaction that rolled back) is captured again, and invalidated if
  /// the open transaction may have written it while ignored.
  private func ignoreNonRowIDShadowTables(_ snapshot: SchemaSnapshot, wroteWhileIgnored: Bool) {
    // Once per schema version, not on every commit.
    guard snapshot.version != shadowsIgnoredAtVersion else { return }
    var shadows = Set<TableName>()
    for (table, kind) in snapshot.kinds {
      guard case .shadow(let owner) = kind, !(owner.flatMap { snapshot.rowIDShadows[$0]?.contains(table) } ?? false)
      else { continue }
      shadows.insert(table)
    }
    for table in ignoredShadowTables.subtracting(shadows) {
      capture.unignore(table.name)
      ignoredShadowTables.remove(table)
      if wroteWhileIgnored && snapshot.kinds[table] != nil { capture.invalidate(table.name) }
    }
    var complete = true
    for table in shadows.subtracting(ignoredShadowTables) {
      if capture.ignore(table.name) { ignoredShadowTables.insert(table) } else { complete = false }
    }
    // Out of memory: tried again on the next commit.
    shadowsIgnoredAtVersion = complete ? snapshot.version : -1
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
  private func migrationChangeSet(_ db: Database) -> CommittedChangeSet? {
    do {
      guard let sequence = try Int64.fetchOne(db, sql: "SELECT seq FROM \(Self.migrationSequenceTable)") else {
        return nil
      }
      let after = try schema.snapshot(db)
      ignoreNonRowIDShadowTables(after, wroteWhileIgnored: true)
      let changeSet = try makeChangeSet(db, sequence: sequence, schema: after)
      let encoded = ChangeSetEncoding.encode(changeSet)
      // Its own commit, and a quiet one: counted in it.
      try db.inTransaction {
        try db.execute(
          sql: "UPDATE \(StoreState.historyTable) SET payload = ? WHERE seq = ?", arguments: [Data(encoded), sequence])
        try StoreState.countQuietCommit(db)
        return .commit
      }
      // No writer waits for it: whoever publishes next publishes it.
      return CommittedChangeSet(changeSet: changeSet, encoded: encoded, author: nil, awaitedByWriter: false)
    } catch {
      Logger.groupSync.error("cannot build the change set of a migration: \(error)")
      return nil
    }
  }

  // MARK: Modes

  /// Numbers each of GRDB's migration transactions from now until
  /// ``stopMigrating(_:)``: GRDB commits each migration in a transaction of
  /// its own, which ends by recording the migration in `grdb_migrations`.
  /// A TEMP trigger on that table (whose body may not qualify names: they
  /// resolve in `temp`, then `main`) gives the transaction its sequence
  /// number, so the migration's rows commit together with their number.
  /// Runs outside a transaction.
  func startMigrating(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(Self.migrationsTable) (identifier TEXT NOT NULL PRIMARY KEY);
      CREATE TABLE IF NOT EXISTS \(Self.migrationSequenceTable) (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER);
      CREATE TEMP TRIGGER IF NOT EXISTS groupsync_migration_sequence
      AFTER INSERT ON main.\(Self.migrationsTable)
      BEGIN
        INSERT INTO \(StoreState.historyTable)(seq, committed_at, author, pid, payload)
          SELECT coalesce(max(seq), 0) + 1, 0, 'migration ' || NEW.identifier, 0, x''
          FROM \(StoreState.historyTable);
        INSERT OR REPLACE INTO groupsync_migration_sequence(id, seq)
          SELECT 1, max(seq) FROM \(StoreState.historyTable);
      END;
      """)
    try rememberSchema(db)
    isMigrating = true
  }

  /// Ends ``startMigrating(_:)``.
  func stopMigrating(_ db: Database) throws {
    isMigrating = false
    try db.execute(sql: "DROP TRIGGER IF EXISTS temp.groupsync_migration_sequence")
  }

  /// Runs `body`, in which the connection notifies GRDB's observers of
  /// other processes' changes: those are not writes of this connection.
  func relayingOtherProcesses<T>(_ body: () throws -> T) rethrows -> T {
    isRelayingOtherProcesses = true
    defer { isRelayingOtherProcesses = false }
    return try body()
  }

  // MARK: TransactionObserver

  func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
    // GRDB asks before every statement: the common answer (the table the
    // last statement wrote) costs one compare of bytes and no allocation.
    if isMigrating, case .insert(tableName: Self.migrationsTable) = eventKind { return true }
    guard !isRelayingOtherProcesses else { return false }
    let table = eventKind.tableName
    if let last = writtenTables.last, TableName.sameBytes(last, table) { return isFallback }
    if let known = lastExternalTable, TableName.sameBytes(known, table) {
      writtenTables.append(table)
      return isFallback
    }
    // withCString reads a native string in place (passing the String as
    // `const char *` copies it into a new array).
    guard table.withCString({ gs_is_internal_table($0) }) == 0 else {
      // The history written through GRDB (not by the commit's own insert):
      // its last sequence is read again, not assumed.
      if TableName.sameBytes(table, StoreState.historyTable) { knownLastSequence = nil }
      return false
    }
    // The relay's tables, which the capture ignores: no written table for
    // a change set to cover (the fallback would refuse a commit of only
    // them as unsequenced).
    if RelayTables.contains(table) { return false }
    lastExternalTable = table
    writtenTables.append(table)
    return isFallback
  }

  func databaseDidChange(with event: DatabaseEvent) {
    // A `temp` table's rows are this connection's alone, even when its
    // name is a table of the store's.
    guard event.databaseName == "main" else { return }
    if event.tableName == Self.migrationsTable {
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
    var committed = prepared.map {
      CommittedChangeSet(changeSet: $0.changeSet, encoded: $0.encoded, author: author, awaitedByWriter: true)
    }
    if committed == nil && migrationRecorded {
      // Cleared first: storing the payload commits again, which comes back here.
      migrationRecorded = false
      committed = migrationChangeSet(db)
    }
    endTransaction()
    guard let committed else { return }
    if committed.awaitedByWriter, let version = statements.dataVersion(), let schemaVersion = schema.baseline?.version {
      lastCommit = (version, committed.changeSet.sequence, schemaVersion)
    }
    publisher.enqueue(committed)
  }

  func databaseDidRollback(_ db: Database) {
    endTransaction()
    lastCommit = nil
    // SQLite puts the schema version back on a rollback, so the next
    // schema change may reuse it: what is keyed by it is read again.
    plainTablesVersion = -1
    shadowsIgnoredAtVersion = -1
    schema.forgetVersion()
    statements.forgetSchemaVersion()
  }

  private func endTransaction() {
    prepared = nil
    knownLastSequence = nil
    pendingNotes.removeAll()
    author = nil
    migrationRecorded = false
    writtenTables.removeAll(keepingCapacity: true)
    sequencedWrittenTables = 0
    capture.endTransaction()
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

  /// The next snapshot is read again, whatever its version.
  func forgetVersion() { current = nil }

  func snapshot(_ db: Database) throws -> SchemaSnapshot {
    let version = try statements.schemaVersion()
    if let current, current.version == version { return current }
    let snapshot = try SchemaSnapshot.read(db)
    current = snapshot
    return snapshot
  }
}
