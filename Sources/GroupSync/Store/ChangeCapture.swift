import CGroupSync

/// Owns the C capture installed on a store's write connection.
///
/// Used only under the store's lock, like the connection itself.
final class ChangeCapture {
  private let handle: OpaquePointer

  /// Tables whose names start with this prefix are GroupSync's own.
  static let internalTablePrefix = "groupsync_"

  init(on database: Database, forceUpdateHook: Bool = false) throws {
    var handle: OpaquePointer?
    let code = gs_capture_create(
      database.sqliteConnection, Self.internalTablePrefix,
      forceUpdateHook ? Int32(GS_CAPTURE_FORCE_UPDATE_HOOK) : 0, &handle)
    guard code == GS_OK, let handle else {
      throw SQLiteError(code: SQLITE_ERROR, message: "cannot install capture hooks: \(String(cString: gs_strerror(code)))")
    }
    self.handle = handle
  }

  /// Uninstalls the hooks; call before the connection closes.
  func close() { gs_capture_close(handle) }

  var usesPreUpdateHook: Bool { gs_capture_hook_kind(handle) == GS_HOOK_PREUPDATE }
  var hasPendingChanges: Bool { gs_capture_pending_count(handle) > 0 }
  var overflowed: Bool { gs_capture_overflowed(handle) != 0 }

  func allowCommit() { gs_capture_allow_commit(handle) }
  func reset() { gs_capture_reset(handle) }

  /// Reduces the rows of the last commit to their net effect.
  func takeCommitted() -> ChangeSetBuilder {
    var rows: UnsafePointer<gs_row_change>?
    let count = gs_capture_take_committed(handle, &rows)
    var builder = ChangeSetBuilder()
    guard let rows else { return builder }
    // Split the log by table index first: names are resolved once per table.
    var logs: [[(rowID: Int64, operation: RowOperation)]] = []
    for change in UnsafeBufferPointer(start: rows, count: count) {
      let index = Int(change.table)
      while logs.count <= index { logs.append([]) }
      logs[index].append((change.rowid, RowOperation(rawValue: change.op)!))
    }
    for (index, log) in logs.enumerated() where !log.isEmpty {
      let table = String(cString: gs_capture_table_name(handle, UInt32(index))!)
      builder.record(table: table, operations: log)
    }
    return builder
  }
}
