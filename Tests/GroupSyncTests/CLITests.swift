import Foundation
import GRDB
@testable import GroupSync
import Synchronization
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The `groupsync` command-line tool, run as a real process.
@Suite(.serialized, .timed)
struct CLITests {
  static let schema = """
    CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL DEFAULT '');
    CREATE TABLE tags(name TEXT PRIMARY KEY, uses INTEGER NOT NULL) WITHOUT ROWID;
    """

  /// The non-empty lines of a stream.
  static func lines(_ text: String) -> [String] {
    text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
  }

  /// The store's rows, read through the library.
  static func count(_ directory: String, _ table: String = "items") throws -> Int64? {
    let group = try GroupFolder(path: directory, create: false)
    return try group.store.read { try Int64.fetchOne($0, sql: "SELECT count(*) FROM \(table)") }
  }

  // MARK: init, exec, status

  @Test func initWithASchemaCreatesTheStoreAndItsTables() async throws {
    let folder = try TemporaryFolder()
    let schemaPath = folder.child("schema.sql")
    try Self.schema.write(toFile: schemaPath, atomically: true, encoding: .utf8)
    let directory = folder.child("nested/group")

    let result = try await ProcessHarness.run(["init", directory, "--schema", schemaPath])
    #expect(result.status == 0, "\(result.stderr)")
    #expect(result.stdout.hasPrefix("initialized "))
    #expect(FileManager.default.fileExists(atPath: directory + "/store.sqlite"))

    let group = try GroupFolder(path: directory, create: false)
    let tables = try await group.store.read {
      try String.fetchAll($0, sql: "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'groupsync%' ORDER BY name")
    }
    #expect(tables == ["items", "tags"])
    #expect(result.stdout.contains(group.store.storeID.uuidString), "init names the store")
    #expect(try group.store.currentSequence() == 1, "a schema is told as one change set")
  }

  @Test func execPrintsTheCommittedSequence() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)

    let first = try await ProcessHarness.run(["exec", directory, "INSERT INTO items(body) VALUES ('a'), ('b')"])
    #expect(first.status == 0, "\(first.stderr)")
    #expect(Self.lines(first.stdout) == ["committed sequence 2: 2 inserted, 0 updated, 0 deleted"])

    let second = try await ProcessHarness.run([
      "exec", directory, "UPDATE items SET body = 'c' WHERE id = 1", "DELETE FROM items WHERE id = 2",
      "INSERT INTO tags(name, uses) VALUES ('t', 1)",
    ])
    #expect(second.status == 0, "\(second.stderr)")
    #expect(Self.lines(second.stdout) == ["committed sequence 3: 0 inserted, 1 updated, 1 deleted, tables invalidated: tags"])

    let read = try await ProcessHarness.run(["exec", directory, "SELECT id, body FROM items"])
    #expect(read.status == 0)
    #expect(Self.lines(read.stdout) == ["1\t'c'", "committed; no rows changed"])

    let json = try await ProcessHarness.exec(directory, repeat: 2, ["INSERT INTO items(body) VALUES ('d')"])
    #expect(json.map(\.seq) == [4, 5])
    #expect(try await ProcessHarness.status(directory).sequence == 5)
  }

  @Test func statusShowsTheStoreTheSequenceAndEachListener() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)

    // A dead listener with two leftover files, a live watch process that
    // consumes everything, and a live in-process listener that consumes nothing.
    let dead = try await ProcessHarness.startWatch([directory, "--name", "gone"])
    dead.signal(SIGKILL)
    _ = try await ProcessHarness.finish(dead, timeout: 10)
    for name in ["00000000000000000001.changeset", "notes.txt"] {
      try ProcessHarness.placeAtomically(Array("x".utf8), at: group.layout.inbox("gone") + "/" + name, staging: folder.path)
    }
    let watch = try await ProcessHarness.startWatch([directory, "--name", "watcher", "--json"])
    defer {
      watch.signal(SIGTERM)
      _ = watch.finish(timeout: 10)
    }
    let idle = try group.listen(as: "idle")
    defer { idle.close() }
    _ = try await ProcessHarness.exec(directory, repeat: 2, ["INSERT INTO items(body) VALUES ('a')"])
    try await ProcessHarness.waitForLines(watch, 2)

    let text = try await ProcessHarness.run(["status", directory])
    #expect(text.status == 0, "\(text.stderr)")
    let lines = Self.lines(text.stdout)
    #expect(lines.contains("store:    \(group.store.storeID.uuidString)"), "\(lines)")
    #expect(lines.contains("sequence: 3"), "\(lines)")
    #expect(lines.contains("listener  gone: dead, backlog 2"), "\(lines)")
    #expect(lines.contains("listener  idle: live (pid \(getpid())), backlog 2"), "\(lines)")
    #expect(lines.contains("listener  watcher: live (pid \(watch.pid)), backlog 0"), "\(lines)")

    let status = try await ProcessHarness.status(directory)
    #expect(status.storeID == group.store.storeID)
    #expect(status.sequence == 3)
    #expect(status.path == group.path)
    #expect(status.listeners.map(\.name) == ["gone", "idle", "watcher"])
    #expect(status.listeners.map(\.isLive) == [false, true, true])
    #expect(status.listeners.map(\.backlog) == [2, 2, 0])
    #expect(status.listeners.map(\.processID) == [nil, getpid(), watch.pid])
  }

  // MARK: Errors

  /// An error is one line on stderr, starting with "groupsync:", and a
  /// non-zero exit.
  static func expectOneErrorLine(
    _ result: CLI.Result, mentioning detail: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    #expect(result.status != 0, "exit status \(result.status)", sourceLocation: sourceLocation)
    let lines = Self.lines(result.stderr)
    #expect(lines.count == 1, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
    #expect(lines.first?.hasPrefix("groupsync:") == true, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
    #expect(lines.first?.contains(detail) == true, "'\(detail)' not in: \(result.stderr)", sourceLocation: sourceLocation)
  }

  @Test(arguments: ["exec", "watch", "status"])
  func aFolderWithoutAStoreIsAnError(_ command: String) async throws {
    let folder = try TemporaryFolder("nostore-\(command)")
    let empty = folder.child("empty")
    try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
    let missing = folder.child("missing")
    let extra = command == "exec" ? ["SELECT 1"] : []

    for directory in [empty, missing] {
      let result = try await ProcessHarness.run([command, directory] + extra, timeout: 20)
      Self.expectOneErrorLine(result, mentioning: directory)
      #expect(result.stdout.isEmpty)
    }
    #expect(ProcessHarness.entries(empty).isEmpty, "nothing was created in a folder without a store")
    #expect(!ProcessHarness.exists(missing), "a missing folder was created")
  }

  @Test func badSQLIsAnErrorAndTheTransactionRollsBack() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    _ = try await ProcessHarness.exec(directory, ["INSERT INTO items(id, body) VALUES (1, 'kept')"])
    let group = try GroupFolder(path: directory, create: false)
    let idle = try group.listen(as: "idle")
    defer { idle.close() }

    let syntax = try await ProcessHarness.run([
      "exec", directory, "INSERT INTO items(body) VALUES ('lost')", "UPDATE items SET body = 'lost' WHERE id = 1",
      "THIS IS NOT SQL",
    ])
    Self.expectOneErrorLine(syntax, mentioning: "syntax error")
    let constraint = try await ProcessHarness.run([
      "exec", directory, "INSERT INTO items(body) VALUES ('lost')", "INSERT INTO items(id, body) VALUES (1, 'dup')",
    ])
    Self.expectOneErrorLine(constraint, mentioning: "UNIQUE")
    let missingTable = try await ProcessHarness.run(["exec", directory, "INSERT INTO nowhere VALUES (1)"])
    Self.expectOneErrorLine(missingTable, mentioning: "nowhere")

    let status = try await ProcessHarness.status(directory)
    #expect(status.sequence == 2, "no sequence number was used")
    #expect(status.listeners.first { $0.name == "idle" }?.backlog == 0, "nothing was published")
    let rows = try group.store.read { try Row.fetchAll($0, sql: "SELECT id, body FROM items ORDER BY id") }
    #expect(rows == [["id": 1, "body": "kept"]], "the store is unchanged")

    // The store still takes writes.
    let after = try await ProcessHarness.exec(directory, ["INSERT INTO items(body) VALUES ('next')"])
    #expect(after.map(\.seq) == [3])
  }

  @Test func aNameInUseByALiveWatchIsAnError() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let holder = try await ProcessHarness.startWatch([directory, "--name", "taken", "--json", "--count", "1"])

    let second = try await ProcessHarness.run(["watch", directory, "--name", "taken"], timeout: 20)
    Self.expectOneErrorLine(second, mentioning: "'taken'")
    #expect(!second.stderr.contains("listening as"))

    // The holder still listens.
    let written = try await ProcessHarness.exec(directory, ["INSERT INTO items(body) VALUES ('a')"])
    #expect(try await ProcessHarness.exitsOnItsOwn(holder))
    let held = try await ProcessHarness.finish(holder)
    #expect(held.status == 0)
    #expect(try jsonLines(held.stdout).map(ChangeSetLine.init(json:)) == written)
  }

  @Test func aMissingSchemaFileIsAnError() async throws {
    let folder = try TemporaryFolder()
    let directory = folder.child("group")
    let result = try await ProcessHarness.run(["init", directory, "--schema", folder.child("nope.sql")])
    Self.expectOneErrorLine(result, mentioning: folder.child("nope.sql"))
    #expect(!ProcessHarness.exists(directory + "/store.sqlite"))
  }

  @Test
  func aBadMultiLineSchemaIsStillOneErrorLine() async throws {
    let folder = try TemporaryFolder()
    let schemaPath = folder.child("bad.sql")
    try "CREATE TABLE a(x);\nCREATE TABLEX b(y);\n".write(toFile: schemaPath, atomically: true, encoding: .utf8)
    let result = try await ProcessHarness.run(["init", folder.child("group"), "--schema", schemaPath])
    Self.expectOneErrorLine(result, mentioning: "syntax error")

    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema, name: "other")
    let exec = try await ProcessHarness.run(["exec", directory, "INSERT INTO items(body) VALUES ('a');\nNOT SQL"])
    Self.expectOneErrorLine(exec, mentioning: "syntax error")
  }

  // MARK: watch

  @Test func watchCountExitsAfterThatManyChangeSets() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let watch = try await ProcessHarness.startWatch([directory, "--name", "counted", "--json", "--count", "2"])
    let written = try await ProcessHarness.exec(directory, repeat: 2, ["INSERT INTO items(body) VALUES ('a')"])

    #expect(try await ProcessHarness.exitsOnItsOwn(watch), "watch --count 2 did not exit after 2 change sets")
    let result = try await ProcessHarness.finish(watch)
    #expect(result.status == 0 && !result.signalled, "\(result.stderr)")
    #expect(try jsonLines(result.stdout).map(ChangeSetLine.init(json:)) == written)
  }

  @Test func watchPrintsText() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let watch = try await ProcessHarness.startWatch([directory, "--count", "1"])
    let written = try await ProcessHarness.exec(
      directory, ["INSERT INTO items(body) VALUES ('a')", "INSERT INTO tags(name, uses) VALUES ('t', 1)"])
    #expect(try await ProcessHarness.exitsOnItsOwn(watch))
    let result = try await ProcessHarness.finish(watch)
    #expect(result.status == 0)
    #expect(Self.lines(result.stdout) == ["#\(written[0].seq) (store main)", "  inserted: \(written[0].inserted[0])", "  invalidated: \(written[0].invalidatedTables[0])"])
  }

  @Test(arguments: [SIGTERM, SIGINT])
  func watchExitsCleanlyOnASignalAndRemovesItsUnnamedFolder(_ signalNumber: Int32) async throws {
    let folder = try TemporaryFolder("signal\(signalNumber)")
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let listeners = directory + "/listeners"
    let watch = try await ProcessHarness.startWatch([directory, "--json"])

    // Its made-up name, from "listening as NAME from sequence N".
    let announced = try #require(Self.lines(watch.stderr).first { $0.contains("listening as") })
    let words = announced.split(separator: " ")
    let name = try #require(words.firstIndex(of: "as").map { String(words[$0 + 1]) })
    #expect(ProcessHarness.entries(listeners) == [name])

    let written = try await ProcessHarness.exec(directory, ["INSERT INTO items(body) VALUES ('a')"])
    try await ProcessHarness.waitForLines(watch, 1)
    watch.signal(signalNumber)
    #expect(try await ProcessHarness.exitsOnItsOwn(watch), "watch did not exit on signal \(signalNumber)")
    let result = try await ProcessHarness.finish(watch)
    #expect(!result.signalled, "killed by the signal instead of exiting")
    #expect(result.status == 0, "\(result.stderr)")
    #expect(try jsonLines(result.stdout).map(ChangeSetLine.init(json:)) == written)
    #expect(ProcessHarness.entries(listeners).isEmpty, "the unnamed listener's folder is left: \(ProcessHarness.entries(listeners))")
    #expect(try await ProcessHarness.status(directory).listeners.isEmpty)
  }

  @Test func aNamedWatchKeepsItsFolderButEmptiesItsInboxOnExit() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let watch = try await ProcessHarness.startWatch([directory, "--name", "kept", "--json"])
    // One delivered change set before the signal: see the test below for
    // a signal sent right after "listening as".
    _ = try await ProcessHarness.exec(directory, ["INSERT INTO items(body) VALUES ('a')"])
    try await ProcessHarness.waitForLines(watch, 1)
    watch.signal(SIGTERM)
    #expect(try await ProcessHarness.exitsOnItsOwn(watch))
    let result = try await ProcessHarness.finish(watch)
    #expect(result.status == 0, "\(result.stderr)")

    #expect(ProcessHarness.exists(directory + "/listeners/kept"))
    #expect(ProcessHarness.entries(directory + "/listeners/kept/inbox").isEmpty)
    let status = try await ProcessHarness.status(directory)
    #expect(status.listeners.map(\.name) == ["kept"])
    #expect(status.listeners.first?.isLive == false)
  }

  @Test
  func watchHonoursASignalSentAsSoonAsItListens() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    // The race needs a busy machine: keep the CPUs busy meanwhile.
    let stop = Atomic<Bool>(false)
    let spinners = (0..<3).map { _ in
      let thread = Thread {
        var x: UInt64 = 1
        while !stop.load(ordering: .relaxed) { x = x &* 6364136223846793005 &+ 1 }
        _ = x
      }
      thread.start()
      return thread
    }
    defer {
      stop.store(true, ordering: .relaxed)
      _ = spinners
    }
    for round in 1...15 {
      let watch = try CLI.start(["watch", directory, "--name", "w\(round)"])
      try await ProcessHarness.onThread {
        while !watch.stderr.contains("listening as") && watch.isRunning { usleep(200) }
        watch.signal(SIGTERM)
      }
      let exited = try await ProcessHarness.exitsOnItsOwn(watch, within: 60)
      #expect(exited, "round \(round): SIGTERM sent right after 'listening as' was lost")
      let result = try await ProcessHarness.finish(watch, timeout: 1)
      if !exited { break }
      #expect(result.status == 0 && !result.signalled, "round \(round): \(result.stderr)")
    }
  }

  // MARK: demo

  @Test func demoRunsListenersAndWritersAndReportsOK() async throws {
    let folder = try TemporaryFolder()
    let result = try await ProcessHarness.run(
      ["demo", "--listeners", "2", "--writers", "2", "--transactions", "10", "--directory", folder.child("demo")],
      timeout: 120)
    #expect(result.status == 0, "stdout: \(result.stdout) stderr: \(result.stderr)")
    #expect(Self.lines(result.stdout).contains { $0.hasPrefix("OK:") }, "\(result.stdout)")
    #expect(!result.stdout.contains("FAILED"))
  }
}
