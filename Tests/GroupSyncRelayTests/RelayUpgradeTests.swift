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

/// Hosts upgraded one at a time: while their schemas differ, additive
/// changes never stop replication; changes that are not additive wait,
/// named, and resume once the schemas agree.
@Suite(.timed) struct RelayUpgradeTests {
  /// The default schema's `note`, column by column by name (a column a
  /// migration added comes last on one host and elsewhere on another).
  static let notesByName = "SELECT title, body, n, x, hex(b) FROM note"

  /// Three hosts writing throughout; one gains a column and a table (its
  /// migration), then the second, then the third. Nothing stalls, nothing
  /// is lost, and every replica ends identical, the column filled where it
  /// was written (also on the hosts that had no such column then).
  @Test func aRollingUpgradeNeverStallsTheGroup() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      var hosts: [GroupHost] = []
      for name in ["a", "b", "c"] {
        let host = try await GroupHost(name, root: root.path, server: server)
        try await host.startRelay()
        hosts.append(host)
      }
      try await hosts[0].exec(["INSERT INTO note(title, body) VALUES ('seed-1', 's'), ('seed-2', 's')"])
      try await waitForConvergence(hosts, server: server)
      // Writers on every host until the last host is upgraded.
      let stop = root.path + "/stop-writers"
      let writers = try hosts.map { host in
        let statements = [
          "INSERT INTO note(title, body) VALUES ('\(host.name)-' || hex(randomblob(6)), 'new')",
          "UPDATE note SET body = '\(host.name)-' || abs(random() % 100) WHERE id = (SELECT id FROM note ORDER BY random() LIMIT 1)",
        ].map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        return try ChildProcess(
          executable: "/bin/sh",
          arguments: ["-c", "until [ -e \(stop) ]; do \(Executables.groupsync) exec \(host.folder) --repeat 20 \(statements) || exit 1; done"],
          name: "writer \(host.name)")
      }
      defer { for writer in writers { writer.signal(SIGKILL); _ = writer.finish(timeout: 10) } }
      let migration = [
        "ALTER TABLE note ADD COLUMN tag TEXT",
        "CREATE TABLE label(id INTEGER PRIMARY KEY, note_id INTEGER REFERENCES note(id) ON DELETE CASCADE, name TEXT)",
      ]
      for host in hosts {
        try await host.exec(migration)
        // The upgraded host uses what it gained at once, on rows from everywhere.
        try await host.exec(
          [
            "UPDATE note SET tag = 'tag-\(host.name)' WHERE id = (SELECT id FROM note WHERE tag IS NULL ORDER BY random() LIMIT 1)",
            "INSERT INTO label(note_id, name) SELECT id, 'label-\(host.name)-' || hex(randomblob(4)) FROM note ORDER BY random() LIMIT 1",
          ], repeat: 10)
      }
      let running = writers.filter { $0.isRunning }.count
      #expect(running == writers.count, "the writers wrote throughout")
      _ = FileManager.default.createFile(atPath: stop, contents: nil)
      for writer in writers {
        let result = try await Executables.onThread { writer.finish(timeout: 300) }
        #expect(result.succeeded, "\(result.stderr)")
      }
      let notes = "SELECT title, body, tag FROM note"
      let labels = "SELECT l.name, n.title, 'label' FROM label l LEFT JOIN note n ON n.id = l.note_id"
      let both = try await waitForConvergence(hosts, server: server, query: "\(notes) UNION ALL \(labels)")
      let all = try hosts[0].rows(notes)
      #expect(all.count > 2 + 3 * 20, "every insert arrived everywhere: \(all.count)")
      // Tags written on each host, the first one's while the others had no
      // such column, are there on every host.
      for name in ["a", "b", "c"] {
        #expect(all.contains { $0.hasSuffix("|tag-\(name)") }, "tag-\(name) missing")
      }
      #expect(try hosts[0].rows(labels).count == 30)
      #expect(!both.contains { $0.hasSuffix("|label") && $0.contains("|NULL|") }, "a label lost its note")
      for host in hosts {
        #expect(
          !host.events("error").contains { ($0["value"] as? String)?.contains("schema mismatch") ?? false },
          "\(host.name): \(host.events("error"))")
        #expect(try host.rows("SELECT count(*) FROM gs_relay_held UNION ALL SELECT count(*) FROM gs_relay_extra") == ["0", "0"])
        #expect(try host.rows("SELECT count(*) FROM label l WHERE NOT EXISTS (SELECT 1 FROM note n WHERE n.id = l.note_id)") == ["0"])
      }
    }
  }

  /// A host whose table lacks a column (it never had it) applies the rest
  /// of each row, keeps the column's values, and fills them in once its
  /// migration adds it.
  @Test func anOlderHostKeepsANewColumnAndFillsItInOnceItHasIt() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost(
        "b", root: root.path, server: server,
        schema: "CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT, n INTEGER, b BLOB);")
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec([
        "INSERT INTO note(title, body, x) VALUES ('one', 'x', 1.5)", "INSERT INTO note(title, body, x) VALUES ('two', 'y', 2.5)",
      ])
      try await waitUntil("b has the rows") { try b.rows("SELECT title, body FROM note") == ["one|x", "two|y"] }
      #expect(b.events("error").isEmpty, "\(b.events("error"))")
      #expect(try b.rows("SELECT count(*) FROM gs_relay_extra") == ["2"])
      // b's own write to a row does not touch the column it lacks.
      try await b.exec(["UPDATE note SET body = 'from b' WHERE title = 'one'"])
      try await waitUntil("a has b's write") { try a.rows("SELECT body, x FROM note WHERE title = 'one'") == ["from b|1.5"] }
      try await b.exec(["ALTER TABLE note ADD COLUMN x REAL"])
      // Compared column by column by name: the column comes last on b.
      let content = try await waitForConvergence([a, b], server: server, query: Self.notesByName)
      #expect(content == ["one|from b|NULL|1.5|", "two|y|NULL|2.5|"])
      #expect(try b.rows("SELECT count(*) FROM gs_relay_extra") == ["0"])
    }
  }

  /// A column a host had and dropped (or renamed) is no additive change:
  /// an entry that carries it waits, with an error naming the store, the
  /// table and the column (in status too), nothing of it applied, and it
  /// applies once the schemas agree again.
  @Test func aDroppedColumnHoldsEntriesNamedUntilTheSchemasAgree() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      try await a.startRelay()
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body, x) VALUES ('one', 'x', 1.5)"])
      try await waitForConvergence([a, b], server: server)
      try await b.exec(["ALTER TABLE note DROP COLUMN x"])
      try await a.exec(["INSERT INTO note(title, body, x) VALUES ('two', 'y', 2.5)"])
      try await waitUntil("b refuses") {
        b.events("error").contains { ($0["value"] as? String)?.contains("schema mismatch") == true }
      }
      let error = b.events("error").compactMap { $0["value"] as? String }.first { $0.contains("schema mismatch") } ?? ""
      #expect(error.contains("store 'main'") && error.contains("table 'note'") && error.contains("column 'x'"), "\(error)")
      #expect(try b.rows("SELECT title FROM note") == ["one"])
      try await waitUntil("b's status shows the error") {
        b.relayStatus()?.lastError?.contains("schema mismatch") == true
      }
      let status = try await Executables.groupsync(["status", b.folder])
      #expect(status.contains("last error: schema mismatch"))
      try await b.exec(["ALTER TABLE note ADD COLUMN x REAL"])
      try await waitForConvergence([a, b], server: server, query: Self.notesByName)
      #expect(try b.rows("SELECT title, x FROM note") == ["one|NULL", "two|2.5"])
      // A table dropped here is no additive change either.
      try await a.exec(["CREATE TABLE tag(id INTEGER PRIMARY KEY, name TEXT)"])
      try await b.exec(["CREATE TABLE tag(id INTEGER PRIMARY KEY, name TEXT)"])
      try await a.exec(["INSERT INTO tag(name) VALUES ('first')"])
      try await waitUntil("b has the tag") { try b.rows("SELECT name FROM tag") == ["first"] }
      try await b.exec(["DROP TABLE tag"])
      try await a.exec(["INSERT INTO tag(name) VALUES ('second')"])
      try await waitUntil("b refuses the dropped table") {
        b.events("error").contains { ($0["value"] as? String)?.contains("table 'tag'") == true }
      }
      #expect(try b.rows("SELECT count(*) FROM gs_relay_held") == ["0"])
    }
  }
}
