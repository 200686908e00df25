// SharedLog+Access: the privileges a relay's role needs, and the checks of what the server holds.
import Foundation

/// What a relay's role may do on the shared tables: the grants the set-up
/// gives (``AccessSetup``) and the relay checks at connect, from one list;
/// and the version of the server's objects (``SharedSchema``).
extension SharedLog {
  /// A privilege the relay needs: on a table (on some of its columns
  /// only, when `columns` names them), on a sequence, or on a function
  /// (by signature).
  struct Grant: Sendable {
    enum Object: Sendable {
      case table(String)
      case sequence(String)
      case function(String)
    }

    let privilege: String
    let object: Object
    let columns: [String]
    /// Needed only under row-level security (`gs_member`, which only the
    /// set-up fills): a relay that finds no such table does not miss it.
    let onlyUnderRowSecurity: Bool
    /// Used by the relays of the versions before only: the set-up gives
    /// it while an administrator says they still run
    /// (``AccessSetup/allowsOlderRelays``); this relay does not check it.
    let onlyForOlderRelays: Bool

    init(
      _ privilege: String, _ object: Object, _ columns: [String] = [], onlyUnderRowSecurity: Bool = false,
      onlyForOlderRelays: Bool = false
    ) {
      self.privilege = privilege
      self.object = object
      self.columns = columns
      self.onlyUnderRowSecurity = onlyUnderRowSecurity
      self.onlyForOlderRelays = onlyForOlderRelays
    }

    /// How the object is named in `GRANT` and in the relay's messages.
    var objectName: String {
      switch object {
      case .table(let name), .sequence(let name): name
      case .function(let signature): String(signature.prefix { $0 != "(" })
      }
    }

    /// `"INSERT on gs_change(grp, store)"`, `"EXECUTE on gs_ship"`.
    var label: String {
      "\(privilege) on \(objectName)" + (columns.isEmpty ? "" : "(\(columns.joined(separator: ", ")))")
    }

    /// The `GRANT` of this privilege to `role` (an identifier, quoted).
    func grantStatement(to role: String) -> String {
      switch object {
      case .table(let name):
        let columnList = columns.isEmpty ? "" : " (\(columns.joined(separator: ", ")))"
        return "GRANT \(privilege)\(columnList) ON TABLE \(name) TO \(role)"
      case .sequence(let name): return "GRANT \(privilege) ON SEQUENCE \(name) TO \(role)"
      case .function(let signature): return "GRANT \(privilege) ON FUNCTION \(signature) TO \(role)"
      }
    }

    /// A boolean expression true when the session's role holds the
    /// privilege; NULL when the object does not exist (the `oid` forms of
    /// the `has_*_privilege` functions never fail on a missing object).
    var check: String {
      let expression: String
      switch object {
      case .table(let name) where columns.isEmpty:
        expression = "has_table_privilege(to_regclass('\(name)'), '\(privilege)')"
      case .table(let name):
        // has_column_privilege fails on a column that does not exist (a
        // server of an older version): NULL, not granted, instead.
        expression = columns.map { column in
          "CASE WHEN EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('\(name)') "
            + "AND attname = '\(column)' AND NOT attisdropped) "
            + "THEN has_column_privilege(to_regclass('\(name)'), '\(column)', '\(privilege)') END"
        }.joined(separator: " AND ")
      case .sequence(let name):
        expression = "has_sequence_privilege(to_regclass('\(name)'), '\(privilege)')"
      case .function(let signature):
        expression = "has_function_privilege(to_regprocedure('\(signature)'), '\(privilege)')"
      }
      return onlyUnderRowSecurity ? "coalesce(\(expression), true)" : "(\(expression))"
    }
  }

  /// Every privilege a relay uses, and no more: it reads its groups' rows,
  /// enrolls its replicas (`gs_host`, `gs_clock`), moves its applied
  /// places and holds, announces what it reads and its transport, and
  /// takes its lease (`gs_peer`: its own rows, row-level security sees
  /// to it). Everything else it writes through the functions of version 5,
  /// which check who calls and what it carries: a shipment (`gs_ship_5`:
  /// the position, the images, the entry, its conflicts, the purge), a
  /// settled shipment's locks (`gs_lock_5`) and the group's format
  /// (`gs_advance_5`). No host role writes the clock, the entries, the
  /// images or the conflicts directly.
  ///
  /// The relays of the versions before wrote those themselves, through
  /// `gs_ship`, `gs_ship_2` or `gs_ship_3` with the caller's rights: their
  /// grants (``Grant/onlyForOlderRelays``) are given only while an
  /// administrator says such relays still run (``AccessSetup/allowsOlderRelays``).
  static let grants: [Grant] = [
    Grant("SELECT", .table("gs_clock")),
    Grant("INSERT", .table("gs_clock"), ["grp", "store"]),
    Grant("SELECT", .table("gs_change")),
    Grant("SELECT", .table("gs_row")),
    Grant("SELECT", .table("gs_host")),
    Grant("INSERT", .table("gs_host"), ["grp", "store", "host"]),
    Grant("UPDATE", .table("gs_host"), ["applied_seq", "seen_at", "held_at"]),
    Grant("SELECT", .table("gs_conflict")),
    Grant("SELECT", .table("gs_peer")),
    Grant(
      "INSERT", .table("gs_peer"),
      ["grp", "host", "version", "reads", "merge_rules", "transport", "lease_holder", "lease_until"]),
    Grant(
      "UPDATE", .table("gs_peer"),
      ["version", "reads", "merge_rules", "announced_at", "retired_at", "transport", "lease_holder", "lease_until"]),
    Grant("SELECT", .table("gs_group")),
    Grant("SELECT", .table("gs_schema")),
    Grant("EXECUTE", .function(SharedSchema.ship5Signature)),
    Grant("EXECUTE", .function(SharedSchema.lock5Signature)),
    Grant("EXECUTE", .function(SharedSchema.advance5Signature)),
    Grant("EXECUTE", .function(SharedSchema.window4Signature)),
    Grant("SELECT", .table("gs_member"), onlyUnderRowSecurity: true),
    // Relays 1-4: the clock, the entries, the images and the conflicts
    // written with the caller's rights.
    Grant("UPDATE", .table("gs_clock"), ["seq", "purged_through"], onlyForOlderRelays: true),
    Grant(
      "INSERT", .table("gs_change"), ["grp", "store", "seq", "origin_host", "origin_seq", "body", "format"],
      onlyForOlderRelays: true),
    Grant("DELETE", .table("gs_change"), onlyForOlderRelays: true),
    Grant(
      "INSERT", .table("gs_row"), ["grp", "store", "tbl", "gid", "seq", "origin_host", "columns", "data"],
      onlyForOlderRelays: true),
    Grant("UPDATE", .table("gs_row"), ["seq", "origin_host", "columns", "data"], onlyForOlderRelays: true),
    Grant("UPDATE", .table("gs_host"), ["shipped_seq"], onlyForOlderRelays: true),
    Grant(
      "INSERT", .table("gs_conflict"),
      ["grp", "store", "seq", "tbl", "gid", "rule", "winner_host", "loser_host", "record", "format"],
      onlyForOlderRelays: true),
    Grant("USAGE", .sequence("gs_conflict_id_seq"), onlyForOlderRelays: true),
    Grant("EXECUTE", .function(SharedSchema.ship3Signature), onlyForOlderRelays: true),
    Grant("EXECUTE", .function(SharedSchema.ship2Signature), onlyForOlderRelays: true),
    Grant("EXECUTE", .function(SharedSchema.advance2Signature), onlyForOlderRelays: true),
    Grant("EXECUTE", .function(SharedSchema.ship1Signature), onlyForOlderRelays: true),
  ]

  /// What this relay checks it holds (``grants`` less the older relays' own).
  static var checkedGrants: [Grant] { grants.filter { !$0.onlyForOlderRelays } }

  /// The version of the server's objects, as `gs_schema` says it.
  struct ServerSchema: Sendable, Equatable {
    let version: Int
    /// The oldest relay schema it serves, and the relay version of it.
    let servesFrom: Int
    let servesFromRelay: String
  }

  /// What the server holds and what this session's role may do there.
  struct Access: Sendable {
    /// `current_user`.
    let role: String
    /// Tables that do not exist, and functions missing or not as this
    /// build makes them.
    let missingTables: [String]
    let staleFunctions: [String]
    /// nil: no `gs_schema` (no objects, or those of relays before versions).
    let schema: ServerSchema?
    /// Whether row-level security applies to this role on `gs_change`
    /// (false for the tables' owner, a superuser, or without policies).
    let rowSecurityActive: Bool
    /// Whether `gs_member` exists.
    let memberTableExists: Bool
    /// The labels of the ``checkedGrants`` the role lacks.
    let missingPrivileges: [String]

    /// Whether the objects are there, at this build's version or newer.
    var isCurrent: Bool {
      missingTables.isEmpty && staleFunctions.isEmpty && (schema?.version ?? 0) >= SharedSchema.version
    }

    /// What is missing or out of date, in words.
    var problem: String {
      var parts: [String] = []
      if !missingTables.isEmpty { parts.append("no table \(missingTables.joined(separator: ", "))") }
      if !staleFunctions.isEmpty {
        parts.append("\(staleFunctions.joined(separator: ", ")) missing or another version")
      }
      let version = schema?.version ?? (missingTables.contains("gs_change") ? 0 : 1)
      if version < SharedSchema.version {
        parts.append("server schema \(version), this relay needs \(SharedSchema.version)")
      }
      return parts.joined(separator: "; ")
    }
  }

  /// Reads, in one round trip (two where `gs_schema` exists), which
  /// objects are there and current, their version, whether row-level
  /// security applies, and which privileges the role lacks.
  func inspectAccess() throws -> Access {
    let missing = SharedSchema.tableNames.map { "CASE WHEN to_regclass('\($0)') IS NULL THEN '\($0)' END" }
    let functions = SharedSchema.functions
    let stale = functions.indices.map { index in
      "CASE WHEN NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = to_regprocedure($\(2 * index + 1)) "
        + "AND p.prosrc = $\(2 * index + 2)) THEN $\(2 * index + 1) END"
    }
    let state = Statement(
      """
      SELECT current_user, array_to_string(ARRAY[\(missing.joined(separator: ", "))], ','),
        array_to_string(ARRAY[\(stale.joined(separator: ", "))], ';'),
        coalesce(row_security_active(to_regclass('gs_change')), false), to_regclass('gs_member') IS NOT NULL
      """, functions.flatMap { [$0.signature, $0.source] })
    let values = Self.checkedGrants.enumerated().map { "($\($0.offset + 1), \($0.element.check))" }
    let privileges = Statement(
      "SELECT v.label FROM (VALUES \(values.joined(separator: ", "))) AS v(label, granted) WHERE v.granted IS NOT TRUE",
      Self.checkedGrants.map(\.label))
    let results = try connection.query([state, privileges])
    let row = results[0].first
    let missingTables = (try row?.decode(String?.self, at: 1) ?? "").split(separator: ",").map(String.init)
    var schema: ServerSchema?
    if !missingTables.contains("gs_schema") {
      schema = try connection.query("SELECT version, serves_from, serves_from_relay FROM gs_schema").first
        .flatMap { row in
          guard let version = try row.decode(Int?.self, at: 0), let servesFrom = try row.decode(Int?.self, at: 1)
          else { return nil }
          return ServerSchema(
            version: version, servesFrom: servesFrom, servesFromRelay: try row.decode(String?.self, at: 2) ?? "?")
        }
    }
    return Access(
      role: try row?.decode(String?.self, at: 0) ?? "?", missingTables: missingTables,
      staleFunctions: (try row?.decode(String?.self, at: 2) ?? "").split(separator: ";").map {
        String($0.prefix { $0 != "(" })
      },
      schema: schema, rowSecurityActive: try row?.decode(Bool.self, at: 3) ?? false,
      memberTableExists: try row?.decode(Bool.self, at: 4) ?? false,
      missingPrivileges: try results[1].compactMap { try $0.decode(String?.self, at: 0) })
  }

  /// Makes sure this session can act as `host` in `group`: creates the
  /// objects, or migrates them forward, when they are missing or older
  /// than this build's (as the relay always did, when its role may), never
  /// over a newer version; then checks the role's privileges and, under
  /// row-level security, its membership.
  ///
  /// - Throws: ``RelayError/serverSchemaTooNew(server:servesFrom:needsRelay:)``
  ///   when the server's objects no longer serve this relay,
  ///   ``RelayError/sharedTablesUnavailable(role:problem:)``,
  ///   ``RelayError/missingPrivileges(role:missing:)``,
  ///   ``RelayError/notAMember(role:host:group:)``, each naming what an
  ///   administrator has to give.
  func prepareAccess(group: String, host: String) throws {
    var access = try inspectAccess()
    if let schema = access.schema, schema.version > SharedSchema.version {
      // A newer relay migrated the server: use what it still serves, and
      // replace nothing of it.
      guard schema.servesFrom <= SharedSchema.version else {
        throw RelayError.serverSchemaTooNew(
          server: schema.version, servesFrom: schema.servesFrom, needsRelay: schema.servesFromRelay)
      }
      guard access.missingTables.isEmpty, access.staleFunctions.isEmpty else {
        throw RelayError.sharedTablesUnavailable(role: access.role, problem: access.problem)
      }
    } else if !access.isCurrent {
      do {
        try createTables()
      } catch SQLState.insufficientPrivilege {
        throw RelayError.sharedTablesUnavailable(role: access.role, problem: access.problem)
      }
      access = try inspectAccess()
    }
    var missing = access.missingPrivileges
    if access.rowSecurityActive && !access.memberTableExists { missing.append("SELECT on gs_member (no such table)") }
    guard missing.isEmpty else { throw RelayError.missingPrivileges(role: access.role, missing: missing) }
    entriesRideWakeUps = !access.rowSecurityActive
    guard access.rowSecurityActive else { return }
    let member = try connection.query(
      "SELECT EXISTS (SELECT 1 FROM gs_member WHERE role = current_user AND grp = $1 AND host = $2)", [group, host])
    guard let row = member.first, try row.decode(Bool.self, at: 0) else {
      throw RelayError.notAMember(role: access.role, host: host, group: group)
    }
  }
}
