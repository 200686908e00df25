import GRDB

extension Store {
  /// Runs a GRDB migrator against the store; each migration that changes
  /// rows is published like any write, as one change set.
  ///
  /// GRDB commits each migration in a transaction of its own, which ends by
  /// recording the migration in `grdb_migrations`. While `migrate` runs, a
  /// TEMP trigger on that table (whose body may not qualify names: they
  /// resolve in `temp`, then `main`) gives the transaction its sequence number,
  /// so the migration's rows commit together with their number and are
  /// never lost to listeners. For example:
  ///
  /// ```swift
  /// var migrator = DatabaseMigrator()
  /// migrator.registerMigration("v1") { db in
  ///   try db.create(table: "note") { t in
  ///     t.autoIncrementedPrimaryKey("id")
  ///     t.column("body", .text).notNull()
  ///   }
  /// }
  /// try group.store.migrate(migrator)
  /// ```
  ///
  /// - Parameters:
  ///   - migrator: GRDB's migrator, with the migrations registered.
  ///   - target: the last migration to apply (all when nil).
  public func migrate(_ migrator: DatabaseMigrator, upTo target: String? = nil) throws {
    try checkOpen()
    try pool.writeWithoutTransaction { db in
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
      try observer.transactionWillBegin(db)
      observer.isMigrating = true
    }
    defer {
      try? pool.writeWithoutTransaction { db in
        observer.isMigrating = false
        try db.execute(sql: "DROP TRIGGER IF EXISTS temp.groupsync_migration_sequence")
      }
      publishPending()
    }
    if let target {
      try migrator.migrate(pool, upTo: target)
    } else {
      try migrator.migrate(pool)
    }
  }
}
