import CGroupSync
import GRDB

/// The commit counter of a WAL-mode store: `iChange` of its wal-index
/// header, which SQLite moves by one on every commit and on nothing else.
///
/// `PRAGMA data_version` moves whenever the wal-index header changes, and
/// that also happens without a commit: a checkpoint that restarts the WAL
/// (`wal_checkpoint(TRUNCATE)`), or a writer that restarts it and then
/// rolls back or is killed before its COMMIT, leaves new salts behind.
/// Counting commits tells those from a program that committed without
/// GroupSync.
///
/// Read from the connection's own mapping of the wal-index (see
/// `gs_wal_commit_counter`): opening and closing the `-shm` file here would
/// drop SQLite's locks on it for the whole process.
enum WALCommitCounter {
  /// The counter as `db`'s connection sees the wal-index now, or nil when
  /// it cannot be read consistently (not WAL, not mapped yet, torn by a
  /// writer three times in a row): callers then assume a commit.
  static func read(_ db: Database) -> UInt32? {
    guard let connection = db.sqliteConnection else { return nil }
    var counter: UInt32 = 0
    for _ in 0..<3 {
      switch gs_wal_commit_counter(connection, &counter) {
      case Int32(GS_OK): return counter
      case Int32(GS_EAGAIN): continue
      default: return nil
      }
    }
    return nil
  }
}
