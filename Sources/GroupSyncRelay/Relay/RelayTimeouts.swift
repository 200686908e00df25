// The bounds on every wait on the server, and their checks.
import Foundation

/// How long the relay waits on PostgreSQL, at most, for each thing it
/// waits for: no host's link, process or lock can hold the relay (or,
/// through the server, the other hosts' relays) longer than these.
///
/// The client side goes into libpq's connection parameters where the
/// conninfo (or libpq's environment) sets none: `connect_timeout`,
/// `keepalives*` and `tcp_user_timeout`. The server side is set on the
/// relay's session when it connects: `lock_timeout`, `statement_timeout`,
/// `idle_in_transaction_session_timeout`, and the server's own
/// `tcp_keepalives_*`, `tcp_user_timeout` and
/// `client_connection_check_interval`, so that the server, too, drops a
/// relay whose link died and releases what its session held. For example:
///
/// ```swift
/// var configuration = RelayConfiguration(folder: "/srv/app/group", conninfo: "host=db dbname=app")
/// configuration.timeouts.deadLink = .seconds(10)   // a slow satellite link
/// ```
public struct RelayTimeouts: Sendable, Equatable {
  /// How long a link may stay silent before it is taken for dead, on both
  /// ends (default 6 s): TCP keepalives start after a third of it and
  /// probe up to three times, the last probe within it (from 2 s; TCP
  /// counts keepalives in whole seconds); data left unacknowledged this
  /// long (TCP's user timeout) breaks the connection. The relay notices
  /// within about two seconds more, as TCP's timers fire (a 3 s link in
  /// about 4 s, the default 6 s one in about 5 to 7).
  public var deadLink: Duration
  /// How long one connection attempt to one server may take (libpq's
  /// `connect_timeout`; default 5 s).
  public var connect: Duration
  /// The longest wait for a lock another session holds (`lock_timeout`;
  /// default 2 s). The statement then fails, its transaction rolls back,
  /// and the relay tries again on its next pass.
  public var lock: Duration
  /// The longest one statement may run (`statement_timeout`; default 30 s).
  public var statement: Duration
  /// How long the server keeps the relay's transaction open while it
  /// waits for the relay's next statement (default 2 s): a host cut off
  /// in the middle of a shipment loses its transaction, and with it every
  /// lock it held, after this.
  public var idleInTransaction: Duration

  public init(
    deadLink: Duration = .seconds(6), connect: Duration = .seconds(5), lock: Duration = .seconds(2),
    statement: Duration = .seconds(30), idleInTransaction: Duration = .seconds(2)
  ) {
    self.deadLink = deadLink
    self.connect = connect
    self.lock = lock
    self.statement = statement
    self.idleInTransaction = idleInTransaction
  }

  /// Checks that every timeout is at least a second (libpq and the
  /// server count some of them in whole seconds).
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming the first
  ///   timeout out of range.
  func validate() throws {
    let named: [(String, Duration)] = [
      ("deadLink", deadLink), ("connect", connect), ("lock", lock), ("statement", statement),
      ("idleInTransaction", idleInTransaction),
    ]
    for (name, value) in named where value < .seconds(1) || value > .seconds(86_400) {
      throw RelayError.invalidConfiguration("timeout \(name) \(value): use 1 s to 1 day")
    }
  }

  /// Seconds before the first keepalive probe: a third of ``deadLink``.
  var keepaliveIdleSeconds: Int { max(1, Int(deadLink.inSeconds / 3)) }
  /// Seconds between probes: a sixth of ``deadLink``.
  var keepaliveIntervalSeconds: Int { max(1, Int(deadLink.inSeconds / 6)) }
  /// Probes before the link is taken for dead: three, fewer where whole
  /// seconds would put the last one past ``deadLink`` (a 3 s link: one
  /// second idle, two probes), one at least.
  var keepaliveCount: Int {
    let fit = (Int(deadLink.inSeconds) - keepaliveIdleSeconds) / keepaliveIntervalSeconds
    return max(1, min(3, fit))
  }

  /// libpq's client-side parameters, by keyword.
  var clientParameters: [(String, String)] {
    [
      ("connect_timeout", String(max(2, Int(connect.inSeconds.rounded(.up))))),
      ("keepalives", "1"),
      ("keepalives_idle", String(keepaliveIdleSeconds)),
      ("keepalives_interval", String(keepaliveIntervalSeconds)),
      ("keepalives_count", String(keepaliveCount)),
      ("tcp_user_timeout", String(deadLink.inMilliseconds)),
    ]
  }

  /// The server-side settings of the relay's session, by name
  /// (`client_connection_check_interval` exists from PostgreSQL 14).
  func sessionSettings(serverVersion: Int32) -> [(String, String)] {
    var settings = [
      ("lock_timeout", String(lock.inMilliseconds)),
      ("statement_timeout", String(statement.inMilliseconds)),
      ("idle_in_transaction_session_timeout", String(idleInTransaction.inMilliseconds)),
      ("tcp_keepalives_idle", String(keepaliveIdleSeconds)),
      ("tcp_keepalives_interval", String(keepaliveIntervalSeconds)),
      ("tcp_keepalives_count", String(keepaliveCount)),
      ("tcp_user_timeout", String(deadLink.inMilliseconds)),
    ]
    if serverVersion >= 140_000 { settings.append(("client_connection_check_interval", "1000")) }
    return settings
  }
}

extension Duration {
  /// The duration in seconds, as a `Double`.
  var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
  /// The duration in whole milliseconds (at least 1).
  var inMilliseconds: Int64 { max(1, components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000) }
}
