import Foundation
import Testing

@testable import GroupSync

@Suite struct ChangeSetEncodingTests {
  let sample = ChangeSet(
    storeID: UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!, sequence: 42,
    committedAtNanoseconds: 1_763_800_000_123_456_789, writerProcessID: 4242,
    tables: [
      "notes": TableChanges(inserted: [7], updated: [1, 2], deleted: [3]),
      "order items": TableChanges(inserted: [-5, Int64.max]),
    ],
    invalidatedTableNames: ["tags"])

  @Test func roundTrips() throws {
    let decoded = try ChangeSetEncoding.decode(ChangeSetEncoding.encode(sample))
    #expect(decoded == sample)
    #expect(decoded.inserted.count == 3)
    #expect(decoded.invalidatedTables.map(\.uri) == ["x-groupsync://6F9619FF-8B86-D011-B42D-00C04FC964FF/tags"])
  }

  @Test func pythonStandardLibraryReadsIt() throws {
    let folder = try TemporaryFolder()
    let file = folder.child("42.changeset")
    try Data(ChangeSetEncoding.encode(sample)).write(to: URL(fileURLWithPath: file))
    // The README's reader: json and urllib.parse only.
    let script = """
      import json, sys, urllib.parse
      d = json.load(open(sys.argv[1], encoding="utf-8"))
      assert d["format"] == "groupsync-changeset" and d["version"] == 1
      for table, ch in sorted(d["tables"].items()):
          for kind in ("inserted", "updated", "deleted"):
              for rowid in ch.get(kind, []):
                  print(kind, "x-groupsync://%s/%s/p%d" % (d["store"], urllib.parse.quote(table, safe="-._~"), rowid))
      for table in d["invalidatedTables"]:
          print("invalidated", "x-groupsync://%s/%s" % (d["store"], urllib.parse.quote(table, safe="-._~")))
      print("seq", d["seq"])
      """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", script, file]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    #expect(process.terminationStatus == 0)
    var expected = sample.inserted.map { "inserted \($0.uri)" } + sample.updated.map { "updated \($0.uri)" }
      + sample.deleted.map { "deleted \($0.uri)" } + sample.invalidatedTables.map { "invalidated \($0.uri)" }
    expected.append("seq 42")
    #expect(Set(output.split(separator: "\n").map(String.init)) == Set(expected))
  }

  @Test(arguments: [
    ("", "not a change-set JSON object"),
    ("\u{0}\u{1}garbage", "not a change-set JSON object"),
    ("[1,2,3]", "not a change-set JSON object"),
    (#"{"format":"other","version":1}"#, "format is 'other'"),
    (#"{"format":"groupsync-changeset","version":99}"#, "version 99 is not supported"),
    (#"{"format":"groupsync-changeset","version":1}"#, "missing key"),
    (#"{"format":"groupsync-changeset","version":1,"store":"x","seq":1,"committedAtNs":0,"pid":1,"tables":{},"invalidatedTables":[]}"#, "not a store UUID"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":0,"committedAtNs":0,"pid":1,"tables":{},"invalidatedTables":[]}"#, "not positive"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":1,"committedAtNs":0,"pid":1,"tables":{"t":{"inserted":["1"]}},"invalidatedTables":[]}"#, "wrong type"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":1,"committedAtNs":0,"pid":1,"tables":{"":{}},"invalidatedTables":[]}"#, "empty"),
    (#"{"format":"groupsync-changeset","version":true}"#, "wrong type at 'version'"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":1.5,"committedAtNs":0,"pid":1,"tables":{},"invalidatedTables":[]}"#, "wrong type at 'seq'"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":1,"committedAtNs":0,"pid":1,"tables":{"t":{"deleted":[1e30]}},"invalidatedTables":[]}"#, "wrong type at 'tables.t.deleted'"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":1,"committedAtNs":0,"pid":1,"tables":[],"invalidatedTables":[]}"#, "wrong type at 'tables'"),
  ])
  func rejectsBadFiles(_ text: String, _ reason: String) {
    #expect {
      _ = try ChangeSetEncoding.decode(Array(text.utf8), name: "f")
    } throws: { error in
      guard case GroupSyncError.invalidChangeSet(let name, let message) = error else { return false }
      return name == "f" && message.contains(reason)
    }
  }

  @Test func readsFilesWithWhitespaceAndAnyKeyOrder() throws {
    let text = """
      { "version": 1, "format": "groupsync-changeset", "seq": 3, "pid": 1, "committedAtNs": 5,
        "store": "6F9619FF-8B86-D011-B42D-00C04FC964FF", "invalidatedTables": [],
        "tables": { "t": { "updated": [ 2, 1 ] } } }
      """
    let decoded = try ChangeSetEncoding.decode(Array(text.utf8))
    #expect(decoded.sequence == 3)
    #expect(decoded.tables["t"]?.updated == [2, 1])
  }

  @Test func rejectsEveryTruncation() throws {
    let bytes = ChangeSetEncoding.encode(sample)
    for length in stride(from: 0, to: bytes.count - 1, by: 7) {
      #expect(throws: GroupSyncError.self) { try ChangeSetEncoding.decode(Array(bytes.prefix(length))) }
    }
  }

  @Test func rejectsDeepNesting() {
    let hostile = #"{"format":"groupsync-changeset","version":1,"tables":"# + String(repeating: "[", count: 100_000)
    #expect(throws: GroupSyncError.self) { try ChangeSetEncoding.decode(Array(hostile.utf8)) }
  }
}
