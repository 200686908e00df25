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

/// A row is the same row on every host: columns that refer to rowids
/// (which are each host's own) keep pointing at the same row everywhere.
/// Replicas are compared by joins, never by ids.
@Suite(.timed) struct RelayReferenceTests {
  static let foldersSchema = """
    CREATE TABLE folder(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
    CREATE TABLE item(id INTEGER PRIMARY KEY, folder_id INTEGER NOT NULL REFERENCES folder(id),
                      label TEXT NOT NULL UNIQUE);
    """
  static let itemsByFolder = "SELECT i.label, f.name FROM item i LEFT JOIN folder f ON f.id = i.folder_id"

  /// Five items in a folder of each host's, inserted before the hosts
  /// hear of each other, so their local keys collide.
  static func fillFolder(_ host: GroupHost) async throws {
    try await host.exec([
      "INSERT INTO folder(name) VALUES ('f-\(host.name)')",
      """
      INSERT INTO item(folder_id, label) SELECT id, 'f-\(host.name)-' || n FROM folder,
        (SELECT 1 AS n UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5) WHERE name = 'f-\(host.name)'
      """,
    ])
  }

  /// The issue's schema on three hosts: inserts at once with colliding
  /// keys, re-parenting across hosts, deletes and inserts while relays
  /// run; every item ends in the same folder on every host.
  @Test func relationsHoldOnEveryHostWhenHostsInsertAtOnce() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [GroupHost] = []
      for name in ["a", "b", "c"] {
        let host = try await GroupHost(name, root: root.path, server: server, schema: Self.foldersSchema)
        try await Self.fillFolder(host)
        hosts.append(host)
      }
      for host in hosts { try await host.startRelay() }
      try await waitForConvergence(hosts, server: server, query: Self.itemsByFolder)
      let ids = try hosts.map { try $0.rows("SELECT name, id FROM folder") }
      #expect(Set(ids).count > 1, "the hosts' keys collided, so they differ per host: \(ids)")
      // Each host moves another host's item into its own folder.
      func move(_ label: String, to folder: String) -> String {
        "UPDATE item SET folder_id = (SELECT id FROM folder WHERE name = '\(folder)') WHERE label = '\(label)'"
      }
      try await hosts[0].exec([move("f-b-1", to: "f-a")])
      try await hosts[1].exec([move("f-c-1", to: "f-b"), "DELETE FROM item WHERE label = 'f-a-5'"])
      try await hosts[2].exec([
        move("f-a-1", to: "f-c"),
        "INSERT INTO item(folder_id, label) SELECT id, 'late-c' FROM folder WHERE name = 'f-a'",
      ])
      try await hosts[0].exec(["INSERT INTO item(folder_id, label) SELECT id, 'late-a' FROM folder WHERE name = 'f-b'"])
      let relations = try await waitForConvergence(hosts, server: server, query: Self.itemsByFolder)
      var expected: Set<String> = []
      for name in ["a", "b", "c"] { for n in 1...5 { expected.insert("f-\(name)-\(n)|f-\(name)") } }
      expected.subtract(["f-b-1|f-b", "f-c-1|f-c", "f-a-5|f-a", "f-a-1|f-a"])
      expected.formUnion(["f-b-1|f-a", "f-c-1|f-b", "f-a-1|f-c", "late-c|f-a", "late-a|f-b"])
      #expect(relations == expected.sorted())
      // A row's global ID names the same row on every host, through the library.
      let stores = try hosts.map { try GroupFolder(path: $0.folder, create: false).store }
      let aID = try #require(Int64(try hosts[0].rows("SELECT id FROM item WHERE label = 'f-b-1'").first ?? ""))
      let gid = try #require(try stores[0].globalID(of: ObjectID(storeID: stores[0].storeID, table: "item", rowID: aID)))
      for (host, store) in zip(hosts, stores) {
        let id = try #require(try store.objectID(table: "item", globalID: gid))
        #expect(try host.rows("SELECT label FROM item WHERE id = \(id.rowID)") == ["f-b-1"])
        // Through a context too.
        let object = try #require(try Context(try GroupFolder(path: host.folder, create: false)).object(globalID: gid, table: "item"))
        #expect(object.objectID == id)
        // And in the history as the CLI prints it: each change set names
        // the rows' global IDs beside their URIs.
        let log = try await Executables.groupsync(["log", host.folder, "--json"])
        #expect(log.contains("\"globalIDs\"") && log.contains(gid), "\(host.name): \(log.suffix(600))")
      }
      #expect(try stores[1].objectID(table: "item", globalID: "no-such-row") == nil)
      for host in hosts {
        #expect(host.events("held").isEmpty && host.events("error").isEmpty, "\(host.name): \(host.eventLines)")
        // The relay told which keys are each host's own and what it translates.
        let identities = host.events("identities").first
        #expect((identities?["references"] as? [String]) == ["item.folder_id→folder"])
        #expect((identities?["localKeys"] as? [String]) == ["folder.id", "item.id"])
        #expect((identities?["suspects"] as? [String]) == [])
      }
    }
  }

  /// A tree (a self-reference) whose child comes before its parent in the
  /// same entry (lower rowids), a composite foreign key, re-parenting
  /// across hosts, a cascade over three levels and a SET NULL made on one
  /// host.
  @Test func aTreeACompositeKeyAndCascadesHoldOnEveryHost() async throws {
    let schema = """
      CREATE TABLE node(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                        parent_id INTEGER REFERENCES node(id) ON DELETE CASCADE);
      CREATE TABLE part(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, UNIQUE(id, kind));
      CREATE TABLE use(id INTEGER PRIMARY KEY, part_id INTEGER, part_kind TEXT, note TEXT UNIQUE,
                       FOREIGN KEY (part_id, part_kind) REFERENCES part(id, kind) ON DELETE SET NULL);
      """
    let tree = "SELECT n.name, p.name FROM node n LEFT JOIN node p ON p.id = n.parent_id"
    let uses = "SELECT u.note, p.kind FROM use u LEFT JOIN part p ON p.id = u.part_id AND p.kind = u.part_kind"
    let both = "\(tree) UNION ALL \(uses)"
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server, schema: schema)
      let b = try await GroupHost("b", root: root.path, server: server, schema: schema)
      // Children before their parents in rowid order, in one transaction.
      try await a.exec([
        "INSERT INTO node(id, name) VALUES (50, 'root-a')",
        "INSERT INTO node(id, name, parent_id) VALUES (10, 'kid-a', 50)",
        "INSERT INTO node(id, name, parent_id) VALUES (5, 'grandkid-a', 10)",
        "INSERT INTO part(kind) VALUES ('bolt')",
        "INSERT INTO use(part_id, part_kind, note) SELECT id, kind, 'use-a' FROM part WHERE kind = 'bolt'",
      ])
      try await b.exec([
        "INSERT INTO node(name) VALUES ('root-b')",
        "INSERT INTO node(name, parent_id) SELECT 'kid-b', id FROM node WHERE name = 'root-b'",
        "INSERT INTO part(kind) VALUES ('nut')",
        "INSERT INTO use(part_id, part_kind, note) SELECT id, kind, 'use-b' FROM part WHERE kind = 'nut'",
      ])
      try await a.startRelay()
      try await b.startRelay()
      let first = try await waitForConvergence([a, b], server: server, query: both)
      #expect(
        first == [
          "grandkid-a|kid-a", "kid-a|root-a", "kid-b|root-b", "root-a|NULL", "root-b|NULL", "use-a|bolt", "use-b|nut",
        ])
      // b re-parents a's subtree under its own root and uses a's part.
      try await b.exec([
        "UPDATE node SET parent_id = (SELECT id FROM node WHERE name = 'root-b') WHERE name = 'kid-a'",
        "INSERT INTO use(part_id, part_kind, note) SELECT id, kind, 'use-b2' FROM part WHERE kind = 'bolt'",
      ])
      let moved = try await waitForConvergence([a, b], server: server, query: both)
      #expect(moved.contains("kid-a|root-b") && moved.contains("use-b2|bolt"), "\(moved)")
      // a deletes b's root (three levels go) and its own part (SET NULL).
      try await a.exec(["DELETE FROM node WHERE name = 'root-b'", "DELETE FROM part WHERE kind = 'bolt'"])
      let last = try await waitForConvergence([a, b], server: server, query: both)
      #expect(last == ["root-a|NULL", "use-a|NULL", "use-b2|NULL", "use-b|nut"])
      for host in [a, b] {
        #expect(try host.rows("SELECT count(*) FROM gs_relay_held") == ["0"])
        #expect(host.events("error").isEmpty, "\(host.name): \(host.events("error"))")
      }
    }
  }

  /// One host deletes a folder while another, not hearing of it, adds an
  /// item to it. The deletion stands on every host; the item follows it
  /// as the reference's ON DELETE says (deleted, or its folder set NULL),
  /// and every host reports it. Never a dangling or wrong reference.
  @Test(arguments: [("deletion first", "NOT NULL"), ("child first", "NOT NULL"), ("child first", "ON DELETE SET NULL")])
  func aParentDeletedWhileAnotherHostAddsAChild(order: String, action: String) async throws {
    let schema = """
      CREATE TABLE folder(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
      CREATE TABLE item(id INTEGER PRIMARY KEY, folder_id INTEGER \(action == "NOT NULL" ? "NOT NULL" : "")
                        REFERENCES folder(id) \(action == "NOT NULL" ? "" : action), label TEXT NOT NULL UNIQUE);
      """
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server, schema: schema)
      let b = try await GroupHost("b", root: root.path, server: server, schema: schema)
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec([
        "INSERT INTO folder(name) VALUES ('keep'), ('shared')",
        "INSERT INTO item(folder_id, label) SELECT id, 'kept' FROM folder WHERE name = 'keep'",
      ])
      try await waitForConvergence([a, b], server: server, query: Self.itemsByFolder)
      try await a.stopRelay()
      try await b.stopRelay()
      try await b.exec(["INSERT INTO item(folder_id, label) SELECT id, 'orphan' FROM folder WHERE name = 'shared'"])
      try await a.exec(["DELETE FROM folder WHERE name = 'shared'"])
      let (first, second) = order == "deletion first" ? (a, b) : (b, a)
      let shipped = first.events("shipped").count
      try await first.startRelay()
      try await waitUntil("\(first.name) shipped") { first.events("shipped").count > shipped }
      try await second.startRelay()
      let relations = try await waitForConvergence([a, b], server: server, query: Self.itemsByFolder)
      let cascade = action == "NOT NULL"
      #expect(relations == (cascade ? ["kept|keep"] : ["kept|keep", "orphan|NULL"]))
      #expect(try a.rows("SELECT name FROM folder") == ["keep"])
      for host in [a, b] {
        let reported = host.events("conflict").filter { ($0["rule"] as? String)?.hasPrefix("parent-deleted") ?? false }
        #expect(reported.count == 1, "\(host.name): \(host.events("conflict"))")
        #expect(reported.first?["rule"] as? String == (cascade ? "parent-deleted:cascade" : "parent-deleted:set-null"))
        #expect(try host.rows("SELECT count(*) FROM gs_relay_held") == ["0"])
      }
    }
  }

  /// Every host makes a default folder of the same (unique) name at first
  /// start, and puts items in it, before hearing of the others: the
  /// folders become one (the one earlier in the log keeps the name, on
  /// every host), reported, and every item ends in it on every host, also
  /// on a host that joins later. Nothing is deleted.
  @Test func rowsWithTheSameUniqueKeyBecomeOneAndWhatPointsAtThemFollows() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [GroupHost] = []
      for name in ["a", "b"] {
        let host = try await GroupHost(name, root: root.path, server: server, schema: Self.foldersSchema)
        try await host.exec([
          "INSERT INTO folder(name) VALUES ('inbox')",
          "INSERT INTO item(folder_id, label) SELECT id, '\(name)-' || n FROM folder, (SELECT 1 AS n UNION SELECT 2 UNION SELECT 3) WHERE name = 'inbox'",
        ])
        hosts.append(host)
      }
      let first = hosts[0]
      try await first.startRelay()
      try await waitUntil("a shipped") { first.events("shipped").contains { ($0["rows"] as? Int ?? 0) > 0 } }
      try await hosts[1].startRelay()
      let late = try await GroupHost("c", root: root.path, server: server, schema: Self.foldersSchema)
      try await late.startRelay()
      hosts.append(late)
      let relations = try await waitForConvergence(hosts, server: server, query: Self.itemsByFolder)
      #expect(relations == ["a-1|inbox", "a-2|inbox", "a-3|inbox", "b-1|inbox", "b-2|inbox", "b-3|inbox"])
      for host in hosts {
        #expect(try host.rows("SELECT count(*) FROM folder") == ["1"])
        #expect(host.events("held").isEmpty, "\(host.name): \(host.events("held"))")
      }
      for host in hosts.prefix(2) {
        try await waitUntil("\(host.name) reports it") {
          host.events("conflict").contains { $0["rule"] as? String == "unique-key" }
        }
        #expect(!host.events("conflict").contains { ($0["rule"] as? String)?.hasPrefix("parent-deleted") ?? false })
      }
    }
  }

  /// A relation the schema does not declare is a suspect until it is
  /// declared to the relay; then it is translated like a foreign key. A
  /// reference to a row the origin does not have is held on the other
  /// hosts and reported, never applied as a number.
  @Test func anUndeclaredRelationIsTranslatedOnceDeclaredAndAnUnresolvableOneIsHeld() async throws {
    let schema = """
      CREATE TABLE folder(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
      CREATE TABLE item(id INTEGER PRIMARY KEY, folder_id INTEGER, label TEXT NOT NULL UNIQUE);
      """
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server, schema: schema)
      let b = try await GroupHost("b", root: root.path, server: server, schema: schema)
      try await Self.fillFolder(a)
      try await Self.fillFolder(b)
      // Undeclared, the relay names the column when it starts.
      let probe = try await GroupHost("probe", root: root.path, server: server, schema: schema)
      try await probe.startRelay()
      #expect((probe.events("identities").first?["suspects"] as? [String]) == ["item.folder_id"])
      try await probe.stopRelay()
      // A declaration that names no column of the store is told.
      probe.references = ["item.folderid=folder"]
      try await probe.startRelay()
      try await waitUntil("the bad declaration is told") {
        probe.events("error").contains { ($0["value"] as? String)?.contains("item.folderid=folder") ?? false }
      }
      try await probe.stopRelay()
      for host in [a, b] {
        host.references = ["item.folder_id=folder"]
        try await host.startRelay()
        #expect((host.events("identities").first?["suspects"] as? [String]) == [])
      }
      let relations = try await waitForConvergence([a, b], server: server, query: Self.itemsByFolder)
      #expect(relations.count == 10 && relations.allSatisfy { $0.hasPrefix($0.split(separator: "|")[1] + "-") })
      // A reference to a row a does not have (no foreign key stops it).
      try await a.exec(["INSERT INTO item(folder_id, label) VALUES (999, 'dangling')"])
      try await waitUntil("a tells it shipped a reference it cannot name") {
        a.events("error").contains { ($0["value"] as? String)?.contains("rowid 999 of folder") ?? false }
      }
      try await waitUntil("b holds the row") { !b.events("held").isEmpty }
      #expect(b.events("held").first?["table"] as? String == "item")
      #expect(try b.rows("SELECT count(*) FROM item WHERE label = 'dangling'") == ["0"])
      try await waitUntil("b's status counts it") { b.relayStatus()?.stores.first?.heldRows == 1 }
      let status = try await Executables.groupsync(["status", b.folder])
      #expect(status.contains("1 rows held"), "\(status)")
    }
  }

  /// A declaration that cannot be read is refused with what was wrong.
  @Test(arguments: ["item.folder_id", "item=folder", "item.folder_id=folder:restrict", ".x=folder"])
  func aBadReferenceDeclarationIsRefused(text: String) async throws {
    #expect(throws: RelayError.self) { try RowReference(parsing: text) }
    let result = try await Executables.onThread {
      try ChildProcess(
        executable: Executables.relay, arguments: ["/nonexistent", "--postgres", "host=/tmp", "--reference", text]
      ).finish(timeout: 120)
    }
    #expect(!result.succeeded && result.stderr.contains("--reference") && result.stderr.contains(text), "\(result.stderr)")
  }
}
