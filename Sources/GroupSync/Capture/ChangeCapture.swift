// The Swift handle on the C capture (CSupport/capture.c) of a writer
// connection.
import CGroupSync

/// Owns the C capture installed on a store's writer connection: the
/// pre-update hook that records every row a transaction changes.
///
/// Used only on GRDB's writer queue, like the connection itself.
final class ChangeCapture {
  private let handle: OpaquePointer
  /// The connection the capture is installed on.
  let connection: OpaquePointer

  /// Installs the pre-update hook on `connection`, unless SQLite lacks it
  /// or `withoutPreUpdateHook` asks for the fallback, ignoring the relay's
  /// tables (``RelayTables``).
  init(connection: OpaquePointer, withoutPreUpdateHook: Bool, rowBudget: Int) throws {
    self.connection = connection
    var handle: OpaquePointer?
    let options = withoutPreUpdateHook ? Int32(GS_CAPTURE_NO_PREUPDATE_HOOK) : 0
    let code = gs_capture_create(connection, options, &handle)
    guard code == GS_OK, let handle else {
      throw GroupSyncError.captureUnavailable(reason: String(cString: gs_strerror(code)))
    }
    // Told here, for every process that opens a store: a relay's
    // bookkeeping must not depend on who else has the store open.
    for table in RelayTables.all where gs_capture_ignore_table(handle, table) != GS_OK {
      gs_capture_close(handle)
      throw GroupSyncError.captureOutOfMemory
    }
    self.handle = handle
    gs_capture_set_row_budget(handle, rowBudget)
  }

  /// Never touches the connection: GRDB releases its observers after the
  /// connection is closed. ``detach()`` uninstalls the hook before that.
  deinit { gs_capture_free(handle) }

  /// Uninstalls the hook, on the writer queue while the connection is open.
  func detach() { gs_capture_detach(handle) }

  var usesPreUpdateHook: Bool { gs_capture_uses_preupdate_hook(handle) != 0 }
  /// Whether the pre-update hook is still ours (reinstalling it if not).
  var isHookIntact: Bool { gs_capture_hook_intact(handle) != 0 }
  var hasChanges: Bool { gs_capture_has_changes(handle) != 0 }
  var overflowed: Bool { gs_capture_overflowed(handle) != 0 }

  func record(_ operation: RowOperation, table: String, rowID: Int64) {
    let op: Int32 = switch operation {
    case .insert: SQLITE_INSERT
    case .update: SQLITE_UPDATE
    case .delete: SQLITE_DELETE
    }
    gs_capture_record(handle, op, "main", table, rowID)
  }

  func invalidate(_ table: String) { gs_capture_invalidate(handle, table) }

  /// Stops capturing `table`, until ``unignore(_:)``; false when memory
  /// ran out.
  func ignore(_ table: String) -> Bool {
    guard gs_capture_ignore_table(handle, table) == GS_OK else {
      gs_capture_invalidate(handle, table)  // out of memory: the next commit is refused
      return false
    }
    return true
  }

  /// Captures `table` again from its next row on (what it got while
  /// ignored stays uncaptured). The relay's tables stay ignored, even if a
  /// shadow table of the same name was ignored and is no longer.
  func unignore(_ table: String) {
    guard !RelayTables.contains(table) else { return }
    gs_capture_unignore_table(handle, table)
  }

  func markSequenced() { gs_capture_mark_sequenced(handle) }

  /// Why the open transaction must not commit, or nil.
  var commitRefusal: GroupSyncError? {
    switch Int(gs_capture_will_commit(handle)) {
    case 0: nil
    case Int(GS_CAPTURE_OVERFLOWED): .captureOutOfMemory
    default: .unsequencedCommit
    }
  }

  /// The transaction ended, committed or rolled back alike: everything it
  /// captured is dropped.
  func endTransaction() { gs_capture_end_transaction(handle) }

  /// Table names by the capture's index: interned for its life.
  private var tableNames: [TableName] = []

  private func tableName(_ index: UInt32) -> TableName {
    while tableNames.count <= Int(index) {
      tableNames.append(TableName(String(cString: gs_capture_table_name(handle, UInt32(tableNames.count))!)))
    }
    return tableNames[Int(index)]
  }

  /// The open transaction's rows, reduced to their net effect beside the
  /// hook (in C), and the tables it invalidated (over the row budget, or
  /// fed by the fallback).
  func pendingChanges() throws -> (netRows: [TableName: NetRows], invalidated: Set<TableName>) {
    guard gs_capture_make_net_rows(handle) == GS_OK else { throw GroupSyncError.captureOutOfMemory }
    var netRows: [TableName: NetRows] = [:]
    var invalidated = Set<TableName>()
    for index in 0..<gs_capture_table_count(handle) {
      if gs_capture_table_invalidated(handle, index) != 0 {
        invalidated.insert(tableName(index))
        continue
      }
      guard gs_capture_table_rows(handle, index) > 0 else { continue }
      var net = gs_net_rows()
      guard gs_capture_net_rows(handle, index, &net) == GS_OK else { throw GroupSyncError.captureOutOfMemory }
      // The first table as a literal: storage made at its size, where
      // growing an empty dictionary reallocated it.
      if netRows.isEmpty { netRows = [tableName(index): NetRows(net)] } else { netRows[tableName(index)] = NetRows(net) }
    }
    return (netRows, invalidated)
  }
}
