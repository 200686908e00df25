import Foundation
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// Concurrent edits across hosts merge by property (log format 2), as a
/// context's merge policies do: what only one host changed survives, only
/// columns both changed are settled and reported.
@Suite(.timed) struct RelayMergeTests {
  static let schema = """
    CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT, tags TEXT, body TEXT, n INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE task(id INTEGER PRIMARY KEY, title TEXT, done INTEGER NOT NULL DEFAULT 0);
    """

  /// A relay embedded in the test process, as a program that links the
  /// library runs it (with a merge of its own), its events collected.
  final class EmbeddedRelay: @unchecked Sendable {
    final class Events: @unchecked Sendable {
      private let lock = NSLock()
      private var collected: [RelayEvent] = []
      func append(_ event: RelayEvent) { lock.withLock { collected.append(event) } }
      var all: [RelayEvent] { lock.withLock { collected } }
    }

    let relay: Relay
    private let collected = Events()

    init(_ host: GroupHost, server: PostgresServer, rules: MergeRules) throws {
      var configuration = RelayConfiguration(folder: host.folder, conninfo: server.conninfo, host: host.name)
      configuration.merge = rules
      configuration.pollInterval = .milliseconds(200)
      relay = try Relay(configuration, onEvent: collected.append)
      try relay.start()
    }

    deinit { relay.stop() }

    var events: [RelayEvent] { collected.all }

    var conflicts: [ConflictRecord] {
      events.compactMap { if case .conflict(let record) = $0 { record } else { nil } }
    }

    var shipped: Int { events.filter { if case .shipped = $0 { true } else { false } }.count }

    func waitShipped(after count: Int) async throws {
      try await waitUntil("a shipment") { self.shipped > count }
    }
  }

  /// Three hosts write the same rows while their relays are stopped, then
  /// ship one after the other (a, b, c: the log's order): every column
  /// only one host changed keeps its value; a column two hosts changed
  /// takes the later value (object-trump); the counter adds every host's
  /// increment (a merge of the program's own); an update against a delete
  /// follows each table's policy. Every host ends with the same rows, and
  /// reports exactly the conflicts of columns both changed.
  @Test func threeHostsWritingTheSameRowsMergeByProperty() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [GroupHost] = []
      for name in ["a", "b", "c"] { hosts.append(try await GroupHost(name, root: root.path, server: server, schema: Self.schema)) }
      let (a, b, c) = (hosts[0], hosts[1], hosts[2])
      var rules = MergeRules(policy: .objectTrump)
      rules.set(.merge(.counter), table: "note", column: "n")
      rules.set(.storeTrump, table: "task")

      var relays = try hosts.map { try EmbeddedRelay($0, server: server, rules: rules) }
      try await a.exec([
        """
        INSERT INTO note(title, tags, body, n) VALUES ('disjoint', 't0', 'b0', 0), ('overlap', 't0', 'b0', 0),
          ('update-delete', 't0', 'b0', 0), ('counter', 't0', 'b0', 10)
        """,
        "INSERT INTO task(title) VALUES ('changed-then-deleted'), ('deleted-then-changed')",
      ])
      try await waitForConvergence(hosts, server: server)
      #expect(try a.rows("SELECT count(*) FROM note") == ["4"])
      for relay in relays { relay.relay.stop() }

      // What each host commits, cut off from the others.
      try await a.exec([
        "UPDATE note SET title = 'disjoint' WHERE title = 'disjoint'",  // no change: no conflict either
        "UPDATE note SET tags = 'a-tags' WHERE title = 'disjoint'",
        "UPDATE note SET title = 'overlap', body = 'a-body' WHERE title = 'overlap'",
        "DELETE FROM note WHERE title = 'update-delete'",
        "UPDATE note SET n = n + 1 WHERE title = 'counter'",
        "UPDATE task SET done = 1 WHERE title = 'changed-then-deleted'",
        "DELETE FROM task WHERE title = 'deleted-then-changed'",
      ])
      try await b.exec([
        "UPDATE note SET body = 'b-body' WHERE title = 'disjoint'",
        "UPDATE note SET body = 'b-body', tags = 'b-tags' WHERE title = 'overlap'",
        "UPDATE note SET tags = 'b-tags' WHERE title = 'update-delete'",
        "UPDATE note SET n = n + 5 WHERE title = 'counter'",
        "DELETE FROM task WHERE title = 'changed-then-deleted'",
        "UPDATE task SET done = 2 WHERE title = 'deleted-then-changed'",
      ])
      try await c.exec([
        "UPDATE note SET n = n + 100, tags = 'c-tags' WHERE title = 'counter'",
        "UPDATE note SET body = 'c-body' WHERE title = 'overlap'",
      ])

      // They ship in the order a, b, c.
      relays = []
      for host in hosts {
        let relay = try EmbeddedRelay(host, server: server, rules: rules)
        relays.append(relay)
        try await relay.waitShipped(after: 0)
      }
      try await waitForConvergence(hosts, server: server)

      // Column by column, on every host.
      let query = "SELECT title, tags, body, n FROM note ORDER BY title"
      let notes = [
        // a changed tags, b body: both kept.
        "counter|c-tags|b0|116",  // 10 + 1 + 5 + 100; tags only c changed
        "disjoint|a-tags|b-body|0",
        // body: a, b and c changed it; the last (c) wins. tags: b only.
        "overlap|b-tags|c-body|0",
        // a deleted it, b changed it later: object-trump brings it back with b's values.
        "update-delete|b-tags|b0|0",
      ].sorted()
      // task is store-trump: the earlier write (a's) wins either way.
      let tasks = ["changed-then-deleted|1"]
      for host in hosts {
        #expect(try host.rows(query) == notes, "\(host.name)")
        #expect(try host.rows("SELECT title, done FROM task") == tasks, "\(host.name)")
      }

      // Conflicts: only where both wrote, once per column, on every host
      // (table, columns, rule, winner).
      let expected = [
        "note body object-trump b",  // b over a
        "note body object-trump c",  // c over a and b
        "note n merge:counter b",
        "note n merge:counter c",
        "note title,tags,body,n object-trump b",  // the update against a's delete
        "task title,done store-trump a",
        "task title,done store-trump a",
      ]
      for (host, relay) in zip(hosts, relays) {
        do {
          try await waitUntil("every conflict is told") { relay.conflicts.count >= expected.count }
        } catch {
          // Which host missed which, and what its relay did meanwhile.
          let told = relay.conflicts.map { "\($0.table) \($0.columns.joined(separator: ",")) \($0.rule) \($0.winnerHost)" }
          Issue.record("\(host.name) told \(told.sorted()); its events: \(relay.events)")
          continue
        }
        let told = relay.conflicts
        let described = told.map { "\($0.table) \($0.columns.joined(separator: ",")) \($0.rule) \($0.winnerHost)" }
        #expect(described.sorted() == expected, "\(told)")
        let counters = told.filter { $0.rule == "merge:counter" }.compactMap(\.merged)
        #expect(Set(counters) == [[.integer(16)], [.integer(116)]], "\(counters)")
        #expect(told.filter { $0.columns == ["body"] }.allSatisfy { $0.base == [.text("b0")] })
        let wholeRows = told.filter { $0.columns.count > 1 }.compactMap(\.reason).sorted()
        #expect(wholeRows == ["changed on b, deleted on a", "changed on b, deleted on a", "deleted on b, changed on a"])
      }
      let recorded = try server.query("SELECT count(*) FROM gs_conflict WHERE grp = 'app'")
      #expect(recorded == [[String(expected.count)]])
      for relay in relays { relay.relay.stop() }
    }
  }
}

extension RelayMergeTests {
  /// Stops both hosts' relays, lets each host commit its statements, then
  /// ships `first`'s before `second`'s (the log's order), and waits until
  /// the hosts agree.
  static func concurrently(
    _ first: (GroupHost, [String]), then second: (GroupHost, [String]), server: PostgresServer
  ) async throws {
    try await first.0.stopRelay()
    try await second.0.stopRelay()
    try await first.0.exec(first.1)
    try await second.0.exec(second.1)
    let shipped = first.0.events("shipped").count
    try await first.0.startRelay()
    try await waitUntil("\(first.0.name) shipped") { first.0.events("shipped").count > shipped }
    try await second.0.startRelay()
    try await waitForConvergence([first.0, second.0], server: server)
  }

  /// A merged row that breaks a CHECK across columns (each write alone
  /// kept it) is settled for the whole row by the policy, reported once,
  /// never stored half-merged; so is every concurrent write of a table
  /// that settles whole rows (`--whole-rows`).
  @Test func aMergedRowTheTableRefusesAndTablesOfWholeRowsAreSettledWhole() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let schema = """
        CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT);
        CREATE TABLE span(id INTEGER PRIMARY KEY, name TEXT, lo INTEGER, hi INTEGER, CHECK (lo <= hi));
        CREATE TABLE pair(id INTEGER PRIMARY KEY, name TEXT, left TEXT, right TEXT);
        """
      let a = try await GroupHost("a", root: root.path, server: server, schema: schema)
      let b = try await GroupHost("b", root: root.path, server: server, schema: schema)
      for host in [a, b] {
        host.policy = "object-trump"
        host.wholeRows = ["pair"]
        try await host.startRelay()
      }
      try await a.exec([
        "INSERT INTO span(name, lo, hi) VALUES ('s', 0, 10), ('t', 0, 10)",
        "INSERT INTO pair(name, left, right) VALUES ('p', 'l0', 'r0')",
      ])
      try await waitForConvergence([a, b], server: server)
      try await Self.concurrently(
        (a, ["UPDATE span SET lo = 8 WHERE name = 's'", "UPDATE span SET lo = 1 WHERE name = 't'",
             "UPDATE pair SET left = 'l-a'"]),
        then: (b, ["UPDATE span SET hi = 5 WHERE name = 's'", "UPDATE span SET hi = 9 WHERE name = 't'",
                   "UPDATE pair SET right = 'r-b'"]),
        server: server)
      // s: lo 8 and hi 5 together break the CHECK: b's row (the later) wins
      // whole. t: merged. p: a table of whole rows, b's row whole.
      for host in [a, b] {
        #expect(try host.rows("SELECT name, lo, hi FROM span") == ["s|0|5", "t|1|9"], "\(host.name)")
        #expect(try host.rows("SELECT name, left, right FROM pair") == ["p|l0|r-b"], "\(host.name)")
        try await waitUntil("\(host.name) tells both conflicts") { host.events("conflict").count >= 2 }
        let conflicts = host.events("conflict")
        #expect(conflicts.count == 2, "\(conflicts)")
        let reasons = conflicts.compactMap { $0["reason"] as? String }.sorted()
        #expect(reasons.count == 2 && reasons[0].hasPrefix("table pair settles whole rows"), "\(reasons)")
        #expect(reasons.count == 2 && reasons[1].hasPrefix("the merged row breaks a constraint of span: CHECK constraint failed"), "\(reasons)")
        #expect(conflicts.allSatisfy { $0["winnerHost"] as? String == "b" && ($0["columns"] as? [String])?.count == 3 })
      }
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }

  /// Hosts whose merge rules differ ship nothing, say so, and go on once
  /// they agree; nothing committed meanwhile is lost.
  @Test func hostsWhoseRulesDifferHoldTheirShipmentsUntilTheyAgree() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }
      try await a.exec(["INSERT INTO note(title, body) VALUES ('before', 'x')"])
      try await waitForConvergence([a, b], server: server)
      try await b.stopRelay()
      b.rules = ["note.body=store-trump"]
      try await b.startRelay()
      try await waitUntil("b says the rules differ") { !b.events("mergeRules").isEmpty }
      let told = b.events("mergeRules")[0]
      #expect(told["ours"] as? String == "object-trump; note.body: store-trump", "\(told)")
      #expect((told["differing"] as? [String: String]) == ["a": "object-trump"], "\(told)")
      #expect(b.errorOutput.contains("nothing ships until they agree"), "\(b.errorOutput)")
      try await waitUntil("b's status says so") { b.relayStatus()?.differingMergeRules == ["a": "object-trump"] }
      let shown = try await Executables.groupsync(["status", b.folder])
      #expect(shown.contains("merge rules: object-trump; note.body: store-trump"), "\(shown)")
      #expect(
        shown.contains("SHIPS NOTHING: other members announce other merge rules (a has object-trump) until they agree"),
        "\(shown)")
      // a learns it at its next check of the group, and holds too.
      try await waitUntil("a says the rules differ", timeout: .seconds(60)) { !a.events("mergeRules").isEmpty }
      try await b.exec(["INSERT INTO note(title, body) VALUES ('while-b-differs', 'x')"])
      try await a.exec(["INSERT INTO note(title, body) VALUES ('while-a-differs', 'x')"])
      // Each relay sees its host's commit and holds it.
      for host in [a, b] {
        try await waitUntil("\(host.name) holds its commit") { (host.relayStatus()?.stores.first?.unshipped ?? 0) > 0 }
      }
      #expect(try a.rows("SELECT title FROM note WHERE title = 'while-b-differs'").isEmpty)
      #expect(try b.rows("SELECT title FROM note WHERE title = 'while-a-differs'").isEmpty)
      // b takes the group's rules again: both ship what waited.
      try await b.stopRelay()
      b.rules = []
      try await b.startRelay()
      try await waitForConvergence([a, b], server: server, timeout: .seconds(60))
      #expect(try b.rows("SELECT title FROM note ORDER BY title") == ["before", "while-a-differs", "while-b-differs"])
      let agreed = a.events("mergeRules").last
      #expect((agreed?["differing"] as? [String: String]) == [:], "\(String(describing: agreed))")
      try await waitUntil("a's status agrees") { a.relayStatus().map { $0.differingMergeRules == nil } ?? false }
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }

  /// Until every relay of the group reads log format 2, concurrent edits
  /// of different columns are settled for the whole row, as relays before
  /// it did; once the last one is upgraded, they merge by property.
  @Test func mergingByPropertyStartsOnceEveryRelayReadsFormatTwo() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      b.build = .legacy
      // b first: a group's first member alone would move it up.
      try await b.startRelay()
      try await a.startRelay()
      try await a.exec(["INSERT INTO note(title, body, n) VALUES ('one', 'b0', 0), ('two', 'b0', 0)"])
      try await waitForConvergence([a, b], server: server)
      #expect(try RelayFormatTests.groupFormat(server) == 1)
      // b (the older relay) ships first; a settles at row level.
      try await Self.concurrently(
        (b, ["UPDATE note SET body = 'b-body' WHERE title = 'one'"]),
        then: (a, ["UPDATE note SET n = 1 WHERE title = 'one'"]), server: server)
      for host in [a, b] { #expect(try host.rows("SELECT body, n FROM note WHERE title = 'one'") == ["b0|1"], "\(host.name)") }
      #expect(try server.query("SELECT rule FROM gs_conflict") == [["object-trump"]])

      // b upgraded: the group moves to format 2, and the same edits merge.
      try await b.stopRelay()
      b.build = .current
      try await b.startRelay()
      try await waitUntil("the group moves up") { try RelayFormatTests.groupFormat(server) == 2 }
      try await waitUntil("a writes format 2") { a.events("format").contains { $0["writing"] as? Int == 2 } }
      try await Self.concurrently(
        (b, ["UPDATE note SET body = 'b-body' WHERE title = 'two'"]),
        then: (a, ["UPDATE note SET n = 1 WHERE title = 'two'"]), server: server)
      for host in [a, b] { #expect(try host.rows("SELECT body, n FROM note WHERE title = 'two'") == ["b-body|1"], "\(host.name)") }
      #expect(try server.query("SELECT count(*) FROM gs_conflict") == [["1"]], "no conflict for different columns")
      #expect(try server.query("SELECT DISTINCT format FROM gs_change WHERE seq > (SELECT min(seq) FROM gs_change WHERE format = 2) ORDER BY 1") == [["2"]])
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }

  @Test(arguments: [
    (["--policy", "newest-wins"], "--policy 'newest-wins': not a policy"),
    (["--policy", "note=loudest"], "--policy 'note=loudest': 'loudest' is not a policy"),
    (["--policy", "=store-trump"], "--policy '=store-trump': name a table"),
  ])
  func badRulesAreRefusedNamingThem(arguments: [String], message: String) async throws {
    let result = try await Executables.onThread {
      try ChildProcess(executable: Executables.groupsync, arguments: ["relay", "/tmp/no-folder"] + arguments)
        .finish(timeout: 60)
    }
    #expect(result.status == 64 && result.stderr.contains(message), "\(result.status): \(result.stderr)")
  }
}

extension RelayMergeTests {
  /// A host whose deletion finds the row already deleted in the log ships
  /// nothing for it, and takes the log's position for it: an update of
  /// the row earlier in the log (changed columns only) is not applied to a
  /// row it no longer has, and nothing is re-synchronised.
  @Test func aDeletionTheLogAlreadyHoldsSkipsTheUpdatesBeforeIt() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [GroupHost] = []
      for name in ["a", "b", "c"] { hosts.append(try await GroupHost(name, root: root.path, server: server)) }
      let (a, b, c) = (hosts[0], hosts[1], hosts[2])
      for host in hosts { try await host.startRelay() }
      try await c.exec(["INSERT INTO note(title, body) VALUES ('r', 'v0'), ('kept', 'v0')"])
      try await waitForConvergence(hosts, server: server)
      for host in hosts { try await host.stopRelay() }
      try await c.exec(["UPDATE note SET body = 'c' WHERE title = 'r'"])
      try await b.exec(["DELETE FROM note WHERE title = 'r'"])
      try await a.exec(["DELETE FROM note WHERE title = 'r'", "UPDATE note SET body = 'a' WHERE title = 'kept'"])
      // The log's order: c's update, b's deletion (which wins over it), a's.
      for host in [c, b, a] {
        let shipped = host.events("shipped").count
        try await host.startRelay()
        try await waitUntil("\(host.name) shipped") { host.events("shipped").count > shipped }
      }
      try await waitForConvergence(hosts, server: server)
      for host in hosts {
        #expect(try host.rows("SELECT title, body FROM note") == ["kept|a"], "\(host.name)")
        #expect(host.events("resync").isEmpty, "\(host.name): \(host.events("resync"))")
      }
      try await waitUntil("a tells b's conflict") { !a.events("conflict").isEmpty }
      #expect(a.events("conflict").map { $0["reason"] as? String } == ["deleted on b, changed on c"])
      for host in hosts { try await host.stopRelay() }
    }
  }
}

extension RelayMergeTests {
  /// Changed columns of a row a host does not have: they join the image it
  /// holds for the row (here, of a table it does not have yet), which
  /// applies whole once it can; for a row it holds nothing of, the store
  /// re-synchronises from the rows' current images, saying why.
  @Test func changesToARowNotHereJoinItsHeldImageOrResynchronise() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }
      try await a.exec(["INSERT INTO note(title, body) VALUES ('r', 'v0')"])
      try await waitForConvergence([a, b], server: server)
      let connection = try server.connect()
      /// Appends an entry of host z, in format 2, with `tables` (JSON).
      func append(_ tables: String) throws -> Int64 {
        try connection.transaction {
          let seq = try connection.execute("UPDATE gs_clock SET seq = seq + 1 WHERE grp = 'app' RETURNING seq")[0][0]!
          try connection.execute(
            """
            INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body, format)
            VALUES ('app', 'main', $1, 'z', $1::bigint, $2, 2)
            """, [seq, #"{"f":2,"e":{"t":["# + tables + #"],"c":[]}}"#])
          try connection.execute("SELECT pg_notify('gs_changes', 'app/main:' || $1)", [seq])
          return Int64(seq)!
        }
      }
      let later = #"{"n":"later","k":["name","v","w"],"s":false,"r":[ROW]}"#
      let made = try append(later.replacingOccurrences(of: "ROW", with: #"{"g":"L1","b":0,"v":[{"t":"x"},{"i":1},{"i":7}]}"#))
      _ = try append(later.replacingOccurrences(of: "ROW", with: #"{"g":"L1","b":\#(made),"v":[{"i":2}],"c":[1]}"#))
      try await waitUntil("b holds the row") { b.relayStatus()?.stores.first?.applied == made + 1 }
      #expect(b.events("resync").isEmpty)
      try await b.exec(["CREATE TABLE later(id INTEGER PRIMARY KEY, name TEXT, v INTEGER, w INTEGER)"])
      try await waitUntil("b applies the held row") { (try? b.rows("SELECT name, v, w FROM later")) == ["x|2|7"] }
      // (b's migration makes it ship the new table whole.)
      try await waitUntil("b shipped its migration") {
        try server.query("SELECT count(*) FROM gs_change WHERE grp = 'app' AND origin_host = 'b'") != [["0"]]
      }

      // A row b never heard of.
      let note = #"{"n":"note","k":["title","body","n","x","b"],"s":false,"r":[{"g":"nowhere","b":1,"v":[{"t":"z"}],"c":[1]}]}"#
      let stray = try append(note)
      try await waitUntil("b re-synchronises") { !b.events("resync").isEmpty }
      let reason = b.events("resync")[0]["reason"] as? String
      #expect(
        reason == "entry \(stray) changes columns of row nowhere of note, which this host does not have (it never came here)",
        "\(String(describing: reason))")
      #expect(try b.rows("SELECT title, body FROM note") == ["r|v0"])
      try await waitUntil("b is at the log's head") {
        let head = Int64(try server.query("SELECT max(seq) FROM gs_clock WHERE grp = 'app'").first?[0] ?? "") ?? 0
        return head >= stray && b.relayStatus()?.stores.first?.applied == head
      }
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }
}
