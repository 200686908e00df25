import Foundation
import GRDB

/// A read-only store's file as this process has it open, opened again once
/// the file was replaced.
///
/// A read-only store changes only by a new file being renamed over the old
/// one (``GroupFolder/installReadOnlyStore(named:from:)``, or an application
/// update doing the same): the connections open on the old file keep
/// reading it, whole, until the next read sees the new one. A reader never
/// sees a half-written file.
final class ReadOnlyStoreFile: Sendable {
  let path: String
  private let folder: SafeDirectory
  private let fileName: String
  private let configuration: Configuration
  private let current: Locked<(pool: DatabasePool, identity: FileIdentity)>

  /// Opens `fileName` of `folder` (the group's `stores/`).
  init(folder: SafeDirectory, fileName: String, configuration: Configuration) throws {
    self.folder = folder
    self.fileName = fileName
    path = folder.path + "/" + fileName
    var configuration = configuration
    configuration.readonly = true
    BusyWait.applyDefault(to: &configuration)
    self.configuration = configuration
    current = Locked(try Self.open(folder: folder, fileName: fileName, path: path, configuration: configuration))
  }

  /// The pool on the file the store's name holds now: opened again if the
  /// file was replaced since the last call (one `fstatat`).
  func pool() throws -> DatabasePool {
    let identity = folder.identity(of: fileName)
    if let open = current.withLock({ $0.identity == identity ? $0.pool : nil }) { return open }
    let reopened = try Self.open(folder: folder, fileName: fileName, path: path, configuration: configuration)
    current.withLock { $0 = reopened }
    return reopened.pool
  }

  /// The pool opened last, without looking at the file.
  var lastPool: DatabasePool { current.withLock { $0.pool } }

  /// The identity of the file the store's name holds now (nil if none).
  var identityNow: FileIdentity? { folder.identity(of: fileName) }

  private static func open(
    folder: SafeDirectory, fileName: String, path: String, configuration: Configuration
  ) throws -> (pool: DatabasePool, identity: FileIdentity) {
    // SQLite follows symlinks: only a regular file of the group folder.
    let identity = try folder.openFile(fileName, O_RDONLY).status(path: path)
    let pool = try DatabasePool(path: path, configuration: configuration)
    let mode = try pool.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") }
    guard mode?.lowercased() != "wal" else {
      throw GroupSyncError.invalidStore(
        path: path, reason: "a read-only store must be in rollback-journal mode, not WAL (install it with installReadOnlyStore)")
    }
    return (pool, FileIdentity(identity))
  }
}
