// Built by `make install-check` against an installed GroupSync (make install),
// the way a Makefile-built program uses it.
import Foundation
import GroupSync

let folder = CommandLine.arguments[1]
let group = try GroupFolder(path: folder)
let listener = try group.listen(as: "client")
try group.store.write { try $0.execute("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (1)") }
var iterator = listener.events.makeAsyncIterator()
guard case .changes(let changeSet)? = await iterator.next() else { fatalError("no change set delivered") }
print("install-check: received sequence \(changeSet.sequence): \(changeSet.inserted.map(\.uri))")
