// The names of the tables a relay keeps in each replicated store: in the
// core, so that every process's capture leaves them out, whether or not
// it links the relay.

/// The tables a relay (`GroupSyncRelay`) keeps in each replicated store,
/// its bookkeeping: never replicated, and never captured.
///
/// Every process that opens a store tells its capture to ignore them at
/// install (``ChangeCapture``), whoever writes them: a commit that writes
/// only them (a relay's bookkeeping after a shipment, say) is a quiet
/// commit (no change set, no history row, counted in
/// `groupsync_quiet_commits` so that no listener takes it for a foreign
/// writer), and an applied entry's change set names the user's rows
/// alone. What they hold is read from the store when needed
/// (``Store/globalID(of:)``), never learnt from a change set.
///
/// Named here beside their owners' Swift rather than as a fixed prefix in
/// the C capture: exact names, not `gs_relay_`, so that a user's table
/// that merely starts so stays captured (a capture may over-report, never
/// under-report); a relay table missing here is captured, the safe way.
package enum RelayTables {
  /// The global IDs (``GlobalIDTable``).
  package static let globalIDs = "gs_relay_row"
  /// This host's places in the log (the relay's `ReplicaPlace`).
  package static let place = "gs_relay_state"
  /// Row images waiting for the rows they refer to (the relay's `HeldRows`).
  package static let heldRows = "gs_relay_held"
  /// Values of columns this host's schema lacks yet, and the columns it
  /// has (the relay's `SchemaDrift`).
  package static let extraValues = "gs_relay_extra"
  package static let columns = "gs_relay_columns"

  package static let all = [globalIDs, place, heldRows, extraValues, columns]

  /// Whether `table` is one of them, by its bytes (SQLite's rule for the
  /// names the capture compares).
  package static func contains(_ table: String) -> Bool {
    all.contains { TableName.sameBytes($0, table) }
  }
}
