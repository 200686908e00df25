import CGroupSync

/// A listener's own read-only connection to the store: the sequence to
/// start from or reset to, and the tables a change set may name.
///
/// Used only by the listener's consuming task.
final class StoreReader {
  private let database: Database
  private let path: String
  private var knownTables = Set<String>()

  init(path: String) throws {
    self.path = path
    database = try Database(path: path, flags: SQLITE_OPEN_READONLY)
    sqlite3_busy_timeout(database.sqliteConnection, Store.busyTimeoutMilliseconds)
  }

  deinit { database.close() }

  func sequence() throws -> Int64 { try Store.readSequence(database, path: path) }

  /// A table the change set names that the store does not have, if any.
  /// The table list is reread only when a name is not in it.
  func unknownTable(in changeSet: ChangeSet) -> String? {
    let names = changeSet.tables.keys.lazy.map { $0 } + changeSet.invalidatedTableNames
    guard let missing = names.first(where: { !knownTables.contains($0) }) else { return nil }
    let rows = (try? database.rows("SELECT name FROM sqlite_schema WHERE type = 'table'")) ?? []
    knownTables = Set(rows.compactMap { $0.first?.string })
    if !knownTables.contains(missing) { return missing }
    return names.first { !knownTables.contains($0) }
  }
}
