import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync
import GroupSyncProcess

/// The change-set encoding, version 2: round trips, pinned bytes, a Python
/// reader, and a decoder that rejects every malformed input with a reason.
@Suite(.timed) struct ChangeSetEncodingTests {
  static let store = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!

  static let sample = ChangeSet(
    storeID: store, sequence: 42, committedAtNanoseconds: 1_763_800_000_123_456_789, writerProcessID: 4242,
    tables: [
      "notes": TableChanges(inserted: [7], updated: [1, 2], deleted: [3]),
      "café": TableChanges(inserted: [-5, 1 << 40]),
      "cafe\u{301}": TableChanges(deleted: [9]),
      "": TableChanges(updated: [0]),
    ],
    invalidatedTableNames: ["tags", "odd \"name\"/%"],
    notes: [ChangeSetNote(name: "notify/import.done", payload: Array("42 rows".utf8))])

  @Test func roundTrips() throws {
    let bytes = ChangeSetEncoding.encode(Self.sample)
    #expect(try ChangeSetEncoding.decode(bytes) == Self.sample)
  }

  @Test func pinsTheBytesOfASmallChangeSet() {
    let small = ChangeSet(
      storeID: Self.store, sequence: 300, committedAtNanoseconds: -1, writerProcessID: 7,
      tables: ["t": TableChanges(inserted: [1, 2, 130], deleted: [5])], invalidatedTableNames: ["w"],
      notes: [ChangeSetNote(name: "n", payload: [0xAB])])
    let expected: [UInt8] =
      Array("GSCS".utf8) + [2, 0]
      + [0x6F, 0x96, 0x19, 0xFF, 0x8B, 0x86, 0xD0, 0x11, 0xB4, 0x2D, 0x00, 0xC0, 0x4F, 0xC9, 0x64, 0xFF]
      + [0xAC, 0x02]  // seq 300
      + [0x01]  // committedAtNs -1 (zigzag)
      + [0x0E]  // pid 7 (zigzag)
      + [0x01, 0x01, UInt8(ascii: "t")]  // one table, "t"
      + [0x03, 0x02, 0x01, 0x80, 0x01]  // inserted 1, +1, +128
      + [0x00]  // updated: none
      + [0x01, 0x0A]  // deleted 5
      + [0x01, 0x01, UInt8(ascii: "w")]  // invalidated "w"
      + [0x01, 0x01, UInt8(ascii: "n"), 0x01, 0xAB]  // note "n" = AB
    #expect(ChangeSetEncoding.encode(small) == expected)
  }

  @Test func tableNamesAreComparedByTheirBytes() throws {
    let decoded = try ChangeSetEncoding.decode(ChangeSetEncoding.encode(Self.sample))
    // NFC and NFD spellings are two tables, and the empty name round-trips.
    #expect(decoded.tables.keys.contains { Array($0.name.utf8) == Array("café".utf8) })
    #expect(decoded.tables[TableName("cafe\u{301}")]?.deleted == [9])
    #expect(decoded.tables[TableName("café")]?.inserted == [-5, 1 << 40])
    #expect(decoded.tables[""]?.updated == [0])
  }

  @Test func roundTripsRandomChangeSets() throws {
    var random = SeededRandom(seed: 7)
    for _ in 0..<500 {
      let changeSet = random.changeSet()
      #expect(try ChangeSetEncoding.decode(ChangeSetEncoding.encode(changeSet)) == changeSet)
    }
  }

  @Test func rejectsEveryTruncation() {
    let bytes = ChangeSetEncoding.encode(Self.sample)
    for length in 0..<bytes.count {
      #expect(throws: GroupSyncError.self) { try ChangeSetEncoding.decode(Array(bytes.prefix(length))) }
    }
  }

  @Test(arguments: [
    ([UInt8](), "no GSCS marker"),
    (Array("GSCX".utf8) + [2, 0], "no GSCS marker"),
    (Array("GSCS".utf8) + [1, 0], "version 1 is not supported"),
    (Array("GSCS".utf8) + [2, 1], "reserved flags"),
    (Array("GSCS".utf8) + [2, 0] + [UInt8](repeating: 0, count: 16) + [0x00], "sequence 0 is out of range"),
    (Array("GSCS".utf8) + [2, 0] + [UInt8](repeating: 0, count: 16) + [0x81, 0x00], "not minimally encoded"),
    (Array("GSCS".utf8) + [2, 0] + [UInt8](repeating: 0, count: 16) + [0x01, 0x00, 0x00, 0x7F], "exceeds what the remaining"),
    (Array("GSCS".utf8) + [2, 0] + [UInt8](repeating: 0, count: 16) + [0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09], "bytes after the end"),
  ] as [([UInt8], String)])
  func rejectsMalformedInputWithAReason(_ bytes: [UInt8], _ reason: String) {
    #expect {
      try ChangeSetEncoding.decode(bytes, name: "f")
    } throws: { error in
      guard case GroupSyncError.invalidChangeSet(let file, let message) = error else { return false }
      return file == "f" && message.contains(reason)
    }
  }

  @Test func rejectsRowsInTwoCategoriesAndUnsortedTables() {
    var bad = ChangeSetEncoding.encode(ChangeSet(
      storeID: Self.store, sequence: 1, committedAtNanoseconds: 0, writerProcessID: 1,
      tables: ["t": TableChanges(inserted: [4], deleted: [5])], invalidatedTableNames: []))
    // The deleted rowid 5 (zigzag 10) becomes 4 (zigzag 8): in two categories.
    let index = bad.lastIndex(of: 10)!
    bad[index] = 8
    #expect(throws: GroupSyncError.self) { try ChangeSetEncoding.decode(bad) }
    let twoTables = ChangeSetEncoding.encode(ChangeSet(
      storeID: Self.store, sequence: 1, committedAtNanoseconds: 0, writerProcessID: 1,
      tables: ["a": TableChanges(inserted: [1]), "b": TableChanges(inserted: [1])], invalidatedTableNames: []))
    var swapped = twoTables
    let a = swapped.firstIndex(of: UInt8(ascii: "a"))!
    let b = swapped.firstIndex(of: UInt8(ascii: "b"))!
    swapped.swapAt(a, b)
    #expect(throws: GroupSyncError.self) { try ChangeSetEncoding.decode(swapped) }
  }

  /// Seeded mutations of valid encodings: each is rejected with a reason,
  /// or decodes to a change set that encodes back to the same bytes; never
  /// a crash, a hang or a huge allocation.
  @Test func survivesTwoHundredThousandMutations() throws {
    var random = SeededRandom(seed: 2026)
    var rejected = 0
    var accepted = 0
    // One thread, nothing for ThreadSanitizer to see: a tenth under it.
    let mutations = ProcessInfo.processInfo.environment["GROUPSYNC_SANITIZER"] == "thread" ? 20_000 : 200_000
    for _ in 0..<mutations {
      var bytes = ChangeSetEncoding.encode(random.changeSet(maximumRows: 8))
      random.mutate(&bytes)
      do {
        let decoded = try ChangeSetEncoding.decode(bytes)
        #expect(ChangeSetEncoding.encode(decoded) == bytes)
        accepted += 1
      } catch let error as GroupSyncError {
        guard case .invalidChangeSet(_, let reason) = error, !reason.isEmpty else {
          Issue.record("unexpected error \(error)")
          break
        }
        rejected += 1
      }
    }
    #expect(rejected > mutations / 2 && accepted > 0, "rejected \(rejected), accepted \(accepted)")
  }

  @Test func pythonStandardLibraryReadsAFileAndAHistoryRow() throws {
    let folder = try TemporaryFolder()
    let file = folder.child("42.changeset")
    try Data(ChangeSetEncoding.encode(Self.sample)).write(to: URL(fileURLWithPath: file))
    let group = try GroupFolder(path: folder.child("group"))
    let (_, committed) = try group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "CREATE TABLE t(x); INSERT INTO t(rowid, x) VALUES (5, 'y')")
    }
    let history = try #require(committed)
    let expected = { (changeSet: ChangeSet) -> Set<String> in
      Set(
        changeSet.inserted.map { "inserted \($0.uri)" } + changeSet.updated.map { "updated \($0.uri)" }
          + changeSet.deleted.map { "deleted \($0.uri)" } + changeSet.invalidatedTables.map { "invalidated \($0.uri)" }
          + changeSet.notes.map { "note \($0.name) \($0.payload.count)" } + ["seq \(changeSet.sequence)"])
    }
    #expect(try Set(runPythonReader(["file", file])) == expected(Self.sample))
    #expect(try Set(runPythonReader(["history", group.layout.store, String(history.sequence)])) == expected(history))
  }

  /// The reader of the "Folder layout and file formats" article
  /// (Sources/GroupSync/GroupSync.docc), verbatim.
  static let pythonReader = """
    import sqlite3, sys, urllib.parse, uuid

    def uvarint(b, i):
        shift = value = 0
        while True:
            byte = b[i]; i += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80: return value, i
            shift += 7

    def svarint(b, i):
        v, i = uvarint(b, i)
        return (v >> 1) ^ -(v & 1), i

    def data(b, i):
        n, i = uvarint(b, i)
        return b[i:i + n], i + n

    def read_change_set(b):
        assert b[:4] == b"GSCS" and b[4] == 2, "not a version 2 change set"
        store = str(uuid.UUID(bytes=bytes(b[6:22]))).upper()
        seq, i = uvarint(b, 22)
        committed_at, i = svarint(b, i)
        pid, i = svarint(b, i)
        cs = {"store": store, "seq": seq, "committedAtNs": committed_at, "pid": pid,
              "tables": {}, "invalidated": [], "notes": []}
        count, i = uvarint(b, i)
        for _ in range(count):
            name, i = data(b, i)
            table = cs["tables"][name.decode("utf-8")] = {}
            for kind in ("inserted", "updated", "deleted"):
                n, i = uvarint(b, i)
                rowids = []
                for k in range(n):
                    if k == 0: value, i = svarint(b, i)
                    else:
                        gap, i = uvarint(b, i); value = rowids[-1] + gap
                    rowids.append(value)
                table[kind] = rowids
        count, i = uvarint(b, i)
        for _ in range(count):
            name, i = data(b, i); cs["invalidated"].append(name.decode("utf-8"))
        count, i = uvarint(b, i)
        for _ in range(count):
            name, i = data(b, i); payload, i = data(b, i)
            cs["notes"].append((name.decode("utf-8"), bytes(payload)))
        assert i == len(b), "bytes after the end"
        return cs

    def uri(cs, table, rowid=None):
        base = "x-groupsync://%s/%s" % (cs["store"], urllib.parse.quote(table, safe="-._~"))
        return base if rowid is None else "%s/p%d" % (base, rowid)

    if sys.argv[1] == "file":
        cs = read_change_set(open(sys.argv[2], "rb").read())
    else:  # history STORE SEQ
        db = sqlite3.connect("file:%s?mode=ro" % sys.argv[2], uri=True)
        (payload,) = db.execute("SELECT payload FROM groupsync_history WHERE seq = ?", (int(sys.argv[3]),)).fetchone()
        cs = read_change_set(payload)
    for table, changes in sorted(cs["tables"].items()):
        for kind in ("inserted", "updated", "deleted"):
            for rowid in changes[kind]: print(kind, uri(cs, table, rowid))
    for table in cs["invalidated"]: print("invalidated", uri(cs, table))
    for name, payload in cs["notes"]: print("note", name, len(payload))
    print("seq", cs["seq"])
    """

  func runPythonReader(_ arguments: [String]) throws -> [String] {
    let result = try ChildProcess.run("/usr/bin/env", ["python3", "-c", Self.pythonReader] + arguments)
    #expect(result.succeeded, "\(result.stderr)")
    return result.stdout.split(separator: "\n").map(String.init)
  }
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct SeededRandom {
  var state: UInt64

  init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 | 1 }

  mutating func next() -> UInt64 {
    state ^= state << 13
    state ^= state >> 7
    state ^= state << 17
    return state
  }

  mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }

  mutating func rowID() -> Int64 {
    switch below(4) {
    case 0: Int64(bitPattern: next())
    case 1: -Int64(below(1000))
    default: Int64(below(100_000))
    }
  }

  mutating func name() -> String {
    let alphabet = ["a", "b", "é", "e\u{301}", " ", "\"", "/", "%", "表", "_"]
    return (0..<below(6)).map { _ in alphabet[below(alphabet.count)] }.joined()
  }

  mutating func changeSet(maximumRows: Int = 200) -> ChangeSet {
    var tables: [TableName: TableChanges] = [:]
    for _ in 0..<below(4) {
      var used = Set<Int64>()
      var lists: [[Int64]] = [[], [], []]
      for _ in 0..<below(maximumRows) {
        let rowID = rowID()
        if used.insert(rowID).inserted { lists[below(3)].append(rowID) }
      }
      let changes = TableChanges(inserted: lists[0].sorted(), updated: lists[1].sorted(), deleted: lists[2].sorted())
      if !changes.isEmpty { tables[TableName(name())] = changes }
    }
    let invalidated = Set((0..<below(3)).map { _ in TableName(name()) })
    let notes = (0..<below(3)).map { _ in
      ChangeSetNote(name: name(), payload: (0..<below(20)).map { _ in UInt8(truncatingIfNeeded: next()) })
    }
    return ChangeSet(
      storeID: UUID(), sequence: Int64(below(1_000_000)) + 1, committedAtNanoseconds: Int64(bitPattern: next()),
      writerProcessID: Int32(truncatingIfNeeded: next()), tables: tables, invalidatedTableNames: invalidated,
      notes: notes)
  }

  /// Flips bits, inserts, deletes or overwrites bytes.
  mutating func mutate(_ bytes: inout [UInt8]) {
    for _ in 0...below(3) {
      guard !bytes.isEmpty else { return }
      let index = below(bytes.count)
      switch below(5) {
      case 0: bytes[index] ^= UInt8(1 << below(8))
      case 1: bytes.insert(UInt8(truncatingIfNeeded: next()), at: index)
      case 2: bytes.remove(at: index)
      case 3: bytes[index] = [0x00, 0x7F, 0x80, 0xFF][below(4)]
      default: bytes.removeLast(below(min(bytes.count, 4)))
      }
    }
  }
}
