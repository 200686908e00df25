import Foundation
import GroupSync
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
      for relay in relays {
        try await waitUntil("every conflict is told") { relay.conflicts.count >= expected.count }
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
