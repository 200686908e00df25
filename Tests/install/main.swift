// Built by `make install-check` against an installed GroupSync (make install),
// the way a Makefile-built program uses it: GroupSync's store with GRDB's API.
import Foundation
import GRDB
import GroupSync

struct Item: Codable, FetchableRecord, PersistableRecord {
  var x: Int
}

let folder = CommandLine.arguments[1]
let group = try GroupFolder(path: folder)
let listener = try group.listen(as: "client")
try group.store.write { db in
  try db.execute(sql: "CREATE TABLE IF NOT EXISTS item(x)")
  try Item(x: 1).insert(db)
}
var iterator = listener.events.makeAsyncIterator()
guard case .changes(let changeSet)? = await iterator.next() else { fatalError("no change set delivered") }
let count = try group.store.read { try Item.fetchCount($0) }
print("install-check: received sequence \(changeSet.sequence): \(changeSet.inserted.map(\.uri)); \(count) item(s)")
