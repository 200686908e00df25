// Where each member of a group stands (`--fleet`): versions, formats, places.
import Foundation

/// Where a group's fleet stands, as the server knows it: the log format
/// the group writes, and each host's relay version, the formats it reads,
/// its last sign of life and where it holds. `groupsync relay --fleet`
/// prints it; ``retire(host:group:conninfo:timeouts:)`` is how an
/// administrator lets the group's format move past a host gone for good.
public struct GroupFleet: Sendable, Equatable, Codable {
  /// One host of the group.
  public struct Member: Sendable, Equatable, Codable {
    public var host: String
    /// The version it announced (nil: it announced nothing, a relay from
    /// before versions, which reads format 1).
    public var version: String?
    /// The formats it reads.
    public var reads: [Int]
    /// When it last announced itself, and last shipped or applied
    /// (ISO 8601, UTC; nil: never).
    public var announcedAt: String?
    public var seenAt: String?
    /// Where it holds an entry it cannot read, as `STORE:POSITION`.
    public var holds: [String]
    /// Whether an administrator retired it.
    public var retired: Bool
    /// The transport it announced (``RelayTransport``; nil: a relay before
    /// version 4, which notifies).
    public var transport: String?
  }

  /// The group's settings on the server (``GroupSettings``), as they stand.
  public struct Settings: Sendable, Equatable, Codable, CustomStringConvertible {
    public var retention: GroupSettings.Retention
    public var retentionPassesMembers: Bool
    public var maxShipmentBytes: Int64

    public var description: String {
      let kept =
        switch retention {
        case .everything: "every entry"
        case .entries(let count):
          "the newest \(count) entries, "
            + (retentionPassesMembers ? "older ones purged even if a member has not applied them" : "older ones purged once every member applied them")
        }
      return "retention: \(kept); largest shipment: \(maxShipmentBytes) bytes"
    }
  }

  public var group: String
  /// The group's log format (``LogFormat``).
  public var format: Int
  public var settings: Settings
  public var members: [Member]

  /// Reads `group`'s fleet from the server `conninfo` names (the relay's
  /// server objects must be there).
  ///
  /// - Throws: ``RelayError`` when the server cannot be reached or the
  ///   objects are missing.
  public static func read(group: String, conninfo: String, timeouts: RelayTimeouts = RelayTimeouts()) throws
    -> GroupFleet
  {
    try session(conninfo: conninfo, timeouts: timeouts).fleet(group: group)
  }

  /// Retires `host` from `group` for good, and moves the group's format
  /// up if every remaining member reads a newer one; returns the fleet
  /// afterwards. Under the printed set-up, only the tables' owner (an
  /// administrator) may.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` for a host the
  ///   group does not know; ``RelayError`` from the server.
  @discardableResult
  public static func retire(
    host: String, group: String, conninfo: String, timeouts: RelayTimeouts = RelayTimeouts()
  ) throws -> GroupFleet {
    let log = try session(conninfo: conninfo, timeouts: timeouts)
    guard try log.fleet(group: group).members.contains(where: { $0.host == host }) else {
      throw RelayError.invalidConfiguration("group '\(group)' has no host '\(host)' to retire")
    }
    try log.retire(group: group, host: host)
    return try log.fleet(group: group)
  }

  /// Sets `group`'s settings on the server (those `settings` names; the
  /// others stay) and returns the fleet afterwards. An administrator's
  /// act: under the printed set-up only the tables' owner may. Makes or
  /// migrates the relay's objects first where they are missing or older.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` for a setting out of
  ///   range; ``RelayError/missingPrivileges(role:missing:)`` for a role
  ///   that may not change them; ``RelayError`` from the server.
  @discardableResult
  public static func configure(
    _ settings: GroupSettings, group: String, conninfo: String, timeouts: RelayTimeouts = RelayTimeouts()
  ) throws -> GroupFleet {
    try settings.validate()
    let log = try session(conninfo: conninfo, timeouts: timeouts)
    try log.configure(group: group, settings: settings)
    return try log.fleet(group: group)
  }

  private static func session(conninfo: String, timeouts: RelayTimeouts) throws -> SharedLog {
    let log = SharedLog(
      try PostgresConnection(conninfo: conninfo, timeouts: timeouts, applicationName: "groupsync-relay fleet"))
    try log.configureSession(timeouts: timeouts)
    return log
  }
}
