import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay

/// PostgreSQL fails over: a primary with a streaming standby, relays given
/// both in a multi-host conninfo (`target_session_attrs=read-write`); the
/// primary dies and the standby is promoted.
@Suite(.timed) struct RelayFailoverTests {
  /// Hosts "a" and "b" reaching the pair through its multi-host conninfo.
  static func hostsOnPair(_ pair: StandbyPair, root: HostsFolder) async throws -> (GroupHost, GroupHost) {
    let a = try await GroupHost("a", root: root.path, conninfo: pair.conninfo)
    let b = try await GroupHost("b", root: root.path, conninfo: pair.conninfo)
    return (a, b)
  }

  /// The log's head on whichever server of the pair accepts writes.
  static func head(_ pair: StandbyPair) throws -> Int64 {
    Int64(try pair.query("SELECT coalesce(max(seq), 0) FROM gs_clock WHERE grp = 'app'", conninfo: pair.conninfo)
      .first?.first ?? "0") ?? 0
  }

  /// Nothing lost: the standby had every entry. The relays reconnect to the
  /// promoted standby by themselves and go on; nobody re-synchronises.
  @Test func aFailoverThatLosesNothingIsTakenInStride() async throws {
    try await StandbyPair.with { pair in
      let root = try HostsFolder()
      let (a, b) = try await Self.hostsOnPair(pair, root: root)
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('a-' || hex(randomblob(4)), 'before')"], repeat: 20)
      try await b.exec(["INSERT INTO note(title, body) VALUES ('b-' || hex(randomblob(4)), 'before')"], repeat: 20)
      try await waitForConvergence([a, b]) { try Self.head(pair) }
      try await pair.waitUntilStandbyCaughtUp()
      try pair.killPrimary()
      try await pair.promoteStandby()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('a-after', 'after')"])
      try await b.exec(["UPDATE note SET body = 'b-after' WHERE body = 'before' AND title LIKE 'a-%'"])
      let content = try await waitForConvergence([a, b], timeout: .seconds(120)) { try Self.head(pair) }
      #expect(content.count == 41)
      #expect(content.values.filter { $0[1] == "\"b-after\"" }.count == 20)
      #expect(a.events("resync").isEmpty && b.events("resync").isEmpty)
      #expect(a.events("connected").count >= 2 && b.events("connected").count >= 2)
      withExtendedLifetime(root) {}
    }
  }

  /// Entries the old primary acknowledged and the standby never received:
  /// their origin finds its shipments gone and ships them again from its
  /// own store; the other host, which had applied them, finds the log
  /// diverged and re-synchronises. Both say so (`resync` events naming the
  /// loss), and every replica ends equal to the new log, nothing missing.
  ///
  /// Also behind a pooler that hides the failover: two poll relays
  /// connected to a PgBouncer in front of the primary, which is pointed
  /// at the promoted standby while their connections to it stay. No
  /// session of theirs ends, so no reconnect reads the places back: the
  /// shipping host learns of the loss from its next shipment (the server's
  /// shipped place below the one it had acknowledged), the other from its
  /// next read of the log.
  @Test(arguments: [false, true])
  func aFailoverThatLosesEntriesIsDetectedAndSettled(behindAPooler: Bool) async throws {
    try await StandbyPair.with { pair in
      guard behindAPooler else { return try await Self.losesEntries(pair, conninfo: pair.conninfo) {} }
      let (socket, primary, standby) = (pair.folder, StandbyPair.Server.primary.port, StandbyPair.Server.standby.port)
      try await PgBouncer.with(host: socket, port: primary) { bouncer in
        try await Self.losesEntries(pair, conninfo: bouncer.conninfo, transport: "poll") {
          try bouncer.retarget(host: socket, port: standby)
        }
      }
    }
  }

  /// ``aFailoverThatLosesEntriesIsDetectedAndSettled(behindAPooler:)`` with
  /// relays connecting with `conninfo` on `transport` (nil: the tests'),
  /// `promoted` run once the standby is promoted.
  private static func losesEntries(
    _ pair: StandbyPair, conninfo: String, transport: String? = nil, promoted: () throws -> Void
  ) async throws {
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, conninfo: conninfo)
      let b = try await GroupHost("b", root: root.path, conninfo: conninfo)
      if let transport { (a.transport, b.transport) = (transport, transport) }
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body, n) VALUES ('kept-' || hex(randomblob(4)), 'kept', 0)"], repeat: 10)
      try await waitForConvergence([a, b]) { try Self.head(pair) }
      try await pair.waitUntilStandbyCaughtUp()
      // From here the standby hears nothing: what follows, the old primary
      // acknowledges and the new one will never have.
      try pair.stopStandby()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('lost-' || hex(randomblob(4)), 'from a')"], repeat: 5)
      try await a.exec(["UPDATE note SET n = 1 WHERE title LIKE 'kept-%'"])
      try await b.exec(["DELETE FROM note WHERE title = (SELECT min(title) FROM note WHERE title LIKE 'kept-%')"])
      let lostContent = try await waitForConvergence([a, b]) { try Self.head(pair) }
      #expect(lostContent.count == 14)
      try pair.killPrimary()
      try pair.startStandby()
      // Still in recovery, so no relay can write to it yet.
      #expect(try pair.query("SELECT count(*) FROM gs_change WHERE body LIKE '%lost-%'", on: .standby)
        .first?.first == "0", "the standby was meant to miss the last entries")
      try await pair.promoteStandby()
      try promoted()
      // Both hosts write on after the failover too.
      try await b.exec(["INSERT INTO note(title, body) VALUES ('b-after', 'after')"])
      let content = try await waitForConvergence([a, b], timeout: .seconds(120)) { try Self.head(pair) }
      #expect(content.count == 15, "\(content.values.map { $0[0] + " " + $0[2] }.sorted()); a: \(a.eventLines.suffix(12)); b: \(b.eventLines.suffix(12))")
      #expect(content.values.filter { $0[0].hasPrefix("\"lost-") }.count == 5)
      #expect(content.values.filter { $0[0].hasPrefix("\"kept-") && $0[2] == "1" }.count == 9)
      for host in [a, b] {
        #expect(
          host.events("resync").contains { ($0["reason"] as? String)?.contains("lost") == true },
          "\(host.name) did not say the log lost entries: \(host.events("resync"))")
      }
      // The new log is gapless and equals the replicas row for row.
      let log = try pair.query("SELECT count(*), min(seq), max(seq) FROM gs_change", conninfo: pair.conninfo).first
      #expect(log?[0] == log?[2] && log?[1] == "1")
      let live = try pair.query("SELECT count(*) FROM gs_row WHERE data IS NOT NULL", conninfo: pair.conninfo)
      #expect(live.first?.first == "15")
      withExtendedLifetime(root) {}
  }
}
