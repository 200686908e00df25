import CGroupSync
import Foundation
import GRDB

/// GroupSync's bookkeeping inside a store:
///
/// - `groupsync_store`: one row with the store UUID, created once;
/// - `groupsync_history`: one row per committed change set, appended in
///   the transaction that made it. Its INTEGER PRIMARY KEY is the sequence
///   number: the write lock makes `max(seq) + 1` gapless and in commit
///   order across processes, as long as the newest row is never purged;
/// - `groupsync_quiet_commits`: one row counting GroupSync's commits that
///   carry no change set (bookkeeping only: a defaults value set to what
///   it was, a place acknowledged in the store, a relay's shipped place),
///   so that listeners do not take them for a program writing the store
///   without GroupSync.
enum StoreState {
  static let table = "groupsync_store"
  static let historyTable = "groupsync_history"
  static let quietCommitsTable = "groupsync_quiet_commits"

  /// Creates the tables and the store UUID on first open; returns the UUID.
  static func setUp(_ db: Database, path: String) throws -> UUID {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(table) (
        id INTEGER PRIMARY KEY CHECK (id = 1), uuid TEXT NOT NULL, seq INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS \(historyTable) (
        seq INTEGER PRIMARY KEY,
        committed_at INTEGER NOT NULL,
        author TEXT,
        pid INTEGER NOT NULL,
        payload BLOB NOT NULL);
      CREATE TABLE IF NOT EXISTS \(quietCommitsTable) (
        id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL);
      INSERT OR IGNORE INTO \(quietCommitsTable)(id, count) VALUES (1, 0);
      """)
    try db.execute(
      sql: "INSERT OR IGNORE INTO \(table)(id, uuid, seq) VALUES (1, ?, 0)", arguments: [UUID().uuidString])
    // A store from before the history kept its last number in
    // groupsync_store.seq: carry it over as an unreadable row, so numbers
    // go on from there (a listener asking for it gets a reset).
    try db.execute(sql: """
      INSERT INTO \(historyTable)(seq, committed_at, author, pid, payload)
      SELECT seq, 0, 'groupsync-upgrade', 0, x'' FROM \(table)
      WHERE id = 1 AND seq > 0 AND NOT EXISTS (SELECT 1 FROM \(historyTable))
      """)
    try History.setUp(db)
    return try readStoreID(db, path: path)
  }

  /// Runs `body`, GroupSync's own bookkeeping outside `Store.write`,
  /// inside `db`'s transaction, and counts the commit as quiet if it wrote
  /// anything (rows or the schema).
  static func bookkeeping<T>(_ db: Database, _ body: () throws -> T) throws -> T {
    let connection = db.sqliteConnection
    let changes = sqlite3_total_changes64(connection)
    let schemaVersion = try schemaVersion(db)
    let result = try body()
    let wroteRows = sqlite3_total_changes64(connection) != changes
    if try wroteRows || Self.schemaVersion(db) != schemaVersion { try countQuietCommit(db) }
    return result
  }

  private static func schemaVersion(_ db: Database) throws -> Int64 {
    try Int64.fetchOne(db, sql: "PRAGMA main.schema_version") ?? 0
  }

  /// Counts the open transaction as a commit without a change set, inside
  /// it: a listener that sees the count move with the commit knows the
  /// commit was GroupSync's.
  static func countQuietCommit(_ db: Database) throws {
    try db.cachedStatement(sql: "UPDATE \(quietCommitsTable) SET count = count + 1 WHERE id = 1").execute()
  }

  /// The count of quiet commits (0 in a store set up before it was kept).
  static func quietCommits(_ db: Database) throws -> Int64 {
    guard try db.tableExists(quietCommitsTable) else { return 0 }
    return try Int64.fetchOne(db.cachedStatement(sql: "SELECT count FROM \(quietCommitsTable) WHERE id = 1")) ?? 0
  }

  static func readStoreID(_ db: Database, path: String) throws -> UUID {
    let text = try String.fetchOne(db, sql: "SELECT uuid FROM \(table) WHERE id = 1")
    guard let text, let id = UUID(uuidString: text) else {
      throw GroupSyncError.invalidStore(path: path, reason: "\(table).uuid is missing or not a UUID")
    }
    return id
  }

  /// Appends `changeSet` (which holds its sequence number, the next one) to
  /// the history, inside the open transaction.
  static func append(_ changeSet: ChangeSet, payload: [UInt8], author: String?, _ db: Database) throws {
    // The caller's last_insert_rowid survives our insert.
    let savedRowID = db.lastInsertedRowID
    try db.cachedStatement(sql: """
      INSERT INTO \(historyTable)(seq, committed_at, author, pid, payload) VALUES (?, ?, ?, ?, ?)
      """).execute(arguments: [
        changeSet.sequence, changeSet.committedAtNanoseconds, author, changeSet.writerProcessID,
        Data(payload),
      ])
    if let connection = db.sqliteConnection { sqlite3_set_last_insert_rowid(connection, savedRowID) }
  }
}
