import Foundation

/// What a relay's role may do on the shared tables: the grants the set-up
/// gives (``AccessSetup``) and the relay checks at connect, from one list.
extension SharedLog {
  /// A privilege the relay needs: on a table (on some of its columns
  /// only, when `columns` names them), on a sequence, or on `gs_ship`.
  struct Grant: Sendable {
    enum Object: Sendable {
      case table(String)
      case sequence(String)
      case shipFunction
    }

    let privilege: String
    let object: Object
    let columns: [String]
    /// Needed only under row-level security (`gs_member`, which only the
    /// set-up makes): a relay that finds no such table does not miss it.
    let onlyUnderRowSecurity: Bool

    init(_ privilege: String, _ object: Object, _ columns: [String] = [], onlyUnderRowSecurity: Bool = false) {
      self.privilege = privilege
      self.object = object
      self.columns = columns
      self.onlyUnderRowSecurity = onlyUnderRowSecurity
    }

    /// How the object is named in `GRANT` and in the relay's messages.
    var objectName: String {
      switch object {
      case .table(let name), .sequence(let name): name
      case .shipFunction: "gs_ship"
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
      case .shipFunction: return "GRANT \(privilege) ON FUNCTION \(SharedLog.shipSignature) TO \(role)"
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
        expression = columns.map { "has_column_privilege(to_regclass('\(name)'), '\($0)', '\(privilege)')" }
          .joined(separator: " AND ")
      case .sequence(let name):
        expression = "has_sequence_privilege(to_regclass('\(name)'), '\(privilege)')"
      case .shipFunction:
        expression = "has_function_privilege(to_regprocedure('\(SharedLog.shipSignature)'), '\(privilege)')"
      }
      return onlyUnderRowSecurity ? "coalesce(\(expression), true)" : "(\(expression))"
    }
  }

  /// Every privilege a relay uses, and no more: it reads its groups' rows,
  /// enrolls its replicas (`gs_host`, `gs_clock`), takes positions,
  /// writes images, entries and conflicts through `gs_ship`, moves its
  /// places, and purges entries (`DELETE` in `gs_ship`). `gs_change` is
  /// never updated.
  static let grants: [Grant] = [
    Grant("SELECT", .table("gs_clock")),
    Grant("INSERT", .table("gs_clock"), ["grp", "store"]),
    Grant("UPDATE", .table("gs_clock"), ["seq", "purged_through"]),
    Grant("SELECT", .table("gs_change")),
    Grant("INSERT", .table("gs_change"), ["grp", "store", "seq", "origin_host", "origin_seq", "body"]),
    Grant("DELETE", .table("gs_change")),
    Grant("SELECT", .table("gs_row")),
    Grant("INSERT", .table("gs_row"), ["grp", "store", "tbl", "gid", "seq", "origin_host", "columns", "data"]),
    Grant("UPDATE", .table("gs_row"), ["seq", "origin_host", "columns", "data"]),
    Grant("SELECT", .table("gs_host")),
    Grant("INSERT", .table("gs_host"), ["grp", "store", "host"]),
    Grant("UPDATE", .table("gs_host"), ["shipped_seq", "applied_seq", "seen_at"]),
    Grant("SELECT", .table("gs_conflict")),
    Grant(
      "INSERT", .table("gs_conflict"),
      ["grp", "store", "seq", "tbl", "gid", "rule", "winner_host", "loser_host", "record"]),
    Grant("USAGE", .sequence("gs_conflict_id_seq")),
    Grant("EXECUTE", .shipFunction),
    Grant("SELECT", .table("gs_member"), onlyUnderRowSecurity: true),
  ]

  /// The relay's tables, as `to_regclass` names them.
  static let tableNames = ["gs_clock", "gs_change", "gs_row", "gs_host", "gs_conflict"]

  /// What the server holds and what this session's role may do there.
  struct Access: Sendable {
    /// `current_user`.
    let role: String
    /// Tables that do not exist, and whether `gs_ship` is missing or not
    /// the relay's own.
    let missingTables: [String]
    let shipFunctionCurrent: Bool
    /// Whether row-level security applies to this role on `gs_change`
    /// (false for the tables' owner, a superuser, or without policies).
    let rowSecurityActive: Bool
    let memberTableExists: Bool
    /// The labels of the ``grants`` the role lacks.
    let missingPrivileges: [String]

    /// Whether the tables and `gs_ship` are there and current.
    var isCurrent: Bool { missingTables.isEmpty && shipFunctionCurrent }

    /// What is missing or out of date, in words.
    var problem: String {
      var parts: [String] = []
      if !missingTables.isEmpty { parts.append("no table \(missingTables.joined(separator: ", "))") }
      if !shipFunctionCurrent { parts.append("gs_ship missing or another version") }
      return parts.joined(separator: "; ")
    }
  }

  /// Reads, in one round trip, whether the tables and `gs_ship` are
  /// there and current, whether row-level security applies, and which
  /// privileges the role lacks.
  func inspectAccess() throws -> Access {
    let missing = Self.tableNames.map { "CASE WHEN to_regclass('\($0)') IS NULL THEN '\($0)' END" }
    let state = Statement(
      """
      SELECT current_user, array_to_string(ARRAY[\(missing.joined(separator: ", "))], ','),
        EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = to_regprocedure($1) AND p.prosrc = $2),
        coalesce(row_security_active(to_regclass('gs_change')), false), to_regclass('gs_member') IS NOT NULL
      """, [Self.shipSignature, Self.shipSource])
    let values = Self.grants.enumerated().map { "($\($0.offset + 1), \($0.element.check))" }
    let privileges = Statement(
      "SELECT v.label FROM (VALUES \(values.joined(separator: ", "))) AS v(label, granted) WHERE v.granted IS NOT TRUE",
      Self.grants.map(\.label))
    let results = try connection.run([state, privileges])
    let row = results[0].first ?? []
    func column(_ index: Int) -> String? { index < row.count ? row[index] : nil }
    return Access(
      role: column(0) ?? "?",
      missingTables: (column(1) ?? "").split(separator: ",").map(String.init),
      shipFunctionCurrent: column(2) == "t", rowSecurityActive: column(3) == "t", memberTableExists: column(4) == "t",
      missingPrivileges: results[1].compactMap { $0.first ?? nil })
  }

  /// Makes sure this session can act as `host` in `group`: creates the
  /// tables and `gs_ship` when they are missing or out of date (as the
  /// relay always did, when its role may), then checks the role's
  /// privileges and, under row-level security, its membership.
  ///
  /// - Throws: ``RelayError/sharedTablesUnavailable(role:problem:)``,
  ///   ``RelayError/missingPrivileges(role:missing:)``,
  ///   ``RelayError/notAMember(role:host:group:)``, each naming what an
  ///   administrator has to give.
  func prepareAccess(group: String, host: String) throws {
    var access = try inspectAccess()
    if !access.isCurrent {
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
    guard access.rowSecurityActive else { return }
    let member = try connection.execute(
      "SELECT EXISTS (SELECT 1 FROM gs_member WHERE role = current_user AND grp = $1 AND host = $2)", [group, host])
    guard member.first?.first == "t" else {
      throw RelayError.notAMember(role: access.role, host: host, group: group)
    }
  }
}
