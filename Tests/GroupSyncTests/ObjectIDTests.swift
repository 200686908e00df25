import Foundation
import GroupSyncTestSupport
import Testing

@testable import GroupSync

@Suite(.timed) struct ObjectIDTests {
  let store = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!

  @Test(arguments: [
    "notes", "order items", "a/b", "100%", "naïve", "日本語", "x?y#z", "%41", "semi;colon", "tab\tname", "~._-", "",
    "café", "cafe\u{301}",
  ])
  func roundTripsAnyTableName(_ table: String) throws {
    let id = ObjectID(storeID: store, table: table, rowID: 42)
    let parsed = try ObjectID(uri: id.uri)
    #expect(parsed == id)
    #expect(try TableID(uri: id.tableID.uri) == id.tableID)
  }

  @Test func formatsTheDocumentedURI() {
    #expect(ObjectID(storeID: store, table: "order items", rowID: 7).uri
      == "x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/order%20items/p7")
    #expect(TableID(storeID: store, table: "tags").uri == "x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/tags")
  }

  @Test(arguments: [Int64.min, -1, 0, 1, Int64.max])
  func roundTripsAnyRowID(_ rowID: Int64) throws {
    let id = ObjectID(storeID: store, table: "t", rowID: rowID)
    #expect(try ObjectID(uri: id.uri).rowID == rowID)
  }

  @Test(arguments: [
    ("http://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p1", "does not start with"),
    ("x-groupsync://not-a-uuid/t/p1", "is not a store UUID"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF", "expected"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p1/x", "expected"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/a b/p1", "table name"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/%ZZ/p1", "table name"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/%FF/p1", "table name"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/%00/p1", "table name"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/1", "rowid segment"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p", "rowid segment"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p01", "rowid segment"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p+1", "rowid segment"),
    ("x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p99999999999999999999", "rowid segment"),
  ])
  func rejectsMalformedURIs(_ uri: String, _ reason: String) {
    #expect {
      _ = try ObjectID(uri: uri)
    } throws: { error in
      guard case GroupSyncError.invalidURI(let rejected, let message) = error else { return false }
      return rejected == uri && message.contains(reason)
    }
  }

  @Test func tellsRowsAndTablesApart() throws {
    #expect(throws: GroupSyncError.self) { try ObjectID(uri: "x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t") }
    #expect(throws: GroupSyncError.self) { try TableID(uri: "x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/t/p1") }
  }

  @Test func acceptsLowercaseEscapesAndUUIDs() throws {
    let id = try ObjectID(uri: "x-groupsync://6f9619ff-8b86-d011-b42d-00c04fc964ff/a%2fb/p3")
    #expect(id == ObjectID(storeID: store, table: "a/b", rowID: 3))
  }

  @Test func namesEqualOnlyUnderUnicodeEquivalenceAreTwoTables() throws {
    let nfc = ObjectID(storeID: store, table: "café", rowID: 1)
    let nfd = ObjectID(storeID: store, table: "cafe\u{301}", rowID: 1)
    #expect(nfc != nfd)
    #expect(Set([nfc, nfd]).count == 2)
    #expect(nfc.uri != nfd.uri)
    #expect(try ObjectID(uri: nfd.uri) == nfd)
    #expect(try ObjectID(uri: "x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF//p1").table == "")
  }
}
