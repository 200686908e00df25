// The administrator's set-up (`--print-setup`): the shared tables, one
// login role per host with only the grants a relay needs, row-level security.
import Foundation
import GroupSync

/// The SQL an administrator runs once, so that each host's relay connects
/// as a role of its own that can do what a relay needs and no more, the
/// server enforcing it. For example:
///
/// ```swift
/// let setup = try AccessSetup(
///   group: "shop", members: [AccessSetup.Member(parsing: "web-1"), AccessSetup.Member(parsing: "web-2")])
/// print(setup.script)  // | psql -v ON_ERROR_STOP=1 ADMIN_CONNINFO
/// ```
///
/// The script, one transaction, safe to run again (to add hosts, or other
/// groups), makes:
/// - the relay's tables and functions at this build's version
///   (`gs_schema` names it), with the statements relays use; the objects of
///   the version before stay, so that its relays run beside this one;
/// - `gs_member(role, grp, host)`: which login role may act as which
///   host in which group;
/// - the `NOLOGIN` role ``relayRole``, holding exactly the privileges a
///   relay uses (column by column where it writes), and one `LOGIN` role
///   per member that is granted it (made if missing, without a password);
/// - row-level security on every table: a role reads only its groups'
///   rows, enrolls and moves only its own places and announcements; it
///   reads only its own rows of `gs_member`;
/// - no direct write on the clock, the entries, the row images or the
///   conflicts: a host's relay writes those through `gs_ship_5` and
///   `gs_lock_5`, which run with their owner's rights and check that the
///   session's role acts as the host it names and what the shipment
///   carries (unless ``allowsOlderRelays``, for a rolling upgrade);
/// - the group's ``settings``.
///
/// `PUBLIC` loses every privilege on the tables and functions. Under
/// row-level security a wake-up carries no entry (a member could forge
/// one), so receivers read each entry from the log.
public struct AccessSetup: Sendable, Equatable {
  /// A login role and the host name it acts as in the group.
  public struct Member: Sendable, Equatable {
    /// The login role the host's relay connects as (`user=` in its conninfo).
    public let role: String
    /// The host name the role may act as (the relay's `--host`).
    public let host: String

    /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming what is
    ///   wrong with the role or host name.
    public init(role: String, host: String) throws {
      try AccessSetup.validate(role: role)
      guard RelayStatusFile.isValidHostName(host) else {
        throw RelayError.invalidConfiguration(
          "host name '\(host)' of role '\(role)': use 1-64 letters, digits, '-', '_' or '.' (not first)")
      }
      self.role = role
      self.host = host
    }

    /// Parses `ROLE` or `ROLE:HOST` (the host name defaults to the role's).
    ///
    /// - Throws: ``RelayError/invalidConfiguration(_:)``.
    public init(parsing argument: String) throws {
      let parts = argument.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
      guard parts.count <= 2, parts.allSatisfy({ !$0.isEmpty }) else {
        throw RelayError.invalidConfiguration("'\(argument)': expected ROLE or ROLE:HOST")
      }
      try self.init(role: parts[0], host: parts.count == 2 ? parts[1] : parts[0])
    }
  }

  /// The `NOLOGIN` role that holds the relay's privileges; every member's
  /// role is granted it.
  public static let relayRole = "groupsync_relay"

  /// The group's name in PostgreSQL, as its relays use it (`--group`).
  public let group: String
  /// The group's hosts, each with its login role.
  public let members: [Member]
  /// The group's settings the script sets (retention, the size of a
  /// shipment); those it does not name stay as they are.
  public let settings: GroupSettings
  /// Whether relays before version 5 still run in the group (a rolling
  /// upgrade under way): the script then gives the relay's role what they
  /// write with, the clock, the entries, the images and the conflicts
  /// directly, so that any host could rewrite them. Run the script again
  /// without it once every host runs relay 5 or later: the group's hosts
  /// can then no longer harm each other (the Threat model article).
  public let allowsOlderRelays: Bool

  /// - Throws: ``RelayError/invalidConfiguration(_:)`` when there is no
  ///   member, the group name is not 1-200 bytes of printable text, two
  ///   members claim one host, or a setting is out of range.
  public init(
    group: String, members: [Member], settings: GroupSettings = GroupSettings(), allowsOlderRelays: Bool = false
  ) throws {
    try settings.validate()
    guard !group.isEmpty, group.utf8.count <= 200, !group.unicodeScalars.contains(where: Self.isControl) else {
      throw RelayError.invalidConfiguration("group name '\(group)': 1-200 bytes, no control characters")
    }
    guard !members.isEmpty else {
      throw RelayError.invalidConfiguration("no role: name at least one ROLE or ROLE:HOST")
    }
    var hosts: [String: String] = [:]
    for member in members {
      if let other = hosts[member.host], other != member.role {
        throw RelayError.invalidConfiguration(
          "host '\(member.host)' is claimed by roles '\(other)' and '\(member.role)': one role per host")
      }
      hosts[member.host] = member.role
    }
    self.group = group
    self.members = members
    self.settings = settings
    self.allowsOlderRelays = allowsOlderRelays
  }

  // MARK: Names

  /// Role names: 1-63 bytes (longer ones the server cuts short) of ASCII
  /// letters, digits, `_`, `-`, `.` and `@`, so that every one reads the
  /// same quoted in any statement; not a name the server reserves.
  static func validate(role: String) throws {
    let allowed = role.unicodeScalars.allSatisfy { scalar in
      scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || "_-.@".unicodeScalars.contains(scalar))
    }
    guard (1...63).contains(role.utf8.count), allowed else {
      throw RelayError.invalidConfiguration(
        "role name '\(role)': use 1-63 ASCII letters, digits, '_', '-', '.' or '@'")
    }
    let reserved = ["public", "none", "current_user", "current_role", "session_user", relayRole]
    guard !role.lowercased().hasPrefix("pg_"), !reserved.contains(role.lowercased()) else {
      throw RelayError.invalidConfiguration("role name '\(role)' is reserved")
    }
  }

  private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
    scalar.properties.generalCategory == .control
  }

  /// `name` as an SQL identifier: in double quotes, each `"` doubled.
  static func identifier(_ name: String) -> String {
    "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
  }

  /// `text` as an SQL string literal whatever `standard_conforming_strings`
  /// says: an escape string, `\` and `'` escaped.
  static func literal(_ text: String) -> String {
    "E'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "''") + "'"
  }

  // MARK: The script

  /// The set-up as one SQL script, for `psql -v ON_ERROR_STOP=1`.
  public var script: String {
    let relay = Self.identifier(Self.relayRole)
    let roles = Array(Set(members.map(\.role))).sorted()
    let createRoles = roles.map { role in
      "  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = \(Self.literal(role))) THEN\n"
        + "    CREATE ROLE \(Self.identifier(role)) LOGIN;\n  END IF;"
    }.joined(separator: "\n")
    var lines: [String] = [
      "-- GroupSync relay: the shared tables, roles and row-level security for group \(group).",
      "-- Run once as an administrator (a role that may create tables and roles):",
      "--   groupsync relay --print-setup --group GROUP ROLE[:HOST]... | psql -v ON_ERROR_STOP=1 ADMIN_CONNINFO",
      "-- Safe to run again; run it again to add hosts or groups. Then give each role a password:",
    ]
    lines += roles.map { "--   \\password \(Self.identifier($0))   (or ALTER ROLE \(Self.identifier($0)) PASSWORD '...')" }
    lines += [
      "-- and put it in ~/.pgpass (or the file PGPASSFILE names) of the user that runs the relay,",
      "-- never on a command line: the relay connects with user=ROLE in --postgres and libpq reads it.",
      "BEGIN;",
      "SET LOCAL client_min_messages = warning;",
      // In a DO block: psql would print a SELECT's row.
      "DO $do$ BEGIN PERFORM \(SharedLog.schemaLock); END $do$;",
    ]
    lines += SharedSchema.statements.map { $0 + ";" }
    lines += [
      "-- The relay's role, the hosts' login roles (no password: set one), and the schema's use.",
      """
      DO $do$
      BEGIN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = \(Self.literal(Self.relayRole))) THEN
          CREATE ROLE \(relay) NOLOGIN;
        END IF;
      \(createRoles)
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO \(relay)', current_schema());
      END
      $do$;
      """,
      "-- Nothing for PUBLIC; for the relay's role what a relay uses, no more.",
    ]
    let tables = SharedSchema.tableNames.joined(separator: ", ")
    for grantee in ["PUBLIC", relay] {
      lines += [
        "REVOKE ALL ON TABLE \(tables) FROM \(grantee);",
        "REVOKE ALL ON SEQUENCE gs_conflict_id_seq FROM \(grantee);",
      ]
      lines += SharedSchema.functions.map { "REVOKE ALL ON FUNCTION \($0.signature) FROM \(grantee);" }
    }
    let grants = SharedLog.grants.filter { allowsOlderRelays || !$0.onlyForOlderRelays }
    if allowsOlderRelays {
      lines.append("-- --older-relays: what relays before version 5 write with, until every host runs relay 5.")
    }
    lines += grants.map { $0.grantStatement(to: relay) + ";" }
    lines += roles.map { "GRANT \(relay) TO \(Self.identifier($0));" }
    lines.append("-- Who may act as which host in group \(group).")
    lines += members.map { member in
      "INSERT INTO gs_member(role, grp, host) VALUES (\(Self.literal(member.role)), \(Self.literal(group)), "
        + "\(Self.literal(member.host))) ON CONFLICT (grp, host) DO UPDATE SET role = excluded.role;"
    }
    lines.append("-- The group's settings (an administrator's: no host may change them).")
    lines += settings.statements(group: group).map { $0 + ";" }
    lines.append("-- Row-level security: each role reads its groups' rows and writes under its own host name.")
    for table in SharedSchema.tableNames where table != "gs_schema" {
      lines.append("ALTER TABLE \(table) ENABLE ROW LEVEL SECURITY;")
    }
    for policy in Self.policies {
      lines.append("DROP POLICY IF EXISTS \(policy.name) ON \(policy.table);")
      lines.append("CREATE POLICY \(policy.name) ON \(policy.table) \(policy.rule);")
    }
    lines.append("COMMIT;")
    return lines.joined(separator: "\n") + "\n"
  }

  /// The groups the session's role is a member of.
  private static let myGroups = "(SELECT m.grp FROM gs_member m WHERE m.role = current_user)"
  /// The (group, host) pairs the session's role may act as.
  private static let myHosts = "(SELECT m.grp, m.host FROM gs_member m WHERE m.role = current_user)"

  /// Every policy, by table. A command no policy allows is refused (rows
  /// filtered out, or new rows rejected with SQLSTATE 42501).
  private static let policies: [(table: String, name: String, rule: String)] = [
    ("gs_clock", "gs_clock_read", "FOR SELECT USING (grp IN \(myGroups))"),
    ("gs_clock", "gs_clock_enroll", "FOR INSERT WITH CHECK (grp IN \(myGroups))"),
    ("gs_clock", "gs_clock_advance", "FOR UPDATE USING (grp IN \(myGroups)) WITH CHECK (grp IN \(myGroups))"),
    ("gs_change", "gs_change_read", "FOR SELECT USING (grp IN \(myGroups))"),
    ("gs_change", "gs_change_append", "FOR INSERT WITH CHECK ((grp, origin_host) IN \(myHosts))"),
    // Retention's purge only: entries the clock has let go.
    ("gs_change", "gs_change_purge",
     "FOR DELETE USING (grp IN \(myGroups) AND seq <= (SELECT k.purged_through FROM gs_clock k "
       + "WHERE k.grp = gs_change.grp AND k.store = gs_change.store))"),
    ("gs_row", "gs_row_read", "FOR SELECT USING (grp IN \(myGroups))"),
    ("gs_row", "gs_row_write", "FOR INSERT WITH CHECK ((grp, origin_host) IN \(myHosts))"),
    // A newer image replaces any host's; it is written under this one's.
    ("gs_row", "gs_row_overwrite",
     "FOR UPDATE USING (grp IN \(myGroups)) WITH CHECK ((grp, origin_host) IN \(myHosts))"),
    ("gs_host", "gs_host_read", "FOR SELECT USING (grp IN \(myGroups))"),
    ("gs_host", "gs_host_enroll", "FOR INSERT WITH CHECK ((grp, host) IN \(myHosts))"),
    ("gs_host", "gs_host_move",
     "FOR UPDATE USING ((grp, host) IN \(myHosts)) WITH CHECK ((grp, host) IN \(myHosts))"),
    ("gs_conflict", "gs_conflict_read", "FOR SELECT USING (grp IN \(myGroups))"),
    // The shipper settled it: it won or it lost.
    ("gs_conflict", "gs_conflict_record",
     "FOR INSERT WITH CHECK ((grp, winner_host) IN \(myHosts) OR (grp, loser_host) IN \(myHosts))"),
    ("gs_member", "gs_member_own", "FOR SELECT USING (role = current_user)"),
    // Each host announces what it reads, under its own name only; the
    // group's format moves only through gs_advance_2, an administrator
    // retires a member.
    ("gs_peer", "gs_peer_read", "FOR SELECT USING (grp IN \(myGroups))"),
    ("gs_peer", "gs_peer_announce", "FOR INSERT WITH CHECK ((grp, host) IN \(myHosts))"),
    ("gs_peer", "gs_peer_reannounce",
     "FOR UPDATE USING ((grp, host) IN \(myHosts)) WITH CHECK ((grp, host) IN \(myHosts))"),
    ("gs_group", "gs_group_read", "FOR SELECT USING (grp IN \(myGroups))"),
  ]
}
