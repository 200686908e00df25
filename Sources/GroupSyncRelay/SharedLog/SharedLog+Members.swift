// SharedLog+Members: the group's members and its format, as the log keeps them.
import Foundation

/// The group's members and its format: what each relay announces it
/// reads, the format the group writes, retiring a member, holds.
extension SharedLog {
  /// Announces what `version` reads as `host` of `group` (a host that
  /// comes back is a member again), moves the group's format up if every
  /// member now reads a newer one, and returns the group's format: one
  /// round trip.
  /// Also announces the merge rules `rules` (``MergeRules/fingerprint``)
  /// and the transport it is woken by, reads which other members announce
  /// other rules (``differingRules``) and how the group wakes them
  /// (``wakes``).
  @discardableResult
  func announce(
    group: String, host: String, version: RelayVersion, rules: String, transport: RelayTransport
  ) throws -> LogFormat {
    let reads = version.reads.map(\.rawValue)
    let results = try exchange([
      Statement(
        """
        INSERT INTO gs_peer AS p (grp, host, version, reads, merge_rules, transport)
        VALUES ($1, $2, $3, $4::smallint[], $5, $6)
        ON CONFLICT (grp, host) DO UPDATE SET version = excluded.version, reads = excluded.reads,
          merge_rules = excluded.merge_rules, transport = excluded.transport, announced_at = now(), retired_at = NULL
        """, [group, host, version.name, reads, rules, transport.rawValue]),
      Statement("SELECT gs_advance_5($1)", [group]),
      Self.differingRulesStatement(group: group, host: host, rules: rules),
      Self.wakesStatement(group: group, host: host),
    ])
    try readDifferingRules(results[2])
    try readWakes(results[3])
    return try readGroupFormat(results[1])
  }

  /// Moves the group's format up if every member now reads a newer one
  /// (a member retired, or gone past the window), and returns it; reads
  /// which other members announce merge rules other than `rules`, and how
  /// the group wakes its members (a member came, went or upgraded).
  @discardableResult
  func advanceFormat(group: String, host: String, rules: String) throws -> LogFormat {
    let results = try exchange([
      Statement("SELECT gs_advance_5($1)", [group]), Self.differingRulesStatement(group: group, host: host, rules: rules),
      Self.wakesStatement(group: group, host: host),
    ])
    try readDifferingRules(results[1])
    try readWakes(results[2])
    return try readGroupFormat(results[0])
  }

  /// The members of `group` besides `host`, not retired, that announced
  /// within the member window rules other than `rules` (a relay before
  /// version 3 announces none).
  private static func differingRulesStatement(group: String, host: String, rules: String) -> Statement {
    Statement(
      """
      SELECT host, merge_rules FROM gs_peer
      WHERE grp = $1 AND host <> $2 AND retired_at IS NULL AND merge_rules IS NOT NULL AND merge_rules <> $3
        AND announced_at > now() - interval '\(SharedSchema.memberWindow)'
      ORDER BY host
      """, [group, host, rules])
  }

  private func readDifferingRules(_ rows: PostgresRows) throws {
    var differing: [String: String] = [:]
    for row in rows {
      differing[try row.decode(String?.self, at: 0) ?? "?"] = try row.decode(String?.self, at: 1) ?? ""
    }
    differingRules = differing
  }

  private func readGroupFormat(_ rows: PostgresRows) throws -> LogFormat {
    guard let number = try rows.first?.decode(Int?.self, at: 0) else {
      throw RelayError.unexpectedAnswer(statement: "gs_advance_5", problem: "it returned no format")
    }
    groupFormat = LogFormat(rawValue: number)
    return groupFormat
  }

  /// Retires `host` from `group` for good: the group's format no longer
  /// waits for it (it is a member again if its relay ever announces
  /// itself). An administrator's act: under row-level security only the
  /// tables' owner may. Returns the group's format afterwards.
  @discardableResult
  func retire(group: String, host: String) throws -> LogFormat {
    let results = try exchange([
      Statement(
        """
        INSERT INTO gs_peer AS p (grp, host, version, reads, retired_at) VALUES ($1, $2, '1', '{1}', now())
        ON CONFLICT (grp, host) DO UPDATE SET retired_at = now()
        """, [group, host]),
      Statement("SELECT gs_advance_5($1)", [group]),
    ])
    return try readGroupFormat(results[1])
  }

  /// Records, in a round trip of its own, where `replica` holds (nil: it
  /// does not): no purge passes that position.
  func recordHold(_ replica: Replica, at position: Int64?) throws {
    _ = try exchange([
      Statement(
        "UPDATE gs_host SET held_at = $4::bigint WHERE grp = $1 AND store = $2 AND host = $3",
        [replica.group, replica.store, replica.host, position]),
    ])
  }

  /// Sets `group`'s settings (an administrator's act), in one transaction;
  /// makes or migrates the objects first if this role may and they are
  /// missing or older.
  func configure(group: String, settings: GroupSettings) throws {
    let access = try inspectAccess()
    if !access.isCurrent, (access.schema?.version ?? 0) < SharedSchema.version {
      do {
        try createTables()
      } catch SQLState.insufficientPrivilege {
        throw RelayError.sharedTablesUnavailable(role: access.role, problem: access.problem)
      }
    }
    do {
      try connection.transaction {
        for statement in settings.statements(group: group) { try connection.query(statement) }
      }
    } catch SQLState.insufficientPrivilege {
      throw RelayError.missingPrivileges(
        role: access.role, missing: ["UPDATE on gs_group (the group's settings are an administrator's: the tables' owner)"])
    }
  }

  /// Where `group`'s fleet stands: its format and settings, and each
  /// host's version, formats, last sign of life and holds.
  func fleet(group: String) throws -> GroupFleet {
    let results = try exchange([
      Statement(
        """
        SELECT coalesce(g.format, 1), g.retention, coalesce(g.retention_passes_members, false),
          coalesce(g.max_shipment_bytes, \(SharedSchema.defaultMaxShipmentBytes))
        FROM (SELECT 1) one LEFT JOIN gs_group g ON g.grp = $1
        """, [group]),
      Statement(
        """
        SELECT coalesce(p.host, h.host), p.version, coalesce(array_to_string(p.reads, ','), '1'),
          to_char(p.announced_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
          to_char(h.seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), h.holds, p.retired_at IS NOT NULL,
          to_jsonb(p) ->> 'transport'
        FROM (SELECT * FROM gs_peer WHERE grp = $1) p
        FULL JOIN (
          SELECT host, max(seen_at) AS seen_at,
            string_agg(store || ':' || held_at, ',' ORDER BY store) FILTER (WHERE held_at IS NOT NULL) AS holds
          FROM gs_host WHERE grp = $1 GROUP BY host) h ON h.host = p.host
        ORDER BY 1
        """, [group]),
    ])
    let members = try results[1].map { row in
      GroupFleet.Member(
        host: try row.decode(String?.self, at: 0) ?? "?", version: try row.decode(String?.self, at: 1),
        reads: (try row.decode(String?.self, at: 2) ?? "1").split(separator: ",").compactMap { Int($0) },
        announcedAt: try row.decode(String?.self, at: 3), seenAt: try row.decode(String?.self, at: 4),
        holds: (try row.decode(String?.self, at: 5) ?? "").split(separator: ",").map(String.init),
        retired: try row.decode(Bool.self, at: 6), transport: try row.decode(String?.self, at: 7))
    }
    let row = results[0].first
    let settings = GroupFleet.Settings(
      retention: try row?.decode(Int64?.self, at: 1).map { .entries($0) } ?? .everything,
      retentionPassesMembers: try row?.decode(Bool.self, at: 2) ?? false,
      maxShipmentBytes: try row?.decode(Int64?.self, at: 3) ?? SharedSchema.defaultMaxShipmentBytes)
    return GroupFleet(
      group: group, format: try row?.decode(Int?.self, at: 0) ?? 1, settings: settings, members: members)
  }
}
