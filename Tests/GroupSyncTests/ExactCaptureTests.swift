import Foundation
import GRDB
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// Every change is told, exactly: savepoints rolled back, schema changes,
/// virtual tables. Each example is one whole transaction on a table
/// `t(id INTEGER PRIMARY KEY, v)` holding rows 1, 2, 3, run through the
/// library and through `groupsync exec`.
@Suite(.serialized, .timed)
struct ExactCaptureTests {
  static let schema = "CREATE TABLE t(id INTEGER PRIMARY KEY, v); INSERT INTO t(id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c');"

  struct Expected: Sendable, CustomTestStringConvertible {
    let sql: String
    var inserted: [Int64] = []
    var updated: [Int64] = []
    var deleted: [Int64] = []
    var invalidated: [String] = []
    var testDescription: String { sql }
  }

  static let examples: [Expected] = [
    Expected(
      sql: "INSERT INTO t(id, v) VALUES (10, 'x'); SAVEPOINT s; DELETE FROM t WHERE id = 10; ROLLBACK TO s; RELEASE s",
      inserted: [10]),
    Expected(sql: "SAVEPOINT s; DELETE FROM t WHERE id = 1; ROLLBACK TO s; RELEASE s", updated: [1]),
    Expected(
      sql: "DELETE FROM t WHERE id = 1; SAVEPOINT s; INSERT INTO t(id, v) VALUES (1, 'again'); ROLLBACK TO s; RELEASE s",
      deleted: [1]),
    Expected(sql: "SAVEPOINT s; INSERT INTO t(id, v) VALUES (20, 'x'); ROLLBACK TO s; RELEASE s"),
    Expected(sql: "DROP TABLE t", invalidated: ["t"]),
    // `u` is new under that name, with rows no hook saw: invalidated too.
    Expected(sql: "ALTER TABLE t RENAME TO u", invalidated: ["t", "u"]),
    Expected(sql: "ALTER TABLE t ADD COLUMN w DEFAULT 7", invalidated: ["t"]),
    Expected(sql: "ALTER TABLE t RENAME COLUMN v TO value", invalidated: ["t"]),
    Expected(sql: "ALTER TABLE t DROP COLUMN v", invalidated: ["t"]),
    Expected(
      sql: "DROP TABLE t; CREATE TABLE t(id INTEGER PRIMARY KEY, v); INSERT INTO t(id, v) VALUES (1, 'new')",
      invalidated: ["t"]),
    Expected(sql: "CREATE TABLE fresh(x); INSERT INTO fresh(rowid, x) VALUES (5, 'y')", invalidated: ["fresh"]),
    // A TEMP table named like a table of the store: SQLite resolves `t` to
    // it, so its rows are this connection's own and never reported; the
    // store's `main.t` rows are, each in its own category.
    Expected(
      sql: """
        CREATE TEMP TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v); INSERT INTO t(id, v) VALUES (1, 'tmp'), (10, 'tmp');
        INSERT INTO main.t(id, v) VALUES (10, 'x'); UPDATE main.t SET v = 'z' WHERE id = 2; DELETE FROM main.t WHERE id = 3;
        UPDATE t SET v = 'tmp2'; DELETE FROM t WHERE id = 1
        """,
      inserted: [10], updated: [2], deleted: [3]),
    Expected(
      sql: """
        CREATE TEMP TABLE t(id INTEGER PRIMARY KEY, v); INSERT INTO main.t(id, v) VALUES (4, 'x');
        SAVEPOINT s; DELETE FROM main.t WHERE id = 1; ROLLBACK TO s; RELEASE s; DROP TABLE temp.t
        """,
      inserted: [4], updated: [1]),
  ]

  @Test(arguments: examples)
  func theLibraryReportsTheNetEffect(_ expected: Expected) throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { try $0.execute(sql: Self.schema) }
    let changeSet = try #require(try group.store.writeAndReturnChangeSet { try $0.execute(sql: expected.sql) }.changeSet)
    try check(changeSet, expected, store: group.store.storeID)
  }

  @Test(arguments: examples)
  func execReportsTheNetEffect(_ expected: Expected) async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let lines = try await ProcessHarness.exec(directory, [expected.sql])
    let line = try #require(lines.first)
    let store = try GroupFolder(path: directory, create: false).store.storeID
    #expect(line.inserted.filter { $0.contains("/t/") } == uris(store, expected.inserted), "\(expected.sql)")
    #expect(line.updated == uris(store, expected.updated), "\(expected.sql)")
    #expect(line.deleted == uris(store, expected.deleted), "\(expected.sql)")
    #expect(line.invalidatedTables == expected.invalidated.map { TableID(storeID: store, table: $0).uri }.sorted())
  }

  func check(_ changeSet: ChangeSet, _ expected: Expected, store: UUID) throws {
    #expect(changeSet.tables["t"]?.inserted ?? [] == expected.inserted, "\(expected.sql)")
    #expect(changeSet.tables["t"]?.updated ?? [] == expected.updated, "\(expected.sql)")
    #expect(changeSet.tables["t"]?.deleted ?? [] == expected.deleted, "\(expected.sql)")
    #expect(changeSet.invalidatedTableNames == Set(expected.invalidated.map { TableName($0) }), "\(expected.sql)")
    if expected.sql.hasPrefix("CREATE TABLE fresh") {
      #expect(changeSet.tables["fresh"]?.inserted == [5], "a new table's rows are named too")
    }
  }

  func uris(_ store: UUID, _ rowIDs: [Int64]) -> [String] {
    rowIDs.map { ObjectID(storeID: store, table: "t", rowID: $0).uri }.sorted()
  }

  @Test func aTransactionThatOnlyChangesTheSchemaGetsASequenceNumber() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { try $0.execute(sql: Self.schema) }
    let before = try group.store.currentSequence()
    let (_, index) = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "CREATE INDEX t_v ON t(v)") }
    #expect(index?.sequence == before + 1)
    #expect(index?.invalidatedTableNames == [], "an index changes no row")
    #expect(index?.rowCount == 0)
  }

  /// Found by the differential test (seed 2): an external-content index
  /// whose content table is gone can still be written, but not read; the
  /// rows the hook saw cannot be checked, so the table is invalidated
  /// instead of the commit refused.
  @Test func aTableThatCannotBeReadBackIsInvalidatedNotRefused() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE src(a); CREATE VIRTUAL TABLE ext USING fts5(a, content='src'); DROP TABLE src;
        CREATE TABLE t(id INTEGER PRIMARY KEY, v);
        """)
    }
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "INSERT INTO ext(rowid, a) VALUES (1, 'x'); INSERT INTO t(id, v) VALUES (1, 'y')")
    }
    #expect(changeSet?.invalidatedTableNames == ["ext"])
    #expect(changeSet?.tables["t"]?.inserted == [1])
  }

  /// Found by the differential test (seeds 106, 109, 131): an
  /// external-content full-text table reads its rows from its content
  /// table, so their changes are its changes, also when the triggers that
  /// feed its index did not run: a REPLACE deletes the conflicting row
  /// without firing delete triggers (`recursive_triggers` is off).
  @Test func anExternalContentIndexReportsItsContentTableRows() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT UNIQUE);
        CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id');
        CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN
          INSERT INTO docs_fts(rowid, body) VALUES (new.id, new.body); END;
        CREATE TRIGGER docs_ad AFTER DELETE ON docs BEGIN
          INSERT INTO docs_fts(docs_fts, rowid, body) VALUES ('delete', old.id, old.body); END;
        CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN
          INSERT INTO docs_fts(docs_fts, rowid, body) VALUES ('delete', old.id, old.body);
          INSERT INTO docs_fts(rowid, body) VALUES (new.id, new.body); END;
        INSERT INTO docs(id, body) VALUES (1, 'a'), (2, 'b');
        CREATE TABLE plain(n INT UNIQUE, body);
        CREATE VIRTUAL TABLE by_n USING fts5(body, content='plain', content_rowid='n');
        CREATE VIRTUAL TABLE untriggered USING fts5(body, content='plain');
        """)
    }
    let (_, replaced) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "REPLACE INTO docs(id, body) VALUES (3, 'a')")  // deletes row 1, no delete trigger
    }
    #expect(replaced?.tables["docs"] == TableChanges(inserted: [3], deleted: [1]))
    #expect(replaced?.tables["docs_fts"] == TableChanges(inserted: [3], deleted: [1]))
    let (_, direct) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "INSERT INTO plain(rowid, n, body) VALUES (5, 50, 'x')")  // no trigger feeds either index
    }
    #expect(direct?.tables["untriggered"]?.inserted == [5], "its rowids are the content table's")
    #expect(direct?.invalidatedTableNames == ["by_n"], "its rowids are the values of n")
  }

  /// Found by the differential test (seed 1): writing an external-content
  /// index directly for a row its content table already holds changes what
  /// a search finds, not which rows exist: the row is updated, not inserted.
  /// (seed 120): FTS3/4 read `content=''` as a table named "" when one
  /// exists, so such an index shows that table's rows.
  @Test func anIndexWrittenDirectlyUpdatesRowsItsContentTableHolds() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT);
        CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id');
        INSERT INTO docs(id, body) VALUES (1, 'a');
        CREATE VIRTUAL TABLE "" USING fts4(a);
        CREATE VIRTUAL TABLE reads_empty USING fts4(a, content="");
        INSERT INTO ""(rowid, a) VALUES (7, 'x');
        """)
    }
    let (_, indexed) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "INSERT OR REPLACE INTO docs_fts(rowid, body) VALUES (1, 'a')")
    }
    #expect(indexed?.tables["docs_fts"] == TableChanges(updated: [1]))
    #expect(indexed?.tables["docs"] == nil)
    let (_, deleted) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: #"DELETE FROM """#)
    }
    #expect(deleted?.tables[""] == TableChanges(deleted: [7]))
    #expect(deleted?.tables["reads_empty"] == TableChanges(deleted: [7]))
  }

  @Test func aFailedStatementCaughtInsideTheTransactionIsNotReported() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { try $0.execute(sql: Self.schema + "CREATE TABLE u(id INTEGER PRIMARY KEY, v UNIQUE)") }
    try group.store.write { try $0.execute(sql: "INSERT INTO u(id, v) VALUES (1, 'taken')") }
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
      // Rows 50 and 51 are inserted, then the statement fails on row 52 and
      // SQLite undoes the statement; the transaction goes on.
      do {
        try db.execute(sql: "INSERT INTO u(id, v) VALUES (50, 'a'), (51, 'b'), (52, 'taken')")
      } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {}
      try db.execute(sql: "UPDATE t SET v = 'z' WHERE id = 2")
    }
    #expect(changeSet?.tables["u"] == nil, "rows undone by the failed statement are not reported")
    #expect(changeSet?.tables["t"]?.updated == [2])
  }

  @Test func aTempTableKeptByTheWriterConnectionNeverShadowsTheStoresTable() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { try $0.execute(sql: Self.schema) }
    // The TEMP table outlives its transaction on the store's writer
    // connection: every later transaction resolves `t` to it.
    try group.store.write { db in
      try db.execute(sql: "CREATE TEMP TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v)")
      try db.execute(sql: "INSERT INTO t(id, v) VALUES (2, 'tmp'), (3, 'tmp'), (7, 'tmp')")
    }
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
      // 9 is not in the TEMP table, 3 is: a check that read `t` would
      // lose the insert and take the delete for an update.
      try db.execute(sql: "INSERT INTO main.t(id, v) VALUES (9, 'x'), (8, 'y')")
      try db.execute(sql: "DELETE FROM main.t WHERE id = 8")  // net nothing
      try db.execute(sql: "UPDATE main.t SET v = 'z' WHERE id = 2")
      try db.execute(sql: "DELETE FROM main.t WHERE id = 3")
      try db.execute(sql: "UPDATE t SET v = 'tmp2' WHERE id = 7")  // the TEMP table's row
    }
    let tables = try #require(changeSet).tables
    #expect(tables["t"]?.inserted == [9])
    #expect(tables["t"]?.updated == [2])
    #expect(tables["t"]?.deleted == [3])
    // Only TEMP rows: nothing of the store changed, nothing to report.
    let (_, none) = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "DELETE FROM t") }
    #expect(none == nil)
    let stored = try group.store.read { try Int64.fetchAll($0, sql: "SELECT id FROM main.t ORDER BY id") }
    #expect(stored == [1, 2, 9])
  }

  /// Across processes, as a user's tool does it: `groupsync exec` makes a
  /// TEMP table named like the store's and writes `main.t` in the same
  /// transaction; a `watch` process is told exactly the store's rows.
  @Test func aTempShadowInAnotherProcessIsReportedExactly() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let watch = try await ProcessHarness.startWatch([directory, "--name", "w", "--json", "--count", "2"])
    defer { watch.signal(SIGKILL) }
    let first = try await ProcessHarness.exec(directory, [
      "CREATE TEMP TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v)",
      "INSERT INTO t(id, v) VALUES (2, 'tmp'), (5, 'tmp')",
      "INSERT INTO main.t(id, v) VALUES (5, 'x')",
      "DELETE FROM main.t WHERE id = 2",
      "UPDATE t SET v = 'tmp2' WHERE id = 5",
    ])
    let second = try await ProcessHarness.exec(directory, [
      "CREATE TEMP TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v)",
      "INSERT INTO t(id, v) VALUES (6, 'tmp')",
      "UPDATE main.t SET v = 'y' WHERE id = 3",
    ])
    let lines = try jsonLines(try await ProcessHarness.finish(watch, timeout: 20).stdout)
    #expect(lines.count == 2)
    #expect(try lines.map { try ChangeSetLine(json: $0) } == first + second)
    func rows(_ uris: [String]?) -> [String] { (uris ?? []).map { $0.split(separator: "/").suffix(2).joined(separator: "/") } }
    #expect(rows(first.first?.inserted) == ["t/p5"] && rows(first.first?.deleted) == ["t/p2"])
    #expect(rows(first.first?.updated) == [])
    #expect(rows(second.first?.updated) == ["t/p3"] && rows(second.first?.inserted) == [])
  }

  @Test func virtualTablesAreReportedUnderTheirOwnNames() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE VIRTUAL TABLE ft USING fts5(body);
        CREATE VIRTUAL TABLE box USING rtree(id, minX, maxX);
        CREATE VIRTUAL TABLE contentless USING fts5(body, content='', columnsize=0);
        """)
    }
    let (_, inserted) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: """
        INSERT INTO ft(rowid, body) VALUES (7, 'hello world'), (8, 'bye');
        INSERT INTO box VALUES (3, 0, 1);
        INSERT INTO contentless(rowid, body) VALUES (1, 'x');
        """)
    }
    let changes = try #require(inserted)
    #expect(changes.tables["ft"]?.inserted == [7, 8])
    #expect(changes.tables["box"]?.inserted == [3])
    #expect(changes.invalidatedTableNames == ["contentless"], "no shadow table carries its rowids")
    #expect(Set(changes.tables.keys) == ["ft", "box"], "no shadow table is reported: \(changes.tables.keys.sorted())")

    let (_, edited) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "UPDATE ft SET body = 'changed' WHERE rowid = 7; DELETE FROM ft WHERE rowid = 8; DELETE FROM box")
    }
    #expect(edited?.tables["ft"]?.updated == [7])
    #expect(edited?.tables["ft"]?.deleted == [8])
    #expect(edited?.tables["box"]?.deleted == [3])
  }
}

/// What must run outside a transaction (VACUUM renumbers rowids of tables
/// without an INTEGER PRIMARY KEY) is told as a change set that invalidates
/// every table.
@Suite(.serialized, .timed)
struct OutsideTransactionTests {
  @Test func vacuumThroughTheLibraryInvalidatesEveryTable() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE keyed(id INTEGER PRIMARY KEY, v);
        CREATE TABLE loose(v);
        CREATE TABLE named(k TEXT PRIMARY KEY, v) WITHOUT ROWID;
        INSERT INTO loose(v) VALUES (1), (2), (3), (4);
        DELETE FROM loose WHERE v < 3;
        """)
    }
    let before = try group.store.currentSequence()
    let (_, changeSet) = try group.store.writeWithoutTransaction { try $0.execute(sql: "VACUUM") }
    #expect(changeSet.sequence == before + 1)
    #expect(changeSet.invalidatedTableNames == ["keyed", "loose", "named"])
    #expect(changeSet.rowCount == 0)
    // Rows changed outside a transaction would commit unannounced: refused.
    #expect(throws: GroupSyncError.unsequencedCommit) {
      _ = try group.store.writeWithoutTransaction { try $0.execute(sql: "INSERT INTO keyed(v) VALUES (1)") }
    }
    #expect(try group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM keyed") } == 0)
    #expect(throws: GroupSyncError.nestedWrite) {
      try group.store.write { _ in _ = try group.store.writeWithoutTransaction { _ in } }
    }
  }

  @Test func execNoTransactionRunsVacuumAndForeignKeyPragmas() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: """
      CREATE TABLE parent(id INTEGER PRIMARY KEY);
      CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) ON DELETE CASCADE);
      INSERT INTO parent VALUES (1); INSERT INTO child VALUES (10, 1);
      """)
    let vacuum = try await ProcessHarness.run(["exec", directory, "--no-transaction", "--json", "VACUUM"])
    try #require(vacuum.status == 0, "\(vacuum.stderr)")
    let line = try #require(try jsonLines(vacuum.stdout).map(ChangeSetLine.init(json:)).first)
    #expect(line.invalidatedTables.count == 2 && line.inserted.isEmpty)
    let refused = try await ProcessHarness.run(["exec", directory, "--no-transaction", "DELETE FROM parent"])
    #expect(refused.status == 1 && refused.stderr.contains("without a sequence number"), "\(refused.stderr)")
    // Foreign keys are on (GRDB's configuration): the cascade runs and is told.
    let cascade = try await ProcessHarness.exec(directory, ["DELETE FROM parent WHERE id = 1"])
    #expect(cascade.first?.deleted.contains { $0.hasSuffix("/child/p10") } == true)
  }
}

/// Table names SQLite accepts round-trip and stay apart.
@Suite(.serialized, .timed)
struct TableNameCaptureTests {
  @Test func nfcAndNfdNamesAreTwoTablesAndTheEmptyNameWorks() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { db in
      try db.execute(sql: #"CREATE TABLE "café"(x); CREATE TABLE "cafe\#u{301}"(x); CREATE TABLE ""(x)"#)
    }
    let listener = try group.listen(as: "names")
    defer { listener.close() }
    let other = try GroupFolder(path: folder.child("group"))
    let (_, changeSet) = try await other.store.writeAndReturnChangeSet { db in
      try db.execute(sql: #"INSERT INTO "café"(rowid, x) VALUES (1, 'a'); INSERT INTO "cafe\#u{301}"(rowid, x) VALUES (2, 'b'); INSERT INTO ""(rowid, x) VALUES (3, 'c')"#)
    }
    let committed = try #require(changeSet)
    #expect(committed.tables.count == 3)
    #expect(committed.tables[TableName("café")]?.inserted == [1])
    #expect(committed.tables[TableName("cafe\u{301}")]?.inserted == [2])
    #expect(committed.tables[TableName("")]?.inserted == [3])
    #expect(committed.inserted.count == 3)
    // Through the history and back, in this process's listener.
    let delivered = try await ListenerHarness.nextChanges(listener)
    #expect(delivered == committed)
    for id in committed.inserted { #expect(try ObjectID(uri: id.uri) == id) }
  }
}
