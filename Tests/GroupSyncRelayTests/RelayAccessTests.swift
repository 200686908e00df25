import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// Least privilege, enforced by the server: the set-up an administrator
/// runs (`groupsync relay --print-setup`) and relays that connect as the
/// host roles it makes, against a real server (trust authentication on its
/// socket, so `user=web-1` needs no password here).
@Suite(.timed)
struct RelayAccessTests {
  /// The server's conninfo as `role`.
  static func conninfo(_ server: PostgresServer, as role: String) -> String {
    "host=\(server.folder) port=\(server.port) user=\(role) dbname=postgres connect_timeout=5"
  }

  /// Prints the set-up with the CLI and runs it with psql as the
  /// superuser, stopping at the first error; returns the script.
  @discardableResult
  static func setUp(
    _ server: PostgresServer, group: String, _ roles: [String], options: [String] = []
  ) async throws -> String {
    let script = try await Executables.groupsync(["relay", "--print-setup", "--group", group] + options + roles)
    try await runScript(server, script)
    return script
  }

  static func runScript(_ server: PostgresServer, _ script: String) async throws {
    let file = server.folder + "/setup-\(UUID().uuidString.prefix(8)).sql"
    try script.write(toFile: file, atomically: true, encoding: .utf8)
    let psql = try PostgresServer.binFolder() + "/psql"
    _ = try await Executables.onThread {
      try PostgresServer.run(
        psql,
        ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", server.folder, "-p", String(server.port), "-U", "postgres",
         "-d", "postgres", "-f", file])
    }
  }

  /// A session as `role`, with the relay's view of the log.
  static func log(_ server: PostgresServer, as role: String) throws -> SharedLog {
    SharedLog(try PostgresConnection(conninfo: conninfo(server, as: role)))
  }

  /// A shipment of one row of `note` (its title `title`), `through` the
  /// local sequence given, in format 1.
  static func shipment(_ through: Int64, gid: String, title: String = "t") -> SharedLog.Shipment {
    let value = "[{\"t\":\"\(title)\"}]"
    let body = "{\"t\":[{\"n\":\"note\",\"k\":[\"title\"],\"s\":false,\"r\":[{\"g\":\"\(gid)\",\"b\":0,\"v\":\(value)}]}],\"c\":[]}"
    return SharedLog.Shipment(
      through: through, body: body, format: .v1,
      winners: [.init(table: "note", gid: gid, base: 0, columns: "[\"title\"]", data: value)], conflicts: [])
  }

  /// Whether `body` fails with SQLSTATE 42501 (a missing privilege, or a
  /// row a policy rejects).
  private static func isRefused(_ body: () throws -> Void) -> Bool {
    do {
      try body()
      return false
    } catch SQLState.insufficientPrivilege {
      return true
    } catch {
      return false
    }
  }

  @Test func theSetupRunsTwiceAndMakesTheRolesTheGrantsAndTheMembers() async throws {
    try await PostgresServer.with { server in
      let script = try await Self.setUp(server, group: "shop", ["web-1", "web-2"])
      try await Self.runScript(server, script)
      // Another group, with a role of the first and an odd group name.
      try await Self.setUp(server, group: "it's \\ \"odd\"", ["web-1:w1.odd", "o.1@x:o-1"])
      let roles = try server.query(
        "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname IN ('web-1', 'web-2', 'o.1@x', 'groupsync_relay') ORDER BY 1")
      #expect(roles == [["groupsync_relay", "f"], ["o.1@x", "t"], ["web-1", "t"], ["web-2", "t"]])
      let members = try server.query("SELECT role, grp, host FROM gs_member ORDER BY grp, host")
      #expect(members == [
        ["o.1@x", "it's \\ \"odd\"", "o-1"], ["web-1", "it's \\ \"odd\"", "w1.odd"],
        ["web-1", "shop", "web-1"], ["web-2", "shop", "web-2"],
      ])
      let secured = try server.query(
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'gs\\_%' AND relkind = 'r' AND relrowsecurity")
      // Every table but gs_schema (one row, the same for every group).
      #expect(secured.first?[0] == "8")
      // PUBLIC has nothing; the tables and gs_ship are the relay's own.
      let publicGrants = try server.query(
        "SELECT count(*) FROM information_schema.role_table_grants WHERE grantee = 'PUBLIC' AND table_name LIKE 'gs\\_%'")
      #expect(publicGrants.first?[0] == "0")
      let log = try Self.log(server, as: "postgres")
      let access = try log.inspectAccess()
      #expect(access.isCurrent && access.missingPrivileges.isEmpty && !access.rowSecurityActive)
      // Each host role has what a relay needs, and no row-level bypass.
      let web1 = try Self.log(server, as: "web-1")
      let web1Access = try web1.inspectAccess()
      #expect(web1Access.isCurrent && web1Access.missingPrivileges.isEmpty && web1Access.rowSecurityActive, "\(web1Access)")
      // An older gs_ship: a host role may not replace it and says so; an
      // owner's relay does (no membership needed: it bypasses the policies).
      _ = try server.query(SharedSchema.ship2.replacingOccurrences(of: "One primary-key", with: "An older"))
      #expect(throws: RelayError.sharedTablesUnavailable(role: "web-1", problem: "gs_ship_2 missing or another version")) {
        try web1.prepareAccess(group: "shop", host: "web-1")
      }
      try log.prepareAccess(group: "shop", host: "no-member")
      #expect(try log.inspectAccess().isCurrent)
      try web1.prepareAccess(group: "shop", host: "web-1")
    }
  }

  @Test func aHostRoleWritesOnlyUnderItsOwnNameAndReadsOnlyItsGroups() async throws {
    try await PostgresServer.with { server in
      try await Self.setUp(server, group: "shop", ["web-1", "web-2"])
      try await Self.setUp(server, group: "other", ["other-1"])
      // A member of another group ships an entry there, and listens on
      // its own group's channel and on the legacy one.
      let other = try Self.log(server, as: "other-1")
      try other.prepareAccess(group: "other", host: "other-1")
      let rules = MergeRules(policy: .objectTrump).fingerprint
      try other.announce(group: "other", host: "other-1", version: .current, rules: rules, transport: .notify)
      let otherChannel = try #require(other.wakes.channel)
      try other.listen(on: [otherChannel, SharedLog.legacyChannel])
      let otherReplica = SharedLog.Replica(group: "other", store: "main", host: "other-1")
      _ = try other.enroll(otherReplica, place: 0)
      #expect(try other.ship(otherReplica, Self.shipment(1, gid: "o1"), settled: false) == .shipped(position: 1))

      // web-2 listens on its group's channel; web-1 ships.
      let web2 = try Self.log(server, as: "web-2")
      try web2.prepareAccess(group: "shop", host: "web-2")
      try web2.announce(group: "shop", host: "web-2", version: .current, rules: rules, transport: .notify)
      let channel = try #require(web2.wakes.channel)
      try web2.listen(on: [channel])
      let web1 = try Self.log(server, as: "web-1")
      try web1.prepareAccess(group: "shop", host: "web-1")
      try web1.announce(group: "shop", host: "web-1", version: .current, rules: rules, transport: .notify)
      #expect(web1.wakes == .init(channel: channel, listeners: true, olderMembers: false))
      #expect(channel != otherChannel && channel.hasPrefix("gs_") && channel.count == 35)
      let mine = SharedLog.Replica(group: "shop", store: "main", host: "web-1")
      _ = try web1.enroll(mine, place: 0)
      let tag = try #require(web1.tags["main"])
      #expect(try web1.ship(mine, Self.shipment(1, gid: "g1"), settled: false) == .shipped(position: 1))
      // web-2 is woken on the group's channel
      // under the store's tag: no name of the group or store.
      var payloads: [String] = []
      let deadline = ContinuousClock.now + .seconds(30)
      var backoff = PollBackoff()
      while payloads.isEmpty && ContinuousClock.now < deadline {
        payloads += try web2.notifications().filter { $0.channel == channel }.map(\.payload)
        try await backoff.pause()
      }
      // Under row-level security the position alone: a member could
      // forge an entry in a wake-up, so receivers read it from the log.
      #expect(payloads == [tag + ":1"], "\(payloads)")
      #expect(!payloads.contains { $0.contains("shop") }, "\(payloads)")
      // The other group's member cannot read the channel, and heard
      // nothing of it: not on its channel, not on the legacy one (a
      // round trip of its own lets a notification sent before it arrive).
      #expect(try other.connection.execute("SELECT channel FROM gs_group WHERE grp = 'shop'").isEmpty)
      #expect(try other.connection.execute("SELECT tag FROM gs_clock WHERE grp = 'shop'").isEmpty)
      try other.connection.execute("SELECT 1")
      #expect(try other.notifications().isEmpty)

      let connection = web1.connection
      // Not under another host's name: an entry, a place, an image, gs_ship.
      #expect(Self.isRefused {
        try connection.execute(
          "INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body) VALUES ('shop', 'main', 9, 'web-2', 1, '{}')")
      })
      #expect(Self.isRefused {
        try connection.execute("INSERT INTO gs_host(grp, store, host) VALUES ('shop', 'main', 'web-2')")
      })
      #expect(Self.isRefused {
        try connection.execute(
          "INSERT INTO gs_row(grp, store, tbl, gid, seq, origin_host, columns, data) VALUES ('shop', 'main', 'note', 'x', 9, 'web-2', '[]', NULL)")
      })
      let theirs = SharedLog.Replica(group: "shop", store: "main", host: "web-2")
      #expect(Self.isRefused { _ = try web1.ship(theirs, Self.shipment(1, gid: "g2"), settled: false) })
      // Not in a group it is no member of, even under its own name.
      #expect(Self.isRefused {
        _ = try web1.enroll(SharedLog.Replica(group: "other", store: "main", host: "web-1"), place: 0)
      })
      // Entries are never updated or deleted by a host role.
      #expect(Self.isRefused { try connection.execute("UPDATE gs_change SET body = '{}' WHERE grp = 'shop'") })
      #expect(Self.isRefused { try connection.execute("DELETE FROM gs_change WHERE grp = 'shop'") })
      // The other group's rows are not there for it.
      for table in ["gs_change", "gs_row", "gs_host", "gs_clock"] {
        let count = try connection.execute("SELECT count(*) FROM \(table) WHERE grp = 'other'")
        #expect(count.first?[0] == "0", "\(table)")
      }
      #expect(try server.query("SELECT count(*) FROM gs_change WHERE grp = 'other'").first?[0] == "1")
      // gs_member: its own rows only, read-only.
      #expect(try connection.execute("SELECT role, grp, host FROM gs_member") == [["web-1", "shop", "web-1"]])
      #expect(Self.isRefused {
        try connection.execute("INSERT INTO gs_member(role, grp, host) VALUES ('web-1', 'other', 'web-1')")
      })
      #expect(Self.isRefused { try connection.execute("UPDATE gs_member SET host = 'web-2'") })
      // The group's retention, an administrator's, purges inside gs_ship_5.
      try await Self.setUp(
        server, group: "shop", ["web-1", "web-2"], options: ["--retention", "1", "--retention-passes-members", "true"])
      #expect(try web1.ship(mine, Self.shipment(2, gid: "g3"), settled: false) == .shipped(position: 2))
      #expect(try connection.execute("SELECT seq FROM gs_change WHERE grp = 'shop'") == [["2"]])
    }
  }

  /// Two relays, each as its host's role, under row-level security:
  /// inserts, updates and deletes go both ways, a conflict is settled, a
  /// host whose place was purged re-synchronises, and nothing on the
  /// legacy channel carries an entry. Also with web-1 on the relay from before log
  /// formats were versioned: this set-up keeps what it uses.
  @Test(arguments: [RelayBuild.current, .legacy])
  func relaysAsHostRolesReplicateBothWaysUnderRowLevelSecurity(webOne build: RelayBuild) async throws {
    try await PostgresServer.with { server in
      // The group's retention (2 entries, past members), and what relays
      // before version 5 write with while web-1 runs one.
      let options =
        ["--retention", "2", "--retention-passes-members", "true"] + (build == .legacy ? ["--older-relays"] : [])
      try await Self.setUp(server, group: "app", ["web-1", "web-2"], options: options)
      let listener = try Self.log(server, as: "postgres")
      try listener.listen(on: [SharedLog.legacyChannel])
      let root = try HostsFolder()
      let a = try await GroupHost("web-1", root: root.path, conninfo: Self.conninfo(server, as: "web-1"))
      let b = try await GroupHost("web-2", root: root.path, conninfo: Self.conninfo(server, as: "web-2"))
      a.build = build
      // The legacy relay purges as its own --retention says.
      if build == .legacy { a.retention = 2 }
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('r1', 'a'), ('r2', 'a')"])
      try await waitForConvergence([a, b], server: server)
      try await b.exec(["UPDATE note SET body = 'b' WHERE title = 'r1'", "INSERT INTO note(title, body) VALUES ('r3', 'b')"])
      try await waitForConvergence([a, b], server: server)
      try await a.exec(["DELETE FROM note WHERE title = 'r2'"])
      var content = try await waitForConvergence([a, b], server: server)
      #expect(content.values.map { $0[0] + "=" + $0[1] }.sorted() == ["\"r1\"=\"b\"", "\"r3\"=\"b\""])

      // Both write one row while apart; web-1 ships first, web-2 wins.
      try await a.stopRelay()
      try await b.stopRelay()
      try await a.exec(["UPDATE note SET body = 'from a' WHERE title = 'r1'"])
      try await b.exec(["UPDATE note SET body = 'from b' WHERE title = 'r1'"])
      let shippedBefore = a.events("shipped").count
      try await a.startRelay()
      try await waitUntil("web-1 shipped") { a.events("shipped").count > shippedBefore }
      try await b.startRelay()
      content = try await waitForConvergence([a, b], server: server)
      #expect(content.values.first { $0[0] == "\"r1\"" }?[1] == "\"from b\"")
      try await waitUntil("web-1 reports the conflict") { !a.events("conflict").isEmpty }
      #expect(try server.query("SELECT winner_host, loser_host FROM gs_conflict") == [["web-2", "web-1"]])

      // web-2 away while web-1's entries pass the retention: it
      // re-synchronises from the rows' images.
      try await b.stopRelay()
      // web-2's place: the log's head now (it had converged).
      let place = Int64(try server.query("SELECT seq FROM gs_clock WHERE grp = 'app'").first?[0] ?? "0") ?? 0
      // One row a shipment until the purge passes it (a busy relay may
      // ship two commits as one entry).
      var inserted = 0
      let purged = { Int64(try server.query("SELECT purged_through FROM gs_clock WHERE grp = 'app'").first?[0] ?? "0") ?? 0 }
      while try purged() <= place, inserted < 10 {
        let shipped = a.events("shipped").count
        inserted += 1
        try await a.exec(["INSERT INTO note(title, body) VALUES ('s\(inserted)', 'a')"])
        try await waitUntil("web-1 shipped s\(inserted)") { a.events("shipped").count > shipped }
      }
      #expect(try purged() > place)
      try await b.startRelay()
      content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 2 + inserted)
      #expect(!b.events("resync").isEmpty)
      for host in [a, b] {
        #expect(host.events("error").isEmpty && host.events("failed").isEmpty, "\(host.name): \(host.events("error"))")
      }
      try await a.stopRelay()
      try await b.stopRelay()

      // On the legacy channel, what a relay before version 4 reads, never
      // the entry, and only while one is a member.
      let payloads = try listener.notifications().map(\.payload)
      #expect(build == .legacy ? !payloads.isEmpty : payloads.isEmpty, "\(payloads.prefix(3))")
      #expect(payloads.allSatisfy { $0.hasPrefix("app/main:") && !$0.contains("\n") }, "\(payloads.prefix(3))")
    }
  }

  /// The server refuses the host's role a session (its connection limit):
  /// the relay names the limit and what to do in `groupsync status`, backs
  /// off without giving up, and once the limit is raised connects and
  /// ships what was committed meanwhile.
  @Test func aRoleOverItsConnectionLimitIsToldAndRetried() async throws {
    try await PostgresServer.with { server in
      try await Self.setUp(server, group: "app", ["web-1"])
      _ = try server.query("ALTER ROLE \"web-1\" CONNECTION LIMIT 0")
      let root = try HostsFolder()
      let host = try await GroupHost("web-1", root: root.path, conninfo: Self.conninfo(server, as: "web-1"))
      try await host.exec(["INSERT INTO note(title) VALUES ('waited')"])
      try await host.startRelay(waitConnected: false)
      try await waitUntil("the refusal is told") {
        host.relayStatus()?.lastError?.contains("the role has as many connections as it may") == true
      }
      let status = try await Executables.groupsync(["status", host.folder])
      #expect(status.contains("ALTER ROLE … CONNECTION LIMIT") && status.contains("--transport poll"), "\(status)")
      #expect(host.events("failed").isEmpty)
      _ = try server.query("ALTER ROLE \"web-1\" CONNECTION LIMIT -1")
      try await waitUntil("the relay connects and ships") { host.events("shipped").count >= 1 }
      #expect(try server.query("SELECT count(*) FROM gs_change WHERE grp = 'app'") == [["1"]])
    }
  }

  /// Starts `host`'s relay and waits for it to give up; returns what it
  /// printed on stderr.
  private static func relayGivesUp(_ host: GroupHost) async throws -> String {
    try await host.startRelay(waitConnected: false)
    let relay = try #require(host.relay)
    // A relay that retried would never exit: exiting at all is giving up.
    let exited = try await Executables.onThread { relay.waitForExit(timeout: 120) }
    #expect(exited, "the relay retried instead of giving up")
    let result = try await Executables.onThread { relay.finish(timeout: 10) }
    #expect(result.status != 0)
    #expect(result.stdout.contains("\"failed\""), "\(result.stdout)")
    return result.stderr
  }

  @Test func aRelayWithoutTablesMembershipOrAGrantGivesUpNamingIt() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      // An empty database, a role that may not create tables.
      _ = try server.query("CREATE ROLE \"web-1\" LOGIN")
      let web1 = try await GroupHost("web-1", root: root.path, conninfo: Self.conninfo(server, as: "web-1"))
      let empty = try await Self.relayGivesUp(web1)
      #expect(empty.contains("the shared tables are missing or out of date"), "\(empty)")
      #expect(empty.contains("role 'web-1' may not create them") && empty.contains("--print-setup"), "\(empty)")

      // Set up, but web-1 acting as web-2.
      try await Self.setUp(server, group: "app", ["web-1"])
      let impostor = try await GroupHost("web-2", root: root.path, conninfo: Self.conninfo(server, as: "web-1"))
      let notMember = try await Self.relayGivesUp(impostor)
      #expect(
        notMember.contains("role 'web-1' may not act as host 'web-2' in group 'app' (no row in gs_member)"),
        "\(notMember)")

      // A grant taken away.
      _ = try server.query("REVOKE INSERT ON gs_host FROM groupsync_relay")
      _ = try server.query("REVOKE EXECUTE ON FUNCTION \(SharedSchema.ship5Signature) FROM groupsync_relay")
      let missing = try await Self.relayGivesUp(web1)
      #expect(missing.contains("role 'web-1' lacks privileges the relay needs"), "\(missing)")
      #expect(missing.contains("INSERT on gs_host(grp, store, host)"), "\(missing)")
      #expect(missing.contains("EXECUTE on gs_ship_5") && missing.contains("--print-setup"), "\(missing)")
      #expect(!missing.contains("SELECT on"), "\(missing)")
      // The set-up run again gives it back.
      try await Self.setUp(server, group: "app", ["web-1"])
      try await web1.startRelay()
      try await web1.stopRelay()
    }
  }

  @Test func theSetupRefusesBadNames() async throws {
    for bad in ["", "a:b:c", ":web-1", "web-1:", "pg_web", "PUBLIC", "groupsync_relay", "web 1", "we\"b", "w$b",
                String(repeating: "r", count: 64), "web-1:bad/host", "web-1:.hidden"] {
      #expect(throws: RelayError.self, "\(bad)") { try AccessSetup.Member(parsing: bad) }
    }
    let member = try AccessSetup.Member(parsing: "web-1:h.1")
    #expect(member.role == "web-1" && member.host == "h.1")
    #expect(try AccessSetup.Member(parsing: "web-2") == AccessSetup.Member(role: "web-2", host: "web-2"))
    #expect(throws: RelayError.self) { try AccessSetup(group: "shop", members: []) }
    #expect(throws: RelayError.self) { try AccessSetup(group: "", members: [member]) }
    #expect(throws: RelayError.self) { try AccessSetup(group: "a\nb", members: [member]) }
    #expect(throws: RelayError.self) {
      try AccessSetup(group: "shop", members: [member, AccessSetup.Member(role: "web-2", host: "h.1")])
    }
    #expect(AccessSetup.identifier("a\"b") == "\"a\"\"b\"")
    #expect(AccessSetup.literal("it's \\") == "E'it''s \\\\'")
    // The command line says what is wrong, and prints nothing.
    let cases: [([String], String)] = [
      (["--print-setup", "web-1"], "--print-setup needs --group"),
      (["--print-setup", "--group", "shop"], "at least one ROLE"),
      (["--print-setup", "--group", "shop", "web-1:"], "expected ROLE or ROLE:HOST"),
      (["--print-setup", "--group", "shop", "pg_x"], "role name 'pg_x' is reserved"),
      (["--print-setup", "--group", "shop", "web-1", "--postgres-file", "/tmp/x"], "drop --postgres and --postgres-file"),
      ([], "missing the group folder"),
    ]
    for (arguments, message) in cases {
      let result = try await Executables.onThread {
        try ChildProcess(executable: Executables.relay, arguments: arguments).finish(timeout: 120)
      }
      #expect(!result.succeeded && result.stdout.isEmpty, "\(arguments)")
      #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
    }
  }
}
