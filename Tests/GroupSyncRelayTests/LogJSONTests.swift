// LogJSONTests: the log's texts written in one pass are the bytes JSONEncoder wrote.
import Foundation
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// ``LogJSON`` against what the relay wrote before it, through `JSONEncoder`
/// (kept here as ``Before``): entry bodies byte for byte the same as
/// `JSONEncoder` with sorted keys writes them (without, it writes an
/// object's keys in its dictionary's order, which changes from process to
/// process: the same JSON value), and row images and column lists, which
/// have no order to choose, byte for byte the same as it wrote them.
@Suite(.timed) struct LogJSONTests {
  /// The encoding before ``LogJSON``: `LogEntry.encoded(format:)`,
  /// `StoredImage.encode(_:format:)` and `Shipper.json(_:)` as they were.
  enum Before {
    static func entry(_ entry: LogEntry, format: LogFormat, sortedKeys: Bool = true) throws -> String {
      var stored = entry
      if format.reversesValues {
        for table in stored.tables.indices {
          for row in stored.tables[table].rows.indices { stored.tables[table].rows[row].values?.reverse() }
        }
      }
      let encoder = JSONEncoder()
      if sortedKeys { encoder.outputFormatting = .sortedKeys }
      return format.wrap(String(decoding: try encoder.encode(stored), as: UTF8.self), as: "e")
    }

    static func image(_ values: [RowValue], format: LogFormat) throws -> String {
      let json = { (value: [RowValue]) in String(decoding: try JSONEncoder().encode(value), as: UTF8.self) }
      guard format != .v1 else { return try json(values) }
      return format.wrap(try json(format.reversesValues ? values.reversed() : values), as: "v")
    }

    static func columns(_ columns: [String]) throws -> String {
      String(decoding: try JSONEncoder().encode(columns), as: UTF8.self)
    }
  }

  static let formats: [LogFormat] = [.v1, .v2, .testing]

  /// Strings that need every escape, and none.
  static let awkward = [
    "", "plain", "a/b", "http://x/y", "\"q\"", "back\\slash", "\u{0}\u{1}\u{7}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{e}\u{f}",
    "\u{10}\u{1b}\u{1f} \u{7f}", "é ünïcode 🙂 \u{2028}\u{2029} \u{FEFF}", "tab\there", "line\nbreak\r\n", "{\"t\":1}",
  ]

  static let reals: [Double] = [
    0, -0.0, 1, -1, 0.5, 2.5, 0.1, 1.0 / 3, 100, 1e15, 1e16, 1e17, 123456789012345680000, 1e21, 1e22, 1e-5, 1e-7,
    -1e-300, .leastNonzeroMagnitude, .leastNormalMagnitude, .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
    .ulpOfOne, .pi, 9007199254740993, 4.35, 1234.5678e-10, .infinity, -.infinity,
  ]

  static let entry = LogEntry(
    tables: [
      TableImage(
        name: "note/with \"odd\" name", columns: ["title", "body", "n", "r", "b", "parent"], isSnapshot: false,
        rows: [
          RowImage(
            gid: "g1", rowID: 7, base: 0,
            values: [.text("t/1"), .text("b\n"), .integer(.min), .real(-0.0), .blob(Data([0, 0xff, 0x3e])), .reference("p1")],
            lost: nil),
          RowImage(gid: "g2", rowID: 8, base: 4, values: nil, lost: nil),
          RowImage(gid: "g3", rowID: nil, base: 9, values: [.null, .real(.infinity)], lost: true, changed: [1, 3]),
          RowImage(gid: "g4", rowID: .max, base: 12, values: [.text(""), .null, .integer(0), .real(1e300), .null, .null], lost: false),
        ]),
      TableImage(name: "empty", columns: [], isSnapshot: true, rows: []),
    ],
    conflicts: [
      ConflictRecord(
        store: "main", table: "note", gid: "g3", sequence: 0, columns: ["body"], winnerHost: "a", winnerValues: [.text("x")],
        loserHost: "b", loserValues: nil, rule: "last-writer-wins", base: [.null], reason: "a/b \"why\"")
    ],
    notes: [ShippedNote(name: "defaults", payload: Data("{\"k\":\"v/w\"}".utf8)), ShippedNote(name: "", payload: Data())])

  @Test func entriesAreTheBytesJSONEncoderWritesWithSortedKeys() throws {
    var entries = [Self.entry, LogEntry(tables: [], conflicts: [], notes: nil), LogFormatTests.entry]
    var random = SplitMix64(seed: 39)
    for _ in 0..<300 { entries.append(Self.randomEntry(&random)) }
    for entry in entries {
      for format in Self.formats {
        let text = try entry.encoded(format: format)
        #expect(text == (try Before.entry(entry, format: format)), "\(format)")
        // The same JSON value as today's unsorted text, and it reads back.
        let today = try Before.entry(entry, format: format, sortedKeys: false)
        #expect(try Self.value(text) == Self.value(today))
        #expect(text.utf8.count == today.utf8.count)
        // (Rows listing their changed columns are no entry of format 1.)
        guard format.mergesByProperty || entry.tables.allSatisfy({ $0.rows.allSatisfy { !$0.isPartial } }) else { continue }
        var expected = entry
        for index in expected.conflicts.indices { expected.conflicts[index].sequence = 5 }
        #expect(try LogEntry.decode(text, store: "main", sequence: 5, formats: Self.formats) == expected)
      }
    }
  }

  @Test func imagesAndColumnsAreTheBytesTheyWere() throws {
    var random = SplitMix64(seed: 40)
    var images: [[RowValue]] = [[], [.null], Self.reals.map(RowValue.real), Self.awkward.map(RowValue.text)]
    for _ in 0..<500 { images.append((0..<random.next(upTo: 8)).map { _ in Self.randomValue(&random) }) }
    for values in images {
      for format in Self.formats {
        #expect(try StoredImage.encode(values, format: format) == Before.image(values, format: format))
      }
    }
    for columns in [[], ["a"], Self.awkward, ["title", "body"]] {
      #expect(LogJSON.columns(columns) == (try Before.columns(columns)))
    }
  }

  /// Every Unicode scalar, and doubles of every kind.
  @Test func everyScalarAndEveryKindOfNumberIsWrittenAlike() throws {
    var scalars = String.UnicodeScalarView()
    for value in UInt32(0)...0x10FFFF {
      if let scalar = Unicode.Scalar(value) { scalars.append(scalar) }
    }
    let all = String(scalars)
    #expect(LogJSON.columns([all]) == (try Before.columns([all])))
    var random = SplitMix64(seed: 41)
    var reals = Self.reals
    for _ in 0..<20_000 {
      let real = Double(bitPattern: random.next())
      if !real.isNaN { reals.append(real) }
    }
    for format in [LogFormat.v1, .v2] {
      #expect(try StoredImage.encode(reals.map(RowValue.real), format: format) == Before.image(reals.map(RowValue.real), format: format))
    }
    let integers: [Int64] = [0, 1, -1, .min, .max] + (0..<1000).map { _ in Int64(bitPattern: random.next()) }
    #expect(try StoredImage.encode(integers.map(RowValue.integer), format: .v1) == Before.image(integers.map(RowValue.integer), format: .v1))
    // A NaN (SQLite keeps none) is refused, as before.
    #expect(throws: EncodingError.self) { try StoredImage.encode([.real(.nan)], format: .v1) }
    #expect(throws: EncodingError.self) { try Before.image([.real(.nan)], format: .v1) }
  }

  // MARK: Helpers

  /// A JSON text as a value to compare (objects whatever their order).
  static func value(_ text: String) throws -> NSObject {
    try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) as! NSObject
  }

  static func randomString(_ random: inout SplitMix64) -> String {
    if random.next(upTo: 3) == 0 { return awkward[random.next(upTo: awkward.count)] }
    let pool = Array("ab/\\\"\n\t\u{1}\u{1f} é🙂{}[],:0")
    return String((0..<random.next(upTo: 12)).map { _ in pool[random.next(upTo: pool.count)] })
  }

  static func randomValue(_ random: inout SplitMix64) -> RowValue {
    switch random.next(upTo: 6) {
    case 0: .null
    case 1: .integer(Int64(bitPattern: random.next()) >> random.next(upTo: 64))
    case 2: .real(reals[random.next(upTo: reals.count)] * Double(random.next(upTo: 1000) + 1) / 7)
    case 3: .text(randomString(&random))
    case 4: .blob(Data((0..<random.next(upTo: 9)).map { _ in UInt8(truncatingIfNeeded: random.next()) }))
    default: .reference(randomString(&random))
    }
  }

  static func randomEntry(_ random: inout SplitMix64) -> LogEntry {
    let tables = (0..<random.next(upTo: 3)).map { _ -> TableImage in
      let columns = (0..<random.next(upTo: 5) + 1).map { _ in randomString(&random) }
      let rows = (0..<random.next(upTo: 4)).map { _ -> RowImage in
        let partial = random.next(upTo: 3) == 0
        let changed = partial ? Array(columns.indices.filter { _ in random.next(upTo: 2) == 0 }) : nil
        let count = changed?.count ?? columns.count
        return RowImage(
          gid: randomString(&random), rowID: random.next(upTo: 4) == 0 ? nil : Int64(random.next(upTo: 1_000_000)),
          base: Int64(random.next(upTo: 100)),
          values: random.next(upTo: 5) == 0 ? nil : (0..<count).map { _ in randomValue(&random) },
          lost: [nil, true, false][random.next(upTo: 3)], changed: changed)
      }
      return TableImage(name: randomString(&random), columns: columns, isSnapshot: random.next(upTo: 2) == 0, rows: rows)
    }
    let notes = random.next(upTo: 2) == 0
      ? nil : (0..<random.next(upTo: 3)).map { _ in ShippedNote(name: randomString(&random), payload: Data(randomString(&random).utf8)) }
    return LogEntry(tables: tables, conflicts: [], notes: notes)
  }
}

/// SplitMix64: the same numbers for the same seed, on every run.
struct SplitMix64 {
  private var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
  mutating func next(upTo bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
