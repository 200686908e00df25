import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// Hosts that cannot harm each other, tried as an attacker would: under
/// the printed set-up, group `app` has web-1 and web-2, each replicating
/// through its relay as its own role, and mallory, a member whose host is
/// compromised (a session of its role, doing whatever SQL it likes); group
/// `other` has eve. Every attempt is refused or has no effect, and web-1
/// and web-2 go on replicating without a re-synchronisation.
@Suite(.timed)
struct RelayAttackTests {
  /// The group under attack: its two honest hosts, and sessions of
  /// mallory (a member) and eve (another group's).
  struct Fleet: @unchecked Sendable {
    let server: PostgresServer
    let web1: GroupHost
    let web2: GroupHost
    let mallory: SharedLog
    let eve: SharedLog

    /// The log's shared state as the superuser sees it: the clock, every
    /// shipped place and hold, the entries' origins, the members. (Not
    /// the applied places: the honest relays record theirs when they
    /// like, and an attempt on another's is checked where it is made.)
    func state() throws -> [[String?]] {
      try server.query(
        """
        SELECT 'clock', store, seq::text, purged_through::text FROM gs_clock WHERE grp = 'app'
        UNION ALL SELECT 'host', host, shipped_seq::text, coalesce(held_at::text, '-') FROM gs_host WHERE grp = 'app'
        UNION ALL SELECT 'entry', seq::text, origin_host, origin_seq::text FROM gs_change WHERE grp = 'app'
        UNION ALL SELECT 'member', role, grp, host FROM gs_member
        UNION ALL SELECT 'peer', host, array_to_string(reads, ','), coalesce(retired_at::text, '-') FROM gs_peer WHERE grp = 'app'
        UNION ALL SELECT 'group', grp, format || '/' || coalesce(retention::text, '-'), max_shipment_bytes::text FROM gs_group
        ORDER BY 1, 2, 3
        """)
    }
  }

  /// Sets the fleet up, runs `attack`, then checks that web-1 and web-2
  /// still replicate both ways and neither re-synchronised or failed.
  private static func underAttack(_ attack: (Fleet) async throws -> Void) async throws {
    try await PostgresServer.with { server in
      try await RelayAccessTests.setUp(server, group: "app", ["web-1", "web-2", "mallory"])
      try await RelayAccessTests.setUp(server, group: "other", ["eve"])
      let root = try HostsFolder()
      let web1 = try await GroupHost("web-1", root: root.path, conninfo: RelayAccessTests.conninfo(server, as: "web-1"))
      let web2 = try await GroupHost("web-2", root: root.path, conninfo: RelayAccessTests.conninfo(server, as: "web-2"))
      // mallory joins as its relay would: it reads what the others read.
      let mallory = try RelayAccessTests.log(server, as: "mallory")
      try mallory.prepareAccess(group: "app", host: "mallory")
      _ = try mallory.announce(
        group: "app", host: "mallory", version: .current, rules: MergeRules(policy: .objectTrump).fingerprint,
        transport: .notify)
      _ = try mallory.enroll(SharedLog.Replica(group: "app", store: "main", host: "mallory"), place: 0)
      let eve = try RelayAccessTests.log(server, as: "eve")
      try eve.prepareAccess(group: "other", host: "eve")
      try await web1.startRelay()
      try await web2.startRelay()
      try await web1.exec(["INSERT INTO note(title, body) VALUES ('before', 'web-1')"])
      try await waitForConvergence([web1, web2], server: server)

      try await attack(Fleet(server: server, web1: web1, web2: web2, mallory: mallory, eve: eve))

      try await web1.exec(["INSERT INTO note(title, body) VALUES ('after-1', 'web-1')"])
      try await web2.exec(["UPDATE note SET body = 'web-2' WHERE title = 'before'"])
      let content = try await waitForConvergence([web1, web2], server: server)
      #expect(content.values.map { $0[0] + "=" + $0[1] }.sorted() == ["\"after-1\"=\"web-1\"", "\"before\"=\"web-2\""])
      for host in [web1, web2] {
        #expect(host.events("resync").isEmpty, "\(host.name) re-synchronised: \(host.eventLines)")
        #expect(host.events("failed").isEmpty, "\(host.name): \(host.eventLines)")
      }
      try await web1.stopRelay()
      try await web2.stopRelay()
    }
  }

  /// The SQLSTATE and message `body` fails with; nil when it did not fail.
  /// (A shipment's content refused by the server comes as
  /// ``RelayError/shipmentRefused(store:reason:)``, SQLSTATE 22023.)
  private static func refusal(_ body: () throws -> Void) -> (state: SQLState?, message: String)? {
    do {
      try body()
      return nil
    } catch RelayError.postgres(_, let message, let state, _, _) {
      return (state, message)
    } catch RelayError.shipmentRefused(_, let reason) {
      return ("22023", reason)
    } catch {
      return (nil, "\(error)")
    }
  }

  /// Whether `body` fails for want of a privilege (SQLSTATE 42501).
  private static func isRefused(_ body: () throws -> Void) -> Bool {
    refusal(body)?.state == .insufficientPrivilege
  }

  /// A valid body in format 1, of one row of `note`.
  private static func body(gid: String, title: String, table: String = "note") -> String {
    #"{"t":[{"n":"\#(table)","k":["title","body","n","x","b"],"s":false,"r":[{"g":"\#(gid)","b":0,"v":[{"t":"\#(title)"},null,null,null,null]}]}],"c":[]}"#
  }

  /// A shipment of mallory's own, format 1, its body and image as given.
  private static func shipment(
    _ through: Int64, body: String, format: LogFormat = .v1, table: String = "note", gid: String = "m1",
    columns: String = #"["title","body","n","x","b"]"#, data: String? = #"[{"t":"m"},null,null,null,null]"#
  ) -> SharedLog.Shipment {
    SharedLog.Shipment(
      through: through, body: body, format: format,
      winners: [.init(table: table, gid: gid, base: 0, columns: columns, data: data)], conflicts: [])
  }

  private static let mallorysReplica = SharedLog.Replica(group: "app", store: "main", host: "mallory")

  // MARK: The clock, purges and places

  @Test func theClockPurgesAndOtherHostsPlacesAreOutOfAHostsReach() async throws { try await Self.underAttack(Self.theClockPurgesAndOtherHostsPlacesAreOutOfAHostsReachAttack) }

  private static func theClockPurgesAndOtherHostsPlacesAreOutOfAHostsReachAttack(_ fleet: Fleet) async throws {
    let before = try fleet.state()
    let sql = fleet.mallory.connection
    // The issue's own attempts: the clock moved, the log purged by hand.
    #expect(Self.isRefused { try sql.execute("UPDATE gs_clock SET purged_through = seq WHERE grp = 'app'") })
    #expect(Self.isRefused { try sql.execute("UPDATE gs_clock SET seq = seq + 1000 WHERE grp = 'app'") })
    #expect(Self.isRefused { try sql.execute("DELETE FROM gs_change WHERE grp = 'app'") })
    #expect(Self.isRefused { try sql.execute("TRUNCATE gs_change") })
    // The older relays' functions, which wrote with the caller's rights.
    #expect(Self.isRefused {
      try sql.execute(
        "SELECT * FROM gs_ship_3('app', 'main', 'mallory', 1, '{}', 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
          + "'{}', '{}', '{}', false, 1::smallint, NULL, NULL)")
    })
    #expect(Self.isRefused {
      try sql.execute("SELECT gs_purge_point_5('app', 'main', 100, 1, true)")
    })
    // Another host's places and holds: not there to update.
    let moved = try sql.execute(
      "UPDATE gs_host SET applied_seq = 0, held_at = 1 WHERE grp = 'app' AND host <> 'mallory' RETURNING host")
    #expect(moved.isEmpty)
    // Its own shipped place moves only through gs_ship_5.
    #expect(Self.isRefused { try sql.execute("UPDATE gs_host SET shipped_seq = 1000 WHERE host = 'mallory'") })
    // The group's settings are an administrator's.
    #expect(Self.isRefused {
      try sql.execute("UPDATE gs_group SET retention = 1, retention_passes_members = true WHERE grp = 'app'")
    })
    let arguments = [
      "relay", "--configure", "--group", "app", "--postgres", RelayAccessTests.conninfo(fleet.server, as: "mallory"),
      "--retention", "1", "--retention-passes-members", "true",
    ]
    let configure = try await Executables.onThread {
      try ChildProcess(executable: Executables.groupsync, arguments: arguments).finish(timeout: 120)
    }
    #expect(configure.status != 0 && configure.stderr.contains("the group's settings are an administrator's"), "\(configure.stderr)")
    #expect(try fleet.state() == before)
  }

  // MARK: Speaking for another host

  @Test func aHostSpeaksOnlyForItself() async throws { try await Self.underAttack(Self.aHostSpeaksOnlyForItselfAttack) }

  private static func aHostSpeaksOnlyForItselfAttack(_ fleet: Fleet) async throws {
    let before = try fleet.state()
    let mallory = fleet.mallory
    let sql = mallory.connection
    // Entries under another name, through the function and around it.
    let asWeb2 = SharedLog.Replica(group: "app", store: "main", host: "web-2")
    let forged = Self.shipment(50, body: Self.body(gid: "forged", title: "forged"), gid: "forged")
    let shipped = Self.refusal { _ = try mallory.ship(asWeb2, forged, settled: false) }
    #expect(shipped?.state == .insufficientPrivilege && shipped?.message.contains("may not ship as host web-2") == true)
    #expect(Self.isRefused { _ = try mallory.beginShipment(asWeb2, targets: [(table: "note", gid: "x")]) })
    mallory.rollBackQuietly()
    #expect(Self.isRefused {
      try sql.execute(
        "INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body) VALUES ('app', 'main', 99, 'mallory', 1, '{}')")
    })
    // Row images and conflict records, directly.
    #expect(Self.isRefused {
      try sql.execute(
        "INSERT INTO gs_row(grp, store, tbl, gid, seq, origin_host, columns, data) "
          + "VALUES ('app', 'main', 'note', 'x', 99, 'mallory', '[]', NULL)")
    })
    #expect(Self.isRefused { try sql.execute("UPDATE gs_row SET data = NULL WHERE grp = 'app'") })
    #expect(Self.isRefused {
      try sql.execute(
        "INSERT INTO gs_conflict(grp, store, seq, tbl, gid, rule, winner_host, loser_host, record) "
          + "VALUES ('app', 'main', 1, 'note', 'x', 'object-trump', 'web-1', 'web-2', '{}')")
    })
    // A conflict between two other hosts, in a shipment of its own.
    let conflict = Self.refusal {
      try sql.execute(
        """
        SELECT * FROM gs_ship_5('app', 'main', 'mallory', 1, $1, '{}', '{}', '{}', '{}', '{}',
          '{note}', '{x}', '{object-trump}', '{web-1}', '{web-2}', '{"{}"}', false, 1::smallint, NULL, NULL)
        """, [Self.body(gid: "m1", title: "m")])
    }
    #expect(conflict?.state == "22023" && conflict?.message.contains("which host mallory did not settle") == true, "\(String(describing: conflict))")
    let inBody = Self.refusal {
      let body = #"{"t":[],"c":[{"winnerHost":"web-1","loserHost":"web-2","table":"note","gid":"x"}]}"#
      _ = try mallory.ship(Self.mallorysReplica, Self.shipment(1, body: body), settled: false)
    }
    #expect(inBody?.state == "22023" && inBody?.message.contains("not one host mallory settled") == true, "\(String(describing: inBody))")
    // gs_member: read-only, its own rows only.
    #expect(try sql.execute("SELECT host FROM gs_member") == [["mallory"]])
    #expect(Self.isRefused { try sql.execute("INSERT INTO gs_member(role, grp, host) VALUES ('mallory', 'app', 'web-3')") })
    #expect(Self.isRefused { try sql.execute("UPDATE gs_member SET role = 'mallory' WHERE host = 'web-2'") })
    #expect(Self.isRefused { try sql.execute("DELETE FROM gs_member") })
    // Announcements for another host: what it reads, that it retired.
    #expect(Self.isRefused {
      try sql.execute(
        "INSERT INTO gs_peer(grp, host, version, reads) VALUES ('app', 'web-2', '1', '{1}') "
          + "ON CONFLICT (grp, host) DO UPDATE SET reads = '{1}'")
    })
    #expect(try sql.execute("UPDATE gs_peer SET retired_at = now() WHERE host = 'web-2' RETURNING host").isEmpty)
    // The group's format for another group.
    #expect(Self.isRefused { try sql.execute("SELECT gs_advance_5('other')") })
    #expect(try fleet.state() == before)

    // A wake-up on the group's channel, carrying an entry under web-1's
    // name at the log's next position: never applied (receivers read
    // entries from the log under row-level security).
    let channel = try #require(try sql.execute("SELECT channel FROM gs_group WHERE grp = 'app'").first?[0] ?? nil)
    let tag = try #require(try sql.execute("SELECT tag FROM gs_clock WHERE grp = 'app'").first?[0] ?? nil)
    let head = Int64(try #require(try sql.execute("SELECT seq FROM gs_clock WHERE grp = 'app'").first?[0] ?? nil)) ?? 0
    let forgedEntry = #"{"f":2,"e":"# + Self.body(gid: "forged", title: "forged") + "}"
    for position in [head + 1, head + 2] {
      for body in [Self.body(gid: "forged", title: "forged"), forgedEntry] {
        try sql.execute("SELECT pg_notify($1, $2)", [channel, "\(tag):\(position)\nweb-1 999\n\(body)"])
      }
    }
    try await fleet.web1.exec(["INSERT INTO note(title, body) VALUES ('woken', 'web-1')"])
    try await waitForConvergence([fleet.web1, fleet.web2], server: fleet.server)
    #expect(try fleet.web2.rows("SELECT title FROM note WHERE title = 'forged'").isEmpty)
    try await fleet.web1.exec(["DELETE FROM note WHERE title = 'woken'"])
  }

  // MARK: Formats, size and shape

  @Test func aShipmentNoRelayCouldReadIsRefusedNamingWhy() async throws { try await Self.underAttack(Self.aShipmentNoRelayCouldReadIsRefusedNamingWhyAttack) }

  private static func aShipmentNoRelayCouldReadIsRefusedNamingWhyAttack(_ fleet: Fleet) async throws {
    let mallory = fleet.mallory
    let good = Self.body(gid: "m1", title: "m")
    let cases: [(SharedLog.Shipment, String)] = [
      // A made-up newer format, which would hold every host.
      (Self.shipment(1, body: #"{"f":9,"e":"# + good + "}", format: LogFormat(rawValue: 9)),
       "format 9 is not one the group ships in"),
      (Self.shipment(1, body: #"{"f":9,"e":"# + good + "}"), "its body is marked format 9, the shipment says 1"),
      (Self.shipment(1, body: #"{"f":,"e":{}}"#), "its body is marked format (no number)"),
      (Self.shipment(1, body: #"{"t":["#), "its body is not JSON"),
      (Self.shipment(1, body: "{}"), "its body is no entry"),
      (Self.shipment(1, body: #"{"t":[{"n":"note"}],"c":[]}"#), "a table of its body is no table"),
      (Self.shipment(1, body: good.replacingOccurrences(of: #""b":0,"#, with: "")), "is no row"),
      (Self.shipment(1, body: good.replacingOccurrences(of: ",null,null,null,null]", with: "]")),
       "has 1 values for 5 columns"),
      (Self.shipment(1, body: good.replacingOccurrences(of: #"{"t":"m"}"#, with: #"{"q":1}"#)),
       #"its body holds {"q": 1}, which is no value"#),
      (Self.shipment(1, body: good.replacingOccurrences(of: #"{"t":"m"}"#, with: #"{"i":1.5}"#)),
       #"its body holds {"i": 1.5}, which is no value"#),
      (Self.shipment(1, body: good.replacingOccurrences(of: #"{"t":"m"}"#, with: #"{"i":9223372036854775808}"#)),
       #"its body holds {"i": 9223372036854775808}, which is no value"#),
      (Self.shipment(1, body: good.replacingOccurrences(of: #"{"t":"m"}"#, with: #"{"b":"@@"}"#)),
       #"its body holds {"b": "@@"}, which is no value"#),
      (Self.shipment(1, body: good.replacingOccurrences(of: #"{"t":"m"}"#, with: #"[{"t":"m"}]"#)),
       #"its body holds [{"t": "m"}], which is no value"#),
      (Self.shipment(1, body: good, data: #"[{"t":"m"},null,null,null,{"z":0}]"#),
       #"a row image holds {"z": 0}, which is no value"#),
      (Self.shipment(1, body: Self.body(gid: "m1", title: "m", table: "gs_relay_state")),
       "its body writes table gs_relay_state, internal"),
      (Self.shipment(1, body: Self.body(gid: "m1", title: "m", table: "SQLITE_sequence")),
       "its body writes table SQLITE_sequence, internal"),
      (Self.shipment(1, body: good, table: "groupsync_history"), "it writes table groupsync_history, internal"),
      (Self.shipment(1, body: good, data: #"{"f":7,"v":[]}"#), "its image is marked format 7"),
      (Self.shipment(1, body: good, data: #"[{"t":"m"}"#), "the image of row m1 of table note is not JSON"),
      (Self.shipment(1, body: good, data: #"[{"t":"m"}]"#), "its image does not list one value per column"),
      (Self.shipment(1, body: good, columns: #"{"title":1}"#), "its columns are no list of names"),
      (Self.shipment(1, body: good, columns: #"["title""#), "the column list of row m1 of table note is not JSON"),
      (Self.shipment(1, body: good, gid: ""), "without its table, global ID or base"),
    ]
    for (shipment, reason) in cases {
      let refused = Self.refusal { _ = try mallory.ship(Self.mallorysReplica, shipment, settled: false) }
      #expect(refused?.state == "22023" && refused?.message.contains(reason) == true, "\(reason): \(String(describing: refused))")
    }
    // Lists of rows that do not line up.
    let uneven = Self.refusal {
      try mallory.connection.execute(
        """
        SELECT * FROM gs_ship_5('app', 'main', 'mallory', 1, $1, '{note,note}', '{a}', '{0}', '{"[]"}', '{NULL}',
          '{}', '{}', '{}', '{}', '{}', '{}', false, 1::smallint, NULL, NULL)
        """, [good])
    }
    #expect(uneven?.message.contains("differ in length") == true, "\(String(describing: uneven))")

    // Its size: over the group's limit, which an administrator sets.
    _ = try await Executables.groupsync([
      "relay", "--configure", "--group", "app", "--postgres", fleet.server.conninfo, "--max-shipment-bytes", "2048",
    ])
    let large = Self.body(gid: "m1", title: String(repeating: "x", count: 4096))
    let tooLarge = Self.refusal { _ = try mallory.ship(Self.mallorysReplica, Self.shipment(1, body: large), settled: false) }
    #expect(tooLarge?.message.contains("over the group's limit of 2048") == true, "\(String(describing: tooLarge))")
    // An honest host's commit over the limit waits, told why, while its
    // host goes on applying; it ships once the administrator raises the
    // limit; nothing is lost meanwhile.
    try await fleet.web1.exec(["INSERT INTO note(title, body) VALUES ('large', '\(String(repeating: "y", count: 4096))')"])
    let web1 = fleet.web1
    try await waitUntil("web-1 says why its shipment waits") { web1.errorOutput.contains("over the group's limit of 2048") }
    try await waitUntil("web-1's status says why") {
      web1.relayStatus()?.lastError?.contains("the server refused a shipment of store 'main'") == true
    }
    let status = try await Executables.groupsync(["status", web1.folder])
    #expect(status.contains("over the group's limit of 2048"), "\(status)")
    try await fleet.web2.exec(["INSERT INTO note(title, body) VALUES ('meanwhile', 'web-2')"])
    try await waitUntil("web-1 applies while its shipment waits") {
      try web1.rows("SELECT title FROM note WHERE title = 'meanwhile'") == ["meanwhile"]
    }
    _ = try await Executables.groupsync([
      "relay", "--configure", "--group", "app", "--postgres", fleet.server.conninfo, "--max-shipment-bytes", "1048576",
    ])
    try await waitForConvergence([fleet.web1, fleet.web2], server: fleet.server)
    #expect(try fleet.web2.rows("SELECT length(body) FROM note WHERE title = 'large'") == ["4096"])
    try await fleet.web1.exec(["DELETE FROM note WHERE title IN ('large', 'meanwhile')"])

    // Announcing a newer format for itself does not move the group: the
    // others do not read it; nor can it move the group back.
    let format = try fleet.server.query("SELECT format FROM gs_group WHERE grp = 'app'")
    try mallory.connection.execute("UPDATE gs_peer SET reads = '{1,2,9}' WHERE grp = 'app' AND host = 'mallory'")
    try mallory.connection.execute("SELECT gs_advance_5('app')")
    try mallory.connection.execute("UPDATE gs_peer SET reads = '{1}' WHERE grp = 'app' AND host = 'mallory'")
    try mallory.connection.execute("SELECT gs_advance_5('app')")
    #expect(try fleet.server.query("SELECT format FROM gs_group WHERE grp = 'app'") == format)
    #expect(try fleet.server.query("SELECT count(*) FROM gs_change WHERE origin_host = 'mallory'") == [["0"]])
  }

  // MARK: Internal tables

  /// An entry that writes a relay's own table, put in the log as a relay
  /// before version 5 could (through `gs_ship_3`, which checks nothing; here
  /// as the superuser): the receivers skip its rows, whatever it says.
  @Test func anEntryOfAnOlderRelayNeverWritesInternalTables() async throws {
    try await Self.underAttack(Self.anEntryOfAnOlderRelayNeverWritesInternalTablesAttack)
  }

  private static func anEntryOfAnOlderRelayNeverWritesInternalTablesAttack(_ fleet: Fleet) async throws {
    let values = #"[{"t":"note"},{"t":"evil"}]"#
    let body = #"{"t":[{"n":"gs_relay_columns","k":["tbl","col"],"s":false,"r":[{"g":"evil","b":0,"v":"# + values + "}]}],\"c\":[]}"
    let shipped = try fleet.server.query(
      """
      SELECT outcome FROM gs_ship_3('app', 'main', 'mallory', 1, $1, NULL, '{gs_relay_columns}', '{evil}', '{0}',
        ARRAY[$3], ARRAY[$2], '{}', '{}', '{}', '{}', '{}', '{}', false, 1::smallint, NULL, NULL)
      """, [body, values, #"["tbl","col"]"#])
    #expect(shipped == [["shipped"]])
    try await fleet.web1.exec(["INSERT INTO note(title, body) VALUES ('after-the-entry', 'web-1')"])
    try await waitForConvergence([fleet.web1, fleet.web2], server: fleet.server)
    for host in [fleet.web1, fleet.web2] {
      #expect(try host.rows("SELECT count(*) FROM gs_relay_columns WHERE col = 'evil'") == ["0"], "\(host.name)")
    }
    try await fleet.web1.exec(["DELETE FROM note WHERE title = 'after-the-entry'"])
  }

  // MARK: search_path

  @Test func searchPathTricksDoNotReachTheFunctions() async throws { try await Self.underAttack(Self.searchPathTricksDoNotReachTheFunctionsAttack) }

  private static func searchPathTricksDoNotReachTheFunctionsAttack(_ fleet: Fleet) async throws {
    let sql = fleet.mallory.connection
    // Every function that runs with its owner's rights resolves names in
    // the log's schema, then pg_temp (its helpers too, which it calls);
    // no host role may call a helper.
    for signature in SharedSchema.checkedFunctions5 {
      let found = try fleet.server.query(
        "SELECT prosecdef, array_to_string(proconfig, ',') FROM pg_proc WHERE oid = to_regprocedure($1)", [signature])
      #expect(found == [["t", "search_path=public, pg_temp"]], "\(signature): \(found)")
    }
    for signature in SharedSchema.helpers5 {
      #expect(try sql.execute("SELECT has_function_privilege($1, 'EXECUTE')", [signature]) == [["f"]], "\(signature)")
    }
    // A temporary gs_member claiming web-2, a temporary function that
    // says yes, both first on the caller's path.
    try sql.execute("CREATE TEMP TABLE gs_member (role name, grp text, host text)")
    try sql.execute("INSERT INTO pg_temp.gs_member VALUES ('mallory', 'app', 'web-2')")
    try sql.execute("CREATE FUNCTION pg_temp.gs_acts_as_5(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'")
    try sql.execute("CREATE TEMP TABLE gs_group (grp text, format smallint, max_shipment_bytes bigint, retention bigint, retention_passes_members boolean)")
    try sql.execute("INSERT INTO pg_temp.gs_group VALUES ('app', 9, 1000000000, 1, true)")
    try sql.execute("SET search_path = pg_temp, public")
    let asWeb2 = SharedLog.Replica(group: "app", store: "main", host: "web-2")
    let refused = Self.refusal {
      _ = try fleet.mallory.ship(asWeb2, Self.shipment(1, body: Self.body(gid: "m1", title: "m")), settled: false)
    }
    #expect(refused?.state == .insufficientPrivilege, "\(String(describing: refused))")
    #expect(Self.isRefused { try sql.execute("SELECT * FROM public.gs_lock_5('app', 'main', 'web-2', '{note}', '{x}')") })
    // No schema or function of its own where the log's live.
    #expect(Self.isRefused { try sql.execute("CREATE SCHEMA evil") })
    #expect(Self.isRefused {
      try sql.execute("CREATE FUNCTION public.jsonb_typeof(jsonb) RETURNS text LANGUAGE sql AS 'SELECT ''object''::text'")
    })
    try sql.execute("RESET search_path")
    try sql.execute("DROP TABLE pg_temp.gs_member, pg_temp.gs_group")
  }

  // MARK: Notifications

  @Test func notificationsNameNothingOutsideTheGroup() async throws { try await Self.underAttack(Self.notificationsNameNothingOutsideTheGroupAttack) }

  private static func notificationsNameNothingOutsideTheGroupAttack(_ fleet: Fleet) async throws {
    let eve = fleet.eve
    let sql = eve.connection
    // Nothing of app is there for eve: its channel, its tags, its log,
    // its hosts' sessions' statements (which name the channel).
    #expect(try sql.execute("SELECT channel FROM gs_group WHERE grp = 'app'").isEmpty)
    #expect(try sql.execute("SELECT tag FROM gs_clock WHERE grp = 'app'").isEmpty)
    #expect(try sql.execute("SELECT * FROM gs_window_4('app', 'main', 0, 100, 0)").isEmpty)
    let queries = try sql.execute(
      "SELECT DISTINCT coalesce(query, '<null>') FROM pg_stat_activity WHERE usename IN ('web-1', 'web-2', 'mallory')")
    #expect(!queries.isEmpty && queries.allSatisfy { $0[0] == "<insufficient privilege>" }, "\(queries)")
    #expect(Self.isRefused { try sql.execute("SELECT gs_advance_5('app')") })
    let asWeb1 = SharedLog.Replica(group: "app", store: "main", host: "web-1")
    #expect(Self.isRefused {
      _ = try eve.ship(asWeb1, Self.shipment(1, body: Self.body(gid: "e1", title: "e")), settled: false)
    })
    // Eve listens on the channels it can name; a superuser listens on
    // app's. web-1 commits twice.
    try eve.listen(on: [SharedLog.legacyChannel, "gs_" + String(repeating: "0", count: 32)])
    let channel = try #require(try fleet.server.query("SELECT channel FROM gs_group WHERE grp = 'app'").first?[0] ?? nil)
    let spy = try RelayAccessTests.log(fleet.server, as: "postgres")
    try spy.listen(on: [channel])
    let head = try fleet.server.query("SELECT seq FROM gs_clock WHERE grp = 'app'")
    try await fleet.web1.exec(["INSERT INTO note(title, body) VALUES ('secret-title', 'secret-body')"])
    try await fleet.web1.exec(["DELETE FROM note WHERE title = 'secret-title'"])
    try await waitForConvergence([fleet.web1, fleet.web2], server: fleet.server)
    #expect(try fleet.server.query("SELECT seq FROM gs_clock WHERE grp = 'app'") != head)
    var heard: [String] = []
    var backoff = PollBackoff()
    let deadline = ContinuousClock.now + .seconds(30)
    while heard.count < 2 && ContinuousClock.now < deadline {
      heard += try spy.notifications().map(\.payload)
      try await backoff.pause()
    }
    // On the group's channel: the store's random tag and a position,
    // no group, store, host or row.
    #expect(heard.count >= 2, "\(heard)")
    for payload in heard {
      let parts = payload.split(separator: ":")
      #expect(parts.count == 2 && parts[0].count == 32 && Int64(parts[1]) != nil, "\(payload)")
      #expect(!payload.contains("secret") && !payload.contains("app") && !payload.contains("web-1"), "\(payload)")
    }
    try sql.execute("SELECT 1")
    #expect(try eve.notifications().isEmpty)
  }
}
