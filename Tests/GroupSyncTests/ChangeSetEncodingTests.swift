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

  @Test func writesTheStoreUUIDAsUUIDStringSpellsIt() {
    for _ in 0..<100 {
      let id = UUID()
      let changeSet = ChangeSet(
        storeID: id, sequence: 1, committedAtNanoseconds: 0, writerProcessID: 1, tables: [:],
        invalidatedTableNames: [])
      let text = String(decoding: ChangeSetEncoding.encode(changeSet), as: UTF8.self)
      #expect(text.contains(#""store":"\#(id.uuidString)""#))
    }
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

// MARK: - The hand-written decoder: exact JSON, exact messages

/// A valid version-1 file with some of its values replaced by raw JSON text.
private func changeSetFile(
  format: String = #""groupsync-changeset""#, version: String = "1", seq: String = "1", committedAt: String = "0",
  pid: String = "1", tables: String = "{}", invalidated: String = "[]", extra: String = ""
) -> String {
  #"{"format":\#(format),"version":\#(version),"store":"6F9619FF-8B86-D011-B42D-00C04FC964FF","seq":\#(seq),"#
    + #""committedAtNs":\#(committedAt),"pid":\#(pid),"tables":\#(tables),"invalidatedTables":\#(invalidated)\#(extra)}"#
}

/// The reason `decode` gives for `bytes`, or nil if they decode.
private func decodeFailure(_ bytes: [UInt8]) -> String? {
  do {
    _ = try ChangeSetEncoding.decode(bytes, name: "f")
    return nil
  } catch GroupSyncError.invalidChangeSet(let name, let reason) {
    return name == "f" ? reason : "wrong file name \(name)"
  } catch {
    return "unexpected error \(error)"
  }
}

private func decodeFailure(_ text: String) -> String? { decodeFailure(Array(text.utf8)) }

private let corruptJSON = "not a change-set JSON object (corrupt JSON)"

/// SplitMix64: a seeded generator, so a failure can be replayed.
private struct SeededGenerator: RandomNumberGenerator {
  var state: UInt64
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// Runs a Python 3 script and returns what it prints.
private func python(_ script: String) throws -> [UInt8] {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
  process.arguments = ["python3", "-c", script]
  let pipe = Pipe()
  process.standardOutput = pipe
  try process.run()
  let output = pipe.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  guard process.terminationStatus == 0 else { throw TestFailure("python3 exited with \(process.terminationStatus)") }
  return Array(output)
}

extension ChangeSetEncodingTests {
  @Test func roundTripsRandomChangeSets() throws {
    var random = SeededGenerator(state: 20_251_122)
    let pieces = [
      "notes", "a", "\"", "\\", "\u{1}", "\u{1F}", "\n", "\t", "\u{7F}", "/", " ", "🎉", "👩‍👩‍👧", "naïve", "日本",
      "e\u{301}", "\u{FEFF}", "𝄞", "\u{2028}", "'",
    ]
    func name() -> String {
      (0..<Int.random(in: 1...4, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }
    func rowID() -> Int64 {
      switch Int.random(in: 0..<6, using: &random) {
      case 0: return .min
      case 1: return .max
      case 2: return Int64.random(in: -2...2, using: &random)
      default: return Int64.random(in: .min ... .max, using: &random)
      }
    }
    func rowIDs() -> [Int64] { (0..<Int.random(in: 0...4, using: &random)).map { _ in rowID() } }
    for _ in 0..<200 {
      var tables: [String: TableChanges] = [:]
      for _ in 0..<Int.random(in: 0...4, using: &random) {
        tables[name()] = TableChanges(inserted: rowIDs(), updated: rowIDs(), deleted: rowIDs())
      }
      let changeSet = ChangeSet(
        storeID: UUID(), sequence: Int64.random(in: 1 ... .max, using: &random), committedAtNanoseconds: rowID(),
        writerProcessID: Int32.random(in: .min ... .max, using: &random), tables: tables,
        invalidatedTableNames: Set((0..<Int.random(in: 0...3, using: &random)).map { _ in name() }))
      let bytes = ChangeSetEncoding.encode(changeSet)
      let decoded = try ChangeSetEncoding.decode(bytes)
      #expect(decoded == changeSet, "\(String(decoding: bytes, as: UTF8.self))")
      #expect(ChangeSetEncoding.encode(decoded) == bytes)
    }
  }

  @Test func readsPythonJSONWithASCIIEscapes() throws {
    let script = #"""
      import json
      name = "naïve 🎉\"q\""
      print(json.dumps({
          "format": "groupsync-changeset", "version": 1, "store": "6f9619ff-8b86-d011-b42d-00c04fc964ff",
          "seq": 7, "committedAtNs": -1, "pid": 99,
          "tables": {name: {"inserted": [1, -9223372036854775808], "deleted": [9223372036854775807]},
                     "tab\tle\u0001/": {"updated": [0]}},
          "invalidatedTables": [name, "日本"],
          "written by": {"python": [3, 0.5, True, None]},
      }, indent=2, ensure_ascii=True))
      """#
    let bytes = try python(script)
    let text = String(decoding: bytes, as: UTF8.self)
    #expect(text.utf8.allSatisfy { $0 < 0x80 })
    #expect(text.contains(#""na\u00efve \ud83c\udf89\"q\"""#))
    #expect(text.contains("\n  \"tables\": {\n"))
    let name = "naïve 🎉\"q\""
    #expect(
      try ChangeSetEncoding.decode(bytes)
        == ChangeSet(
          storeID: UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!, sequence: 7, committedAtNanoseconds: -1,
          writerProcessID: 99,
          tables: [
            name: TableChanges(inserted: [1, .min], deleted: [.max]), "tab\tle\u{1}/": TableChanges(updated: [0]),
          ],
          invalidatedTableNames: [name, "日本"]))
  }

  @Test func skipsUnknownKeysWhateverTheirValue() throws {
    let text = #"""
      {"x-nested": {"a": [1, 2.5, -3e-7, 1E+400, true, false, null, {"b": [[], {}], "c": "\u00e9\"\\\/"}], "d": {}},
       "format": "groupsync-changeset", "version": 1, "future": [[[[1]]]], "seq": 5, "pid": 1, "committedAtNs": 2,
       "store": "6F9619FF-8B86-D011-B42D-00C04FC964FF", "invalidatedTables": [], "note": "\ud83c\udf89",
       "tables": {"t": {"moved": {"from": [1.5]}, "inserted": [3], "checksum": null, "updated": []}},
       "": "", "zero": -0.0E-0}
      """#
    let decoded = try ChangeSetEncoding.decode(Array(text.utf8))
    #expect(decoded.sequence == 5)
    #expect(decoded.committedAtNanoseconds == 2)
    #expect(decoded.tables == ["t": TableChanges(inserted: [3])])
  }

  @Test func readsEscapedKeysRepeatedKeysAndAByteOrderMark() throws {
    let text = changeSetFile(
      seq: "9", tables: #"{"t":{"inserted":[1]},"t":{"inserted":[2]}}"#, invalidated: #"["\u0074ags"]"#,
      extra: #","\u0073eq":10"#)
    let decoded = try ChangeSetEncoding.decode([0xEF, 0xBB, 0xBF] + Array(text.utf8))
    #expect(decoded.sequence == 10)
    #expect(decoded.tables == ["t": TableChanges(inserted: [2])])
    #expect(decoded.invalidatedTableNames == ["tags"])
  }

  @Test func readsIntegersAtTheEdgesOfInt64() throws {
    let decoded = try ChangeSetEncoding.decode(
      Array(
        changeSetFile(
          seq: "9223372036854775807", committedAt: "-9223372036854775808", pid: "-2147483648",
          tables: #"{"t":{"inserted":[-0,0,-5744481259541622270],"deleted":[ -1 , 10 ]}}"#
        ).utf8))
    #expect(decoded.sequence == .max)
    #expect(decoded.committedAtNanoseconds == .min)
    #expect(decoded.writerProcessID == .min)
    #expect(decoded.tables["t"] == TableChanges(inserted: [0, 0, -5_744_481_259_541_622_270], deleted: [-1, 10]))
    #expect(decodeFailure(changeSetFile(seq: "-0")) == "seq 0 is not positive")
  }

  @Test(arguments: [
    (changeSetFile(seq: "1.0"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "1e3"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "2.5E+1"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "-0.0"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "true"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "null"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: #""1""#), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "[1]"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(seq: "9223372036854775808"), "wrong type at 'seq': expected an integer"),
    (changeSetFile(committedAt: "-9223372036854775809"), "wrong type at 'committedAtNs': expected an integer"),
    (changeSetFile(committedAt: "100000000000000000000000"), "wrong type at 'committedAtNs': expected an integer"),
    (changeSetFile(pid: "2147483648"), "wrong type at 'pid': expected an integer"),
    (changeSetFile(pid: "false"), "wrong type at 'pid': expected an integer"),
    (changeSetFile(version: "1.0"), "wrong type at 'version': expected an integer"),
    (changeSetFile(version: "null"), "wrong type at 'version': expected an integer"),
    (changeSetFile(version: "-1"), "version -1 is not supported (this library reads 1...1)"),
    (changeSetFile(format: "1"), "wrong type at 'format'"),
    (changeSetFile(format: #""groupsync-changeset ""#), "format is 'groupsync-changeset ', expected 'groupsync-changeset'"),
    (changeSetFile(tables: #"{"t":{"inserted":[1,2.0]}}"#), "wrong type at 'tables.t.inserted': expected an array of integers"),
    (changeSetFile(tables: #"{"t":{"updated":[false]}}"#), "wrong type at 'tables.t.updated': expected an array of integers"),
    (changeSetFile(tables: #"{"t":{"deleted":[null]}}"#), "wrong type at 'tables.t.deleted': expected an array of integers"),
    (changeSetFile(tables: #"{"t":{"deleted":[9223372036854775808]}}"#), "wrong type at 'tables.t.deleted': expected an array of integers"),
    (changeSetFile(tables: #"{"t":{"inserted":null}}"#), "wrong type at 'tables.t.inserted': expected an array of integers"),
    (changeSetFile(tables: #"{"t":{"inserted":1}}"#), "wrong type at 'tables.t.inserted': expected an array of integers"),
    (changeSetFile(tables: #"{"t":{"inserted":[[1]]}}"#), "wrong type at 'tables.t.inserted': expected an array of integers"),
    (changeSetFile(tables: #"{"t":[]}"#), "wrong type at 'tables.t': expected an object"),
    (changeSetFile(tables: "null"), "wrong type at 'tables'"),
    (changeSetFile(tables: #"{"a\u0000":{}}"#), "a table name is empty or contains NUL"),
    (changeSetFile(invalidated: #"["a",1]"#), "wrong type at 'invalidatedTables'"),
    (changeSetFile(invalidated: #"["a\u0000b"]"#), "an invalidated table name is empty or contains NUL"),
    (changeSetFile(invalidated: #"[""]"#), "an invalidated table name is empty or contains NUL"),
    (#"{"format":"groupsync-changeset","version":1,"store":"6F9619FF-8B86-D011-B42D-00C04FC964F"}"#, "'6F9619FF-8B86-D011-B42D-00C04FC964F' is not a store UUID"),
    (#"{"format":"groupsync-changeset","version":1,"store":"+F9619FF-8B86-D011-B42D-00C04FC964FF"}"#, "'+F9619FF-8B86-D011-B42D-00C04FC964FF' is not a store UUID"),
    (#"{"format":"groupsync-changeset","version":1,"store":null}"#, "wrong type at 'store'"),
    // format and version come first, whatever else is wrong.
    (#"{"tables":5,"format":"v2","seq":"x"}"#, "format is 'v2', expected 'groupsync-changeset'"),
    (#"{"tables":5,"version":99,"seq":"x","format":"groupsync-changeset"}"#, "version 99 is not supported (this library reads 1...1)"),
    ("[[], {}]", "not a change-set JSON object"),
  ])
  func reportsTheWrongValue(_ text: String, _ reason: String) {
    #expect(decodeFailure(text) == reason)
  }

  @Test func rejectsAnythingThatIsNotExactlyJSON() {
    let valid = changeSetFile()
    #expect(decodeFailure(valid) == nil)
    #expect(decodeFailure(" \n\t\r" + valid + " \n\t\r") == nil)
    var cases: [(String, [UInt8])] = [
      // Trailing garbage and other top levels.
      ("text after the object", Array((valid + " x").utf8)),
      ("a second object", Array((valid + "{}").utf8)),
      ("a trailing comma after the object", Array((valid + ",").utf8)),
      ("a NUL after the object", Array(valid.utf8) + [0]),
      ("a number", Array("1".utf8)),
      ("a string", Array(#""x""#.utf8)),
      ("null", Array("null".utf8)),
      ("whitespace only", Array("  ".utf8)),
      ("form feed is not JSON whitespace", Array(("\u{C}" + valid).utf8)),
      ("UTF-16", [0xFF, 0xFE, 0x7B, 0x00, 0x7D, 0x00]),
      // Numbers.
      ("leading zero", Array(changeSetFile(seq: "01").utf8)),
      ("negative leading zero", Array(changeSetFile(committedAt: "-01").utf8)),
      ("double zero", Array(changeSetFile(tables: #"{"t":{"inserted":[00]}}"#).utf8)),
      ("leading zero in an unknown key", Array(changeSetFile(extra: #","x":[007]"#).utf8)),
      ("plus sign", Array(changeSetFile(seq: "+1").utf8)),
      ("bare minus", Array(changeSetFile(seq: "-").utf8)),
      ("trailing dot", Array(changeSetFile(seq: "1.").utf8)),
      ("leading dot", Array(changeSetFile(seq: ".5").utf8)),
      ("empty exponent", Array(changeSetFile(seq: "1e").utf8)),
      ("signed empty exponent", Array(changeSetFile(seq: "1e+").utf8)),
      ("hex", Array(changeSetFile(seq: "0x10").utf8)),
      ("NaN", Array(changeSetFile(extra: #","x":NaN"#).utf8)),
      ("Infinity", Array(changeSetFile(extra: #","x":-Infinity"#).utf8)),
      ("misspelt literal", Array(changeSetFile(extra: #","x":nul"#).utf8)),
      ("capitalised literal", Array(changeSetFile(extra: #","x":True"#).utf8)),
      // Structure.
      ("trailing comma in an array", Array(changeSetFile(tables: #"{"t":{"inserted":[1,]}}"#).utf8)),
      ("trailing comma in an object", Array(changeSetFile(tables: #"{"t":{},}"#).utf8)),
      ("empty element", Array(changeSetFile(extra: #","x":[1,,2]"#).utf8)),
      ("missing colon", Array(#"{"format" "groupsync-changeset"}"#.utf8)),
      ("unquoted key", Array(#"{format:1}"#.utf8)),
      ("single quotes", Array(#"{'format':1}"#.utf8)),
      ("comment", Array(("/**/" + valid).utf8)),
      ("unclosed array", Array(changeSetFile(extra: #","x":[1"#).utf8)),
      ("mismatched brackets", Array(changeSetFile(extra: #","x":[1}"#).utf8)),
      // Strings.
      ("raw tab in a string", Array(changeSetFile(invalidated: "[\"a\tb\"]").utf8)),
      ("raw newline in a key", Array(changeSetFile(extra: ",\"a\nb\":1").utf8)),
      ("unknown escape", Array(changeSetFile(invalidated: #"["\x41"]"#).utf8)),
      ("short \\u escape", Array(changeSetFile(invalidated: #"["\u12"]"#).utf8)),
      ("non-hex \\u escape", Array(changeSetFile(invalidated: #"["\u12G4"]"#).utf8)),
      ("lone high surrogate", Array(changeSetFile(invalidated: #"["\ud83c"]"#).utf8)),
      ("lone low surrogate", Array(changeSetFile(invalidated: #"["\udf89"]"#).utf8)),
      ("high surrogate then a letter", Array(changeSetFile(invalidated: #"["\ud83c\u0041"]"#).utf8)),
      ("two high surrogates", Array(changeSetFile(invalidated: #"["\ud83c\ud83c"]"#).utf8)),
      ("unterminated string", Array(#"{"format":"groupsync-changeset"#.utf8)),
      ("escaped quote at the end", Array(#"{"format":"groupsync-changeset\""#.utf8)),
    ]
    // Invalid UTF-8 wherever a string may be.
    let invalidUTF8: [(String, [UInt8])] = [
      ("0xFF", [0xFF]), ("a continuation byte", [0x80]), ("overlong NUL", [0xC0, 0x80]),
      ("overlong slash", [0xE0, 0x80, 0xAF]), ("an encoded surrogate", [0xED, 0xA0, 0x80]),
      ("above U+10FFFF", [0xF4, 0x90, 0x80, 0x80]), ("a truncated sequence", [0xE6, 0x97]),
      ("a lead byte then ASCII", [0xC3, 0x41]),
    ]
    for (what, bytes) in invalidUTF8 {
      for (place, template) in [
        ("a table name", changeSetFile(tables: #"{"tX":{}}"#)), ("an unknown key", changeSetFile(extra: #","X":1"#)),
        ("an unknown value", changeSetFile(extra: #","x":["X"]"#)), ("an invalidated table", changeSetFile(invalidated: #"["X"]"#)),
        ("a name with an escape", changeSetFile(invalidated: #"["\nX"]"#)),
      ] {
        let parts = template.split(separator: "X", omittingEmptySubsequences: false)
        cases.append(("\(what) in \(place)", Array(parts[0].utf8) + bytes + Array(parts[1].utf8)))
      }
    }
    for (what, bytes) in cases {
      #expect(decodeFailure(bytes) == corruptJSON, "\(what)")
    }
  }

  @Test func limitsNestingTo64Levels() {
    func nested(_ levels: Int) -> String { String(repeating: "[", count: levels) + String(repeating: "]", count: levels) }
    func nestedObjects(_ levels: Int) -> String {
      String(repeating: #"{"a":"#, count: levels - 1) + "{}" + String(repeating: "}", count: levels - 1)
    }
    // The top-level object is the first level.
    #expect(decodeFailure(changeSetFile(extra: #","x":"# + nested(63))) == nil)
    #expect(decodeFailure(changeSetFile(extra: #","x":"# + nested(64))) == corruptJSON)
    #expect(decodeFailure(changeSetFile(extra: #","x":"# + nestedObjects(63))) == nil)
    #expect(decodeFailure(changeSetFile(extra: #","x":"# + nestedObjects(64))) == corruptJSON)
    #expect(decodeFailure(changeSetFile(tables: #"{"t":{"x":"# + nested(61) + "}}")) == nil)
    #expect(decodeFailure(changeSetFile(tables: #"{"t":{"x":"# + nested(62) + "}}")) == corruptJSON)
    #expect(decodeFailure(changeSetFile(tables: #"{"t":{"inserted":[1,"# + nested(60) + "]}}"))
      == "wrong type at 'tables.t.inserted': expected an array of integers")
    #expect(decodeFailure(changeSetFile(tables: #"{"t":{"inserted":[1,"# + nested(61) + "]}}")) == corruptJSON)
    #expect(decodeFailure(nested(64)) == "not a change-set JSON object")
    #expect(decodeFailure(nested(65)) == corruptJSON)
    // Hostile input fails fast, without recursion.
    #expect(decodeFailure(changeSetFile(extra: #","x":"# + String(repeating: "[", count: 1_000_000))) == corruptJSON)
    #expect(decodeFailure(String(repeating: #"{"a":"#, count: 1_000_000)) == corruptJSON)
  }
}
