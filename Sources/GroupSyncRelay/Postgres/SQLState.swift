// SQLSTATE: a PostgreSQL error's code, and the codes the relay acts on by name.
/// A PostgreSQL error's SQLSTATE: five characters, the first two naming
/// its class. The codes the relay acts on are named, so that a caller
/// matches an error by what happened, not by its text. For example:
///
/// ```swift
/// switch error {
/// case SQLState.lockNotAvailable, SQLState.serializationFailure:
///   break  // the server rolled back; try again on the next pass
/// default:
///   throw error
/// }
/// ```
///
/// See <https://www.postgresql.org/docs/current/errcodes-appendix.html>.
public struct SQLState: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
  /// The five characters, as the server sent them.
  public let rawValue: String

  public init(rawValue: String) { self.rawValue = rawValue }

  public init(stringLiteral value: String) { self.init(rawValue: value) }

  public var description: String { rawValue }

  /// The class: the first two characters (`08` for a connection exception).
  public var errorClass: String { String(rawValue.prefix(2)) }

  /// `unique_violation`: a row with the same key exists (a shipment sent
  /// twice meets `gs_change`'s unique origin).
  public static let uniqueViolation: SQLState = "23505"
  /// `serialization_failure`: the transaction could not be serialized.
  public static let serializationFailure: SQLState = "40001"
  /// `deadlock_detected`: the server rolled back one of two transactions
  /// that waited for each other.
  public static let deadlockDetected: SQLState = "40P01"
  /// `invalid_sql_statement_name`: no prepared statement of that name on
  /// the session (the server forgot what the session prepared).
  public static let invalidSQLStatementName: SQLState = "26000"
  /// `duplicate_prepared_statement`: the session holds a prepared
  /// statement of that name already.
  public static let duplicatePreparedStatement: SQLState = "42P05"
  /// `insufficient_privilege`: the role lacks a privilege, or a row
  /// breaks a row-level security policy.
  public static let insufficientPrivilege: SQLState = "42501"
  /// `undefined_table`: a table the statement names does not exist.
  public static let undefinedTable: SQLState = "42P01"
  /// `lock_not_available`: a lock was not granted within `lock_timeout`.
  public static let lockNotAvailable: SQLState = "55P03"
  /// `query_canceled`: `statement_timeout` passed, or the statement was
  /// cancelled.
  public static let queryCanceled: SQLState = "57014"
  /// `admin_shutdown`: the server is shutting down, or an administrator
  /// terminated the session.
  public static let adminShutdown: SQLState = "57P01"
  /// `crash_shutdown`: another server process crashed.
  public static let crashShutdown: SQLState = "57P02"
  /// `internal_error`: the server failed in a way it cannot name.
  public static let internalError: SQLState = "XX000"

  /// Class 08: the connection failed or broke.
  public var isConnectionException: Bool { errorClass == "08" }

  /// 57P01 to 57P05 (`admin_shutdown`, `crash_shutdown`,
  /// `cannot_connect_now`, `database_dropped`, `idle_session_timeout`):
  /// the server ends the session.
  public var endsSession: Bool { rawValue.hasPrefix("57P") }

  /// Whether `error` is a ``RelayError/postgres(call:message:sqlState:detail:hint:)``
  /// with this SQLSTATE, so that `catch SQLState.lockNotAvailable` works.
  public static func ~= (state: SQLState, error: any Error) -> Bool {
    guard case RelayError.postgres(_, _, let actual?, _, _) = error else { return false }
    return actual == state
  }
}
