import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// The relay on a real network: PostgreSQL in a network namespace of its
/// own, each host's relay in another, joined by veth pairs; a cut takes a
/// link down on the server's side, so neither end hears a FIN or a RST
/// (a pulled cable, a crashed NAT, a frozen cloud host). Writers run on
/// every host throughout.
@Suite(.timed) struct RelayNetworkTests {
  /// The relay's timeouts, which the bounds below are made of: each bound
  /// is the timeouts that must fire plus a multiple of the same work
  /// measured in the same test with nothing cut (how fast this machine is
  /// right now, a sanitizer build or a busy machine included).
  ///
  /// The dead-link timeout is set short (3 s, not 6): these tests wait
  /// for it to fire.
  static let timeouts = RelayTimeouts(deadLink: .seconds(3))

  /// Work under a sanitizer is cut in half: it makes every process slower.
  static var underSanitizer: Bool { ProcessInfo.processInfo.environment["GROUPSYNC_SANITIZER"] != nil }

  /// How long `body` takes.
  static func measure(_ body: () async throws -> Void) async rethrows -> Duration {
    let start = ContinuousClock.now
    try await body()
    return ContinuousClock.now - start
  }

  /// Runs `body` with a lab of `names`, the server in its namespace, and
  /// one group folder per host whose relay runs in the host's namespace and
  /// reaches the server over its veth pair.
  static func withNetwork(
    _ names: [String], _ body: (NetworkLab, PostgresServer, [GroupHost]) async throws -> Void
  ) async throws {
    try await NetworkLab.with(hosts: names) { lab in
      try await PostgresServer.withInNamespace(lab) { server in
        let root = try HostsFolder()
        var hosts: [GroupHost] = []
        for name in names {
          let host = try await GroupHost(name, root: root.path, conninfo: lab.conninfo(for: name, server: server))
          host.launch = { program, arguments in lab.command(in: name, program, arguments) }
          host.deadLinkTimeout = Self.timeouts.deadLink
          hosts.append(host)
        }
        defer {
          // Relays end before the lab's namespaces go.
          for host in hosts { host.killRelaySync() }
        }
        try await body(lab, server, hosts)
        withExtendedLifetime(root) {}
      }
    }
  }

  /// Waits until `seconds` after `start` (a cut's length is part of the
  /// scenario, not a wait for an outcome).
  static func hold(until start: ContinuousClock.Instant, plus seconds: Double) async throws {
    let end = start + .milliseconds(Int64(seconds * 1000))
    if end > .now { try await Task.sleep(until: end, clock: .continuous) }
  }

  /// A host frozen and cut off in the middle of a shipment, after it
  /// locked rows the others then write: the server ends its session within
  /// the idle-in-transaction timeout, the others ship within 5 s of the
  /// cut, and after the heal the cut host's relay (the same process) takes
  /// its place again and everything converges, with no step on the server.
  @Test(.enabled(if: NetworkLab.isAvailable().0, "needs root and network namespaces (ip netns, veth)"))
  func aHostCutMidShipmentHoldsNoOneAndRejoinsAfterTheHeal() async throws {
    try await Self.withNetwork(["a", "b", "c"]) { lab, server, hosts in
      let (a, b, c) = (hosts[0], hosts[1], hosts[2])
      try await a.startRelay()
      try await b.startRelay(environment: [RelayFailpoints.variable: "stall-in-shipment:10"])
      try await c.startRelay()
      try await a.exec(["INSERT INTO note(title, body, n) VALUES ('seed-' || hex(randomblob(4)), 'seed', 0)"], repeat: 5)
      try await waitForConvergence(hosts, server: server)
      // The baseline: what the others do during the cut, with nothing held.
      let unheld = try await Self.measure {
        try await a.exec(["INSERT INTO note(title, body) VALUES ('a-before-cut', 'a')"])
        try await c.exec(["INSERT INTO note(title, body) VALUES ('c-before-cut', 'c')"])
        try await waitUntil("a and c ship", timeout: .seconds(60)) {
          try server.query("SELECT count(*) FROM gs_change WHERE body LIKE '%before-cut%'").first?[0] == "2"
        }
      }
      // B's shipment locks every seed row, then B freezes: cut it there.
      try await b.exec(["UPDATE note SET body = 'from b', n = n + 1"])
      let bRelay = try #require(b.relay)
      try await Executables.onThread { try bRelay.waitForStderr(containing: "failpoint stall-in-shipment", timeout: 60) }
      try lab.cut("b")
      let cutAt = ContinuousClock.now
      // The others write the rows B holds, and new ones.
      try await a.exec([
        "UPDATE note SET body = 'from a', n = n + 10 WHERE title = (SELECT min(title) FROM note)",
        "INSERT INTO note(title, body) VALUES ('a-during-cut', 'a')",
      ])
      try await c.exec(["INSERT INTO note(title, body) VALUES ('c-during-cut', 'c')"])
      try await waitUntil("a and c ship while b is cut", timeout: .seconds(60)) {
        try server.query("SELECT count(*) FROM gs_change WHERE body LIKE '%during-cut%'").first?[0] == "2"
      }
      // The server ends B's session once it idled in its transaction too
      // long; a shipment waiting for B's locks gives up after the lock
      // timeout and the next pass ships.
      let held = ContinuousClock.now - cutAt
      let bound = Self.timeouts.idleInTransaction + Self.timeouts.lock + unheld * 2
      #expect(held < bound, "the group was held \(held) by a host cut mid-shipment (bound \(bound))")
      try await Self.hold(until: cutAt, plus: 12)
      try lab.heal("b")
      let healedAt = ContinuousClock.now
      let content = try await waitForConvergence(hosts, server: server, timeout: .seconds(120))
      let resumed = ContinuousClock.now - healedAt
      #expect(content.count == 9)
      #expect(b.relay?.isRunning == true && b.relay === bRelay, "b's relay went on by itself")
      #expect(b.events("connected").count >= 2)
      Swift.print("cut mid-shipment: others shipped \(held) after the cut; converged \(resumed) after the heal")
    }
  }

  /// A silent link is noticed within twice the dead-link timeout (status,
  /// event, log), and the relay takes it up again after the heal;
  /// SIGTERM stops a relay as fast as with the link up while it waits for
  /// an answer on a cut link, and while it tries to connect through one.
  @Test(.enabled(if: NetworkLab.isAvailable().0, "needs root and network namespaces (ip netns, veth)"))
  func aSilentLinkIsNoticedAndSIGTERMStopsInEveryState() async throws {
    try await Self.withNetwork(["a", "b"]) { lab, server, hosts in
      let (a, b) = (hosts[0], hosts[1])
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('before', 'x')"])
      try await waitForConvergence(hosts, server: server)
      // The baselines, nothing cut: how long a takes to say that its
      // session ended (ended by the server here, so it hears at once), and
      // to stop on SIGTERM.
      let ended = try await Self.measure {
        let disconnected = a.events("disconnected").count
        _ = try server.query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'groupsync-relay a'")
        try await waitUntil("a notices its session ended", timeout: .seconds(60)) {
          a.events("disconnected").count > disconnected
        }
      }
      try await waitUntil("a reconnects", timeout: .seconds(60)) { a.relayStatus()?.isConnected == true }
      let stopping = try #require(try await a.terminateRelay(), "a did not stop on SIGTERM")
      try await a.startRelay()
      // Noticed: a is idle between passes when the link goes silent.
      let disconnectedBefore = a.events("disconnected").count
      try lab.cut("a")
      let cutAt = ContinuousClock.now
      try await waitUntil("a notices", timeout: .seconds(60)) {
        a.relayStatus()?.isConnected == false && a.events("disconnected").count > disconnectedBefore
      }
      let noticed = ContinuousClock.now - cutAt
      // TCP's timers count whole seconds (keepalives) and back off
      // (retransmissions), which for a short timeout is as much again: twice
      // the timeout, and the relay's own reaction, measured above, eight
      // times for a busy machine (a CI run under ThreadSanitizer took six).
      let noticeBound = Self.timeouts.deadLink * 2 + ended * 8
      #expect(noticed <= noticeBound, "a silent link went unnoticed for \(noticed) (bound \(noticeBound))")
      #expect(a.relay?.stderr.contains("lost the connection to PostgreSQL") == true)
      let status = try await Executables.groupsync(["status", a.folder])
      #expect(status.contains("relay     a (group app): running") && status.contains("not connected"))
      // B goes on meanwhile.
      try await b.exec(["INSERT INTO note(title, body) VALUES ('b-while-a-cut', 'y')"])
      try await waitUntil("b ships") {
        try server.query("SELECT count(*) FROM gs_change WHERE body LIKE '%b-while-a-cut%'").first?[0] == "1"
      }
      try lab.heal("a")
      let healedAt = ContinuousClock.now
      try await waitUntil("a reconnects", timeout: .seconds(60)) { a.relayStatus()?.isConnected == true }
      let resumed = ContinuousClock.now - healedAt
      try await waitForConvergence(hosts, server: server)
      // SIGTERM while a waits for an answer that the cut link never brings.
      try lab.cut("a")
      try await a.exec(["INSERT INTO note(title, body) VALUES ('a-while-cut', 'z')"])
      try await Self.hold(until: .now, plus: 1)
      // The relay does not wait for the link: it stops about as fast as it
      // did with the link up (twice that, and a second, for the noise).
      let stopBound = stopping * 2 + .seconds(1)
      let inCall = try await a.terminateRelay()
      #expect(inCall != nil && inCall! < stopBound, "SIGTERM mid-call took \(String(describing: inCall)) (bound \(stopBound))")
      // SIGTERM while a relay tries to connect through the cut link.
      try await a.startRelay(waitConnected: false)
      try await Self.hold(until: .now, plus: 1)
      let connecting = try await a.terminateRelay()
      #expect(
        connecting != nil && connecting! < stopBound,
        "SIGTERM while connecting took \(String(describing: connecting)) (bound \(stopBound))")
      try lab.heal("a")
      try await a.startRelay()
      let content = try await waitForConvergence(hosts, server: server)
      #expect(content.count == 3)
      Swift.print(
        "silent link: noticed \(noticed) after the cut, connected again \(resumed) after the heal; "
          + "SIGTERM took \(inCall ?? .zero) mid-call, \(connecting ?? .zero) while connecting")
    }
  }

  /// The hub away (every link cut) while every host writes: local commits
  /// go on untouched, every relay says it is not connected, and after the
  /// heal everything ships and every replica converges.
  @Test(.enabled(if: NetworkLab.isAvailable().0, "needs root and network namespaces (ip netns, veth)"))
  func aHubOutageLeavesLocalCommitsAloneAndEverythingShipsAfter() async throws {
    try await Self.withNetwork(["a", "b", "c"]) { lab, server, hosts in
      for host in hosts { try await host.startRelay() }
      try await hosts[0].exec(["INSERT INTO note(title, body) VALUES ('seed', 's')"])
      try await waitForConvergence(hosts, server: server)
      try lab.cutAll()
      let cutAt = ContinuousClock.now
      let count = Self.underSanitizer ? 150 : 300
      let writers = try hosts.map { host in
        try host.startWriter(
          ["INSERT INTO note(title, body) VALUES ('\(host.name)-' || hex(randomblob(8)), 'offline')"], repeat: count)
      }
      for writer in writers {
        let result = try await Executables.onThread { writer.finish(timeout: 300) }
        #expect(result.succeeded, "a local commit was held by the hub's outage: \(result.stderr)")
      }
      try await waitUntil("every relay says it is not connected", timeout: .seconds(60)) {
        hosts.allSatisfy { $0.relayStatus()?.isConnected == false }
      }
      let noticed = ContinuousClock.now - cutAt
      try lab.healAll()
      let healedAt = ContinuousClock.now
      let content = try await waitForConvergence(hosts, server: server, timeout: .seconds(120))
      #expect(content.count == 1 + 3 * count)
      Swift.print("hub outage: noticed by all within \(noticed); \(3 * count) commits converged \(ContinuousClock.now - healedAt) after the heal")
    }
  }
}

extension GroupHost {
  /// SIGKILLs the relay and waits for it, from synchronous code.
  func killRelaySync() {
    guard let relay else { return }
    relay.signal(SIGKILL)
    _ = relay.finish(timeout: 10)
  }
}
