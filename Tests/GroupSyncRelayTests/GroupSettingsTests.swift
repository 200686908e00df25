import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// The group's settings on the server, an administrator's: retention
/// (which purges never past what every member applied unless it says so,
/// and never where a member holds), the size of a shipment; how they are
/// set (`--configure`, the set-up) and refused.
@Suite(.timed)
struct GroupSettingsTests {
  @Test func settingsParseAndRefuseWhatIsOutOfRange() throws {
    #expect(try GroupSettings.Retention(parsing: "all") == .everything)
    #expect(try GroupSettings.Retention(parsing: "25") == .entries(25))
    for bad in ["0", "-3", "", "ten", "1e3"] {
      #expect(throws: RelayError.self, "\(bad)") { try GroupSettings.Retention(parsing: bad) }
    }
    #expect(throws: RelayError.invalidConfiguration("retention 0: keep at least 1 entry")) {
      try GroupSettings(retention: .entries(0)).validate()
    }
    for bytes: Int64 in [0, 1023, (1 << 30) + 1] {
      #expect(throws: RelayError.self, "\(bytes)") { try GroupSettings(maxShipmentBytes: bytes).validate() }
    }
    #expect(GroupSettings().isEmpty && !GroupSettings(retentionPassesMembers: false).isEmpty)
    // Only what is named is set; the group's row is made if missing.
    #expect(
      GroupSettings(retention: .everything, maxShipmentBytes: 4096).statements(group: "it's") == [
        "INSERT INTO gs_group (grp) VALUES (E'it''s') ON CONFLICT (grp) DO NOTHING",
        "UPDATE gs_group SET retention = NULL, max_shipment_bytes = 4096 WHERE grp = E'it''s'",
      ])
    #expect(GroupSettings().statements(group: "g").count == 1)
  }

  /// Ships one entry of `replica`'s, format 1, through `through`; the
  /// host has applied the log up to it (recorded with the next shipment,
  /// as a relay's bookkeeping rides along).
  private static func ship(_ log: SharedLog, _ replica: SharedLog.Replica, _ through: Int64) throws -> Int64 {
    let outcome = try log.ship(replica, RelayAccessTests.shipment(through, gid: "\(replica.host)-\(through)"), settled: false)
    guard case .shipped(let position) = outcome else { throw RelayTestFailure("not shipped: \(outcome)") }
    log.recordApplied(replica, through: position)
    return position
  }

  @Test func aPurgeNeverPassesWhatAMemberHasNotAppliedUnlessTheAdministratorSaysSo() async throws {
    try await PostgresServer.with { server in
      let a = SharedLog(try server.connect())
      let b = SharedLog(try server.connect())
      let mine = SharedLog.Replica(group: "app", store: "main", host: "a")
      let theirs = SharedLog.Replica(group: "app", store: "main", host: "b")
      try a.prepareAccess(group: "app", host: "a")
      _ = try a.enroll(mine, place: 0)
      _ = try b.enroll(theirs, place: 0)
      // b is a member: seen, place 0.
      b.recordApplied(theirs, through: 0)
      try b.flushDeferred()
      let purged = { Int64(try server.query("SELECT purged_through FROM gs_clock WHERE grp = 'app'").first?[0] ?? "") }
      let entries = { try server.query("SELECT count(*) FROM gs_change WHERE grp = 'app'").first?[0] }

      // No retention (the default): every entry stays.
      for through: Int64 in 1...3 { _ = try Self.ship(a, mine, through) }
      #expect(try purged() == 0 && entries() == "3")
      // Retention 1: b has applied nothing, so nothing goes.
      try GroupFleet.configure(GroupSettings(retention: .entries(1)), group: "app", conninfo: server.conninfo)
      _ = try Self.ship(a, mine, 4)
      #expect(try purged() == 0 && entries() == "4")
      // b applies through 2: the purge follows it, no further.
      b.recordApplied(theirs, through: 2)
      try b.flushDeferred()
      _ = try Self.ship(a, mine, 5)
      #expect(try purged() == 2 && entries() == "3")
      // b holds at 3 (it cannot read it): even past members, never there.
      try b.recordHold(theirs, at: 3)
      try GroupFleet.configure(GroupSettings(retentionPassesMembers: true), group: "app", conninfo: server.conninfo)
      _ = try Self.ship(a, mine, 6)
      #expect(try purged() == 2)
      // Applying past the hold lets it go; then past b, as the administrator said.
      b.recordApplied(theirs, through: 3)
      try b.flushDeferred()
      #expect(try server.query("SELECT held_at FROM gs_host WHERE host = 'b'") == [[nil]])
      #expect(try Self.ship(a, mine, 7) == 7)
      #expect(try purged() == 6 && entries() == "1")
      // Members again: b, at 3, keeps what it has not applied.
      try GroupFleet.configure(GroupSettings(retentionPassesMembers: false), group: "app", conninfo: server.conninfo)
      _ = try Self.ship(a, mine, 8)
      #expect(try purged() == 6 && entries() == "2")
      // A member retired by the administrator counts for nothing.
      try GroupFleet.retire(host: "b", group: "app", conninfo: server.conninfo)
      _ = try Self.ship(a, mine, 9)
      #expect(try purged() == 8 && entries() == "1")
      // Every entry kept again: nothing more is purged.
      try GroupFleet.configure(GroupSettings(retention: .everything), group: "app", conninfo: server.conninfo)
      _ = try Self.ship(a, mine, 10)
      #expect(try purged() == 8 && entries() == "2")
      let fleet = try GroupFleet.read(group: "app", conninfo: server.conninfo)
      #expect(fleet.settings == .init(retention: .everything, retentionPassesMembers: false, maxShipmentBytes: 64 << 20))
      #expect(fleet.settings.description == "retention: every entry; largest shipment: 67108864 bytes")
    }
  }

  @Test func theCommandLineSetsTheSettingsAndRefusesThemWhereTheyNoLongerBelong() async throws {
    try await PostgresServer.with { server in
      let shown = try await Executables.groupsync([
        "relay", "--configure", "--group", "app", "--postgres", server.conninfo, "--retention", "500",
        "--max-shipment-bytes", "1048576",
      ])
      #expect(
        shown.contains(
          "retention: the newest 500 entries, older ones purged once every member applied them; largest shipment: 1048576 bytes"),
        "\(shown)")
      #expect(try server.query("SELECT retention, retention_passes_members, max_shipment_bytes FROM gs_group") == [["500", "f", "1048576"]])
      // The set-up sets what it names, and leaves the rest.
      let script = try await Executables.groupsync([
        "relay", "--print-setup", "--group", "app", "--retention-passes-members", "true", "web-1",
      ])
      #expect(script.contains("UPDATE gs_group SET retention_passes_members = true WHERE grp = E'app';"))
      try await RelayAccessTests.runScript(server, script)
      #expect(try server.query("SELECT retention, retention_passes_members, max_shipment_bytes FROM gs_group") == [["500", "t", "1048576"]])

      let folder = try HostsFolder()
      for (arguments, message) in [
        (["relay", folder.path, "--retention", "5"], "the group's settings on the server"),
        (["relay", folder.path, "--max-shipment-bytes", "5000"], "the group's settings on the server"),
        (["relay", folder.path, "--older-relays"], "the group's settings on the server"),
        (["relay", "--configure", "--group", "app"], "--configure: name a setting"),
        (["relay", "--configure", "--group", "app", "--retention", "0"], "retention '0'"),
        (["relay", "--configure", "--group", "app", "--max-shipment-bytes", "10"], "max shipment bytes 10"),
        (["relay", "--configure", "--retention", "5"], "need --group NAME"),
        (["relay", "--fleet", "--group", "app", "--retention", "5"], "the group's settings go with --configure"),
        (["relay", "--fleet", "--group", "app", "--older-relays"], "--older-relays with --print-setup"),
      ] {
        let result = try await Executables.onThread {
          try ChildProcess(executable: Executables.groupsync, arguments: arguments).finish(timeout: 120)
        }
        #expect(result.status != 0 && result.stderr.contains(message), "\(arguments): \(result.stderr)")
      }
    }
  }
}
