import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// The store's history: every change set appended in its own transaction,
/// read back in order, purged by retention, printed by `groupsync log`.
@Suite(.serialized, .timed)
struct HistoryTests {
  let folder: TemporaryFolder
  init() throws { folder = try TemporaryFolder() }

  /// A group whose table `t` was created by change set 1.
  func makeGroup(author: String? = nil) throws -> GroupFolder {
    var options = StoreOptions()
    options.author = author
    let group = try GroupFolder(path: folder.child("group"), options: options)
    try group.store.write { try $0.execute(sql: "CREATE TABLE t(id INTEGER PRIMARY KEY, v)") }
    return group
  }

  @Test func everyChangeSetIsInTheHistoryAsPublished() throws {
    let group = try makeGroup(author: "tester")
    var published: [ChangeSet] = []
    for index in 1...5 {
      let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
        try db.execute(sql: "INSERT INTO t(v) VALUES (?)", arguments: [index])
        if index > 1 { try db.execute(sql: "DELETE FROM t WHERE id = ?", arguments: [index - 1]) }
      }
      published.append(try #require(changeSet))
    }
    _ = try group.store.write { _ in }  // no change: no entry
    let entries = try group.store.history(after: 1)
    #expect(entries.map(\.sequence) == published.map(\.sequence))
    #expect(entries.map { try? $0.changeSet.get() } == published)
    #expect(entries.allSatisfy { $0.author == "tester" && $0.processID == getpid() && $0.byteCount > 0 })
    #expect(try group.store.history(after: published[2].sequence, limit: 1).map(\.sequence) == [published[3].sequence])
    #expect(try group.store.currentSequence() == published.last?.sequence)
  }

  @Test func aWriteMayNameItsOwnAuthor() throws {
    let group = try makeGroup(author: "app")
    try group.store.write(author: "importer") { try $0.execute(sql: "INSERT INTO t(v) VALUES (1)") }
    _ = try group.store.writeAndReturnChangeSet(author: "sync") { try $0.execute(sql: "INSERT INTO t(v) VALUES (2)") }
    _ = try group.store.writeAndReport { try $0.execute(sql: "INSERT INTO t(v) VALUES (3)") }
    #expect(try group.store.history(after: 1).map(\.author) == ["importer", "sync", "app"])
    let count = try group.store.read { db in try group.store.changeSetCount(after: 1, notWrittenBy: "sync", in: db) }
    #expect(count == 2)
  }

  @Test func aRolledBackTransactionLeavesNoEntryAndNumbersStayGapless() throws {
    let group = try makeGroup()
    let before = try group.store.currentSequence()
    struct Abort: Error {}
    #expect(throws: Abort.self) {
      try group.store.write { db in
        try db.execute(sql: "INSERT INTO t(v) VALUES (1)")
        throw Abort()
      }
    }
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO t(v) VALUES (2)") }
    #expect(changeSet?.sequence == before + 1)
    #expect(try group.store.history(after: before).map(\.sequence) == [before + 1])
  }

  @Test func retentionPurgesOldEntriesButNeverTheNewest() throws {
    let group = try makeGroup()
    try group.store.setHistoryRetention(HistoryRetention(
      maximumAgeSeconds: nil, maximumCount: 10, maximumBytes: nil,
      hardMaximumAgeSeconds: nil, hardMaximumCount: nil, hardMaximumBytes: nil))
    #expect(try group.store.historyRetention().maximumCount == 10)
    for index in 0..<299 {
      try group.store.write { try $0.execute(sql: "INSERT INTO t(v) VALUES (?)", arguments: [index]) }
    }
    let newest = try group.store.currentSequence()
    // Writers purge on every 256th number, keeping the 10 newest then.
    let oldest = try #require(try group.store.oldestHistorySequence())
    #expect(oldest == 256 - 10 + 1)
    #expect(try group.store.history(after: 0, limit: 10_000).count == Int(newest - oldest + 1))
    #expect(newest == 300)
  }

  @Test func aCountLimitOfZeroStillKeepsTheNewestEntry() throws {
    let group = try makeGroup()
    try group.store.setHistoryRetention(HistoryRetention(maximumCount: 0, hardMaximumCount: 0))
    for index in 0..<255 {
      try group.store.write { try $0.execute(sql: "INSERT INTO t(v) VALUES (?)", arguments: [index]) }
    }
    #expect(try group.store.oldestHistorySequence() == 256)
    // Numbering goes on from it.
    let (_, next) = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO t(v) VALUES (0)") }
    #expect(next?.sequence == 257)
  }

  @Test func logPrintsTheHistory() async throws {
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE TABLE t(id INTEGER PRIMARY KEY, v);")
    let written = try await ProcessHarness.exec(directory, repeat: 3, ["INSERT INTO t(v) VALUES (1)"])
    let result = try await ProcessHarness.run(["log", directory, "--json", "--since", String(written[0].seq)])
    try #require(result.status == 0, "\(result.stderr)")
    let lines = try jsonLines(result.stdout)
    #expect(lines.compactMap { ($0["seq"] as? NSNumber)?.int64Value } == Array(written.dropFirst().map(\.seq)))
    #expect(lines.allSatisfy { $0["author"] as? String == "groupsync" && ($0["inserted"] as? [String])?.count == 1 })
    let text = try await ProcessHarness.run(["log", directory, "--since", "1", "--limit", "1"])
    #expect(text.status == 0 && text.stdout.hasPrefix("#\(written[0].seq) ") && text.stdout.contains("1 inserted"))
    let schema = try await ProcessHarness.run(["log", directory, "--limit", "1"])
    #expect(schema.stdout.hasPrefix("#1 ") && schema.stdout.contains("0 inserted"), "the schema's change set")
    let bad = try await ProcessHarness.run(["log", directory, "--since", "-1"])
    #expect(bad.status != 0 && bad.stderr.contains("--since"))
  }

  @Test func statusShowsTheHistoryRange() async throws {
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE TABLE t(id INTEGER PRIMARY KEY, v);")
    let written = try await ProcessHarness.exec(directory, repeat: 2, ["INSERT INTO t(v) VALUES (1)"])
    let status = try await ProcessHarness.status(directory)
    #expect(status.history.oldest == 1 && status.history.newest == written[1].seq)
    #expect(status.history.count == 3 && status.history.bytes > 0)
  }
}

/// `groupsync show`: a change-set file or a history entry, as JSON.
@Suite(.serialized, .timed)
struct ShowCommandTests {
  @Test func showPrintsAFileAndAHistoryEntry() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE TABLE t(id INTEGER PRIMARY KEY, v);")
    let written = try await ProcessHarness.exec(directory, ["INSERT INTO t(v) VALUES ('a'), ('b')"])
    let seq = try #require(written.first?.seq)
    let entry = try await ProcessHarness.run(["show", directory, "--seq", String(seq)])
    try #require(entry.status == 0, "\(entry.stderr)")
    let object = try #require(try jsonLines(entry.stdout).first)
    #expect((object["seq"] as? NSNumber)?.int64Value == seq)
    #expect((object["inserted"] as? [String]) == written[0].inserted)

    let group = try GroupFolder(path: directory, create: false)
    let changeSet = try #require(try group.store.history(after: seq - 1, limit: 1).first?.changeSet.get())
    let file = folder.child("42.changeset")
    try Data(ChangeSetEncoding.encode(changeSet)).write(to: URL(fileURLWithPath: file))
    let shown = try await ProcessHarness.run(["show", file])
    try #require(shown.status == 0, "\(shown.stderr)")
    #expect(try jsonLines(shown.stdout).map(ChangeSetLine.init(json:)) == written)

    let missing = try await ProcessHarness.run(["show", directory, "--seq", "999"])
    #expect(missing.status == 1 && missing.stderr.contains("no change set 999"))
    try Data("junk".utf8).write(to: URL(fileURLWithPath: folder.child("junk")))
    let junk = try await ProcessHarness.run(["show", folder.child("junk")])
    #expect(junk.status == 1 && junk.stderr.contains("no GSCS marker"))
    let nothing = try await ProcessHarness.run(["show", folder.child("none")])
    #expect(nothing.status == 1 && nothing.stderr.contains("cannot read"))
  }
}
