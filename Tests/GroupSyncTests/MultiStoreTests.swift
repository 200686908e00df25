import Foundation
import GRDB
@testable import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Several stores in one group: a main store, other writable stores and a
/// read-only seed store, each with its own UUID, history and sequence;
/// listeners deliver each store's change sets in its own order, and a
/// replaced seed store is a reset of that store alone.
@Suite(.serialized, .timed)
struct MultiStoreTests {
  static let schema = ListenerFixture.schema

  /// An SQLite file with `titles` in table `recipe` (in WAL mode, as a live
  /// database would be), and a `category` table they refer to.
  static func makeSeed(_ path: String, titles: [String]) throws {
    try? FileManager.default.removeItem(atPath: path)
    let queue = try DatabaseQueue(path: path)
    try queue.writeWithoutTransaction { db in
      _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
      try db.execute(sql: """
        CREATE TABLE category(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE recipe(id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE,
          category INTEGER REFERENCES category(id));
        CREATE INDEX recipe_category ON recipe(category);
        INSERT INTO category(name) VALUES ('soups');
        """)
      for title in titles {
        try db.execute(sql: "INSERT INTO recipe(title, category) VALUES (?, 1)", arguments: [title])
      }
    }
    try queue.close()
  }

  static func titles(_ store: Store) throws -> [String] {
    try store.read { db in try String.fetchAll(db, sql: "SELECT title FROM recipe ORDER BY id") }
  }

  static func fileBytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

  // MARK: Stores

  @Test func storesHaveNamesUUIDsAndSequencesOfTheirOwn() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let app = try group.store(named: "app", create: true)
    for store in [group.store, app] { try store.write { try $0.execute(sql: Self.schema) } }
    try group.store.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('a')") }
    let (_, appChange) = try app.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO items(body) VALUES ('b')") }

    #expect(group.store.name == "main" && app.name == "app")
    #expect(group.store.storeID != app.storeID)
    #expect(try group.store.currentSequence() == 2)
    #expect(try app.currentSequence() == 2)
    #expect(appChange?.storeID == app.storeID)
    #expect(try group.allStores().map(\.name) == ["main", "app"])
    #expect(try group.store(named: "main") === group.store)
    #expect(try group.store(named: "app") === app)
    #expect(try group.store(withID: app.storeID) === app)
    #expect(try group.store(for: ObjectID(storeID: app.storeID, table: "items", rowID: 1)) === app)
    #expect(FileManager.default.fileExists(atPath: folder.child("group/stores/app.sqlite")))

    // A second process (another GroupFolder) finds the store by its file.
    let other = try GroupFolder(path: folder.child("group"), create: false)
    #expect(try other.store(named: "app").storeID == app.storeID)
    #expect(try Self.titlesOfItems(other.store(named: "app")) == ["b"])
  }

  static func titlesOfItems(_ store: Store) throws -> [String] {
    try store.read { db in try String.fetchAll(db, sql: "SELECT body FROM items ORDER BY id") }
  }

  @Test func unknownStoresAndBadNamesAreClearErrors() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    #expect(throws: GroupSyncError.unknownStore("nope")) { try group.store(named: "nope") }
    let stranger = UUID()
    #expect(throws: GroupSyncError.unknownStoreID(stranger)) {
      try group.store(for: ObjectID(storeID: stranger, table: "items", rowID: 1))
    }
    for bad in ["", "Main", "a.b", "-x", "_x", "a/b", "é", String(repeating: "a", count: 33)] {
      #expect(throws: GroupSyncError.invalidStoreName(bad)) { try group.store(named: bad, create: true) }
    }
    #expect(!FileManager.default.fileExists(atPath: folder.child("group/stores/nope.sqlite")))
    let message = "\(GroupSyncError.unknownStoreID(stranger))"
    #expect(message.contains(stranger.uuidString))
  }

  @Test func inboxFileNamesNameTheirStore() {
    #expect(GroupLayout.fileName(store: "main", sequence: 42) == "00000000000000000042.changeset")
    #expect(GroupLayout.fileName(store: "app", sequence: 42) == "app.00000000000000000042.changeset")
    let main = GroupLayout.storeAndSequence(inFileName: "00000000000000000042.changeset")
    #expect(main?.store == "main" && main?.sequence == 42)
    let app = GroupLayout.storeAndSequence(inFileName: "app.00000000000000000007.changeset")
    #expect(app?.store == "app" && app?.sequence == 7)
    for bad in [
      "main.00000000000000000042.changeset", "App.00000000000000000042.changeset", ".00000000000000000042.changeset",
      "a.b.00000000000000000042.changeset", "app00000000000000000042.changeset", "app.0000000000000000042.changeset",
      "app.00000000000000000000.changeset",
    ] {
      #expect(GroupLayout.storeAndSequence(inFileName: bad) == nil, "\(bad)")
    }
    #expect(GroupLayout.store(inFileName: "seed.readonly.sqlite")! == ("seed", true))
    #expect(GroupLayout.store(inFileName: "app.sqlite")! == ("app", false))
    #expect(GroupLayout.store(inFileName: "app.sqlite-wal") == nil)
    #expect(GroupLayout.store(inFileName: "main.sqlite") == nil)
  }

  // MARK: Delivery across processes

  @Test func writesToTwoStoresInterleavedFromTwoProcessesArriveInEachStoresOrder() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let schemaPath = folder.child("schema-group.sql")
    let added = try await ProcessHarness.run(["init", directory, "--store", "app", "--schema", schemaPath])
    try #require(added.status == 0, "\(added.stderr)")
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "ui", options: ListenerFixture.options)
    defer { listener.close() }
    let transactions = 30
    let watcher = try await ProcessHarness.startWatch(
      [directory, "--name", "cli", "--json", "--count", String(2 * transactions)])

    // Two writer processes at once, one per store.
    async let mainWrites = ProcessHarness.run(
      ["exec", directory, "--json", "--repeat", String(transactions)] + ListenerFixture.insert)
    async let appWrites = ProcessHarness.run(
      ["exec", directory, "--store", "app", "--json", "--repeat", String(transactions)] + ListenerFixture.insert)
    let (mainResult, appResult) = try await (mainWrites, appWrites)
    try #require(mainResult.status == 0 && appResult.status == 0, "\(mainResult.stderr) \(appResult.stderr)")
    let written = try jsonLines(mainResult.stdout).map(ChangeSetLine.init(json:))
      + jsonLines(appResult.stdout).map(ChangeSetLine.init(json:))

    var received: [ChangeSetLine] = []
    for _ in 0..<(2 * transactions) {
      received.append(ChangeSetLine(try await ListenerHarness.nextChanges(listener)))
    }
    let app = try group.store(named: "app")
    for store in [group.store, app] {
      let id = store.storeID.uuidString
      let sequences = received.filter { $0.store == id }.map(\.seq)
      #expect(sequences == Array(2...Int64(transactions + 1)), "store \(store.name) in its own order, each once")
      #expect(
        received.filter { $0.store == id } == written.filter { $0.store == id }, "store \(store.name): the writers' IDs")
    }

    let cli = try await ProcessHarness.finish(watcher)
    #expect(cli.status == 0, "\(cli.stderr)")
    let lines = try jsonLines(cli.stdout)
    #expect(lines.allSatisfy { $0["reset"] == nil })
    for name in ["main", "app"] {
      let ofStore = lines.filter { $0["storeName"] as? String == name }
      #expect(ofStore.map { ($0["seq"] as? NSNumber)?.int64Value ?? 0 } == Array(2...Int64(transactions + 1)))
    }
  }

  @Test func aStoreMadeAfterTheListenerStartedIsDeliveredFromItsFirstChangeSet() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "ui", options: ListenerFixture.options)
    defer { listener.close() }

    let added = try await ProcessHarness.run(
      ["init", directory, "--store", "later", "--schema", folder.child("schema-group.sql")])
    try #require(added.status == 0, "\(added.stderr)")
    let written = try await ProcessHarness.run(["exec", directory, "--store", "later"] + ListenerFixture.insert)
    try #require(written.status == 0, "\(written.stderr)")

    let later = try group.store(named: "later")
    let first = try await ListenerHarness.nextChanges(listener)
    let second = try await ListenerHarness.nextChanges(listener)
    #expect(first.storeID == later.storeID && first.sequence == 1, "the schema's change set")
    #expect(second.storeID == later.storeID && second.sequence == 2)
    #expect(second.inserted == [ObjectID(storeID: later.storeID, table: "items", rowID: 1)])
  }

  @Test func anInboxFileOfAStoreTheGroupDoesNotHaveIsAResetOfTheWholeGroup() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "ui", options: ListenerFixture.options)
    defer { listener.close() }

    let forged = ChangeSetEncoding.encode(craftedChangeSet(store: UUID(), sequence: 1))
    try ProcessHarness.placeAtomically(
      forged, at: directory + "/listeners/ui/inbox/nosuch.00000000000000000001.changeset", staging: directory)
    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.store == nil && reset.storeID == nil, "\(reset)")
    #expect(reset.reason.contains("nosuch"), "\(reset.reason)")
    #expect(!ProcessHarness.exists(directory + "/listeners/ui/inbox/nosuch.00000000000000000001.changeset"))

    // The listener goes on.
    let written = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    #expect(ChangeSetLine(try await ListenerHarness.nextChanges(listener)) == written[0])
  }

  // MARK: Read-only stores

  @Test func aReadOnlyStoreRefusesWritesClearlyAndChangesNothing() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try Self.makeSeed(folder.child("seed.db"), titles: ["soup", "stew"])
    let seed = try group.installReadOnlyStore(named: "seed", from: folder.child("seed.db"))
    let file = folder.child("group/stores/seed.readonly.sqlite")
    let before = Self.fileBytes(file)
    #expect(seed.isReadOnly && seed.name == "seed")
    #expect(try Self.titles(seed) == ["soup", "stew"])

    #expect(throws: GroupSyncError.readOnlyStore("seed")) {
      try seed.write { try $0.execute(sql: "INSERT INTO recipe(title) VALUES ('x')") }
    }
    await #expect(throws: GroupSyncError.readOnlyStore("seed")) {
      try await seed.write { db in try db.execute(sql: "DELETE FROM recipe") }
    }
    #expect(throws: GroupSyncError.readOnlyStore("seed")) { try seed.writeWithoutTransaction { _ in } }
    var migrator = DatabaseMigrator()
    migrator.registerMigration("v2") { db in try db.execute(sql: "ALTER TABLE recipe ADD COLUMN rating INTEGER") }
    #expect(throws: GroupSyncError.readOnlyStore("seed"), "a migration is refused, not trapped on") {
      try seed.migrate(migrator)
    }
    #expect(throws: (any Error).self) { try seed.pool.write { try $0.execute(sql: "DELETE FROM recipe") } }
    #expect(try group.store(named: "seed", create: true) === seed, "create finds the read-only store")

    let cli = try await ProcessHarness.run(
      ["exec", folder.child("group"), "--store", "seed", "INSERT INTO recipe(title) VALUES ('x')"])
    #expect(cli.status == 1)
    #expect(cli.stderr.contains("read-only"), "\(cli.stderr)")
    #expect(Self.fileBytes(file) == before, "the file is unchanged")
    #expect(try Self.titles(seed) == ["soup", "stew"])
    #expect(try seed.currentSequence() == 0 && seed.history(after: 0).isEmpty)
  }

  @Test func installingBadFilesOrOverAWritableStoreIsRefusedAndKeepsTheStore() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    _ = try group.store(named: "app", create: true)
    try Self.makeSeed(folder.child("seed.db"), titles: ["soup"])
    #expect(throws: GroupSyncError.storeKindMismatch("app", isReadOnly: false)) {
      try group.installReadOnlyStore(named: "app", from: folder.child("seed.db"))
    }
    #expect(throws: GroupSyncError.invalidStoreName("main")) {
      try group.installReadOnlyStore(named: "main", from: folder.child("seed.db"))
    }
    let seed = try group.installReadOnlyStore(named: "seed", from: folder.child("seed.db"))

    try Data("this is not a database, just text".utf8).write(to: URL(fileURLWithPath: folder.child("junk.db")))
    do {
      try group.installReadOnlyStore(named: "seed", from: folder.child("junk.db"))
      Issue.record("a file that is not a database was installed")
    } catch GroupSyncError.invalidStore(let path, let reason) {
      #expect(path == folder.child("junk.db"), "\(reason)")
    }
    do {
      try group.installReadOnlyStore(named: "seed", from: folder.child("missing.db"))
      Issue.record("a missing file was installed")
    } catch GroupSyncError.invalidStore(let path, _) {
      #expect(path == folder.child("missing.db"))
    }
    #expect(try Self.titles(seed) == ["soup"], "the installed store is untouched")
    #expect(ProcessHarness.entries(folder.child("group/tmp")).isEmpty, "no temporary file left")
  }

  @Test func aSymlinkOrAWALFilePlantedAsAReadOnlyStoreIsRefused() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try FileManager.default.createDirectory(atPath: folder.child("group/stores"), withIntermediateDirectories: true)
    try Self.makeSeed(folder.child("outside.db"), titles: ["secret"])
    #expect(symlink(folder.child("outside.db"), folder.child("group/stores/evil.readonly.sqlite")) == 0)
    #expect(try group.allStores().map(\.name) == ["main"], "a symlink is not a store")
    #expect(throws: GroupSyncError.self) { try group.store(named: "evil") }

    // A WAL-mode file renamed in by hand (not through the installer).
    try Self.makeSeed(folder.child("wal.db"), titles: ["x"])
    #expect(rename(folder.child("wal.db"), folder.child("group/stores/wal.readonly.sqlite")) == 0)
    do {
      _ = try group.store(named: "wal")
      Issue.record("a WAL-mode read-only store was opened")
    } catch GroupSyncError.invalidStore(_, let reason) {
      #expect(reason.contains("WAL"), "\(reason)")
    }
  }

  @Test func aBrokenOrPlantedStoreDoesNotStopDeliveryOfTheOthers() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    try FileManager.default.createDirectory(atPath: directory + "/stores", withIntermediateDirectories: true)
    try Self.makeSeed(folder.child("wal.db"), titles: ["x"])
    #expect(rename(folder.child("wal.db"), directory + "/stores/bad.readonly.sqlite") == 0)
    let group = try GroupFolder(path: directory, create: false)
    let listener = try group.listen(as: "ui", options: ListenerFixture.options)
    defer { listener.close() }
    let written = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    #expect(ChangeSetLine(try await ListenerHarness.nextChanges(listener)) == written[0])

    // `stores/` replaced by a symlink to a folder outside the group.
    try FileManager.default.createDirectory(atPath: folder.child("outside"), withIntermediateDirectories: true)
    try FileManager.default.removeItem(atPath: directory + "/stores")
    #expect(symlink(folder.child("outside"), directory + "/stores") == 0)
    let second = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    #expect(ChangeSetLine(try await ListenerHarness.nextChanges(listener)) == second[0])
    #expect(try group.allStores().map(\.name) == ["main"])
    #expect(throws: GroupSyncError.self) { try group.store(named: "evil", create: true) }
    #expect(ProcessHarness.entries(folder.child("outside")).isEmpty, "nothing made outside the group")
  }

  @Test func replacingTheSeedStoreIsOneResetOfThatStoreAlone() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    try Self.makeSeed(folder.child("v1.db"), titles: ["soup", "stew"])
    try Self.makeSeed(folder.child("v2.db"), titles: ["salad"])
    let installed = try await ProcessHarness.run(
      ["init", directory, "--store", "seed", "--read-only", folder.child("v1.db")])
    try #require(installed.status == 0, "\(installed.stderr)")
    let group = try GroupFolder(path: directory, create: false)
    let seed = try group.store(named: "seed")
    #expect(try Self.titles(seed) == ["soup", "stew"])
    let listener = try group.listen(as: "ui", options: ListenerFixture.options)
    defer { listener.close() }
    let watcher = try await ProcessHarness.startWatch([directory, "--name", "cli", "--json", "--count", "2"])

    let first = try await ProcessHarness.exec(directory, ListenerFixture.insert)
    let replaced = try await ProcessHarness.run(
      ["init", directory, "--store", "seed", "--read-only", folder.child("v2.db")])
    try #require(replaced.status == 0, "\(replaced.stderr)")
    // The listeners' rescan ticks (200 ms here, 1 s in the CLI) notice the
    // file: both tell a reset before the next commit.
    var events: [ListenerEvent] = []
    while !events.contains(where: { if case .reset = $0 { true } else { false } }) {
      guard let event = await ListenerHarness.next(listener) else { break }
      events.append(event)
    }
    try await waitUntil("the CLI's listener tells the reset") { watcher.stdout.contains("\"reset\"") }
    let second = try await ProcessHarness.exec(directory, ListenerFixture.insert)

    while events.filter({ if case .changes = $0 { true } else { false } }).count < 2 {
      guard let event = await ListenerHarness.next(listener) else { break }
      events.append(event)
    }
    let resets = events.compactMap { if case .reset(let reset) = $0 { reset } else { nil } }
    #expect(resets.count == 1, "\(resets)")
    #expect(resets.first?.store == "seed" && resets.first?.storeID == seed.storeID)
    #expect(resets.first.map { $0.concerns(seed.storeID) && !$0.concerns(group.store.storeID) } == true)
    let changes = events.compactMap { if case .changes(let changeSet) = $0 { ChangeSetLine(changeSet) } else { nil } }
    #expect(changes == first + second, "the main store's change sets, untouched by the reset")
    #expect(await ListenerHarness.next(listener, timeout: .milliseconds(700)) == nil, "no second reset")

    #expect(try Self.titles(seed) == ["salad"], "reads see the new file")
    #expect(seed.storeID == (try group.store(named: "seed")).storeID, "the UUID survives the replacement")

    let cli = try await ProcessHarness.finish(watcher, timeout: 20)
    let lines = try jsonLines(cli.stdout)
    let cliResets = lines.filter { $0["reset"] != nil }
    #expect(cliResets.count == 1 && cliResets.first?["storeName"] as? String == "seed", "\(lines)")
  }

  @Test func readersNeverSeeAHalfWrittenSeedStoreWhileItIsReplaced() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let versions = [["a", "b", "c"], ["d"]]
    for (index, titles) in versions.enumerated() { try Self.makeSeed(folder.child("v\(index).db"), titles: titles) }
    let seed = try group.installReadOnlyStore(named: "seed", from: folder.child("v0.db"))
    let done = Collected<Bool>()
    let reads = Collected<Int>()
    let reader = Thread {
      while done.all.isEmpty {
        do {
          let titles = try Self.titles(seed)
          reads.append(versions.contains(titles) ? 0 : 1)
        } catch {
          reads.append(2)
        }
      }
    }
    reader.start()
    try await waitUntil("the reader's first read") { !reads.all.isEmpty }
    for round in 0..<30 {
      try group.installReadOnlyStore(named: "seed", from: folder.child("v\(round % 2).db"))
    }
    let afterInstalls = reads.all.count
    try await waitUntil("a read after the last install") { reads.all.count > afterInstalls }
    done.append(true)
    let bad = reads.all.filter { $0 != 0 }
    #expect(reads.all.count >= 2)
    #expect(bad.isEmpty, "\(bad.prefix(3))")
    #expect(try Self.titles(seed) == versions[1])
  }

  // MARK: Durable listeners

  @Test func aDurableListenerKeepsAPlaceInEachStore() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let schemaPath = folder.child("schema-group.sql")
    try #require(try await ProcessHarness.run(["init", directory, "--store", "app", "--schema", schemaPath]).status == 0)
    try Self.makeSeed(folder.child("v1.db"), titles: ["soup"])
    try Self.makeSeed(folder.child("v2.db"), titles: ["salad"])
    try #require(
      try await ProcessHarness.run(["init", directory, "--store", "seed", "--read-only", folder.child("v1.db")]).status
        == 0)
    let group = try GroupFolder(path: directory, create: false)
    do {
      let listener = try group.listen(as: "uploader", durable: true, options: ListenerFixture.options)
      listener.close()
    }
    // While it is not running: two commits to main, three to app, and the
    // seed store replaced.
    let main = try await ProcessHarness.exec(directory, repeat: 2, ListenerFixture.insert)
    let appRun = try await ProcessHarness.run(
      ["exec", directory, "--store", "app", "--json", "--repeat", "3"] + ListenerFixture.insert)
    let app = try jsonLines(appRun.stdout).map(ChangeSetLine.init(json:))
    try #require(
      try await ProcessHarness.run(["init", directory, "--store", "seed", "--read-only", folder.child("v2.db")]).status
        == 0)

    let status = try await ProcessHarness.status(directory)
    #expect(status.stores.map(\.name) == ["main", "app", "seed"])
    #expect(status.listeners.first?.places["app"] == 1, "\(status.listeners)")

    let listener = try group.listen(as: "uploader", durable: true, options: ListenerFixture.options)
    defer { listener.close() }
    var changes: [ChangeSetLine] = []
    var resets: [Reset] = []
    while changes.count < 5 {
      guard let event = await ListenerHarness.next(listener) else { break }
      switch event {
      case .changes(let changeSet): changes.append(ChangeSetLine(changeSet))
      case .reset(let reset): resets.append(reset)
      }
    }
    #expect(changes.filter { $0.store == group.store.storeID.uuidString } == main)
    #expect(changes.filter { $0.store == app.first?.store } == app)
    #expect(resets.count == 1 && resets.first?.store == "seed" && resets.first?.isExpired == true, "\(resets)")
  }

  // MARK: Migration

  @Test func migratingTheSeedStoreCopiesItsRowsWithTheirRowIDsAsOneChangeSet() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try Self.makeSeed(folder.child("seed.db"), titles: ["soup", "stew", "salad"])
    let seed = try group.installReadOnlyStore(named: "seed", from: folder.child("seed.db"))
    let watcher = try await ProcessHarness.startWatch([folder.child("group"), "--json", "--count", "1"])

    let migration = try group.migrateStore("seed", into: "main")
    #expect(migration.rowCounts == ["category": 1, "recipe": 3])
    #expect(try Self.titles(group.store) == ["soup", "stew", "salad"])
    let rowIDs = try await group.store.read { db in try Int64.fetchAll(db, sql: "SELECT id FROM recipe ORDER BY id") }
    #expect(rowIDs == [1, 2, 3])
    let old = ObjectID(storeID: seed.storeID, table: "recipe", rowID: 2)
    #expect(migration.objectIDs[old] == ObjectID(storeID: group.store.storeID, table: "recipe", rowID: 2))
    let changeSet = try #require(migration.changeSet)
    #expect(changeSet.storeID == group.store.storeID)
    #expect(changeSet.inserted.isSuperset(of: Set(migration.objectIDs.values)))
    #expect(try await group.store.read { db in try db.indexes(on: "recipe").map(\.name) }.contains("recipe_category"))
    #expect(try Self.titles(seed) == ["soup", "stew", "salad"], "the source is unchanged")

    let cli = try await ProcessHarness.finish(watcher, timeout: 20)
    let line = try #require(try jsonLines(cli.stdout).first)
    #expect((line["seq"] as? NSNumber)?.int64Value == changeSet.sequence)
    #expect(Set(line["inserted"] as? [String] ?? []) == Set(changeSet.inserted.map(\.uri)))
  }

  @Test func aMigrationThatConflictsWritesNothingAndSaysWhere() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try Self.makeSeed(folder.child("seed.db"), titles: ["soup", "stew"])
    try group.installReadOnlyStore(named: "seed", from: folder.child("seed.db"))
    try await group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE category(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE recipe(id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE, category INTEGER);
        INSERT INTO recipe(id, title) VALUES (2, 'mine');
        """)
    }
    let sequence = try group.store.currentSequence()
    do {
      try group.migrateStore("seed", into: "main")
      Issue.record("a conflicting migration was written")
    } catch GroupSyncError.invalidStore(_, let reason) {
      #expect(reason.contains("'recipe'") && reason.contains("rowid 2"), "\(reason)")
    }
    #expect(try group.store.currentSequence() == sequence, "nothing committed")
    #expect(try await group.store.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM category") } == 0)
    #expect(try Self.titles(group.store) == ["mine"])

    #expect(throws: GroupSyncError.readOnlyStore("seed")) { try group.migrateStore("main", into: "seed") }
    #expect(throws: GroupSyncError.unknownStore("nope")) { try group.migrateStore("nope", into: "main") }
    do {
      try group.migrateStore("seed", into: "main", tables: ["nosuch"])
      Issue.record("an unknown table was migrated")
    } catch GroupSyncError.invalidStore(_, let reason) {
      #expect(reason.contains("nosuch"))
    }

    let cli = try await ProcessHarness.run(["migrate-store", folder.child("group"), "--from", "seed", "--to", "main"])
    #expect(cli.status == 1 && cli.stderr.contains("rowid 2"), "\(cli.stderr)")
    let only = try await ProcessHarness.run(
      ["migrate-store", folder.child("group"), "--from", "seed", "--to", "main", "--table", "category"])
    #expect(only.status == 0, "\(only.stderr)")
    #expect(only.stdout.contains("migrated 1 rows of 1 tables from seed into main (category 1)"), "\(only.stdout)")
  }

  // MARK: GRDB observation

  @Test func aRegionObservationOfAnotherStoreFiresForThatStoresCommitsOnly() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    try #require(try await ProcessHarness.run(
      ["init", directory, "--store", "app", "--schema", folder.child("schema-group.sql")]).status == 0)
    let group = try GroupFolder(path: directory, create: false)
    let app = try group.store(named: "app")
    let relay = try group.observeOtherProcesses(store: "app")
    defer { relay.cancel() }
    let fired = Collected<Int>()
    let observation = DatabaseRegionObservation(tracking: Table("items"))
      .start(in: app.pool, onError: { Issue.record($0) }, onChange: { _ in fired.append(1) })
    defer { observation.cancel() }

    _ = try await ProcessHarness.exec(directory, repeat: 3, ListenerFixture.insert)  // main: not app's
    _ = try await ProcessHarness.run(["exec", directory, "--store", "app", "--repeat", "2"] + ListenerFixture.insert)
    try await waitUntil("2 change sets of app observed") { fired.all.count >= 2 }
    try await Task.sleep(for: .milliseconds(300))
    #expect(fired.all.count == 2, "the main store's commits are not app's")

    try Self.makeSeed(folder.child("seed.db"), titles: ["soup"])
    try group.installReadOnlyStore(named: "seed", from: folder.child("seed.db"))
    #expect(throws: GroupSyncError.readOnlyStore("seed")) { try group.observeOtherProcesses(store: "seed") }
    #expect(throws: GroupSyncError.unknownStore("nope")) { try group.observeOtherProcesses(store: "nope") }
  }

  // MARK: The command line

  @Test func theCommandLineNamesBadStoresAndOptions() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    try Self.makeSeed(folder.child("seed.db"), titles: ["soup"])
    let cases: [(arguments: [String], message: String)] = [
      (["init", directory, "--read-only", folder.child("seed.db")], "--read-only needs --store"),
      (["init", directory, "--store", "Bad.Name"], "invalid store name 'Bad.Name'"),
      (["init", directory, "--store", "seed", "--read-only", folder.child("seed.db"), "--schema", "x.sql"],
       "--schema cannot change a read-only store"),
      (["init", directory, "--store", "seed", "--read-only", folder.child("nothing.db")], "nothing.db"),
      (["exec", directory, "--store", "nope", "SELECT 1"], "no store named 'nope'"),
      (["log", directory, "--store", "nope"], "no store named 'nope'"),
      (["query", directory, "SELECT 1", "--store", "nope"], "no store named 'nope'"),
      (["migrate-store", directory, "--from", "nope"], "no store named 'nope'"),
    ]
    for (arguments, message) in cases {
      let result = try await ProcessHarness.run(arguments)
      #expect(result.status != 0, "\(arguments) succeeded")
      #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
    }
    #expect(ProcessHarness.entries(directory + "/stores").isEmpty, "no store was made by a failed command")
    #expect(try await ProcessHarness.status(directory).sequence == 1)
  }

  // MARK: Status

  @Test func statusShowsEveryStore() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    try #require(try await ProcessHarness.run(
      ["init", directory, "--store", "app", "--schema", folder.child("schema-group.sql")]).status == 0)
    try Self.makeSeed(folder.child("seed.db"), titles: ["soup"])
    try #require(
      try await ProcessHarness.run(["init", directory, "--store", "seed", "--read-only", folder.child("seed.db")])
        .status == 0)
    _ = try await ProcessHarness.run(["exec", directory, "--store", "app"] + ListenerFixture.insert)
    let status = try await ProcessHarness.status(directory)
    #expect(status.stores.map(\.name) == ["main", "app", "seed"])
    #expect(status.stores.map(\.isReadOnly) == [false, false, true])
    #expect(status.stores.map(\.sequence) == [1, 2, 0])
    #expect(status.stores[2].fileSize.map { $0 > 0 } == true)
    let text = try await ProcessHarness.run(["status", directory])
    #expect(text.stdout.contains("store     app: sequence 2"), "\(text.stdout)")
    #expect(text.stdout.contains("store     seed: read-only"), "\(text.stdout)")
  }
}
