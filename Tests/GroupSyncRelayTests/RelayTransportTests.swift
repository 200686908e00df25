import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// The transports against a real server and a real PgBouncer: poll relays
/// through a pooler in transaction mode beside notify relays in one group;
/// one relay per host whatever the transports; a group's wake-ups reach
/// its members only, under a tag; a wake-up lost is made up for; a
/// pooler's refusal is told and outlived.
@Suite(.timed)
struct RelayTransportTests {
  /// Two poll relays through a PgBouncer of two server connections and a
  /// notify relay on the server itself: writes from each reach the others,
  /// the server sees the pool's connections and the notify relay's, and
  /// `groupsync status` names each relay's transport.
  @Test func pollRelaysThroughAPoolerAndANotifyRelayReplicateInOneGroup() async throws {
    try await PostgresServer.with { server in
      try await PgBouncer.with(server, poolSize: 2) { bouncer in
        let root = try HostsFolder()
        let a = try await GroupHost("a", root: root.path, conninfo: bouncer.conninfo)
        let b = try await GroupHost("b", root: root.path, conninfo: server.conninfo)
        let c = try await GroupHost("c", root: root.path, conninfo: bouncer.conninfo)
        (a.transport, b.transport, c.transport) = ("poll", "notify", "poll")
        for host in [a, b, c] { try await host.startRelay() }
        for host in [a, b, c] {
          try await host.exec(["INSERT INTO note(title, body) VALUES ('\(host.name)1', '\(host.name)')"])
        }
        try await b.exec(["UPDATE note SET body = 'b again' WHERE title = 'a1'"])
        try await a.exec(["DELETE FROM note WHERE title = 'c1'"])
        let content = try await waitForConvergence([a, b, c], server: server)
        #expect(content.values.map { $0[0] }.sorted() == ["\"a1\"", "\"b1\""])
        // The pool's two connections, b's session and this query's (a
        // session of the test's that just closed may still be leaving:
        // waited for; the pool's would stay for its idle timeout, 10 min).
        try await waitUntil("the server holds the pool's connections and b's only") {
          let sessions = try server.query("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
          return Int(sessions.first?[0] ?? "") ?? 99 <= 4
        }
        let status = try await Executables.groupsync(["status", a.folder])
        #expect(status.contains("transport: poll, every 0.05 s"), "\(status)")
        #expect(b.relayStatus()?.transport == "notify")
        let fleet = try await Executables.groupsync(["relay", "--fleet", "--group", "app", "--postgres", server.conninfo])
        for (name, transport) in [("a", "poll"), ("b", "notify"), ("c", "poll")] {
          let line = fleet.split(separator: "\n").first { $0.hasPrefix(name + " ") } ?? ""
          #expect(line.split(separator: " ").suffix(2) == [Substring(transport), "member"], "\(fleet)")
        }
        for host in [a, b, c] {
          #expect(host.events("error").isEmpty && host.events("failed").isEmpty, "\(host.name): \(host.events("error"))")
        }
      }
    }
  }

  /// A host's relays keep each other out whatever their transports: a
  /// poll relay's lease keeps a notify relay of the host out until it
  /// stops (a clean stop gives the lease up), and the notify relay's
  /// advisory lock keeps a poll relay out.
  @Test func oneRelayPerHostAcrossTransports() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let poller = try await GroupHost("a", root: root.path, conninfo: server.conninfo)
      poller.transport = "poll"
      try await poller.startRelay()
      let twin = try await GroupHost("twin", root: root.path, conninfo: server.conninfo)
      twin.transport = "notify"
      twin.launch = { executable, arguments in (executable, Self.asHost("a", arguments)) }
      try await twin.startRelay(waitConnected: false)
      try await waitUntil("the notify twin is refused") {
        twin.relay?.stdout.contains("a relay of the poll transport holds the host's lease") == true
      }
      #expect(twin.relay?.stdout.contains("\"connected\"") == false)
      try await poller.stopRelay()
      try await waitUntil("the twin takes over once the lease is given up") {
        twin.relay?.stdout.contains("\"connected\"") == true
      }
      try await poller.startRelay(waitConnected: false)
      try await waitUntil("the poll relay is refused") {
        poller.relay?.stdout.contains("PostgreSQL advisory lock held") == true
      }
      #expect(poller.relay?.stdout.contains("\"connected\"") == false)
    }
  }

  /// `arguments` of a relay with `--host NAME --group app`.
  private static func asHost(_ name: String, _ arguments: [String]) -> [String] {
    var arguments = arguments
    if let index = arguments.firstIndex(of: "--host") { arguments[index + 1] = name }
    return arguments + ["--group", "app"]
  }

  /// A relay shipping under a lease it lost writes nothing, and says so;
  /// renewing a lease another holder took fails.
  @Test func aShipmentUnderALostLeaseWritesNothing() async throws {
    try await PostgresServer.with { server in
      let log = SharedLog(try server.connect())
      try log.createTables()
      let (first, second) = (UUID(), UUID())
      try log.takeLease(group: "g", host: "h", holder: first, duration: .seconds(60), version: .current)
      let other = SharedLog(try server.connect())
      #expect(throws: RelayError.self) {
        try other.takeLease(group: "g", host: "h", holder: second, duration: .seconds(60), version: .current)
      }
      // The lease runs out; the second takes it.
      _ = try server.query("UPDATE gs_peer SET lease_until = now() - interval '1 second'")
      try other.takeLease(group: "g", host: "h", holder: second, duration: .seconds(60), version: .current)
      let replica = SharedLog.Replica(group: "g", store: "main", host: "h")
      _ = try log.enroll(replica, place: 0)
      #expect(throws: RelayError.relayAlreadyRunning(host: "h", group: "g", where: "another relay took the host's lease over")) {
        _ = try log.ship(replica, RelayAccessTests.shipment(1, gid: "x"), settled: false)
      }
      #expect(throws: RelayError.self) {
        try log.renewLease(group: "g", host: "h", holder: first, duration: .seconds(60))
      }
      #expect(try server.query("SELECT count(*) FROM gs_change") == [["0"]])
      #expect(try other.ship(replica, RelayAccessTests.shipment(1, gid: "x"), settled: false) == .shipped(position: 1))
      try other.renewLease(group: "g", host: "h", holder: second, duration: .seconds(60))
    }
  }

  /// Two groups on one server: a session that joins group `other` as a
  /// notify member and listens on its channel and the legacy one hears
  /// nothing of `app`'s shipments, and hears `other`'s, under the store's
  /// tag.
  @Test func aGroupsWakeUpsReachItsMembersOnly() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, conninfo: server.conninfo)
      let b = try await GroupHost("b", root: root.path, conninfo: server.conninfo)
      let c = try await GroupHost("c", root: root.path, conninfo: server.conninfo)
      for host in [a, b, c] { host.transport = "notify" }
      c.launch = { executable, arguments in (executable, arguments + ["--group", "other"]) }
      for host in [a, b, c] { try await host.startRelay() }
      let spy = SharedLog(try server.connect())
      try spy.announce(
        group: "other", host: "spy", version: .current, rules: MergeRules(policy: .objectTrump).fingerprint,
        transport: .notify)
      let channel = try #require(spy.wakes.channel)
      try spy.listen(on: [channel, SharedLog.legacyChannel])
      // c learns of the spy at its next look at the group (its connect, or
      // its format check): restart it so that it knows now.
      try await c.stopRelay()
      try await c.startRelay()
      // What c itself had to ship is shipped, and its wake-up heard and
      // dropped (it comes before the answer of the spy's round trip).
      try await waitUntil("c shipped what it had") { c.relayStatus()?.stores.first?.unshipped == 0 }
      try spy.connection.execute("SELECT 1")
      _ = try spy.notifications()
      for index in 1...5 { try await a.exec(["INSERT INTO note(title) VALUES ('a\(index)')"]) }
      try await waitForConvergence([a, b], server: server)
      try spy.connection.execute("SELECT 1")
      #expect(try spy.notifications().isEmpty)
      try await c.exec(["INSERT INTO note(title) VALUES ('c1')"])
      let tag = try #require(
        try server.query("SELECT tag FROM gs_clock WHERE grp = 'other' AND store = 'main'").first?[0] ?? nil)
      var heard: [(channel: String, payload: String)] = []
      let deadline = ContinuousClock.now + .seconds(60)
      var backoff = PollBackoff()
      while heard.isEmpty && ContinuousClock.now < deadline {
        heard += try spy.notifications()
        try await backoff.pause()
      }
      #expect(heard.count == 1 && heard[0].channel == channel && heard[0].payload.hasPrefix(tag + ":")
        && heard[0].payload.contains("\nc "), "\(heard) \(tag)")
    }
  }

  /// A notify relay wakes its group's channel even before it learns of a
  /// listener (members of a fleet started together announce one after
  /// another): a session that listens without having announced itself
  /// hears the shipment.
  @Test func aNotifyRelayWakesTheGroupBeforeItKnowsOfAListener() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, conninfo: server.conninfo)
      a.transport = "notify"
      try await a.startRelay()
      let channel = try #require(try server.query("SELECT channel FROM gs_group WHERE grp = 'app'").first?[0] ?? nil)
      let listener = SharedLog(try server.connect())
      try listener.listen(on: [channel])
      let shipped = a.events("shipped").count
      try await a.exec(["INSERT INTO note(title) VALUES ('woke')"])
      try await waitUntil("a shipped") { a.events("shipped").count > shipped }
      // The wake-up commits before the shipment's answer comes back; one
      // round trip of the listener's brings what was sent before it.
      try listener.connection.execute("SELECT 1")
      let heard = try listener.notifications()
      #expect(heard.contains { $0.channel == channel && $0.payload.contains("\na ") }, "\(heard)")
    }
  }

  /// Shipments whose wake-ups never came (their relay died between the
  /// two commits, here a failpoint drops them all) still reach a notify
  /// relay: at its next quiet read of the log, within its poll interval.
  @Test func aLostWakeUpIsMadeUpForByTheQuietRead() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, conninfo: server.conninfo)
      let b = try await GroupHost("b", root: root.path, conninfo: server.conninfo)
      for host in [a, b] { host.transport = "notify" }
      try await b.startRelay()
      try await a.startRelay(environment: [RelayFailpoints.variable: "no-wake-ups:1"])
      let spy = SharedLog(try server.connect())
      try spy.announce(
        group: "app", host: "spy", version: .current, rules: MergeRules(policy: .objectTrump).fingerprint,
        transport: .notify)
      try spy.listen(on: [try #require(spy.wakes.channel), SharedLog.legacyChannel])
      // b's own first shipment, and its wake-up, out of the way.
      try await waitUntil("b shipped what it had") { b.relayStatus()?.stores.first?.unshipped == 0 }
      try spy.connection.execute("SELECT 1")
      _ = try spy.notifications()
      for index in 1...3 { try await a.exec(["INSERT INTO note(title) VALUES ('a\(index)')"]) }
      #expect(try await waitForConvergence([a, b], server: server).count == 3)
      try spy.connection.execute("SELECT 1")
      #expect(try spy.notifications().isEmpty)
    }
  }

  /// A pooler that takes no more clients: the relay says which limit and
  /// what to do, in its events and in `groupsync status`, backs off, and
  /// connects and ships what waited once a client slot is free.
  @Test func aPoolersRefusalIsToldAndOutlived() async throws {
    try await PostgresServer.with { server in
      try await PgBouncer.with(server, poolSize: 2, maxClients: 1) { bouncer in
        // The pooler's one client slot, taken.
        var holder: PostgresConnection? = try PostgresConnection(conninfo: bouncer.conninfo)
        let root = try HostsFolder()
        let a = try await GroupHost("a", root: root.path, conninfo: bouncer.conninfo)
        a.transport = "poll"
        try await a.exec(["INSERT INTO note(title) VALUES ('waited')"])
        try await a.startRelay(waitConnected: false)
        try await waitUntil("the refusal is told") {
          a.relayStatus()?.lastError?.contains("the pooler takes no more clients (its max_client_conn)") == true
        }
        let status = try await Executables.groupsync(["status", a.folder])
        #expect(status.contains("PostgreSQL refused the session") && status.contains("raise the pooler's max_client_conn"))
        #expect(holder != nil)
        holder = nil
        try await waitUntil("the relay connects and ships") { a.events("shipped").count >= 1 }
        #expect(try server.query("SELECT count(*) FROM gs_change") == [["1"]])
      }
    }
  }

  /// What the relay says of each limit a server or pooler refuses a
  /// session for, and of errors that are no refusal.
  @Test func refusalsAreNamed() {
    func refusal(_ message: String, _ state: SQLState? = nil) -> ServerRefusal? {
      ServerRefusal(RelayError.postgres(call: "PQconnectPoll", message: message, sqlState: state))
    }
    #expect(refusal("FATAL:  sorry, too many clients already")?.limit.contains("max_connections") == true)
    #expect(refusal("FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute")?.limit
      .contains("max_connections") == true)
    #expect(refusal("FATAL:  too many connections for role \"web-1\"")?.advice.contains("ALTER ROLE") == true)
    #expect(refusal("FATAL:  too many connections for database \"postgres\"")?.advice.contains("ALTER DATABASE") == true)
    #expect(refusal("ERROR:  no more connections allowed (max_client_conn)")?.advice.contains("max_client_conn") == true)
    #expect(refusal("ERROR:  pgbouncer cannot connect to server")?.advice.contains("default_pool_size") == true)
    #expect(refusal("something else", "53300") != nil)
    let described = refusal("FATAL:  sorry, too many clients already")?.description ?? ""
    #expect(described.contains("--transport poll") && described.contains("nothing is lost"))
    #expect(refusal("could not connect to server: No such file or directory") == nil)
    #expect(ServerRefusal(RelayError.stopped) == nil)
  }
}
