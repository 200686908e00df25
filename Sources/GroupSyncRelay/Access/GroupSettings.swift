// GroupSettings: what an administrator decides for a whole group on the
// server (retention, the size of a shipment), not any one host.
import Foundation

/// A group's settings on the server (`gs_group`), kept by an
/// administrator: no host's relay may change them, so that no host can
/// purge what the others still need or stall them with a shipment too
/// large. Set them in the set-up (`groupsync relay --print-setup … --retention
/// N`) or on a running group (`groupsync relay --configure`,
/// ``GroupFleet/configure(_:group:conninfo:timeouts:)``).
///
/// A `nil` field leaves the setting as it is.
public struct GroupSettings: Sendable, Equatable, Codable {
  /// How many entries of each store's log are kept.
  public enum Retention: Sendable, Equatable, Codable, CustomStringConvertible {
    /// Every entry (the default).
    case everything
    /// The newest `n` (at least 1); older ones are purged once every
    /// member has applied them, or at once with
    /// ``GroupSettings/retentionPassesMembers``.
    case entries(Int64)

    /// Parses `all` or a number of entries.
    ///
    /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming the text.
    public init(parsing text: String) throws {
      if text == "all" {
        self = .everything
      } else if let count = Int64(text), count >= 1 {
        self = .entries(count)
      } else {
        throw RelayError.invalidConfiguration(
          "retention '\(text)': 'all', or the number of entries each store's log keeps (1 or more)")
      }
    }

    public var description: String {
      switch self {
      case .everything: "every entry"
      case .entries(let count): "the newest \(count) entries"
      }
    }
  }

  public var retention: Retention?
  /// Whether retention purges past members that have not applied the
  /// entries yet: they re-synchronise from the rows' images. Never past a
  /// hold (a member that cannot read an entry's format yet). Off by
  /// default: a purge waits for every member, and a member gone for good
  /// is retired (``GroupFleet/retire(host:group:conninfo:timeouts:)``).
  public var retentionPassesMembers: Bool?
  /// The largest shipment the server takes, in bytes (its body, images
  /// and conflict records; 64 MiB by default): a larger one is refused
  /// with an error naming the limit, and its relay tries again until the
  /// limit is raised.
  public var maxShipmentBytes: Int64?

  public init(retention: Retention? = nil, retentionPassesMembers: Bool? = nil, maxShipmentBytes: Int64? = nil) {
    self.retention = retention
    self.retentionPassesMembers = retentionPassesMembers
    self.maxShipmentBytes = maxShipmentBytes
  }

  /// Whether it changes nothing.
  public var isEmpty: Bool { retention == nil && retentionPassesMembers == nil && maxShipmentBytes == nil }

  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming what is out
  ///   of range.
  public func validate() throws {
    if case .entries(let count) = retention, count < 1 {
      throw RelayError.invalidConfiguration("retention \(count): keep at least 1 entry")
    }
    if let bytes = maxShipmentBytes, !(1024...(1 << 30)).contains(bytes) {
      throw RelayError.invalidConfiguration(
        "max shipment bytes \(bytes): between 1024 and 1073741824 (PostgreSQL's largest value)")
    }
  }

  /// The statements that make `group`'s row if missing and set what this
  /// names (literals only: an administrator's script runs them as they are).
  func statements(group: String) -> [String] {
    var assignments: [String] = []
    switch retention {
    case .everything: assignments.append("retention = NULL")
    case .entries(let count): assignments.append("retention = \(count)")
    case nil: break
    }
    if let passes = retentionPassesMembers { assignments.append("retention_passes_members = \(passes)") }
    if let bytes = maxShipmentBytes { assignments.append("max_shipment_bytes = \(bytes)") }
    let name = AccessSetup.literal(group)
    var statements = ["INSERT INTO gs_group (grp) VALUES (\(name)) ON CONFLICT (grp) DO NOTHING"]
    if !assignments.isEmpty {
      statements.append("UPDATE gs_group SET \(assignments.joined(separator: ", ")) WHERE grp = \(name)")
    }
    return statements
  }
}
