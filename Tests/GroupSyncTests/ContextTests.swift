import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

private struct RankedNote: Codable, FetchableRecord, PersistableRecord, Equatable {
  static let databaseTableName = "note"
  var id: Int64?
  var body: String
  var rank: Int
}

/// Contexts in one process: identity, faults, merging, saving, policies.
@Suite(.serialized, .timed)
struct ContextTests {
  let folder: TemporaryFolder
  let group: GroupFolder

  init() throws {
    folder = try TemporaryFolder()
    group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT NOT NULL, rank INT NOT NULL DEFAULT 0)")
      for (index, body) in ["a", "b", "c"].enumerated() {
        try db.execute(sql: "INSERT INTO note(id, body, rank) VALUES (?, ?, ?)", arguments: [index + 1, body, index])
      }
    }
  }

  func id(_ rowID: Int64) -> ObjectID { ObjectID(storeID: group.store.storeID, table: "note", rowID: rowID) }

  /// Another writer of the store, in this process.
  func storeWrite(_ sql: String) throws -> ChangeSet {
    try group.store.writeAndReturnChangeSet { db in try db.execute(sql: sql) }.changeSet!
  }

  /// Another process writes (`groupsync exec`); its change set, read back
  /// from the history.
  func otherProcessWrites(_ sql: String) throws -> ChangeSet {
    let before = try group.store.currentSequence()
    let result = try CLI.run(["exec", group.path, sql])
    #expect(result.status == 0, "\(result.stderr)")
    return try #require(try group.store.history(after: before).first).changeSet.get()
  }

  @Test func oneObjectPerIDAndFaultsLoadOnFirstAccess() throws {
    let context = Context(group)
    #expect(context.registeredObject(for: id(1)) == nil)
    let fault = try context.object(with: id(1))
    #expect(fault.isFault)
    #expect(context.registeredObject(for: id(1)) === fault)
    #expect(try fault.value("body") == "a".databaseValue)
    #expect(!fault.isFault)
    #expect(try context.existingObject(with: id(1)) === fault)
    let fetched = try context.fetch(RankedNote.self, orderBy: [.ascending("id")])
    #expect(fetched.count == 3 && fetched[0] === fault)
    #expect(try fetched[1].decode(RankedNote.self) == RankedNote(id: 2, body: "b", rank: 1))
  }

  @Test func aFaultWhoseRowIsGoneSaysSo() throws {
    let context = Context(group)
    let fault = try context.object(with: id(99))
    #expect(throws: ContextError.objectGone(id(99))) { try fault.row() }
    #expect(fault.isGone)
    #expect(throws: ContextError.objectNotFound(id(98))) { try context.existingObject(with: id(98)) }
    let other = ObjectID(storeID: UUID(), table: "note", rowID: 1)
    #expect(throws: ContextError.foreignStore(other)) { try context.object(with: other) }
    #expect(throws: ContextError.self) { try context.fetch(FetchRequest(table: "nope")) }
    #expect(throws: ContextError.self) { try context.fetch(FetchRequest(table: "note", filter: "no_such_column = 1")) }
  }

  @Test func badRequestsAndEditsSayWhatIsWrong() throws {
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE keyed(k TEXT PRIMARY KEY, v) WITHOUT ROWID;
        CREATE TABLE odd(rowid, _rowid_, oid);
        CREATE VIEW v AS SELECT * FROM note;
        """)
    }
    let context = Context(group)
    for (table, reason) in [("keyed", "not a table with rowids"), ("v", "not a table with rowids"), ("odd", "every rowid alias")] {
      let error = try #require(throws: ContextError.self) { try context.fetch(FetchRequest(table: table)) }
      #expect("\(error)".contains(reason), "\(table): \(error)")
    }
    let object = try context.existingObject(with: id(1))
    context.delete(object)
    #expect(throws: ContextError.objectDeleted(id(1))) { try object.set("body", to: "x") }
    let stranger = ObjectID(storeID: group.store.storeID, table: "note", rowID: 77, isTemporary: true)
    #expect(throws: ContextError.unknownTemporaryID(stranger)) { try context.object(with: stranger) }
    #expect(try ObjectID(uri: stranger.uri) == stranger)
    #expect(stranger.uri.hasSuffix("/note/t77"))
    // A failing save writes nothing and keeps the changes pending.
    let bad = try context.insert(into: "note", values: ["body": nil])  // NOT NULL
    #expect(throws: DatabaseError.self) { try context.save() }
    #expect(context.hasChanges && bad.objectID.isTemporary)
    #expect(try storedRow(1) != nil, "the delete of the same save was rolled back")
  }

  /// Names with double quotes, spaces and Unicode are quoted, never pasted.
  @Test func oddTableAndColumnNamesWork() throws {
    try group.store.write { db in
      try db.execute(sql: #"CREATE TABLE "we""ird é"(id INTEGER PRIMARY KEY, "co""l" TEXT, "x y" INT)"#)
      try db.execute(sql: #"INSERT INTO "we""ird é"(id, "co""l", "x y") VALUES (1, 'b', 2), (2, 'a', 1)"#)
    }
    let table = #"we"ird é"#
    let context = Context(group)
    let controller = try ResultsController(
      context: context, request: FetchRequest(table: table, orderBy: [.ascending(#"co"l"#)]))
    #expect(controller.objectIDs.map(\.rowID) == [2, 1])
    let object = try controller.object(at: 0)
    try object.set(#"co"l"#, to: "z")
    let new = try context.insert(into: table, values: [#"co"l"#: "m", "x y": 3])
    try context.save()
    #expect(controller.objectIDs.map(\.rowID) == [1, new.objectID.rowID, 2])
    #expect(try new.value("x y") == 3.databaseValue)
  }

  @Test func anObjectOutlivesItsContextOnlyAsValues() throws {
    var context: Context? = Context(group)
    let loaded = try context!.existingObject(with: id(1))
    let fault = try context!.object(with: id(2))
    context = nil
    #expect(try loaded.value("body") == "a".databaseValue, "a loaded snapshot stays readable")
    #expect(throws: ContextError.contextReleased(id(2))) { try fault.row() }
    #expect(throws: ContextError.contextReleased(id(1))) { try loaded.set("body", to: "x") }
  }

  /// SQLite finds `NOTE` for a table declared `note`; change sets name it
  /// as declared, so the context registers objects under that spelling.
  @Test func aTableNamedInAnotherCaseIsTheSameTable() throws {
    let context = Context(group)
    let fetched = try context.fetch(FetchRequest(table: "NOTE", orderBy: [.ascending("id")]))
    #expect(fetched.first?.objectID == id(1))
    let upper = ObjectID(storeID: group.store.storeID, table: "Note", rowID: 2)
    #expect(try context.object(with: upper) === fetched[1])
    let controller = try ResultsController(context: context, request: FetchRequest(table: "nOtE", orderBy: [.descending("body")]))
    try context.merge(try storeWrite("UPDATE note SET body = 'z' WHERE id = 1"))
    #expect(try fetched[0].value("body") == "z".databaseValue)
    #expect(controller.objectIDs == [id(1), id(3), id(2)])
    let new = try context.insert(into: "NOTE", values: ["body": "new"])
    try context.save()
    #expect(new.objectID.table == "note")
  }

  @Test func mergeReReadsOnlyWhatChangedAndTellsObservers() throws {
    let context = Context(group)
    let objects = try context.fetch(RankedNote.self, orderBy: [.ascending("id")])
    var told: [ContextChanges] = []
    context.onChange { told.append($0) }
    let changeSet = try storeWrite("UPDATE note SET body = 'B' WHERE id = 2; DELETE FROM note WHERE id = 3; INSERT INTO note(id, body) VALUES (4, 'd')")
    let changes = try context.merge(changeSet)
    #expect(try objects[1].value("body") == "B".databaseValue)
    #expect(objects[2].isGone)
    #expect(context.registeredObject(for: id(3)) == nil)
    #expect(context.registeredObject(for: id(4)) == nil, "inserted rows are registered only when asked for")
    #expect(changes.updated == [id(2)] && changes.deleted == [id(3)] && changes.inserted == [id(4)])
    #expect(told == [changes])
    #expect(throws: ContextError.objectGone(id(3))) { try objects[2].row() }
  }

  @Test func anInvalidatedTableRefreshesItsObjects() throws {
    let context = Context(group)
    let object = try context.existingObject(with: id(1))
    try group.store.write { db in try db.execute(sql: "UPDATE note SET body = 'changed' WHERE id = 1") }
    let changeSet = ChangeSet(
      storeID: group.store.storeID, sequence: 1000, committedAtNanoseconds: 0, writerProcessID: 0,
      tables: [:], invalidatedTableNames: ["note"])
    let changes = try context.merge(changeSet)
    #expect(changes.refreshed == [id(1)])
    #expect(try object.value("body") == "changed".databaseValue)
    let reset = try context.merge(ListenerEvent.reset(Reset(reason: "test", sequence: 5)))
    #expect(reset.isReset && reset.refreshed == [id(1)])
  }

  @Test func saveWritesInsertsUpdatesAndDeletesAsOneChangeSet() throws {
    let context = Context(group)
    let first = try context.existingObject(with: id(1))
    try first.set("body", to: "edited")
    #expect(context.hasChanges && first.hasChanges)
    let second = try context.existingObject(with: id(2))
    context.delete(second)
    let new = try context.insert(RankedNote(id: nil, body: "new", rank: 9))
    #expect(new.objectID.isTemporary)
    #expect(context.registeredObject(for: new.objectID) === new)
    let temporaryID = new.objectID
    let changeSet = try #require(try context.save())
    #expect(!context.hasChanges)
    #expect(!new.objectID.isTemporary)
    #expect(context.registeredObject(for: temporaryID) == nil)
    #expect(context.registeredObject(for: new.objectID) === new)
    #expect(changeSet.updated == [id(1)] && changeSet.deleted == [id(2)] && changeSet.inserted == [new.objectID])
    #expect(try new.decode(RankedNote.self) == RankedNote(id: new.objectID.rowID, body: "new", rank: 9))
    let stored = try group.store.read { db in try RankedNote.fetchAll(db, sql: "SELECT * FROM note ORDER BY id") }
    #expect(stored.map(\.body) == ["edited", "c", "new"])
    #expect(try context.save() == nil, "nothing left to save")
  }

  @Test func rollbackDiscardsEveryPendingChange() throws {
    let context = Context(group)
    let first = try context.existingObject(with: id(1))
    try first.set("body", to: "edited")
    context.delete(try context.existingObject(with: id(2)))
    let new = try context.insert(into: "note", values: ["body": "x"])
    context.rollback()
    #expect(!context.hasChanges)
    #expect(try first.value("body") == "a".databaseValue)
    #expect(new.isGone)
    #expect(try context.save() == nil)
  }

  @Test func pendingEditsStayOnTopOfAMergedSnapshot() throws {
    let context = Context(group)
    let object = try context.existingObject(with: id(1))
    try object.set("body", to: "mine")
    let changeSet = try storeWrite("UPDATE note SET rank = 42 WHERE id = 1")
    try context.merge(changeSet)
    #expect(try object.value("body") == "mine".databaseValue)
    #expect(try object.value("rank") == 42.databaseValue)
    #expect(object.snapshot?["body"] == "a", "the snapshot is the store's row")
    try context.save()  // based on the merged snapshot: no conflict
    let row = try group.store.read { db in try Row.fetchOne(db, sql: "SELECT body, rank FROM note WHERE id = 1")! }
    #expect(row["body"] == "mine" && row["rank"] == 42)
  }

  /// A conflict: the store changed `rank` and `body` of row 1 after the
  /// context read it; the context set `body`.
  func conflict(_ policy: MergePolicy) throws -> (Context, ManagedObject) {
    let context = Context(group, mergePolicy: policy)
    let object = try context.existingObject(with: id(1))
    try object.set("body", to: "mine")
    _ = try otherProcessWrites("UPDATE note SET body = 'theirs', rank = 7 WHERE id = 1")
    return (context, object)
  }

  func storedRow(_ rowID: Int64) throws -> Row? {
    try group.store.read { db in try Row.fetchOne(db, sql: "SELECT body, rank FROM note WHERE id = ?", arguments: [rowID]) }
  }

  @Test func policyErrorWritesNothingAndListsTheConflict() throws {
    let (context, object) = try conflict(.error)
    let other = try context.existingObject(with: id(2))
    try other.set("body", to: "fine")
    let error = try #require(throws: MergeConflictError.self) { try context.save() }
    #expect(error.conflicts.count == 1)
    let conflict = try #require(error.conflicts.first)
    #expect(conflict.objectID == id(1))
    #expect(conflict.snapshot["body"] == "a".databaseValue)
    #expect(conflict.stored?["body"] == "theirs".databaseValue)
    #expect(conflict.pending == ["body": "mine".databaseValue])
    #expect("\(error)".contains("theirs"))
    #expect(try storedRow(2)?["body"] == "b", "nothing was written")
    #expect(context.hasChanges && object.hasChanges, "the changes stay pending")
  }

  @Test func policyStoreTrumpKeepsTheStoresColumns() throws {
    let (context, object) = try conflict(.storeTrump)
    try object.set("rank", to: 100)  // a column... the store changed too: its value wins
    let other = try context.existingObject(with: id(2))
    try other.set("body", to: "fine")
    try context.save()
    #expect(try storedRow(1)?["body"] == "theirs")
    #expect(try storedRow(1)?["rank"] == 7)
    #expect(try storedRow(2)?["body"] == "fine")
    #expect(try object.value("body") == "theirs".databaseValue)
  }

  @Test func policyStoreTrumpWritesColumnsTheStoreLeftAlone() throws {
    let context = Context(group, mergePolicy: .storeTrump)
    let object = try context.existingObject(with: id(1))
    try object.set("body", to: "mine")
    _ = try storeWrite("UPDATE note SET rank = 7 WHERE id = 1")
    try context.save()
    #expect(try storedRow(1)?["body"] == "mine")
    #expect(try storedRow(1)?["rank"] == 7)
  }

  @Test func policyObjectTrumpWritesTheEditedColumnsOnly() throws {
    let (context, _) = try conflict(.objectTrump)
    try context.save()
    #expect(try storedRow(1)?["body"] == "mine")
    #expect(try storedRow(1)?["rank"] == 7, "a column the context did not edit keeps the store's value")
  }

  @Test func policyOverwriteWritesTheWholeObject() throws {
    let (context, _) = try conflict(.overwrite)
    try context.save()
    #expect(try storedRow(1)?["body"] == "mine")
    #expect(try storedRow(1)?["rank"] == 0, "the object's own rank, as the context read it")
  }

  @Test func policyRollbackDiscardsTheConflictingChanges() throws {
    let (context, object) = try conflict(.rollback)
    let other = try context.existingObject(with: id(2))
    try other.set("body", to: "fine")
    try context.save()
    #expect(try storedRow(1)?["body"] == "theirs")
    #expect(try storedRow(2)?["body"] == "fine", "objects without conflict are saved")
    #expect(!object.hasChanges)
    #expect(try object.value("body") == "theirs".databaseValue)
  }

  @Test(arguments: [MergePolicy.error, .storeTrump, .objectTrump, .overwrite, .rollback])
  func aRowDeletedUnderAPendingEdit(_ policy: MergePolicy) throws {
    let context = Context(group, mergePolicy: policy)
    let object = try context.existingObject(with: id(1))
    try object.set("body", to: "mine")
    let deletion = try otherProcessWrites("DELETE FROM note WHERE id = 1")
    try context.merge(deletion)
    #expect(object.isGone && object.hasChanges)
    switch policy {
    case .error:
      let error = try #require(throws: MergeConflictError.self) { try context.save() }
      #expect(error.conflicts.first?.stored == nil)
    case .storeTrump, .rollback:
      try context.save()
      #expect(try storedRow(1) == nil)
      #expect(object.isGone && !object.hasChanges)
    case .objectTrump, .overwrite:
      try context.save()
      #expect(try storedRow(1)?["body"] == "mine", "inserted again with the object's values")
      #expect(context.registeredObject(for: id(1)) === object && !object.isGone)
    }
  }

  @Test func aDeleteOfARowChangedInTheStore() throws {
    for policy in [MergePolicy.error, .storeTrump, .objectTrump, .rollback] {
      try group.store.write { db in try db.execute(sql: "INSERT OR REPLACE INTO note(id, body, rank) VALUES (1, 'a', 0)") }
      let context = Context(group, mergePolicy: policy)
      let object = try context.existingObject(with: id(1))
      context.delete(object)
      _ = try otherProcessWrites("UPDATE note SET body = 'theirs' WHERE id = 1")
      if policy == .error {
        #expect(throws: MergeConflictError.self) { try context.save() }
        #expect(try storedRow(1) != nil)
      } else {
        try context.save()
        #expect((try storedRow(1) == nil) == (policy == .objectTrump), "\(policy)")
      }
    }
  }

  @Test func twoContextsMergeEachOthersSavesWithoutAFile() async throws {
    let listener = try group.listen(as: "contexts", options: ListenerFixture.options)
    defer { listener.close() }
    let a = Context(group)
    let b = Context(group)
    let inB = try b.existingObject(with: id(1))
    let inA = try a.existingObject(with: id(1))
    try inA.set("body", to: "from a")
    let saved = try #require(try a.save())
    var events = listener.events.makeAsyncIterator()
    let event = try #require(await events.next())
    #expect(event == .changes(saved))
    try b.merge(event)
    try a.merge(event)  // its own save: nothing to do
    #expect(try inB.value("body") == "from a".databaseValue)
    let inbox = try FileManager.default.contentsOfDirectory(atPath: group.path + "/listeners/contexts/inbox")
    #expect(inbox.isEmpty, "no file was written for a change set of this process")
  }

  @Test func aContextIsFedByAListener() async throws {
    let listener = try group.listen(options: ListenerFixture.options)
    let context = Context(group)
    let object = try context.existingObject(with: id(1))
    var told: [ContextChanges] = []
    context.onChange { changes in
      told.append(changes)
      listener.close()  // ends merge(from:) once the change is in
    }
    let store = group.store
    Task.detached { try store.write { db in try db.execute(sql: "UPDATE note SET body = 'fed' WHERE id = 1") } }
    try await context.merge(from: listener)
    #expect(told.map(\.updated) == [[id(1)]])
    #expect(try object.value("body") == "fed".databaseValue)
  }
}
