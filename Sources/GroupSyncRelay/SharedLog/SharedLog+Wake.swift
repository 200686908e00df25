// SharedLog+Wake: how a shipment wakes the group's other relays (the
// group's own channel, apart from the shipment's commit), and what a
// session listens on.
import Foundation

extension SharedLog {
  /// How the group's members are woken, as this session last read it
  /// (``wakesStatement(group:host:)``, with every announcement and format
  /// check).
  struct Wakes: Sendable, Equatable {
    /// The group's channel (`gs_group.channel`): random, readable only by
    /// those who may read the group's row (nil: not read yet).
    var channel: String?
    /// Whether another member listens on the group's channel (the notify
    /// transport): while none does, a poll relay's shipments send no
    /// wake-up at all. A notify relay wakes the group whatever it read: the
    /// members of a fleet started together announce after one another, and
    /// a notify fleet is the one that must not wait for a format check to
    /// learn of its listeners.
    var listeners = true
    /// Whether another member is a relay before version 4, which listens on
    /// ``SharedLog/legacyChannel`` and reads `GROUP/STORE:POSITION`
    /// there: shipments wake it there too, and a notify relay listens
    /// there for its shipments.
    var olderMembers = false
  }

  /// Reads the group's channel, and which wake-ups its other members need.
  /// A member is older than version 4 when its announced version says so
  /// (a relay rolled back keeps the transport it announced before) or it
  /// announced nothing (version 1).
  static func wakesStatement(group: String, host: String) -> Statement {
    let window = "now() - interval '\(SharedSchema.memberWindow)'"
    return Statement(
      """
      SELECT g.channel,
        EXISTS (SELECT 1 FROM gs_peer p WHERE p.grp = $1 AND p.host <> $2 AND p.retired_at IS NULL
          AND p.announced_at > \(window) AND p.transport = 'notify'
          AND coalesce(substring(p.version FROM '^[0-9]+')::int, 0) >= 4),
        EXISTS (SELECT 1 FROM gs_peer p WHERE p.grp = $1 AND p.host <> $2 AND p.retired_at IS NULL
          AND p.announced_at > \(window)
          AND (p.transport IS NULL OR coalesce(substring(p.version FROM '^[0-9]+')::int, 0) < 4))
        OR EXISTS (SELECT 1 FROM gs_host h WHERE h.grp = $1 AND h.host <> $2 AND h.seen_at > \(window)
          AND NOT EXISTS (SELECT 1 FROM gs_peer p WHERE p.grp = h.grp AND p.host = h.host))
      FROM gs_group g WHERE g.grp = $1
      """, [group, host])
  }

  /// Takes ``wakesStatement(group:host:)``'s answer.
  func readWakes(_ rows: PostgresRows) throws {
    guard let row = rows.first, let channel = try row.decode(String?.self, at: 0) else {
      throw RelayError.unexpectedAnswer(statement: "gs_group", problem: "the group has no row (gs_advance_5 makes it)")
    }
    wakes = Wakes(
      channel: channel, listeners: try row.decode(Bool?.self, at: 1) ?? true,
      olderMembers: try row.decode(Bool?.self, at: 2) ?? false)
  }

  /// Makes the session listen on exactly `channels` (the group's, and the
  /// legacy one while older members ship there), in one round trip.
  func listen(on channels: Set<String>) throws {
    guard channels != listening else { return }
    let statements =
      listening.subtracting(channels).sorted().map { Statement("UNLISTEN \(Self.quoted($0))") }
      + channels.subtracting(listening).sorted().map { Statement("LISTEN \(Self.quoted($0))") }
    _ = try connection.query(statements)
    listening = channels
  }

  private static func quoted(_ channel: String) -> String {
    "\"" + channel.replacingOccurrences(of: "\"", with: "\"\"") + "\""
  }

  /// The statements that wake the group's listening members once the
  /// shipment of `replica` through local sequence `through` has committed:
  /// a transaction of their own, committed without waiting for the flush
  /// (`synchronous_commit` off for it alone), so that the server's notify
  /// lock, which every notifying commit in the cluster takes in turn, is
  /// held for a memory write and not across a disk flush.
  ///
  /// The position is looked up by the entry's origin, on the server: no
  /// round trip waits for the shipment's answer, and a shipment that did
  /// not land (`moved`) wakes no one. A wake-up lost (the relay died
  /// between the two commits, the server crashed) is made up for by the
  /// next wake-up of the store, which names a later position, and by each
  /// relay's own read of the log after a quiet ``RelayConfiguration/pollInterval``
  /// or a reconnect.
  func wakeStatements(_ replica: Replica, through: Int64, body: String) -> [Statement] {
    guard sendsWakeUps, let channel = wakes.channel, let tag = tags[replica.store] else { return [] }
    var statements: [Statement] = []
    let origin: [any PostgresBindable] = [replica.group, replica.store, replica.host, through]
    if wakes.listeners || wakesAlways {
      let prefix = tag + ":"
      // Room for the position's digits: the payload stays under the limit.
      let entry = "\n" + replica.host + " " + String(through) + "\n" + body
      let fits = prefix.utf8.count + 20 + entry.utf8.count < Hint.payloadLimit
      let carried = entriesRideWakeUps && fits ? entry : ""
      statements.append(Statement(Self.wake, origin + [channel, prefix, carried]))
    }
    if wakes.olderMembers {
      statements.append(Statement(Self.legacyWake, origin + [replica.group + "/" + replica.store + ":"]))
    }
    return statements
  }

  static let wake = PreparedSQL(
    "wake",
    """
    SELECT set_config('synchronous_commit', 'off', true), pg_notify($5, $6 || c.seq || $7)
    FROM gs_change c WHERE c.grp = $1 AND c.store = $2 AND c.origin_host = $3 AND c.origin_seq = $4::bigint
    """)

  static let legacyWake = PreparedSQL(
    "wake_legacy",
    """
    SELECT set_config('synchronous_commit', 'off', true), pg_notify('\(legacyChannel)', $5 || c.seq)
    FROM gs_change c WHERE c.grp = $1 AND c.store = $2 AND c.origin_host = $3 AND c.origin_seq = $4::bigint
    """)
}
