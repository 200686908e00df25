import GRDB

extension Store {
  /// Runs a GRDB migrator against the store; each migration that changes
  /// rows is published like any write, as one change set.
  ///
  /// GRDB commits each migration in a transaction of its own; while
  /// `migrate` runs, each gets its sequence number as it commits, so the
  /// migration's rows commit together with their number and are never
  /// lost to listeners. For example:
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
  /// - Throws: ``GroupSyncError/readOnlyStore(_:)`` for a read-only store
  ///   (nothing is run), ``GroupSyncError/storeClosed(path:)``, and GRDB's
  ///   errors from the migrations.
  public func migrate(_ migrator: DatabaseMigrator, upTo target: String? = nil) throws {
    try checkWritable()
    try pool.writeWithoutTransaction { db in try recorder.startMigrating(db) }
    defer {
      try? pool.writeWithoutTransaction { db in try recorder.stopMigrating(db) }
      publishPending()
    }
    if let target {
      try migrator.migrate(pool, upTo: target)
    } else {
      try migrator.migrate(pool)
    }
  }
}
