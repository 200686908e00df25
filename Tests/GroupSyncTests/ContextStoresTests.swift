import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// A row of the cache store's `Item` table (the main store's `item` has
/// other columns).
private struct CacheItem: Codable, FetchableRecord, PersistableRecord, Equatable {
  static let databaseTableName = "item"
  var id: Int64?
  var title: String
  var score: Int
}

/// Contexts over every store of a group, as Core Data's one coordinator
/// over several stores: lookup and fetches by store, merges routed by
/// store, a read-only seed store replaced underneath, saves per store.
@Suite(.serialized, .timed)
struct ContextStoresTests {
  let folder: TemporaryFolder
  let group: GroupFolder
  /// A writable store whose table `Item` shares its name with the main
  /// store's `item`, with other columns (one named like a rowid alias).
  let cache: Store
  /// A read-only store installed from a file.
  let seed: Store

  init() throws {
    folder = try TemporaryFolder()
    group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        INSERT INTO item(id, name) VALUES (1, 'm1'), (2, 'm2');
        CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT NOT NULL, template TEXT);
        INSERT INTO note(id, body) VALUES (1, 'n1');
        """)
    }
    cache = try group.store(named: "cache", create: true)
    try cache.write { db in
      try db.execute(sql: """
        CREATE TABLE Item(id INTEGER PRIMARY KEY, title TEXT NOT NULL, score INT NOT NULL DEFAULT 0, _rowid_ TEXT);
        INSERT INTO Item(id, title, score) VALUES (1, 'c1', 5), (2, 'c2', 7);
        """)
    }
    try Self.makeSeed(folder.child("seed-v1.db"), templates: [1: "soup", 2: "stew", 3: "salad"], extra: true)
    seed = try group.installReadOnlyStore(named: "seed", from: folder.child("seed-v1.db"))
  }

  /// A seed database made with GRDB, as an application ships one.
  static func makeSeed(_ path: String, templates: [Int64: String], extra: Bool) throws {
    try? FileManager.default.removeItem(atPath: path)
    let queue = try DatabaseQueue(path: path)
    try queue.write { db in
      try db.execute(sql: "CREATE TABLE template(id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
      for (id, name) in templates {
        try db.execute(sql: "INSERT INTO template(id, name) VALUES (?, ?)", arguments: [id, name])
      }
      if extra { try db.execute(sql: "CREATE TABLE extra(id INTEGER PRIMARY KEY, v); INSERT INTO extra VALUES (1, 'x')") }
    }
    try queue.close()
  }

  func mainID(_ rowID: Int64, _ table: String = "item") -> ObjectID {
    ObjectID(storeID: group.store.storeID, table: table, rowID: rowID)
  }
  func cacheID(_ rowID: Int64) -> ObjectID { ObjectID(storeID: cache.storeID, table: "Item", rowID: rowID) }
  func seedID(_ rowID: Int64, _ table: String = "template") -> ObjectID {
    ObjectID(storeID: seed.storeID, table: table, rowID: rowID)
  }

  func noteBody(_ rowID: Int64) throws -> String? {
    try group.store.read { db in try String.fetchOne(db, sql: "SELECT body FROM note WHERE id = ?", arguments: [rowID]) }
  }
  func cacheTitle(_ rowID: Int64) throws -> String? {
    try cache.read { db in try String.fetchOne(db, sql: "SELECT title FROM Item WHERE id = ?", arguments: [rowID]) }
  }

  @Test func fetchesAndLookupsReachEveryStore() throws {
    let context = Context(group)
    let mainItems = try context.fetch(FetchRequest(table: "item", orderBy: [.ascending("id")]))
    let cacheItems = try context.fetch(FetchRequest(table: "item", store: "cache", orderBy: [.ascending("id")]))
    #expect(mainItems.map(\.objectID) == [mainID(1), mainID(2)])
    #expect(cacheItems.map(\.objectID) == [cacheID(1), cacheID(2)], "registered under the cache's spelling")
    #expect(mainItems[0] !== cacheItems[0], "one object per store, table and rowid")
    #expect(try mainItems[0].value("name") == "m1".databaseValue)
    #expect(try cacheItems[0].decode(CacheItem.self) == CacheItem(id: 1, title: "c1", score: 5))
    #expect(context.registeredObject(for: cacheID(2)) === cacheItems[1])
    #expect(context.registeredObject(for: mainID(2)) === mainItems[1])
    #expect(try context.existingObject(with: cacheID(1)) === cacheItems[0])
    #expect(try context.object(with: ObjectID(storeID: cache.storeID, table: "ITEM", rowID: 2)) === cacheItems[1])

    let fault = try context.object(with: seedID(2))
    #expect(fault.isFault)
    #expect(try fault.value("name") == "stew".databaseValue)
    #expect(try context.fetch(CacheItem.self, store: "cache", where: "score > ?", arguments: [6]).map(\.objectID) == [cacheID(2)])
    #expect(try context.fetch(CacheItem.self).map(\.objectID) == [mainID(1), mainID(2)], "the main store by default")
    #expect(throws: ContextError.self, "main's item has no score") {
      try context.fetch(FetchRequest(table: "item", filter: "score > 0"))
    }
    #expect(context.registeredCount == 5)
    #expect(Set(context.registeredObjects.map(\.objectID.storeID)) == [group.store.storeID, cache.storeID, seed.storeID])

    // Inserts carry their store's UUID; a save writes each store once.
    let cacheList = try ResultsController(
      context: context, request: FetchRequest(table: "item", store: "cache", orderBy: [.descending("score")]))
    let mainList = try ResultsController(context: context, request: FetchRequest(table: "item", orderBy: [.ascending("name")]))
    var listChanges: [String] = []
    cacheList.onChange { _ in listChanges.append("cache") }
    mainList.onChange { _ in listChanges.append("main") }
    var told: [ContextChanges] = []
    context.onChange { told.append($0) }
    let byName = try context.insert(into: "item", store: "cache", values: ["title": "c3", "score": 9])
    let byRecord = try context.insert(CacheItem(id: nil, title: "c4", score: 1), store: "cache")
    let inMain = try context.insert(into: "item", values: ["name": "m3"])
    #expect(byName.objectID.isTemporary && byName.objectID.storeID == cache.storeID)
    #expect(byRecord.objectID.storeID == cache.storeID && inMain.objectID.storeID == group.store.storeID)
    #expect(context.registeredObject(for: byRecord.objectID) === byRecord)
    let stray = ObjectID(storeID: group.store.storeID, table: "item", rowID: byRecord.objectID.rowID, isTemporary: true)
    #expect(context.registeredObject(for: stray) == nil, "a temporary number belongs to its store")
    let changeSets = try context.saveAndReturnChangeSets()
    #expect(changeSets.map(\.storeID) == [group.store.storeID, cache.storeID], "the main store first")
    #expect(changeSets[1].inserted == [byName.objectID, byRecord.objectID])
    #expect(byName.objectID.table == "Item" && !byName.objectID.isTemporary)
    #expect(try cacheTitle(byRecord.objectID.rowID) == "c4")
    #expect(told.map(\.storeID) == [group.store.storeID, cache.storeID], "one notification per store written")
    #expect(listChanges.sorted() == ["cache", "main"])
    #expect(cacheList.objectIDs == [byName.objectID, cacheID(2), cacheID(1), byRecord.objectID])
    #expect(mainList.objectIDs == [mainID(1), mainID(2), inMain.objectID])
  }

  @Test func mergesRouteByStoreAndSequencesArePerStore() throws {
    let context = Context(group)
    let inMain = try context.existingObject(with: mainID(1))
    let inCache = try context.existingObject(with: cacheID(1))
    let mainList = try ResultsController(context: context, request: FetchRequest(table: "item", orderBy: [.ascending("id")]))
    let cacheList = try ResultsController(
      context: context, request: FetchRequest(table: "item", store: "cache", orderBy: [.descending("score")]))
    var mainChanges: [ResultsChange] = []
    var cacheChanges: [ResultsChange] = []
    mainList.onChange { mainChanges.append($0) }
    cacheList.onChange { cacheChanges.append($0) }
    #expect(cacheList.objectIDs == [cacheID(2), cacheID(1)])

    let cacheWrite = try #require(
      try cache.writeAndReturnChangeSet { db in try db.execute(sql: "UPDATE Item SET title = 'C1', score = 9 WHERE id = 1") }
        .changeSet)
    let changes = try context.merge(cacheWrite)
    #expect(changes.storeID == cache.storeID && changes.updated == [cacheID(1)])
    #expect(try inCache.value("title") == "C1".databaseValue)
    #expect(try inMain.value("name") == "m1".databaseValue)
    #expect(cacheList.objectIDs == [cacheID(1), cacheID(2)])
    #expect(mainChanges.isEmpty && cacheChanges.count == 1)

    let mainDelete = try #require(
      try group.store.writeAndReturnChangeSet { db in try db.execute(sql: "DELETE FROM item WHERE id = 1") }.changeSet)
    try context.merge(mainDelete)
    #expect(inMain.isGone && !inCache.isGone, "rowid 1 of the cache store is another row")
    #expect(context.registeredObject(for: cacheID(1)) === inCache)
    #expect(mainList.objectIDs == [mainID(2)] && cacheChanges.count == 1)

    // The context's save in the cache store and the main store's next
    // change set have the same sequence number: only the first is its own.
    try inCache.set("title", to: "mine")
    let saved = try #require(try context.save())
    #expect(saved.storeID == cache.storeID)
    try #require(try group.store.currentSequence() < saved.sequence)
    while try group.store.currentSequence() < saved.sequence - 1 {
      try group.store.write { db in try db.execute(sql: "UPDATE note SET body = body WHERE id = 1") }
    }
    let sameNumber = try #require(
      try group.store.writeAndReturnChangeSet { db in try db.execute(sql: "UPDATE item SET name = 'M2' WHERE id = 2") }
        .changeSet)
    #expect(sameNumber.sequence == saved.sequence)
    let merged = try context.merge(sameNumber)
    #expect(merged.updated == [mainID(2)], "not taken for the context's own save")
    #expect(try mainList.object(at: 0).value("name") == "M2".databaseValue)
    #expect(try context.merge(saved).isEmpty, "its own save, come back through a listener")
  }

  @Test func aReplacedSeedStoreIsOneResetThatReReadsOnlyItsObjects() async throws {
    let listener = try group.listen(options: ListenerFixture.options)
    defer { listener.close() }
    let context = Context(group)
    let note = try context.existingObject(with: mainID(1, "note"))
    let mainItems = try context.fetch(FetchRequest(table: "item"))
    let templates = try context.fetch(FetchRequest(table: "template", store: "seed", orderBy: [.ascending("id")]))
    #expect(templates.map(\.objectID) == [seedID(1), seedID(2), seedID(3)])
    let seedList = try ResultsController(
      context: context, request: FetchRequest(table: "template", store: "seed", orderBy: [.ascending("name")]))
    let mainList = try ResultsController(context: context, request: FetchRequest(table: "item", orderBy: [.ascending("id")]))
    var seedListChanges: [ResultsChange] = []
    var mainListChanges: [ResultsChange] = []
    seedList.onChange { seedListChanges.append($0) }
    mainList.onChange { mainListChanges.append($0) }

    try Self.makeSeed(folder.child("seed-v2.db"), templates: [1: "SOUP", 3: "salad", 4: "pie"], extra: false)
    try group.installReadOnlyStore(named: "seed", from: folder.child("seed-v2.db"))

    let event = try #require(await ListenerHarness.next(listener), "the listener's rescan notices the new file")
    guard case .reset(let reset) = event else {
      Issue.record("expected the seed store's reset, got \(event)")
      return
    }
    #expect(reset.store == "seed" && reset.storeID == seed.storeID)
    let changes = try context.merge(event)
    #expect(changes.isReset && changes.storeID == seed.storeID)
    #expect(changes.refreshed == Set(templates.map(\.objectID)))
    #expect(!changes.refreshed.contains { $0.storeID == group.store.storeID }, "no object of the main store was refreshed")
    #expect(try templates[0].value("name") == "SOUP".databaseValue, "read from the new file")
    #expect(templates[1].isGone && context.registeredObject(for: seedID(2)) == nil, "its row is not in the new file")
    #expect(throws: ContextError.objectNotFound(seedID(2))) { try context.existingObject(with: seedID(2)) }
    #expect(try context.existingObject(with: seedID(4)).value("name") == "pie".databaseValue)
    #expect(seedList.objectIDs == [seedID(1), seedID(4), seedID(3)])
    #expect(seedListChanges.count == 1 && mainListChanges.isEmpty)
    #expect(try note.value("body") == "n1".databaseValue && mainItems.allSatisfy { !$0.isGone })

    // Exactly one reset: the next event is the main store's next change set.
    try await group.store.write { db in try db.execute(sql: "UPDATE note SET body = 'after' WHERE id = 1") }
    let next = try #require(await ListenerHarness.next(listener))
    guard case .changes(let changeSet) = next else {
      Issue.record("a second reset: \(next)")
      return
    }
    #expect(changeSet.storeID == group.store.storeID)
    try context.merge(next)
    #expect(try note.value("body") == "after".databaseValue)
    #expect(await ListenerHarness.next(listener, timeout: .milliseconds(700)) == nil, "no second reset")
  }

  @Test func changesToAReadOnlyStoreAreRefusedBeforeAnythingIsWritten() throws {
    let context = Context(group)
    let note = try context.existingObject(with: mainID(1, "note"))
    try note.set("body", to: "edited")
    let item = try context.existingObject(with: cacheID(1))
    try item.set("title", to: "edited")
    let template = try context.existingObject(with: seedID(1))
    try template.set("name", to: "edited")
    let (mainBefore, cacheBefore) = (try group.store.currentSequence(), try cache.currentSequence())
    #expect(throws: GroupSyncError.readOnlyStore("seed")) { try context.save() }
    #expect(try group.store.currentSequence() == mainBefore && cache.currentSequence() == cacheBefore)
    #expect(try noteBody(1) == "n1" && cacheTitle(1) == "c1", "no store was written")
    #expect(context.hasChanges && note.hasChanges && item.hasChanges && template.hasChanges)

    try context.refresh(template, mergeChanges: false)
    context.delete(template)
    #expect(throws: GroupSyncError.readOnlyStore("seed")) { try context.save() }
    #expect(try noteBody(1) == "n1")
    #expect(throws: GroupSyncError.readOnlyStore("seed"), "an insert is refused at once") {
      try context.insert(into: "template", store: "seed", values: ["name": "pie"])
    }

    try context.refresh(template, mergeChanges: false)
    let changeSets = try context.saveAndReturnChangeSets()
    #expect(changeSets.map(\.storeID) == [group.store.storeID, cache.storeID])
    #expect(try noteBody(1) == "edited" && cacheTitle(1) == "edited")
    #expect(try seed.read { db in try String.fetchOne(db, sql: "SELECT name FROM template WHERE id = 1") } == "soup")
  }

  @Test func unknownStoresSayWhatIsWrong() throws {
    let context = Context(group)
    let stranger = ObjectID(storeID: UUID(), table: "item", rowID: 1)
    let error = try #require(throws: ContextError.self) { try context.existingObject(with: stranger) }
    #expect(error == .foreignStore(stranger))
    #expect("\(error)".contains("the group has no store with UUID \(stranger.storeID.uuidString)"), "\(error)")
    #expect(throws: ContextError.foreignStore(stranger)) { try context.object(with: stranger) }
    #expect(context.registeredObject(for: stranger) == nil)
    let temporary = ObjectID(storeID: UUID(), table: "item", rowID: 1, isTemporary: true)
    #expect(throws: ContextError.foreignStore(temporary)) { try context.object(with: temporary) }

    #expect(throws: GroupSyncError.unknownStore("nope")) { try context.fetch(FetchRequest(table: "item", store: "nope")) }
    #expect(throws: GroupSyncError.unknownStore("nope")) { try context.fetch(CacheItem.self, store: "nope") }
    #expect(throws: GroupSyncError.unknownStore("nope")) {
      try ResultsController(context: context, request: FetchRequest(table: "item", store: "nope"))
    }
    #expect(throws: GroupSyncError.unknownStore("nope")) { try context.insert(into: "item", store: "nope") }
    #expect(throws: GroupSyncError.invalidStoreName("Bad Name")) {
      try context.fetch(FetchRequest(table: "item", store: "Bad Name"))
    }
    let missing = try #require(throws: ContextError.self) { try context.fetch(FetchRequest(table: "note", store: "cache")) }
    #expect("\(missing)".contains("the store 'cache' has no table 'note'"), "\(missing)")

    let foreign = ChangeSet(
      storeID: UUID(), sequence: 1, committedAtNanoseconds: 0, writerProcessID: 0,
      tables: ["item": TableChanges(updated: [1])], invalidatedTableNames: [])
    _ = try context.existingObject(with: mainID(1))
    #expect(try context.merge(foreign).isEmpty, "a change set of a store the group does not have changes nothing")
  }

  /// Stores share no relationships: a row of the main store keeps a seed
  /// row's URI and resolves it.
  @Test func aRowRefersToARowOfAnotherStoreByItsURI() throws {
    let context = Context(group)
    let soup = seedID(1)
    let note = try context.insert(into: "note", values: ["body": "tonight", "template": soup.uri])
    try context.save()

    let reader = Context(group)
    let stored = try reader.existingObject(with: note.objectID)
    let uri: String = try stored.row()["template"]
    let template = try reader.existingObject(with: try ObjectID(uri: uri))
    #expect(template.objectID == soup && template.objectID.storeID == seed.storeID)
    #expect(try template.value("name") == "soup".databaseValue)
    #expect(reader.registeredObject(for: soup) === template)
    let dangling = seedID(99)
    #expect(throws: ContextError.objectNotFound(dangling)) { try reader.existingObject(with: try ObjectID(uri: dangling.uri)) }
  }

  @Test func aSaveFailingInALaterStoreKeepsThatStoresChangesPending() throws {
    let context = Context(group)
    let note = try context.existingObject(with: mainID(1, "note"))
    try note.set("body", to: "saved")
    let bad = try context.insert(into: "item", store: "cache", values: ["title": nil])  // NOT NULL
    let cacheBefore = try cache.currentSequence()
    let error = try #require(throws: PartialSaveError.self) { try context.save() }
    #expect(error.savedStores == ["main"] && error.failedStore == "cache" && error.pendingStores == ["cache"])
    #expect(error.changeSets.map(\.storeID) == [group.store.storeID])
    #expect(error.underlying is DatabaseError)
    #expect("\(error)".contains("committed in store(s) 'main'") && "\(error)".contains("stay pending"), "\(error)")
    #expect(try noteBody(1) == "saved", "the main store committed")
    #expect(!note.hasChanges && context.hasChanges && bad.objectID.isTemporary)
    #expect(try cache.currentSequence() == cacheBefore)

    try bad.set("title", to: "fixed")
    let retried = try context.saveAndReturnChangeSets()
    #expect(retried.map(\.storeID) == [cache.storeID], "only what stayed pending")
    #expect(!bad.objectID.isTemporary && bad.objectID.storeID == cache.storeID)
    #expect(try cacheTitle(bad.objectID.rowID) == "fixed")
  }

  @Test func aSaveFailingInTheFirstStoreWritesNothing() throws {
    let context = Context(group)
    _ = try context.insert(into: "note", values: ["body": nil])  // NOT NULL
    let item = try context.existingObject(with: cacheID(1))
    try item.set("title", to: "not written")
    let (mainBefore, cacheBefore) = (try group.store.currentSequence(), try cache.currentSequence())
    #expect(throws: DatabaseError.self) { try context.save() }
    #expect(try group.store.currentSequence() == mainBefore && cache.currentSequence() == cacheBefore)
    #expect(try cacheTitle(1) == "c1" && item.hasChanges)
  }

  /// Another process changes the cache's row under an edit: under
  /// `.error`, the conflict fails the save before the main store is
  /// written.
  @Test func aConflictInAnyStoreFailsTheSaveBeforeAnyStoreIsWritten() throws {
    let context = Context(group)
    let note = try context.existingObject(with: mainID(1, "note"))
    try note.set("body", to: "mine")
    let item = try context.existingObject(with: cacheID(1))
    try item.set("title", to: "mine")
    let result = try CLI.run(["exec", group.path, "--store", "cache", "UPDATE Item SET title = 'theirs' WHERE id = 1"])
    try #require(result.status == 0, "\(result.stderr)")
    let mainBefore = try group.store.currentSequence()
    let error = try #require(throws: MergeConflictError.self) { try context.save() }
    #expect(error.conflicts.map(\.objectID) == [cacheID(1)])
    #expect(try group.store.currentSequence() == mainBefore && noteBody(1) == "n1", "the main store was not written")
    #expect(note.hasChanges && item.hasChanges)

    context.mergePolicy = .objectTrump
    let changeSets = try context.saveAndReturnChangeSets()
    #expect(changeSets.map(\.storeID) == [group.store.storeID, cache.storeID])
    #expect(try noteBody(1) == "mine" && cacheTitle(1) == "mine")
  }

  @Test func aResetOfTheGroupRefreshesEveryStoreAndASeedWithoutATableLeavesItsObjectsGone() throws {
    let context = Context(group)
    _ = try context.existingObject(with: mainID(1))
    _ = try context.existingObject(with: cacheID(1))
    let extra = try context.existingObject(with: seedID(1, "extra"))
    let everything = try context.merge(ListenerEvent.reset(Reset(reason: "test", sequence: 0)))
    #expect(everything.isReset && everything.storeID == nil)
    #expect(everything.refreshed == [mainID(1), cacheID(1), seedID(1, "extra")])

    try Self.makeSeed(folder.child("seed-v2.db"), templates: [1: "soup"], extra: false)
    try group.installReadOnlyStore(named: "seed", from: folder.child("seed-v2.db"))
    let reset = Reset(reason: "replaced", sequence: 0, store: "seed", storeID: seed.storeID)
    let changes = try context.merge(ListenerEvent.reset(reset))
    #expect(changes.refreshed == [seedID(1, "extra")] && changes.storeID == seed.storeID)
    #expect(extra.isGone, "the new file has no such table")
    #expect(throws: ContextError.self) { try context.existingObject(with: seedID(1, "extra")) }
  }

  @Test func aControllerWhoseTableVanishesIsEmptiedAndMergesGoOn() throws {
    let context = Context(group)
    let controller = try ResultsController(context: context, request: FetchRequest(table: "extra", store: "seed"))
    var reported: [ResultsChange] = []
    controller.onChange { reported.append($0) }
    #expect(controller.count == 1 && controller.error == nil)

    // The seed file replaced by one without the table.
    try Self.makeSeed(folder.child("seed-v2.db"), templates: [1: "soup"], extra: false)
    try group.installReadOnlyStore(named: "seed", from: folder.child("seed-v2.db"))
    let reset = ListenerEvent.reset(Reset(reason: "replaced", sequence: 0, store: "seed", storeID: seed.storeID))
    try context.merge(reset)
    #expect(controller.count == 0)
    #expect(controller.error != nil)
    #expect(reported.last?.difference.removals.count == 1, "the row's removal is reported")

    // Merges go on: another store's change set, then the table back.
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "UPDATE item SET name = 'x' WHERE id = 1")
    }
    try context.merge(try #require(changeSet))
    try group.installReadOnlyStore(named: "seed", from: folder.child("seed-v1.db"))
    try context.merge(reset)
    #expect(controller.count == 1 && controller.error == nil)
    #expect(controller.objectIDs == [seedID(1, "extra")])
  }
}
