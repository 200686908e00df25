import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// The group's log format against a real server: it moves up once every
/// member reads the newer one, never down; a relay that meets a format it
/// does not read holds there (nothing applied, shipped, skipped or
/// purged) and says what it needs; the server's objects carry versions an
/// older relay never replaces.
@Suite(.timed) struct RelayFormatTests {
  /// The group's format on the server (1 when it has no row yet).
  static func groupFormat(_ server: PostgresServer, group: String = "app") throws -> Int {
    Int(try server.query("SELECT coalesce((SELECT format FROM gs_group WHERE grp = $1), 1)", [group]).first?[0] ?? "")
      ?? -1
  }

  /// The format of the newest entry of the group's log.
  static func newestEntryFormat(_ server: PostgresServer) throws -> Int {
    Int(try server.query("SELECT format FROM gs_change WHERE grp = 'app' ORDER BY seq DESC LIMIT 1").first?[0] ?? "")
      ?? -1
  }

  /// Commits one insert on `host` at a time until the newest entry of the
  /// log is in `format` (a relay learns that the group moved with the
  /// answer to its next shipment).
  static func write(on host: GroupHost, untilEntriesAre format: Int, _ server: PostgresServer) async throws {
    let deadline = ContinuousClock.now + .seconds(60)
    repeat {
      guard ContinuousClock.now < deadline else { throw RelayTestFailure("entries never came in format \(format)") }
      try await host.exec(["INSERT INTO note(title, body) VALUES ('\(host.name)-' || hex(randomblob(4)), 'f\(format)')"])
      try await waitForConvergenceOf(host, server)
    } while try newestEntryFormat(server) != format
  }

  /// Waits until `host` shipped everything and the log holds it.
  static func waitForConvergenceOf(_ host: GroupHost, _ server: PostgresServer) async throws {
    try await waitUntil("\(host.name) shipped") {
      guard let store = host.relayStatus()?.stores.first else { return false }
      return store.unshipped == 0
    }
  }

  @Test func aRelayRolledBackBelowTheGroupsFormatHoldsUntilUpgradedLosingNothing() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      a.build = .testingFormat
      b.build = .testingFormat
      a.retention = 2
      b.metricsFile = root.path + "/b.prom"
      try await a.startRelay()
      try await b.startRelay()
      // Every member reads the testing format: the group moves up by itself.
      try await waitUntil("the group moves up") { try Self.groupFormat(server) == LogFormat.testing.rawValue }
      try await Self.write(on: a, untilEntriesAre: LogFormat.testing.rawValue, server)
      try await waitForConvergence([a, b], server: server)

      // b is rolled back to a build that reads format 1 only.
      try await b.stopRelay()
      b.build = .current
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body, n) VALUES ('while-held', 'x', 1)"])
      try await waitUntil("b holds") { !b.events("formatHeld").isEmpty }
      let held = try #require(b.events("formatHeld").first)
      let position = try #require(held["position"] as? Int)
      #expect(held["format"] as? Int == LogFormat.testing.rawValue && held["store"] as? String == "main", "\(held)")
      #expect((held["readers"] as? String ?? "").contains("testing"), "\(held)")
      // The error line comes on stderr, a pipe of its own: read until it is there.
      try await waitUntil("b's error line names the held entry") { b.errorOutput.contains("holds at entry #\(position)") }
      // The group's format never moves down by itself.
      #expect(try Self.groupFormat(server) == LogFormat.testing.rawValue)
      // Meanwhile a goes on writing (its retention keeps 2 entries), and b's
      // own write waits: nothing of b is applied, shipped or purged.
      try await b.exec(["INSERT INTO note(title, body) VALUES ('from-b', 'while held')"])
      for index in 0..<6 { try await a.exec(["INSERT INTO note(title, body) VALUES ('later-\(index)', 'y')"]) }
      try await Self.waitForConvergenceOf(a, server)
      try await waitUntil("b's status shows the hold") { b.relayStatus()?.stores.first?.heldAt != nil }
      let status = try #require(b.relayStatus())
      #expect(status.stores.first?.heldAt == Int64(position) && status.stores.first?.heldFormat == LogFormat.testing.rawValue)
      #expect(status.relayVersion == RelayVersion.current.name && status.formatsRead == RelayVersion.current.reads.map(\.rawValue), "\(status)")
      #expect(status.stores.first?.applied == Int64(position - 1) && (status.stores.first?.unshipped ?? 0) > 0, "\(status)")
      #expect(try b.rows("SELECT title FROM note WHERE title IN ('while-held', 'later-5')").isEmpty)
      let kept = try server.query("SELECT min(seq), max(seq) FROM gs_change WHERE grp = 'app'").first ?? []
      #expect(Int(kept[0] ?? "") ?? .max <= position, "the held entry \(position) was purged: \(kept)")
      #expect(try server.query("SELECT held_at FROM gs_host WHERE grp = 'app' AND host = 'b'") == [[String(position)]])
      let shown = try await Executables.groupsync(["status", b.folder])
      #expect(shown.contains("HOLDS at entry \(position)") && shown.contains("version \(RelayVersion.current.name),"), "\(shown)")
      try await waitUntil("b's metric shows the hold") {
        let text = (try? String(contentsOfFile: root.path + "/b.prom", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").contains {
          $0.hasPrefix(RelayMetrics.formatHeld + "{")
            && Double($0.split(separator: " ").last ?? "") == Double(LogFormat.testing.rawValue)
        }
      }

      // Upgraded again: it applies from where it held, no resync, and its
      // own write ships.
      try await b.stopRelay()
      b.build = .testingFormat
      try await b.startRelay()
      try await waitForConvergence([a, b], server: server)
      #expect(try a.rows("SELECT body FROM note WHERE title = 'from-b'") == ["while held"])
      let lastRun = b.relay?.stdout ?? ""
      #expect(!lastRun.contains("\"resync\""), "b re-synchronised instead of applying from its hold: \(b.eventLines)")
      // The hold goes once b's applied place, recorded with its next
      // round trip, passes it.
      try await waitUntil("b's hold is let go") {
        try server.query("SELECT held_at FROM gs_host WHERE grp = 'app' AND host = 'b'") == [[nil]]
      }
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }

  @Test func theGroupWaitsForEveryMemberAndAnAdministratorRetiresOneGoneForGood() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      a.build = .testingFormat
      // b first: a group's first member alone would move it up.
      try await b.startRelay()
      try await a.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('one', 'x')"])
      try await waitForConvergence([a, b], server: server)
      // b reads up to this build's newest format only: the group stays
      // there, and so do a's entries.
      let newest = LogFormat.newest.rawValue
      #expect(try Self.groupFormat(server) == newest)
      #expect(try server.query("SELECT DISTINCT format FROM gs_change WHERE grp = 'app'") == [[String(newest)]])
      #expect(a.events("format").allSatisfy { $0["group"] as? Int == newest && $0["writing"] as? Int == newest })

      // b is gone for good: the administrator looks, and retires it.
      try await b.stopRelay()
      let postgres = ["--postgres", server.conninfo]
      let fleet = try await Executables.groupsync(["relay", "--fleet", "--group", "app"] + postgres)
      #expect(fleet.hasPrefix("group app: log format \(newest)\n"), "\(fleet)")
      let reads = RelayVersion.current.reads.map { String($0.rawValue) }.joined(separator: ",")
      let name = RelayVersion.current.name
      #expect(fleet.contains("a     \(name)+testing  \(reads),\(LogFormat.testing.rawValue)"), "\(fleet)")
      #expect(fleet.contains("b     \(name)          \(reads) "), "\(fleet)")
      let unknown = try await Executables.onThread {
        try ChildProcess(executable: Executables.groupsync, arguments: ["relay", "--retire", "zz", "--group", "app"] + postgres)
          .finish(timeout: 60)
      }
      #expect(unknown.status == 1 && unknown.stderr.contains("group 'app' has no host 'zz' to retire"), "\(unknown.stderr)")
      let retired = try await Executables.groupsync(["relay", "--retire", "b", "--group", "app"] + postgres)
      #expect(retired.hasPrefix("group app: log format \(LogFormat.testing.rawValue)\n"), "\(retired)")
      #expect(retired.split(separator: "\n").contains { $0.hasPrefix("b ") && $0.hasSuffix("retired") }, "\(retired)")
      try await Self.write(on: a, untilEntriesAre: LogFormat.testing.rawValue, server)
      try await waitUntil("a tells the group moved") {
        a.events("format").contains { $0["writing"] as? Int == LogFormat.testing.rawValue }
      }

      // b comes back after all, with the old build: a member again, it
      // holds at the first entry it cannot read.
      try await b.startRelay()
      try await waitUntil("b holds") { !b.events("formatHeld").isEmpty }
      let back = try await Executables.groupsync(["relay", "--fleet", "--group", "app"] + postgres)
      #expect(back.split(separator: "\n").contains { $0.hasPrefix("b ") && $0.contains("main:") && $0.hasSuffix("member") },
              "\(back)")
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }

  /// The members' rules as `gs_advance_2` applies them, on the server
  /// alone: the window, `gs_member`, retiring, never down.
  @Test func membersAreTheListedHostsOrThoseSeenWithinTheWindow() async throws {
    try await PostgresServer.with { server in
      let log = SharedLog(try PostgresConnection(conninfo: server.conninfo))
      try log.prepareAccess(group: "w", host: "x")
      func advance(_ group: String) throws -> Int { try log.advanceFormat(group: group, host: "x", rules: MergeRules().fingerprint).rawValue }
      let next = String(LogFormat.testing.rawValue)
      // Group w, without gs_member rows: x reads both; y announced nothing
      // but applied recently (a relay from before versions).
      _ = try server.query("INSERT INTO gs_peer(grp, host, version, reads) VALUES ('w', 'x', 't', '{1,\(next)}')")
      _ = try server.query("INSERT INTO gs_host(grp, store, host, seen_at) VALUES ('w', 'main', 'y', now())")
      #expect(try advance("w") == 1)
      // y last seen past the window: no longer a member.
      _ = try server.query(
        "UPDATE gs_host SET seen_at = now() - interval '\(SharedSchema.memberWindow)' - interval '1 hour' WHERE host = 'y'")
      #expect(try advance("w") == LogFormat.testing.rawValue)
      // Never down: x announces format 1 only now.
      _ = try server.query("UPDATE gs_peer SET reads = '{1}' WHERE grp = 'w' AND host = 'x'")
      #expect(try advance("w") == LogFormat.testing.rawValue)

      // Group m under the set-up: gs_member names x and z; z never
      // connected, and holds the group back until retired.
      _ = try server.query("INSERT INTO gs_member(role, grp, host) VALUES ('r1', 'm', 'x'), ('r2', 'm', 'z')")
      _ = try server.query("INSERT INTO gs_peer(grp, host, version, reads) VALUES ('m', 'x', 't', '{1,\(next)}')")
      #expect(try advance("m") == 1)
      #expect(try log.retire(group: "m", host: "z").rawValue == LogFormat.testing.rawValue)
      // A host no one lists does not count under the set-up.
      _ = try server.query("INSERT INTO gs_peer(grp, host, version, reads) VALUES ('m', 'stray', '1', '{1}')")
      #expect(try advance("m") == LogFormat.testing.rawValue)
      // Members that share no format: the group stays where it is.
      _ = try server.query("INSERT INTO gs_peer(grp, host, version, reads) VALUES ('n', 'p', '9', '{9}'), ('n', 'q', '1', '{1}')")
      #expect(try advance("n") == 1)
    }
  }

  /// A relay migrates a server of relays from before versions forward,
  /// replacing none of their objects; uses a newer server that still
  /// serves it without touching it; and stops, naming the relay version it
  /// needs, on one that no longer does.
  @Test func serverObjectsCarryVersionsAnOlderRelayNeverReplaces() async throws {
    try await PostgresServer.with { server in
      // The objects as relays before versions made them.
      for statement in SharedSchema.version1 { _ = try server.query(statement) }
      let shipSource = "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure('\(SharedSchema.ship1Signature)')"
      let before = try server.query(shipSource)
      let log = SharedLog(try PostgresConnection(conninfo: server.conninfo))
      let old = try log.inspectAccess()
      #expect(old.schema == nil && !old.isCurrent && old.problem.contains("server schema 1, this relay needs \(SharedSchema.version)"), "\(old)")
      try log.prepareAccess(group: "app", host: "a")
      #expect(try server.query("SELECT version, serves_from, serves_from_relay FROM gs_schema") == [[String(SharedSchema.version), "1", "1"]])
      #expect(try server.query(shipSource) == before, "gs_ship, which relays of version 1 use, was replaced")
      #expect(try log.inspectAccess().isCurrent)
      for (table, column) in [("gs_change", "format"), ("gs_row", "format"), ("gs_conflict", "format"), ("gs_host", "held_at")] {
        #expect(
          try server.query(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = '\(table)' AND column_name = '\(column)'")
            == [["1"]], "\(table).\(column)")
      }
      // gs_row's format comes from the image itself, whoever wrote it.
      _ = try server.query(
        """
        INSERT INTO gs_row(grp, store, tbl, gid, seq, origin_host, columns, data) VALUES
          ('app', 'main', 'note', 'g1', 1, 'a', '["t"]', '["x"]'),
          ('app', 'main', 'note', 'g2', 2, 'a', '["t"]', $1), ('app', 'main', 'note', 'g3', 3, 'a', '["t"]', NULL)
        """, [try StoredImage.encode([.text("x")], format: .testing)])
      #expect(
        try server.query("SELECT gid, format FROM gs_row WHERE grp = 'app' ORDER BY gid")
          == [["g1", "1"], ["g2", String(LogFormat.testing.rawValue)], ["g3", "1"]])

      // A newer server that still serves this relay's schema: used as is.
      let (newer, next) = (SharedSchema.version + 1, RelayVersion.current.name + "+1")
      _ = try server.query(
        "UPDATE gs_schema SET version = \(newer), serves_from = \(SharedSchema.version), serves_from_relay = '\(next)'")
      try log.prepareAccess(group: "app", host: "a")
      #expect(try server.query("SELECT version FROM gs_schema") == [[String(newer)]])
      // One that no longer does: the relay stops, naming what it needs.
      _ = try server.query("UPDATE gs_schema SET serves_from = \(newer)")
      let tooNew = RelayError.serverSchemaTooNew(server: newer, servesFrom: newer, needsRelay: next)
      #expect(throws: tooNew) {
        try log.prepareAccess(group: "app", host: "a")
      }
      #expect(tooNew.needsAdministrator)
      #expect(tooNew.description.contains("relay \(next) or later"))
      #expect(try server.query("SELECT version, serves_from FROM gs_schema") == [[String(newer), String(newer)]])
    }
  }

  @Test(arguments: [
    (["--fleet"], "--fleet, --retire and --configure need --group NAME"),
    (["--retire", "b"], "--fleet, --retire and --configure need --group NAME"),
    (["--fleet", "--group", "app", "/tmp/folder"], "--fleet, --retire and --configure take no folder"),
  ])
  func theFleetCommandsRefuseBadArguments(arguments: [String], message: String) async throws {
    let result = try await Executables.onThread {
      try ChildProcess(executable: Executables.groupsync, arguments: ["relay"] + arguments).finish(timeout: 60)
    }
    #expect(result.status == 64 && result.stderr.contains(message), "\(result.status): \(result.stderr)")
  }

  @Test func theRelayTellsItsVersionAndFormats() async throws {
    let printed = try await Executables.groupsync(["relay", "--version"])
    #expect(printed == "groupsync-relay \(RelayVersion.current.description)\n", "\(printed)")
    #expect(printed.contains("reads 1") && printed.contains("server schema \(SharedSchema.version)"))
  }
}
