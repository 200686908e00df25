import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// Results controllers: the list follows inserts, updates, moves and
/// deletes exactly as re-running the query would, with differences that
/// turn the old list into the new one.
@Suite(.serialized, .timed)
struct ResultsControllerTests {
  static let request = FetchRequest(
    table: "item", filter: "score >= ?", arguments: [10],
    orderBy: [.descending("score"), .ascending("name", collation: .nocase)])

  static func makeGroup(_ folder: TemporaryFolder) throws -> GroupFolder {
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, score)")
    }
    return group
  }

  /// The IDs the request selects, read afresh.
  static func fresh(_ group: GroupFolder) throws -> [ObjectID] {
    try group.store.read { db in
      try Int64.fetchAll(db, sql: "SELECT id FROM item WHERE score >= 10 ORDER BY score DESC, name COLLATE NOCASE, id")
    }.map { ObjectID(storeID: group.store.storeID, table: "item", rowID: $0) }
  }

  /// Random changes: inserts, updates that move rows in and out of the
  /// filter and across the order (values of every type, NULLs, equal
  /// keys), deletes.
  static func randomStatements(_ random: inout SeededRandom, count: Int) -> [String] {
    let names = ["'a'", "'B'", "'b'", "'Ab'", "NULL", "x'00'", "'é'", "''"]
    let scores = ["10", "10.0", "10.5", "11", "9", "NULL", "'text'", "x'01'", "-3", "9223372036854775807", "1e300", "12"]
    func pick(_ values: [String]) -> String { values[Int(random.next() % UInt64(values.count))] }
    return (0..<count).map { _ in
      let id = Int(random.next() % 40) + 1
      switch random.next() % 4 {
      case 0: return "INSERT OR REPLACE INTO item(id, name, score) VALUES (\(id), \(pick(names)), \(pick(scores)))"
      case 1: return "UPDATE item SET score = \(pick(scores)) WHERE id = \(id)"
      case 2: return "UPDATE item SET name = \(pick(names)) WHERE id = \(id)"
      default: return "DELETE FROM item WHERE id = \(id)"
      }
    }
  }

  @Test func theListFollowsRandomChangesExactly() throws {
    let folder = try TemporaryFolder()
    let group = try Self.makeGroup(folder)
    let context = Context(group)
    let controller = try ResultsController(context: context, request: Self.request)
    var list = controller.objectIDs
    var changes: [ResultsChange] = []
    controller.onChange { changes.append($0) }
    var random = SeededRandom(seed: 7)
    for round in 0..<300 {
      let statements = Self.randomStatements(&random, count: Int(random.next() % 3) + 1)
      let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
        for statement in statements { try db.execute(sql: statement) }
      }
      guard let changeSet else { continue }
      changes = []
      try context.merge(changeSet)
      for change in changes { list = try #require(list.applying(change.difference)) }
      let expected = try Self.fresh(group)
      #expect(list == expected, "round \(round): \(statements)")
      #expect(controller.objectIDs == expected, "round \(round): \(statements)")
      if list != expected { return }
      for id in changes.flatMap(\.updated) {
        #expect(changeSet.updated.contains(id) || changeSet.inserted.contains(id), "updated in place: \(id)")
      }
    }
  }

  @Test func aSubqueryOnAnotherTableOrALimitReRunsTheRequest() throws {
    let folder = try TemporaryFolder()
    let group = try Self.makeGroup(folder)
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE hidden(id INTEGER PRIMARY KEY);
        INSERT INTO item(id, name, score) VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3);
        """)
    }
    let context = Context(group)
    let filtered = try ResultsController(
      context: context, request: FetchRequest(table: "item", filter: "id NOT IN (SELECT id FROM hidden)"))
    let limited = try ResultsController(
      context: context, request: FetchRequest(table: "item", orderBy: [.descending("score")], limit: 2))
    #expect(filtered.count == 3 && limited.count == 2)
    let (_, hiding) = try group.store.writeAndReturnChangeSet { db in try db.execute(sql: "INSERT INTO hidden(id) VALUES (2)") }
    try context.merge(hiding!)
    #expect(filtered.objectIDs.map(\.rowID) == [1, 3])
    let (_, raising) = try group.store.writeAndReturnChangeSet { db in try db.execute(sql: "UPDATE item SET score = 10 WHERE id = 1") }
    try context.merge(raising!)
    #expect(limited.objectIDs.map(\.rowID) == [1, 3])
  }

  @Test func itemsUpdatedInPlaceAreNotMoves() throws {
    let folder = try TemporaryFolder()
    let group = try Self.makeGroup(folder)
    try group.store.write { db in
      try db.execute(sql: "INSERT INTO item(id, name, score) VALUES (1, 'a', 30), (2, 'b', 20), (3, 'c', 10)")
    }
    let context = Context(group)
    let controller = try ResultsController(context: context, request: Self.request)
    var changes: [ResultsChange] = []
    controller.onChange { changes.append($0) }
    let (_, renamed) = try group.store.writeAndReturnChangeSet { db in try db.execute(sql: "UPDATE item SET name = 'z' WHERE id = 2") }
    try context.merge(renamed!)
    #expect(changes.count == 1 && changes[0].difference.isEmpty)
    #expect(changes[0].updated.map(\.rowID) == [2])
    let (_, moved) = try group.store.writeAndReturnChangeSet { db in try db.execute(sql: "UPDATE item SET score = 40 WHERE id = 3") }
    try context.merge(moved!)
    let difference = changes[1].difference.inferringMoves()
    #expect(difference.contains { if case .insert(0, _, .some) = $0 { true } else { false } }, "a move to the top")
    #expect(controller.objectIDs.map(\.rowID) == [3, 1, 2])
  }

  /// Process A (this one) holds a context and a results controller fed by
  /// a listener; process B (`groupsync exec`) inserts, updates, moves and
  /// deletes rows in hundreds of random statements.
  @Test func anotherProcessesChangesArriveAsDifferences() async throws {
    let folder = try TemporaryFolder()
    let group = try Self.makeGroup(folder)
    let listener = try group.listen(options: ListenerFixture.options)
    defer { listener.close() }
    let context = Context(group)
    let controller = try ResultsController(context: context, request: Self.request)
    let registered = try context.fetch(FetchRequest(table: "item"))
    #expect(registered.isEmpty)
    var list = controller.objectIDs
    controller.onChange { change in list = list.applying(change.difference)! }
    var random = SeededRandom(seed: 11)
    var transactions = 0
    for _ in 0..<24 {
      let statements = Self.randomStatements(&random, count: 12)
      let result = try CLI.run(["exec", group.path] + statements)
      #expect(result.status == 0, "\(result.stderr)")
      transactions += 1
    }
    let sequence = try group.store.currentSequence()
    var events = listener.events.makeAsyncIterator()
    while let event = await events.next() {
      try context.merge(event)
      if case .changes(let changeSet) = event, changeSet.sequence >= sequence { break }
    }
    let expected = try Self.fresh(group)
    #expect(list == expected)
    #expect(controller.objectIDs == expected)
    for index in 0..<controller.count {
      let object = try controller.object(at: index)
      let stored = try group.store.read { db in
        try Row.fetchOne(db, sql: "SELECT * FROM item WHERE id = ?", arguments: [object.objectID.rowID])
      }
      #expect(try object.row()["score"] as DatabaseValue == stored?["score"], "\(object.objectID)")
    }
  }
}
