// Capture of full-text shadow tables and of names shared across SQLite's
// namespaces.
import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// Two ways a change could go untold, across processes (`groupsync exec`):
/// a write straight into a full-text table's document shadow tables, and a
/// trigger (or index) that shares its name with a table, an index or a
/// view (SQLite keeps triggers in a namespace of their own).
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
  /// like any other. Known to fail: the capture keeps ignoring the shadow
  /// names for its life, so such a table's writes commit untold.
  @Test(arguments: [false, true])
  func aTableNamedLikeTheShadowOfAGoneFullTextTableIsTold(rolledBack: Bool) throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { try $0.execute(sql: """
      CREATE TABLE parent(id INTEGER PRIMARY KEY);
      CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);
      """) }
    if rolledBack {
      // COMMIT fails on the deferred foreign key, after the change set was made.
      #expect(throws: DatabaseError.self) {
        try group.store.write { try $0.execute(sql: """
          CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a'); INSERT INTO child VALUES (1, 99)
          """) }
      }
    } else {
      try group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a')") }
      try group.store.write { try $0.execute(sql: "DROP TABLE v") }
    }
    try group.store.write { try $0.execute(sql: "CREATE TABLE v_idx(a, b)") }
    let changeSet = try group.store.writeAndReturnChangeSet {
      try $0.execute(sql: "INSERT INTO v_idx(rowid, a, b) VALUES (3, 1, 2)")
    }.changeSet
    withKnownIssue("ignored shadow-table names are never forgotten (CSupport/capture.c has no un-ignore)") {
      #expect(changeSet?.inserted == [ObjectID(storeID: group.store.storeID, table: "v_idx", rowID: 3)])
    }
  }
}
