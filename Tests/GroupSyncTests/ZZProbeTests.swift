import Foundation
import GRDB
import GroupSyncTestSupport
import Testing
@testable import GroupSync

@Suite struct ZZProbeTests {
  @Test func namesakeOfRolledBackShadow() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("g"))
    try group.store.write { try $0.execute(sql: "CREATE TABLE parent(id INTEGER PRIMARY KEY); CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);") }
    #expect(throws: DatabaseError.self) {
      try group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a'); INSERT INTO child VALUES (1, 99)") }
    }
    _ = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "CREATE TABLE v_idx(a, b)") }
    let c = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO v_idx(rowid, a, b) VALUES (3, 1, 2)") }.changeSet
    #expect(c != nil)
    print("PROBE", c as Any)
  }
  @Test func namesakeOfDroppedShadow() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("g"))
    try group.store.write { try $0.execute(sql: "CREATE VIRTUAL TABLE v USING fts5(x); INSERT INTO v VALUES ('a')") }
    try group.store.write { try $0.execute(sql: "DROP TABLE v") }
    _ = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "CREATE TABLE v_idx(a, b)") }
    let c = try group.store.writeAndReturnChangeSet { try $0.execute(sql: "INSERT INTO v_idx(rowid, a, b) VALUES (3, 1, 2)") }.changeSet
    #expect(c != nil)
    print("PROBE2", c as Any)
  }
}
