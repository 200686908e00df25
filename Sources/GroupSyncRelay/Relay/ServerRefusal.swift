// A server or pooler that refuses a session for its limits, told in
// words a user acts on.
import Foundation

/// A session the server (or a pooler in front of it) refused for one of
/// its limits: too many clients, connections per role or database, a
/// pool that cannot get a server connection. The relay says which limit,
/// what to do about it, backs off longer than after a broken link (a
/// fleet retrying at once keeps the server full), and shows it in
/// `groupsync status`; nothing is lost: commits wait in the store.
struct ServerRefusal: Sendable, Equatable, CustomStringConvertible {
  /// Which limit, in words.
  let limit: String
  /// What the user can do.
  let advice: String
  /// What the server said.
  let message: String

  /// The wait before the next attempt after a refusal, at least.
  static let minimumBackoff = Duration.seconds(2)
  /// ...and at most.
  static let maximumBackoff = Duration.seconds(30)

  private static let pooler =
    "connect the hosts through a pooler in transaction mode (PgBouncer) with --transport poll, "
    + "so that they share a few server connections"

  /// The refusal `error` is, nil when it is none.
  init?(_ error: any Error) {
    guard case RelayError.postgres(_, let message, let state, _, _) = error else { return nil }
    let text = message.lowercased()
    self.message = message.trimmingCharacters(in: .whitespacesAndNewlines)
    if text.contains("too many clients already") || text.contains("connection slots are reserved") {
      limit = "the server has no connection left (its max_connections is reached)"
      advice = "raise max_connections on the server, or " + Self.pooler
    } else if text.contains("too many connections for role") {
      limit = "the role has as many connections as it may (its CONNECTION LIMIT)"
      advice = "raise the role's limit (ALTER ROLE … CONNECTION LIMIT), or " + Self.pooler
    } else if text.contains("too many connections for database") {
      limit = "the database has as many connections as it may (its CONNECTION LIMIT)"
      advice = "raise the database's limit (ALTER DATABASE … CONNECTION LIMIT), or " + Self.pooler
    } else if text.contains("no more connections allowed") {
      limit = "the pooler takes no more clients (its max_client_conn)"
      advice = "raise the pooler's max_client_conn"
    } else if text.contains("pgbouncer cannot connect to server") || text.contains("query_wait_timeout") {
      limit = "the pooler could not get a server connection in time"
      advice = "check that the server is up and that the pool (default_pool_size) fits its max_connections"
    } else if state == "53300" {
      limit = "the server refused the session for its limits"
      advice = "raise the server's limits, or " + Self.pooler
    } else {
      return nil
    }
  }

  var description: String {
    "PostgreSQL refused the session: \(limit). To fix it: \(advice). The relay tries again, backing off up to "
      + "\(Int(Self.maximumBackoff.inSeconds)) s; nothing is lost meanwhile (the server said: \(message))"
  }
}
