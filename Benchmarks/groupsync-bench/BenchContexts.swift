import Foundation
import GRDB
import GroupSync

/// Issue 10: merging change sets into a context that holds many objects,
/// and a results controller kept current, against re-running the query
/// (what GRDB's `ValueObservation` does for any change to its table).
struct BenchContextsResult: Codable {
  /// Rows in the table; a context holds every one of them.
  var objects: Int
  /// `context.merge` of a 1-row change set (an update of a registered object).
  var mergeOneRow: BenchStats
  /// `context.merge` of a 1000-row change set (1000 registered objects updated).
  var mergeThousandRows: BenchStats
  /// `context.merge` of a 1-row change set that moves a row in a results
  /// controller over every row (its list and difference included).
  var controllerOneRow: BenchStats
  /// The baseline: the controller's request run again, every row fetched
  /// (`Row.fetchAll` in `store.read`), in alternating blocks.
  var requery: BenchStats
  /// requery p50 / controllerOneRow p50, and / mergeOneRow p50.
  var controllerAdvantage: Double
  var mergeAdvantage: Double
}

extension BenchRunner {
  func contexts() throws {
    let objects = 100_000
    let samples = options.quick ? 60 : 300
    log("contexts: merges into a context of \(objects) objects, a results controller vs re-running the query")
    let folder = options.workFolder + "/contexts"
    try? FileManager.default.removeItem(atPath: folder)
    let group = try GroupFolder(path: folder)
    let store = group.store
    try store.write { db in
      try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT NOT NULL, score INT NOT NULL)")
      let insert = try db.cachedStatement(sql: "INSERT INTO item(id, name, score) VALUES (?, ?, ?)")
      for id in 1...objects { try insert.execute(arguments: [id, "item \(id)", id * 7 % 10_007]) }
    }
    let request = FetchRequest(table: "item", filter: "score >= ?", arguments: [0], orderBy: [.ascending("score")])
    let holder = Context(group)
    _ = try holder.fetch(FetchRequest(table: "item"))
    let viewer = Context(group)
    let controller = try ResultsController(context: viewer, request: request)
    guard holder.registeredCount == objects, controller.count == objects else {
      throw BenchError("the contexts hold \(holder.registeredCount) and \(controller.count) objects, not \(objects)")
    }
    var random = SystemRandomNumberGenerator()
    func timed(_ body: () throws -> Void) rethrows -> Int64 {
      let start = BenchClock.monotonic()
      try body()
      return BenchClock.monotonic() - start
    }
    func change(_ sql: String, _ arguments: StatementArguments) throws -> ChangeSet {
      guard let changeSet = try store.writeAndReturnChangeSet({ db in try db.execute(sql: sql, arguments: arguments) }).changeSet
      else { throw BenchError("no change set for \(sql)") }
      return changeSet
    }
    let requerySQL = "SELECT rowid, * FROM item WHERE score >= 0 ORDER BY score, rowid"
    var merge1: [Int64] = [], merge1000: [Int64] = [], controller1: [Int64] = [], requery: [Int64] = []
    for round in 0..<samples {
      let id = Int.random(in: 1...objects, using: &random)
      let moved = try change("UPDATE item SET score = ? WHERE id = ?", [Int.random(in: 0..<10_007, using: &random), id])
      merge1.append(try timed { try holder.merge(moved) })
      controller1.append(try timed { try viewer.merge(moved) })
      if round % 5 == 0 {
        let first = Int.random(in: 1...(objects - 1000), using: &random)
        let bulk = try change("UPDATE item SET name = name || '.' WHERE id BETWEEN ? AND ?", [first, first + 999])
        merge1000.append(try timed { try holder.merge(bulk) })
        try viewer.merge(bulk)
      }
      requery.append(try timed { _ = try store.read { db in try Row.fetchAll(db, sql: requerySQL) } })
    }
    let expected = try store.read { db in try Int64.fetchAll(db, sql: "SELECT id FROM item WHERE score >= 0 ORDER BY score, id") }
    guard controller.objectIDs.map(\.rowID) == expected else {
      throw BenchError("the results controller's list differs from the query's result")
    }
    let result = BenchContextsResult(
      objects: objects, mergeOneRow: BenchStats(nanoseconds: merge1), mergeThousandRows: BenchStats(nanoseconds: merge1000),
      controllerOneRow: BenchStats(nanoseconds: controller1), requery: BenchStats(nanoseconds: requery),
      controllerAdvantage: 0, mergeAdvantage: 0)
    var final = result
    final.controllerAdvantage = result.requery.p50 / result.controllerOneRow.p50
    final.mergeAdvantage = result.requery.p50 / result.mergeOneRow.p50
    results.contexts = final
    store.close()
  }
}
