// The C capture's edge cases, seen through a store's change sets.
import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// The C capture's edge cases, seen through the change sets a store
/// produces, on both hooks.
@Suite(.serialized, .timed) struct CaptureTests {
  static let hooks = [false, true]  // captureWithoutPreUpdateHook

  let folder: TemporaryFolder

  init() throws { folder = try TemporaryFolder() }

  func makeGroup(forceUpdateHook: Bool = false, _ schema: String) throws -> GroupFolder {
    var options = StoreOptions()
    options.captureWithoutPreUpdateHook = forceUpdateHook
    let group = try GroupFolder(path: folder.child(UUID().uuidString), options: options)
    try group.store.write { try $0.execute(sql: schema) }
    return group
  }

  func commit(_ group: GroupFolder, _ sql: String) throws -> ChangeSet? {
    try group.store.writeAndReturnChangeSet { try $0.execute(sql: sql) }.changeSet
  }

  func ids(_ group: GroupFolder, _ table: String, _ rowIDs: [Int64]) -> Set<ObjectID> {
    Set(rowIDs.map { ObjectID(storeID: group.store.storeID, table: table, rowID: $0) })
  }

  @Test func usesThePreUpdateHookWhereSQLiteHasIt() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    #expect(group.store.usesPreUpdateHook)
    let fallback = try makeGroup(forceUpdateHook: true, "CREATE TABLE t(x)")
    #expect(!fallback.store.usesPreUpdateHook)
  }

  @Test(arguments: hooks)
  func reportsNetEffectPerRow(forceUpdateHook: Bool) throws {
    let group = try makeGroup(forceUpdateHook: forceUpdateHook, "CREATE TABLE t(x); INSERT INTO t(rowid, x) VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    let changes = try #require(try commit(group, """
      INSERT INTO t(rowid, x) VALUES (10, 'new');
      UPDATE t SET x = 'changed' WHERE rowid = 10;
      UPDATE t SET x = 'B' WHERE rowid = 2;
      DELETE FROM t WHERE rowid = 3;
      INSERT INTO t(rowid, x) VALUES (11, 'gone'); DELETE FROM t WHERE rowid = 11;
      """))
    #expect(changes.inserted == ids(group, "t", [10]))
    #expect(changes.updated == ids(group, "t", [2]))
    #expect(changes.deleted == ids(group, "t", [3]))
    #expect(changes.invalidatedTables.isEmpty)
  }

  @Test(arguments: hooks)
  func rollbackReportsNothingAndAllocatesNoSequence(forceUpdateHook: Bool) throws {
    let group = try makeGroup(forceUpdateHook: forceUpdateHook, "CREATE TABLE t(x)")
    let before = try group.store.currentSequence()
    struct Abort: Error {}
    #expect(throws: Abort.self) {
      try group.store.write { db in
        try db.execute(sql: "INSERT INTO t VALUES (1)")
        throw Abort()
      }
    }
    #expect(try group.store.currentSequence() == before)
    #expect(try group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 0)
    // The next transaction reports only its own row.
    let changes = try #require(try commit(group, "INSERT INTO t(rowid, x) VALUES (5, 5)"))
    #expect(changes.sequence == before + 1)
    #expect(changes.inserted == ids(group, "t", [5]))
  }

  /// A store whose COMMIT fails after the change set was made, numbered
  /// and written to the history: a deferred foreign key is checked only
  /// at COMMIT, and the transaction then rolls back.
  static let deferredForeignKey = """
    CREATE TABLE parent(id INTEGER PRIMARY KEY);
    CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);
    """
  static let failingAtCommit = "INSERT INTO child VALUES (1, 99)"

  @Test(arguments: hooks)
  func rollbackAtCommitLeavesNoRowsSequenceOrInvalidationBehind(forceUpdateHook: Bool) throws {
    var options = StoreOptions()
    options.captureWithoutPreUpdateHook = forceUpdateHook
    options.rowBudget = 16  // past it, t is invalidated
    let group = try GroupFolder(path: folder.child(UUID().uuidString), options: options)
    try group.store.write { try $0.execute(sql: Self.deferredForeignKey + "CREATE TABLE t(x); CREATE TABLE u(y)") }
    let before = try group.store.currentSequence()
    #expect(throws: DatabaseError.self) {
      try group.store.write { db in
        try db.execute(sql: """
          WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
          INSERT INTO t(rowid, x) SELECT i, i FROM n;
          INSERT INTO u(rowid, y) VALUES (7, 7);
          """ + Self.failingAtCommit)
      }
    }
    #expect(try group.store.currentSequence() == before)
    #expect(try group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 0)
    // The next commit reports its own rows only: none of u's, no
    // invalidation of t, and the sequence the rolled-back one had.
    let changes = try #require(try commit(group, "INSERT INTO t(rowid, x) VALUES (500, 5)"))
    #expect(changes.sequence == before + 1)
    #expect(changes.inserted == ids(group, "t", [500]))
    #expect(changes.invalidatedTables.isEmpty)
  }

  // SQLite puts the schema version back on a rollback: the next schema
  // change has the number the rolled-back one had. What the rolled-back
  // schema looked like must not stand for it.
  @Test func aSchemaRolledBackAtCommitIsNotTakenForTheNextWithItsVersion() throws {
    let group = try makeGroup(Self.deferredForeignKey)
    #expect(throws: DatabaseError.self) {
      try group.store.write { try $0.execute(sql: "CREATE TABLE gone(x);" + Self.failingAtCommit) }
    }
    let created = try #require(try commit(group, "CREATE TABLE t(id INTEGER PRIMARY KEY, x)"))
    #expect(created.invalidatedTableNames == ["t"])
    let changes = try #require(try commit(group, "INSERT INTO t VALUES (1, 'a')"))
    #expect(changes.inserted == ids(group, "t", [1]))
    #expect(changes.invalidatedTableNames.isEmpty)
  }

  @Test func noChangeMeansNoChangeSetAndNoSequence() throws {
    let group = try makeGroup("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
    let before = try group.store.currentSequence()
    #expect(try commit(group, "SELECT * FROM t; UPDATE t SET x = 2 WHERE 0") == nil)
    #expect(try group.store.currentSequence() == before)
  }

  @Test func sequencesAreGapless() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    let first = try group.store.currentSequence()
    var seen: [Int64] = []
    for index in 0..<20 {
      if index % 3 == 0 { _ = try commit(group, "SELECT 1") }  // no changes
      seen.append(try #require(try commit(group, "INSERT INTO t VALUES (\(index))")).sequence)
    }
    #expect(seen == Array((first + 1)...(first + 20)))
  }

  // A commit that follows this connection's own reuses its last sequence
  // and schema (issue 20); another connection's commit in between, or a
  // write to the history, must make it read them again.
  @Test func twoConnectionsTakingTurnsNumberGaplessly() throws {
    let path = folder.child(UUID().uuidString)
    let a = try GroupFolder(path: path)
    try a.store.write { try $0.execute(sql: "CREATE TABLE t(x)") }
    let b = try GroupFolder(path: path, create: false)
    let first = try a.store.currentSequence()
    var seen: [Int64] = []
    for index in 0..<12 {
      let writer = index % 3 == 2 ? b : a  // a twice, then b
      seen.append(try #require(try commit(writer, "INSERT INTO t VALUES (\(index))")).sequence)
    }
    #expect(seen == Array((first + 1)...(first + 12)))
  }

  @Test func anotherConnectionsSchemaChangeIsNotTakenForOurs() throws {
    let path = folder.child(UUID().uuidString)
    let a = try GroupFolder(path: path)
    try a.store.write { try $0.execute(sql: "CREATE TABLE t(x); CREATE TABLE u(y)") }
    _ = try commit(a, "INSERT INTO t VALUES (1)")
    let b = try GroupFolder(path: path, create: false)
    let altered = try #require(try commit(b, "ALTER TABLE u ADD COLUMN z"))
    #expect(altered.invalidatedTableNames == ["u"])
    // a's next commit starts from the schema b left: it changed none.
    let next = try #require(try commit(a, "INSERT INTO t VALUES (2)"))
    #expect(next.invalidatedTableNames.isEmpty)
    #expect(next.sequence == altered.sequence + 1)
    #expect(next.inserted == ids(a, "t", [2]))
  }

  @Test func aHistoryRowWrittenInTheTransactionIsNotNumberedOver() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    _ = try commit(group, "INSERT INTO t VALUES (1)")
    let last = try group.store.currentSequence()
    // A row of the history written inside a write (as a tool might):
    // the commit's own number comes after it.
    let changeSet = try #require(try group.store.writeAndReturnChangeSet { db in
      try db.execute(
        sql: "INSERT INTO \(StoreState.historyTable)(seq, committed_at, author, pid, payload) VALUES (?, 0, 'tool', 0, x'')",
        arguments: [last + 1])
      try db.execute(sql: "INSERT INTO t VALUES (2)")
    }.changeSet)
    #expect(changeSet.sequence == last + 2)
  }

  @Test func savepointRollbackMayOverReportButNeverUnderReports() throws {
    let group = try makeGroup("CREATE TABLE t(x); INSERT INTO t(rowid, x) VALUES (1, 'a')")
    let changes = try #require(try commit(group, """
      SAVEPOINT s; INSERT INTO t(rowid, x) VALUES (2, 'b'); UPDATE t SET x = 'z' WHERE rowid = 1; ROLLBACK TO s; RELEASE s;
      INSERT INTO t(rowid, x) VALUES (3, 'c');
      """))
    #expect(changes.inserted.isSuperset(of: ids(group, "t", [3])))
    // Rows 1 and 2 are unchanged in the store; naming them is allowed.
    let rows = try group.store.read { try Row.fetchAll($0, sql: "SELECT rowid, x FROM t ORDER BY rowid") }
    #expect(rows == [["rowid": 1, "x": "a"], ["rowid": 3, "x": "c"]])
  }

  @Test func releasedSavepointChangesAreReported() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    let changes = try #require(try commit(group, "SAVEPOINT s; INSERT INTO t(rowid, x) VALUES (1, 'a'); RELEASE s"))
    #expect(changes.inserted == ids(group, "t", [1]))
  }

  @Test func replaceReportsTheRowsItDeletes() throws {
    let group = try makeGroup("""
      CREATE TABLE people(id INTEGER PRIMARY KEY, email TEXT UNIQUE);
      INSERT INTO people VALUES (1, 'a@x'), (2, 'b@x');
      """)
    // Row 3 takes b@x: REPLACE silently deletes row 2.
    let changes = try #require(try commit(group, "INSERT OR REPLACE INTO people VALUES (3, 'b@x')"))
    #expect(changes.inserted == ids(group, "people", [3]))
    #expect(changes.deleted == ids(group, "people", [2]))
    // Replacing a row by its own rowid is an update of that ID.
    let same = try #require(try commit(group, "REPLACE INTO people VALUES (1, 'c@x')"))
    #expect(same.updated == ids(group, "people", [1]))
  }

  @Test(arguments: hooks)
  func deleteWithoutWhereReportsEveryRow(forceUpdateHook: Bool) throws {
    let group = try makeGroup(forceUpdateHook: forceUpdateHook, """
      CREATE TABLE t(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
      INSERT INTO t(rowid, x) SELECT i, i FROM n;
      """)
    let changes = try #require(try commit(group, "DELETE FROM t"))
    #expect(changes.deleted == ids(group, "t", Array(1...100)))
  }

  @Test func withoutRowIDTablesAreInvalidatedAsAWhole() throws {
    let group = try makeGroup("""
      CREATE TABLE tags(name TEXT PRIMARY KEY, uses INT) WITHOUT ROWID; CREATE TABLE t(x);
      """)
    let changes = try #require(try commit(group, "INSERT INTO tags VALUES ('a', 1); INSERT INTO t(rowid, x) VALUES (0, 'zero')"))
    #expect(changes.invalidatedTables == [TableID(storeID: group.store.storeID, table: "tags")])
    #expect(changes.tables["tags"] == nil)
    // Rowid 0 of a rowid table stays a row.
    #expect(changes.inserted == ids(group, "t", [0]))
  }

  @Test func changedRowIDIsADeleteAndAnInsert() throws {
    let group = try makeGroup("CREATE TABLE t(x); INSERT INTO t(rowid, x) VALUES (1, 'a')")
    let changes = try #require(try commit(group, "UPDATE t SET rowid = 9 WHERE rowid = 1"))
    #expect(changes.deleted == ids(group, "t", [1]))
    #expect(changes.inserted == ids(group, "t", [9]))
  }

  @Test func manyTablesInOneTransaction() throws {
    let count = 60
    let schema = (0..<count).map { "CREATE TABLE t\($0)(x)" }.joined(separator: ";")
    let group = try makeGroup(schema)
    let changes = try #require(try commit(group, (0..<count).map { "INSERT INTO t\($0)(rowid, x) VALUES (\($0 + 1), 1)" }.joined(separator: ";")))
    #expect(changes.tables.count == count)
    for index in 0..<count { #expect(changes.tables[TableName("t\(index)")]?.inserted == [Int64(index + 1)]) }
  }

  @Test func tableNamesThatNeedPercentEncoding() throws {
    let group = try makeGroup(#"CREATE TABLE "order items/2024 ü%"(x)"#)
    let changes = try #require(try commit(group, #"INSERT INTO "order items/2024 ü%"(rowid, x) VALUES (4, 1)"#))
    let id = try #require(changes.inserted.first)
    #expect(id.uri.hasSuffix("/order%20items%2F2024%20%C3%BC%25/p4"))
    #expect(try ObjectID(uri: id.uri) == id)
  }

  @Test func tenThousandRowTransaction() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    let changes = try #require(try commit(group, """
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
      INSERT INTO t(rowid, x) SELECT i, i FROM n
      """))
    #expect(changes.tables["t"]?.inserted == Array(1...10_000))
    let decoded = try ChangeSetEncoding.decode(ChangeSetEncoding.encode(changes))
    #expect(decoded == changes)
  }

  @Test func internalAndTemporaryTablesAreNotReported() throws {
    let group = try makeGroup("CREATE TABLE t(x INTEGER PRIMARY KEY AUTOINCREMENT)")
    let changes = try #require(try commit(group, """
      CREATE TEMP TABLE scratch(y); INSERT INTO scratch VALUES (1);
      INSERT INTO t VALUES (NULL);
      """))
    #expect(Set(changes.tables.keys) == ["t"])  // no sqlite_sequence, groupsync_store or temp
  }

  @Test func aCommitInsideTheClosureIsRefused() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    let before = try group.store.currentSequence()
    #expect(throws: GroupSyncError.self) {
      try group.store.write { try $0.execute(sql: "INSERT INTO t VALUES (1); COMMIT") }
    }
    #expect(try group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 0)
    #expect(try group.store.currentSequence() == before)
    // The store still works afterwards.
    #expect(try commit(group, "INSERT INTO t VALUES (2)") != nil)
  }

  @Test func badSQLLeavesTheStoreUnchanged() throws {
    let group = try makeGroup("CREATE TABLE t(x)")
    let before = try group.store.currentSequence()
    #expect {
      try group.store.write { try $0.execute(sql: "INSERT INTO t VALUES (1); INSERT INTO nope VALUES (2)") }
    } throws: { error in
      (error as? DatabaseError)?.message?.contains("no such table: nope") == true
    }
    #expect(try group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 0)
    #expect(try group.store.currentSequence() == before)
  }

  @Test func storeIDIsCreatedOnceAndKept() throws {
    let folder = try TemporaryFolder()
    let first = try GroupFolder(path: folder.path).store.storeID
    let second = try GroupFolder(path: folder.path).store.storeID
    #expect(first == second)
  }
}
