// How a relay learns that the shared log moved on: notifications on a
// session of its own, or reading the log by position at an interval.
import Foundation

/// How a relay learns that another host shipped: the two transports. Hosts
/// of one group may use either; every shipment wakes the members that
/// listen, whatever its shipper's transport.
public enum RelayTransport: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
  /// The relay holds a session of its own on the server and LISTENs on
  /// its group's channel: woken within a round trip of each shipment. The
  /// session's advisory lock keeps a second relay of the host out. One
  /// server connection per host, held.
  case notify
  /// The relay reads the log by position every
  /// ``RelayConfiguration/pollInterval``: no session state, so it works
  /// through a pooler in transaction mode (PgBouncer), where many hosts
  /// share a few server connections. A lease that the relay renews on the
  /// server (``RelayConfiguration/leaseDuration``) keeps a second relay of
  /// the host out, and statements go unprepared.
  case poll

  public var description: String { rawValue }
}
