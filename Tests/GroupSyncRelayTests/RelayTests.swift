import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// The relay across hosts, against a real PostgreSQL server: each host is
/// a group folder of its own with its own `groupsync relay` process, and
/// writers and listeners are `groupsync exec` and `groupsync watch`
/// processes. The relay's tests run side by side, in every suite: each has
/// a server, folders, ports and network namespaces of its own.
@Suite(.timed)
struct RelayTests {
  @Test func aCommitReachesTheOtherHostWithItsValuesAndItsListeners() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      let watch = try ChildProcess(executable: Executables.groupsync, arguments: ["watch", b.folder, "--json"])
      defer { watch.signal(SIGKILL); _ = watch.finish(timeout: 10) }
      try await Executables.onThread { try watch.waitForStderr(containing: "listening as", timeout: 30) }
      try await a.exec([
        "INSERT INTO note(title, body, n, x, b) VALUES ('t1', 'it''s', 9007199254740993, 1.5e300, x'00ff10')",
        "INSERT INTO note(title, body, n, x, b) VALUES ('t2', NULL, -1, 0.1, x'')",
      ])
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.count == 2)
      let rows = Set(content.values)
      #expect(rows.contains(["'t1'", "'it''s'", "9007199254740993", "1.5e+300", "X'00FF10'"]) || rows.contains { $0.contains("9007199254740993") })
      // The values are stored with their types, exactly.
      var configuration = Configuration()
      configuration.readonly = true
      let queue = try DatabaseQueue(path: b.folder + "/store.sqlite", configuration: configuration)
      let typed = try await queue.read { db in
        try Row.fetchOne(db, sql: "SELECT typeof(n), n, typeof(x), x, typeof(b), hex(b), body FROM note WHERE title = 't1'")
      }
      #expect(typed?[0] == "integer" && typed?[1] == Int64(9007199254740993))
      #expect(typed?[2] == "real" && typed?[3] == 1.5e300)
      #expect(typed?[4] == "blob" && typed?[5] == "00FF10" && typed?[6] == "it's")
      // B's listener saw one ordinary change set with both rows.
      try await Executables.onThread { try watch.waitForLines(1, timeout: 30) }
      let line = try JSONSerialization.jsonObject(with: Data(try watch.readLine(timeout: 5).utf8)) as? [String: Any]
      #expect((line?["inserted"] as? [String])?.filter { $0.contains("/note/") }.count == 2)
      // With each row's global ID, the same on every host.
      let globalIDs = line?["globalIDs"] as? [String: String] ?? [:]
      let gids = Set(try b.content().keys)
      #expect(globalIDs.count == 2 && Set(globalIDs.values) == gids, "\(globalIDs)")
      // A's own commit came back from the log and changed nothing on A.
      let applied = a.events("applied")
      #expect(!applied.isEmpty && applied.allSatisfy { $0["rows"] as? Int == 0 && $0["localSequence"] == nil })
      // groupsync status shows the relay.
      let status = try await Executables.groupsync(["status", b.folder])
      #expect(status.contains("relay     b (group app): running"))
      #expect(status.contains("connected"))
      try await a.stopRelay()
      try await b.stopRelay()
      let stopped = try await Executables.groupsync(["status", b.folder])
      #expect(stopped.contains("relay     b (group app): dead"))
    }
  }

  @Test(arguments: ["last-writer-wins", "first-writer-wins"])
  func concurrentWritesToOneRowAreSettledTheSameEverywhere(policy: String) async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      a.policy = policy
      b.policy = policy
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('shared', 'v0')"])
      try await waitForConvergence([a, b], server: server)
      // Both hosts write the row while cut off from each other.
      try await a.stopRelay()
      try await b.stopRelay()
      try await a.exec(["UPDATE note SET body = 'from a' WHERE title = 'shared'"])
      try await b.exec(["UPDATE note SET body = 'from b' WHERE title = 'shared'"])
      // A ships first: its write comes first in the log.
      let shippedBefore = a.events("shipped").count
      try await a.startRelay()
      try await waitUntil("a shipped") { a.events("shipped").count > shippedBefore }
      try await b.startRelay()
      let content = try await waitForConvergence([a, b], server: server)
      let winner = policy == "last-writer-wins" ? "from b" : "from a"
      #expect(content.values.map { $0[1] } == ["\"\(winner)\""])
      // Every host reports the conflict, with both values and the winner.
      // The policy's name since log format 2 (the old one is an alias).
      let rule = ConflictPolicy(rawValue: policy)?.rawValue
      for host in [a, b] {
        try await waitUntil("\(host.name) reports the conflict") { !host.events("conflict").isEmpty }
        let conflict = host.events("conflict")[0]
        #expect(conflict["rule"] as? String == rule)
        #expect(conflict["columns"] as? [String] == ["body"], "only the column both wrote")
        #expect(conflict["winnerHost"] as? String == (policy == "last-writer-wins" ? "b" : "a"))
        #expect(conflict["loserHost"] as? String == (policy == "last-writer-wins" ? "a" : "b"))
        let loser = (conflict["loserValues"] as? [Any])?.description ?? ""
        #expect(loser.contains(policy == "last-writer-wins" ? "from a" : "from b"))
      }
      let recorded = try server.query("SELECT rule, winner_host, loser_host FROM gs_conflict")
      #expect(recorded.count == 1)
      #expect(recorded.first?[0] == rule)
    }
  }
}

extension RelayTests {
  /// A row changed here and not shipped yet is not overwritten by an older
  /// remote image: the applier skips it, the local write ships afterwards
  /// and wins (last writer), and every host ends with it. The relay runs
  /// in process here, through the library's API.
  @Test func anUnshippedLocalWriteIsNotOverwrittenAndTheLibraryAPIReportsIt() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      try await a.exec(["INSERT INTO note(title, body) VALUES ('r', 'v0')"])
      try await waitForConvergence([a, b], server: server)
      try await b.stopRelay()
      try await b.exec(["UPDATE note SET body = 'local b' WHERE title = 'r'"])
      let shippedBefore = a.events("shipped").count
      try await a.exec(["UPDATE note SET body = 'remote a' WHERE title = 'r'"])
      try await waitUntil("a shipped") { a.events("shipped").count > shippedBefore }
      // B applies the log before it ships: its row is held.
      let group = try GroupFolder(path: b.folder, create: false)
      let context = try ReplicaContext(
        store: group.store, storeName: "main", group: "app", host: "b", merge: MergeRules(policy: .objectTrump),
        author: "groupsync-relay@b", emit: { _ in })
      let log = SharedLog(try server.connect())
      while try Applier(context: context).apply(log) {}
      #expect(try b.content().values.map { $0[1] } == ["\"local b\""])
      #expect(context.place.current.applied == Int64(try server.query("SELECT max(seq) FROM gs_change").first?[0] ?? "0"))
      group.store.close()
      // Now B's relay, in process: it ships, wins, and says so.
      var configuration = RelayConfiguration(folder: b.folder, conninfo: server.conninfo, host: "b")
      configuration.pollInterval = .milliseconds(200)
      let relay = try Relay(configuration)
      try relay.start()
      defer { relay.stop() }
      var conflict: ConflictRecord?
      for await event in relay.events {
        if case .conflict(let record) = event {
          conflict = record
          break
        }
      }
      // Only the column both wrote is in conflict, with both values and the
      // value both wrote on.
      #expect(conflict?.winnerHost == "b" && conflict?.loserHost == "a")
      #expect(conflict?.columns == ["body"] && conflict?.base == [.text("v0")])
      #expect(conflict?.winnerValues == [.text("local b")] && conflict?.loserValues == [.text("remote a")])
      try await waitUntil("b's status") {
        let status = relay.status()
        return status.isConnected && status.stores.first?.unshipped == 0 && status.stores.first?.lagChangeSets == 0
      }
      let content = try await waitForConvergence([a, b], server: server)
      #expect(content.values.map { $0[1] } == ["\"local b\""])
    }
  }

  /// The relay runs in the process's own group folder and writes under its
  /// author there, whatever the folder's store options say: the entry it
  /// applies from another host commits as a change set of that author. A
  /// folder that is not the configuration's is refused before anything is
  /// taken. (Its own tables are not captured: only an applied row makes a
  /// change set, so the row is what tells the author.)
  @Test func aRelayRunsInTheProcesssOwnGroupFolderUnderItsOwnAuthor() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let b = try await GroupHost("b", root: root.path, server: server)
      try FileManager.default.createDirectory(atPath: root.path + "/h", withIntermediateDirectories: true)
      let group = try GroupFolder(path: root.path + "/h/app")
      try await group.store.write { try $0.execute(sql: GroupHost.schema) }
      let other = try GroupFolder(path: root.path + "/two")
      var configuration = RelayConfiguration(folder: root.path + "/h/app", conninfo: server.conninfo, host: "h")
      configuration.pollInterval = .milliseconds(200)
      let refused = try Relay(configuration)
      #expect(throws: RelayError.invalidConfiguration(
        "the group folder '\(root.path)/two' is not the configuration's folder '\(root.path)/h/app'")
      ) { try refused.start(in: other) }
      let relay = try Relay(configuration)  // the refusal took no lock
      try relay.start(in: group)
      defer { relay.stop() }
      try await b.startRelay()
      try await b.exec(["INSERT INTO note(title, body) VALUES ('from b', 'x')"])
      try await waitUntil("h applied b's row") {
        try group.store.read { try String.fetchOne($0, sql: "SELECT body FROM note WHERE title = 'from b'") } == "x"
      }
      #expect(try group.store.history(after: 0).last?.author == "groupsync-relay@h")
      try await group.store.write { try $0.execute(sql: "CREATE TABLE t(v)") }
      #expect(try group.store.history(after: 0).last?.author == ProcessInfo.processInfo.processName)
      try await b.stopRelay()
    }
  }

  /// A host whose table is to ship whole (over the row budget here; DDL
  /// alike) while remote images arrive: a row it does not have is applied
  /// at once, and a row it holds back is settled when its table ships, the
  /// newer image winning there too. Both hosts end equal.
  @Test func aTableShippedWholeTakesTheRowsItHeldBack() async throws {
    try await PostgresServer.with { server in
      let (root, a, b) = try await GroupHost.twoWithRelays(server)
      defer { withExtendedLifetime(root) {} }  // the hosts' folder stays until the end
      try await a.exec(["INSERT INTO note(title, body) VALUES ('r1', 'v0')"])
      try await waitForConvergence([a, b], server: server)
      try await b.stopRelay()
      let shippedBefore = a.events("shipped").count
      try await a.exec(["UPDATE note SET body = 'a-new' WHERE title = 'r1'", "INSERT INTO note(title, body) VALUES ('r2', 'a')"])
      try await waitUntil("a shipped") { a.events("shipped").count > shippedBefore }

      // B changes more rows than its budget: the table is to ship whole.
      var options = StoreOptions()
      options.rowBudget = 1
      let user = try GroupFolder(path: b.folder, create: false, options: options)
      let changeSet = try await user.store.writeAndReturnChangeSet { db in
        try db.execute(sql: "INSERT INTO note(title, body) VALUES ('b1', 'b'), ('b2', 'b')")
      }.changeSet
      #expect(changeSet?.invalidatedTables.map(\.table) == ["note"])
      user.store.close()

      // B's relay, in process, its writes with its author as groupsync-relay
      // has them. It applies the log before it ships: r2, which B does not
      // have, comes in now; r1 is held.
      var relayOptions = StoreOptions()
      relayOptions.author = "groupsync-relay@b"
      let group = try GroupFolder(path: b.folder, create: false, options: relayOptions)
      let context = try ReplicaContext(
        store: group.store, storeName: "main", group: "app", host: "b", merge: MergeRules(policy: .objectTrump),
        author: "groupsync-relay@b", emit: { _ in })
      let log = SharedLog(try server.connect())
      while try Applier(context: context).apply(log) {}
      let held = try b.content().values.map { $0[0] + "=" + $0[1] }.sorted()
      #expect(held == ["\"b1\"=\"b\"", "\"b2\"=\"b\"", "\"r1\"=\"v0\"", "\"r2\"=\"a\""])
      // The same relay goes on (no restart reads the log again): it ships
      // the table whole, and its own entry brings r1's newer image back.
      while try Shipper(context: context).ship(log) == .shipped {}
      while try Applier(context: context).apply(log) {}
      let settled = try b.content().values.map { $0[0] + "=" + $0[1] }.sorted()
      #expect(settled == ["\"b1\"=\"b\"", "\"b2\"=\"b\"", "\"r1\"=\"a-new\"", "\"r2\"=\"a\""])
      group.store.close()

      try await b.startRelay()
      let content = try await waitForConvergence([a, b], server: server, timeout: .seconds(30))
      #expect(content.values.map { $0[0] + "=" + $0[1] }.sorted() == settled)
    }
  }
}
