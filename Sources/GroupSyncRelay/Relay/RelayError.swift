// RelayError: every error the relay throws or reports, and how it is worded.
import Foundation
import GroupSync

/// An error the relay throws or reports. Each case names what was wrong.
public enum RelayError: Error, Equatable, Sendable, CustomStringConvertible {
  /// A libpq call failed: `call` names it, `message` is the server's or
  /// libpq's text, `sqlState` the SQLSTATE when the server sent one, and
  /// `detail` and `hint` its DETAIL and HINT fields when it sent them.
  case postgres(call: String, message: String, sqlState: SQLState?, detail: String? = nil, hint: String? = nil)
  /// PostgreSQL answered with a value the relay cannot read: `text` (nil:
  /// NULL) in result column `column`, where it expects a value of type
  /// `expected` (`bigint`, `boolean`…).
  case unexpectedValue(column: String, text: String?, expected: String)
  /// The connection to PostgreSQL is down (it never came up, or it broke).
  case disconnected(reason: String)
  /// Another relay holds this host's place in the group: locally (the
  /// lock file) or on the server (the advisory lock).
  case relayAlreadyRunning(host: String, group: String, where: String)
  /// The tables of a change set do not match the local store's: the entry
  /// was refused whole (nothing of it applied).
  case schemaMismatch(store: String, table: String, column: String?, reason: String)
  /// A table cannot be replicated (WITHOUT ROWID: no rowid to map).
  case unsupportedTable(store: String, table: String, reason: String)
  /// An entry of the shared log cannot be decoded or does not follow the
  /// one before it.
  case invalidEntry(store: String, sequence: Int64, reason: String)
  /// A row of an entry kept meeting rows of this host with the same value
  /// of a unique key (each one given way, the next one hit): nothing of the
  /// entry was applied.
  case uniqueKeysKeepColliding(store: String, table: String, gid: String, position: Int64)
  /// The server answered `statement` with something the relay cannot take
  /// (`problem` says what): its objects were changed by hand, or a bug.
  case unexpectedAnswer(statement: String, problem: String)
  /// A system call failed (the same error the core throws).
  case system(SystemCallError)
  /// A setting is not acceptable (host or group name, retention,
  /// timeouts, the connection string).
  case invalidConfiguration(String)
  /// PostgreSQL did not answer `call` within `seconds` (the statement
  /// timeout plus the dead-link time, or the connect timeout per host):
  /// the link or the server is taken for dead and the connection dropped.
  case timedOut(call: String, seconds: Double)
  /// The relay is stopping: the call was abandoned.
  case stopped
  /// The shared tables or `gs_ship` are missing or out of date (`problem`
  /// says which), and `role` may not create them: an administrator runs
  /// the set-up (``AccessSetup``, `groupsync relay --print-setup`).
  case sharedTablesUnavailable(role: String, problem: String)
  /// `role` lacks privileges the relay needs, each named as
  /// `"INSERT on gs_change(…)"` or `"EXECUTE on gs_ship"`.
  case missingPrivileges(role: String, missing: [String])
  /// Under row-level security, `role` is not allowed to act as `host` in
  /// `group`: `gs_member` has no such row.
  case notAMember(role: String, host: String, group: String)
  /// The server's objects are of schema `server`, which serves relays of
  /// schema `servesFrom` and later only: this relay is too old for them;
  /// `needsRelay` names the relay version it takes.
  case serverSchemaTooNew(server: Int, servesFrom: Int, needsRelay: String)
  /// An entry, a row's image or a conflict record of the shared log is in
  /// a format this relay does not read: the store holds there (applies
  /// and ships nothing) until a relay that reads it runs.
  case unreadableFormat(store: String, position: Int64, format: LogFormat)
  /// The server refused a shipment of `store` (`reason`, in the server's
  /// words): over the group's size limit, or not one every relay can read.
  /// Nothing was written; the store goes on applying, and ships again
  /// after a pause (an administrator may raise the limit meanwhile).
  case shipmentRefused(store: String, reason: String)

  /// Whether only an administrator can cure this (a table, a grant, a
  /// membership): the relay gives up instead of retrying.
  var needsAdministrator: Bool {
    switch self {
    case .sharedTablesUnavailable, .missingPrivileges, .notAMember, .serverSchemaTooNew: true
    default: false
    }
  }

  /// Whether the connection stays usable after this error: the server
  /// refused one statement (a lock or statement timeout, a serialization
  /// failure, a constraint) and rolled back, or the relay refused an
  /// entry (for what this host holds, or as unreadable). Anything else
  /// drops the connection.
  var leavesConnectionUsable: Bool {
    switch self {
    case .schemaMismatch, .unsupportedTable, .invalidEntry, .unreadableFormat, .uniqueKeysKeepColliding,
      .unexpectedAnswer, .shipmentRefused:
      true
    case .postgres(_, _, let state?, _, _):
      // The connection broke, the server ends the session, or it failed
      // inside: start over.
      !state.isConnectionException && !state.endsSession && state != .internalError
    default: false
    }
  }

  public var description: String {
    switch self {
    case .postgres(let call, let message, let sqlState, let detail, let hint):
      var text = message.trimmingCharacters(in: .whitespacesAndNewlines)
      // libpq's message holds the DETAIL and HINT lines already, worded so,
      // unless its verbosity is terse or the error was made elsewhere.
      for (label, field) in [("DETAIL", detail), ("HINT", hint)] {
        if let field, !text.contains(field) { text += "\n\(label):  \(field)" }
      }
      return "\(call) failed\(sqlState.map { " (SQLSTATE \($0))" } ?? ""): \(text)"
    case .unexpectedValue(let column, let text, let expected):
      let shown = text.map { $0.count > 100 ? "'\($0.prefix(100))…'" : "'\($0)'" } ?? "NULL"
      return "PostgreSQL sent \(shown) in column '\(column)' where the relay reads a value of type \(expected)"
    case .disconnected(let reason):
      return "not connected to PostgreSQL: \(reason)"
    case .relayAlreadyRunning(let host, let group, let place):
      return "another relay for host '\(host)' of group '\(group)' is running (\(place))"
    case .schemaMismatch(let store, let table, let column, let reason):
      return "schema mismatch in store '\(store)', table '\(table)'"
        + (column.map { ", column '\($0)'" } ?? "") + ": \(reason); nothing of the entry was applied"
    case .unsupportedTable(let store, let table, let reason):
      return "table '\(table)' of store '\(store)' is not replicated: \(reason)"
    case .invalidEntry(let store, let sequence, let reason):
      return "invalid entry #\(sequence) of store '\(store)' in the shared log: \(reason)"
    case .uniqueKeysKeepColliding(let store, let table, let gid, let position):
      return "entry #\(position) of store '\(store)': row \(gid) of \(table) keeps hitting unique keys of other rows "
        + "here; nothing of the entry was applied"
    case .unexpectedAnswer(let statement, let problem):
      return "unexpected answer of the server to \(statement): \(problem)"
    case .system(let error):
      return error.description
    case .invalidConfiguration(let text):
      return "invalid relay configuration: \(text)"
    case .timedOut(let call, let seconds):
      return "\(call): no answer from PostgreSQL in \(String(format: "%.0f", seconds)) s; the link is taken for dead"
    case .stopped:
      return "the relay is stopping"
    case .sharedTablesUnavailable(let role, let problem):
      return "the shared tables are missing or out of date (\(problem)) and role '\(role)' may not create them: "
        + "have an administrator run the output of `groupsync relay --print-setup` (psql -v ON_ERROR_STOP=1)"
    case .missingPrivileges(let role, let missing):
      return "role '\(role)' lacks privileges the relay needs: \(missing.joined(separator: ", ")); "
        + "have an administrator run the output of `groupsync relay --print-setup` (psql -v ON_ERROR_STOP=1)"
    case .notAMember(let role, let host, let group):
      return "role '\(role)' may not act as host '\(host)' in group '\(group)' (no row in gs_member): "
        + "have an administrator run `groupsync relay --print-setup --group \(group) \(role):\(host)`"
        + " (psql -v ON_ERROR_STOP=1)"
    case .serverSchemaTooNew(let server, let servesFrom, let needsRelay):
      return "the server's relay objects are of schema \(server), which serves relays of schema \(servesFrom) "
        + "and later; this relay (\(RelayVersion.current.name)) speaks schema \(SharedSchema.version): "
        + "upgrade it to relay \(needsRelay) or later"
    case .unreadableFormat(let store, let position, let format):
      return "store '\(store)' holds at entry #\(position) of the shared log: it is in \(format), which this relay "
        + "(\(RelayVersion.current.name)) does not read; \(format.readers) reads it. Nothing is skipped: upgrade "
        + "this host's relay and it applies from there"
    case .shipmentRefused(let store, let reason):
      return "the server refused a shipment of store '\(store)' (nothing was written; it ships again after a pause): "
        + reason
    }
  }
}
