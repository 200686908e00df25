// Capture of full-text shadow tables and of names shared across SQLite's
// namespaces.
import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// Ways a change could go untold: a write straight into a full-text
/// table's document shadow tables, and a trigger (or index) that shares its
/// name with a table, an index or a view (SQLite keeps triggers in a
/// namespace of their own), across processes (`groupsync exec`); a table
/// named like a shadow table of a virtual table that is gone (dropped, or
/// created in a transaction that rolled back), which the capture must not
/// keep ignoring.
@Suite(.timed) struct CaptureShadowAndNamesakeTests {
  /// The statements that write the documents table of `module`, for a
  /// table `t(x)`: delete document 1, change document 2.
  static func shadowWrites(_ module: String) -> (delete: String, update: String) {
    module == "fts5"
      ? ("DELETE FROM t_content WHERE id = 1", "UPDATE t_content SET c0 = 'z' WHERE id = 2")
      : ("DELETE FROM t_content WHERE docid = 1", "UPDATE t_content SET c0x = 'z' WHERE docid = 2")
  }

  @Test(arguments: ["fts3", "fts4", "fts5"])
  func aWriteToAFullTextTablesDocumentsIsTold(module: String) async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE VIRTUAL TABLE t USING \(module)(x);")
    let store = try GroupFolder(path: directory, create: false).store.storeID
    let uri = { (rowID: Int64) in ObjectID(storeID: store, table: "t", rowID: rowID).uri }
    _ = try await ProcessHarness.exec(directory, ["INSERT INTO t(rowid, x) VALUES (1, 'a'), (2, 'b')"])
    let writes = Self.shadowWrites(module)
    let deleted = try #require(try await ProcessHarness.exec(directory, [writes.delete]).first)
    #expect(deleted.deleted == [uri(1)] && deleted.updated.isEmpty && deleted.inserted.isEmpty, "\(deleted)")
    let updated = try #require(try await ProcessHarness.exec(directory, [writes.update]).first)
    #expect(updated.updated == [uri(2)] && updated.deleted.isEmpty, "\(updated)")
    // What the table shows, as a reader sees it.
    let rows = try await ProcessHarness.run(["query", directory, "SELECT rowid, x FROM t"])
    #expect(rows.stdout.contains("z") && !rows.stdout.contains("| a"), "\(rows.stdout)")
  }

  /// A row whose content was written straight into the documents table
  /// has no document size until a `rebuild` writes one: that row existed
  /// before the rebuild (a reader saw it), so the rebuild updates it, as it
  /// does every other row; it inserts nothing.
  @Test(arguments: ["fts4", "fts5"])
  func aRebuildAfterADirectWriteToTheDocumentsUpdatesEveryRow(module: String) async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE VIRTUAL TABLE t USING \(module)(x);")
    let store = try GroupFolder(path: directory, create: false).store.storeID
    let uri = { (rowID: Int64) in ObjectID(storeID: store, table: "t", rowID: rowID).uri }
    _ = try await ProcessHarness.exec(directory, ["INSERT INTO t(rowid, x) VALUES (1, 'a'), (2, 'b')"])
    let direct = module == "fts5"
      ? "INSERT INTO t_content(id, c0) VALUES (9, 'c')" : "INSERT INTO t_content(docid, c0x) VALUES (9, 'c')"
    let written = try #require(try await ProcessHarness.exec(directory, [direct]).first)
    #expect(written.inserted == [uri(9)] && written.updated.isEmpty && written.deleted.isEmpty, "\(written)")
    let rebuilt = try #require(try await ProcessHarness.exec(directory, ["INSERT INTO t(t) VALUES ('rebuild')"]).first)
    #expect(rebuilt.inserted.isEmpty && rebuilt.deleted.isEmpty, "\(rebuilt)")
    #expect(rebuilt.updated == [uri(1), uri(2), uri(9)], "\(rebuilt)")
    // A document size written for no document names no row.
    let sizes = module == "fts5"
      ? "INSERT INTO t_docsize(id, sz) VALUES (50, x'01')" : "INSERT INTO t_docsize(docid, size) VALUES (50, x'01')"
    let stray = try await ProcessHarness.exec(directory, [sizes]).first
    #expect(stray.map { $0.inserted + $0.updated + $0.deleted } ?? [] == [], "\(String(describing: stray))")
  }

  /// Names that differ only in their Unicode form are different names to
  /// SQLite: renaming a table from "café" spelled precomposed to "café"
  /// spelled decomposed rewrites the tables that refer to it, and those
  /// changed shape as much as the renamed one.
  @Test func aRenameToTheSameNameInAnotherUnicodeFormInvalidatesWhatRefersToIt() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let composed = "caf\u{E9}"
    let decomposed = "cafe\u{301}"
    #expect(composed == decomposed && !composed.utf8.elementsEqual(decomposed.utf8), "Swift's == and SQLite's differ here")
    try await group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE "\(composed)"(k INTEGER PRIMARY KEY, b);
        CREATE TABLE child(id INTEGER PRIMARY KEY, ref REFERENCES "\(composed)"(k));
        """)
    }
    let (_, changeSet) = try await group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "ALTER TABLE \"\(composed)\" RENAME TO \"\(decomposed)\"")
    }
    let invalidated = try #require(changeSet).invalidatedTableNames.map { Array($0.name.utf8) }
    #expect(invalidated.contains(Array("child".utf8)), "\(invalidated.map { String(decoding: $0, as: UTF8.self) })")
    #expect(invalidated.contains(Array(decomposed.utf8)))
  }

  /// A trigger named like an external-content full-text table does not
  /// hide that table's changes.
  @Test(arguments: ["fts4", "fts5"])
  func aTriggerNamedLikeAFullTextTableHidesNothing(module: String) async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(
      folder,
      schema: """
        CREATE TABLE c(x);
        CREATE VIRTUAL TABLE f USING \(module)(content='c', x);
        CREATE TRIGGER f AFTER UPDATE ON c BEGIN SELECT 1; END;
        """)
    let store = try GroupFolder(path: directory, create: false).store.storeID
    let line = try #require(try await ProcessHarness.exec(directory, ["INSERT INTO c VALUES ('hello')"]).first)
    #expect(
      line.inserted == [ObjectID(storeID: store, table: "c", rowID: 1).uri, ObjectID(storeID: store, table: "f", rowID: 1).uri].sorted(),
      "\(line)")
  }

  /// A trigger named like an index (or a table, or a view) does not make
  /// every later schema change invalidate every table: a new table
  /// invalidates itself only.
  @Test func aTriggerNamedLikeAnotherObjectDoesNotBlurLaterSchemaChanges() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(
      folder,
      schema: """
        CREATE TABLE a(id INTEGER PRIMARY KEY, v);
        CREATE TABLE b(id INTEGER PRIMARY KEY, v);
        CREATE INDEX ix ON a(v);
        CREATE VIEW w AS SELECT * FROM a;
        CREATE TRIGGER ix AFTER INSERT ON b BEGIN SELECT 1; END;
        CREATE TRIGGER w AFTER DELETE ON b BEGIN SELECT 1; END;
        CREATE TRIGGER a AFTER UPDATE ON b BEGIN SELECT 1; END;
        """)
    let store = try GroupFolder(path: directory, create: false).store.storeID
    let created = try #require(try await ProcessHarness.exec(directory, ["CREATE TABLE z(id INTEGER PRIMARY KEY)"]).first)
    #expect(created.invalidatedTables == [TableID(storeID: store, table: "z").uri], "\(created)")
    let indexed = try #require(try await ProcessHarness.exec(directory, ["CREATE INDEX bv ON b(v)"]).first)
    #expect(indexed.invalidatedTables.isEmpty, "\(indexed)")
    // The objects the triggers share their names with change too.
    for statement in ["DROP INDEX ix", "DROP VIEW w", "CREATE INDEX ix ON b(v)"] {
      let line = try #require(try await ProcessHarness.exec(directory, [statement]).first)
      #expect(line.invalidatedTables.isEmpty, "\(statement): \(line)")
    }
    // And rows are still named exactly.
    let line = try #require(try await ProcessHarness.exec(directory, ["INSERT INTO a(v) VALUES (1)"]).first)
    #expect(line.inserted == [ObjectID(storeID: store, table: "a", rowID: 1).uri] && line.invalidatedTables.isEmpty)
  }

  /// A table named like an index shadow of a full-text table that is gone
  /// (dropped, or created in a transaction that rolled back) is a table
  /// like any other: the capture ignores exactly the current shadows.
  @Test(arguments: [false, true])
  func aTableNamedLikeTheShadowOfAGoneFullTextTableIsTold(rolledBack: Bool) throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try Self.createParentAndChild(group)
    if rolledBack {
      _ = try Self.createFullTextTableAndRollBack(group)
    } else {
      try group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a')") }
      try group.store.write { try $0.execute(sql: "DROP TABLE v") }
    }
    try group.store.write { try $0.execute(sql: "CREATE TABLE v_idx(a, b)") }
    let changeSet = try group.store.writeAndReturnChangeSet {
      try $0.execute(sql: "INSERT INTO v_idx(rowid, a, b) VALUES (3, 1, 2)")
    }.changeSet
    #expect(changeSet?.inserted == [ObjectID(storeID: group.store.storeID, table: "v_idx", rowID: 3)])
  }

  /// The transaction that drops a full-text table creates a table under
  /// one of its shadow names, exactly as the shadow was, on the same root
  /// page (so the schema's entries show no change for that name), and
  /// writes it: the rows the capture ignored until the commit are told,
  /// then every later row.
  @Test func aShadowNameReusedInTheTransactionThatDropsItsTableIsTold() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let store = group.store.storeID
    try group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a')") }
    // Free pages after the shadow's: SQLite gives a new table the free
    // page nearest the file's start, which the dropped shadow's root is.
    try group.store.write { try $0.execute(sql: """
      CREATE TABLE filler(x);
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8)
      INSERT INTO filler SELECT randomblob(3000) FROM n;
      DROP TABLE filler;
      """) }
    let shadow = try #require(try group.store.read {
      try Row.fetchOne($0, sql: "SELECT sql, rootpage FROM sqlite_schema WHERE name = 'v_data'")
    })
    let shadowSQL: String = shadow["sql"]
    var rootPage: Int64 = -1
    let changeSet = try #require(try group.store.writeAndReturnChangeSet {
      try $0.execute(sql: "DROP TABLE v")
      try $0.execute(sql: shadowSQL)
      rootPage = try Int64.fetchOne($0, sql: "SELECT rootpage FROM sqlite_schema WHERE name = 'v_data'") ?? -1
      try $0.execute(sql: "INSERT INTO v_data(id, block) VALUES (3, x'00')")
    }.changeSet)
    try #require(rootPage == shadow["rootpage"], "the schema shows the table as it was")
    #expect(
      changeSet.inserted.contains(ObjectID(storeID: store, table: "v_data", rowID: 3))
        || changeSet.invalidatedTables.contains(TableID(storeID: store, table: "v_data")), "\(changeSet)")
    let next = try group.store.writeAndReturnChangeSet {
      try $0.execute(sql: "INSERT INTO v_data(id, block) VALUES (4, x'00')")
    }.changeSet
    #expect(next?.inserted == [ObjectID(storeID: store, table: "v_data", rowID: 4)] && next?.invalidatedTables == [])
  }

  /// Another process drops a full-text table and creates a table under
  /// one of its shadow names: this process's next write to it is told.
  /// Also when this process had created the full-text table in a
  /// transaction that rolled back, and the other process's schema change
  /// reuses the schema version that transaction reached.
  @Test(arguments: [false, true])
  func aShadowNameReusedByAnotherProcessIsTold(rolledBack: Bool) async throws {
    let folder = try TemporaryFolder()
    let directory = folder.child("group")
    let group = try GroupFolder(path: directory)
    let store = group.store.storeID
    try Self.createParentAndChild(group)
    if rolledBack {
      let reached = try Self.createFullTextTableAndRollBack(group)
      _ = try await ProcessHarness.exec(directory, ["CREATE TABLE v_idx(a, b)"])
      let padding = reached - (try Self.schemaVersion(group))
      try #require(padding >= 0)
      if padding > 0 {
        _ = try await ProcessHarness.exec(directory, (0..<padding).map { "CREATE TABLE pad\($0)(x)" })
      }
      try #require(try Self.schemaVersion(group) == reached, "the rolled-back schema version is reused")
    } else {
      try await group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a')") }
      _ = try await ProcessHarness.exec(directory, ["DROP TABLE v", "CREATE TABLE v_idx(a, b)"])
    }
    let changeSet = try await group.store.writeAndReturnChangeSet {
      try $0.execute(sql: "INSERT INTO v_idx(rowid, a, b) VALUES (3, 1, 2)")
    }.changeSet
    #expect(changeSet?.inserted == [ObjectID(storeID: store, table: "v_idx", rowID: 3)], "\(String(describing: changeSet))")
  }

  /// A virtual table dropped and created again under another module: its
  /// rows are named, and the new module's shadows are ignored (a commit
  /// that wrote them unsequenced would be refused).
  @Test func aVirtualTableCreatedAgainUnderAnotherModuleIsTold() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let store = group.store.storeID
    for (module, columns) in [("fts5", "x"), ("rtree", "id, a, b"), ("fts4", "x"), ("fts5", "x")] {
      try group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING \(module)(\(columns))") }
      let changeSet = try group.store.writeAndReturnChangeSet {
        try $0.execute(sql: module == "rtree" ? "INSERT INTO v VALUES (1, 0, 1)" : "INSERT INTO v(rowid, x) VALUES (1, 'a')")
      }.changeSet
      #expect(
        changeSet?.inserted == [ObjectID(storeID: store, table: "v", rowID: 1)] && changeSet?.invalidatedTables == [],
        "\(module): \(String(describing: changeSet))")
      try group.store.write { try $0.execute(sql: "DROP TABLE v") }
    }
  }

  // MARK: Helpers

  private static func createParentAndChild(_ group: GroupFolder) throws {
    try group.store.write { try $0.execute(sql: """
      CREATE TABLE parent(id INTEGER PRIMARY KEY);
      CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);
      """) }
  }

  /// Creates the full-text table `v` in a transaction whose COMMIT fails
  /// (on a deferred foreign key, after its change set was made); returns
  /// the schema version it reached, which SQLite then puts back.
  private static func createFullTextTableAndRollBack(_ group: GroupFolder) throws -> Int64 {
    var reached: Int64 = -1
    #expect(throws: DatabaseError.self) {
      try group.store.write {
        try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a'); INSERT INTO child VALUES (1, 99)")
        reached = try Int64.fetchOne($0, sql: "PRAGMA schema_version") ?? -1
      }
    }
    return reached
  }

  private static func schemaVersion(_ group: GroupFolder) throws -> Int64 {
    try group.store.read { try Int64.fetchOne($0, sql: "PRAGMA schema_version") } ?? -1
  }
}
