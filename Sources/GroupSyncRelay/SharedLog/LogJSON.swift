// LogJSON: the log's texts written in one pass, as JSONEncoder with sorted keys writes them.
import Foundation

/// Writes an entry's body, a row's image and a table's columns as JSON in
/// one pass over the values, without `Codable`'s containers: what a
/// shipment encodes on every commit, on a relay thread whose caches went
/// cold while it waited.
///
/// The text is byte for byte what `JSONEncoder` writes with `.sortedKeys`
/// (its escapes: `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, other
/// control characters `\u00xx`; its numbers; `Data` as base64), which is
/// one of the orders a `JSONEncoder` without `.sortedKeys` writes: that
/// one lists an object's keys in its dictionary's order, which changes
/// from process to process. Readers decode it with `JSONDecoder` as ever.
/// `LogJSONTests` compares the two.
struct LogJSON {
  private(set) var bytes: [UInt8] = []

  init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

  var text: String { String(decoding: bytes, as: UTF8.self) }

  // MARK: The log's texts

  /// `entry` as ``LogEntry/encoded(format:)`` stores it: format 1 as the
  /// plain object, later ones wrapped (`{"f":N,"e":…}`).
  static func entry(_ entry: LogEntry, format: LogFormat) throws -> String {
    var json = LogJSON(capacity: 128 + entry.rowCount * 128)
    json.openMark(format, key: "e")
    try json.write(entry, reversingValues: format.reversesValues)
    json.closeMark(format)
    return json.text
  }

  /// `values` as `gs_row.data` stores them (``StoredImage/encode(_:format:)``).
  static func image(_ values: [RowValue], format: LogFormat) throws -> String {
    var json = LogJSON(capacity: 16 + values.count * 24)
    json.openMark(format, key: "v")
    try json.write(values, reversed: format.reversesValues)
    json.closeMark(format)
    return json.text
  }

  /// A table's columns as `gs_row.columns` stores them: a JSON array.
  static func columns(_ columns: [String]) -> String {
    var json = LogJSON(capacity: 2 + columns.reduce(0) { $0 + $1.utf8.count + 3 })
    json.write(columns)
    return json.text
  }

  // MARK: Containers

  /// ``LogFormat/wrap(_:as:)``'s opening, written in place.
  private mutating func openMark(_ format: LogFormat, key: StaticString) {
    guard format != .v1 else { return }
    raw("{\"f\":")
    bytes.append(contentsOf: String(format.rawValue).utf8)
    raw(",\"")
    raw(key)
    raw("\":")
  }

  private mutating func closeMark(_ format: LogFormat) {
    if format != .v1 { bytes.append(UInt8(ascii: "}")) }
  }

  /// Keys in sorted order (by UTF-8), each written once: `first` says
  /// whether a comma goes before it.
  private mutating func key(_ name: StaticString, first: inout Bool) {
    if !first { bytes.append(UInt8(ascii: ",")) }
    first = false
    bytes.append(UInt8(ascii: "\""))
    raw(name)
    raw("\":")
  }

  private mutating func raw(_ text: StaticString) {
    bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
  }

  // MARK: The log's types, keys sorted

  /// ``LogEntry``: `c`, `n` (when there are notes), `t`.
  private mutating func write(_ entry: LogEntry, reversingValues: Bool) throws {
    var first = true
    bytes.append(UInt8(ascii: "{"))
    key("c", first: &first)
    try writeArray(entry.conflicts) { json, conflict in try json.write(conflict) }
    if let notes = entry.notes {
      key("n", first: &first)
      writeArray(notes) { json, note in json.write(note) }
    }
    key("t", first: &first)
    try writeArray(entry.tables) { json, table in try json.write(table, reversingValues: reversingValues) }
    bytes.append(UInt8(ascii: "}"))
  }

  /// ``TableImage``: `k`, `n`, `r`, `s`.
  private mutating func write(_ table: TableImage, reversingValues: Bool) throws {
    var first = true
    bytes.append(UInt8(ascii: "{"))
    key("k", first: &first)
    write(table.columns)
    key("n", first: &first)
    write(table.name)
    key("r", first: &first)
    try writeArray(table.rows) { json, row in try json.write(row, reversingValues: reversingValues) }
    key("s", first: &first)
    raw(table.isSnapshot ? "true" : "false")
    bytes.append(UInt8(ascii: "}"))
  }

  /// ``RowImage``: `b`, `c`, `g`, `i`, `l`, `v`, the optional ones only
  /// when set.
  private mutating func write(_ row: RowImage, reversingValues: Bool) throws {
    var first = true
    bytes.append(UInt8(ascii: "{"))
    key("b", first: &first)
    write(row.base)
    if let changed = row.changed {
      key("c", first: &first)
      writeArray(changed) { json, index in json.write(Int64(index)) }
    }
    key("g", first: &first)
    write(row.gid)
    if let rowID = row.rowID {
      key("i", first: &first)
      write(rowID)
    }
    if let lost = row.lost {
      key("l", first: &first)
      raw(lost ? "true" : "false")
    }
    if let values = row.values {
      key("v", first: &first)
      try write(values, reversed: reversingValues)
    }
    bytes.append(UInt8(ascii: "}"))
  }

  /// ``ShippedNote``: `name`, `payload` (base64).
  private mutating func write(_ note: ShippedNote) {
    var first = true
    bytes.append(UInt8(ascii: "{"))
    key("name", first: &first)
    write(note.name)
    key("payload", first: &first)
    write(note.payload.base64EncodedString())
    bytes.append(UInt8(ascii: "}"))
  }

  /// A conflict record, rare and many-keyed: through `JSONEncoder`.
  private mutating func write(_ conflict: ConflictRecord) throws {
    bytes.append(contentsOf: try Self.sortedEncoder.encode(conflict))
  }

  /// For the rare values written through `Codable`. `JSONEncoder` is
  /// safe to share between threads (its options are read under a lock).
  private static let sortedEncoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    return encoder
  }()

  // MARK: Values

  private mutating func write(_ values: [RowValue], reversed: Bool) throws {
    bytes.append(UInt8(ascii: "["))
    for index in values.indices {
      if index != values.startIndex { bytes.append(UInt8(ascii: ",")) }
      try write(values[reversed ? values.count - 1 - index : index])
    }
    bytes.append(UInt8(ascii: "]"))
  }

  /// ``RowValue``'s own encoding: `null`, or an object of one key.
  private mutating func write(_ value: RowValue) throws {
    switch value {
    case .null: raw("null")
    case .integer(let number):
      raw("{\"i\":")
      write(number)
      bytes.append(UInt8(ascii: "}"))
    case .real(let number):
      raw("{\"r\":")
      if number.isInfinite {
        raw(number > 0 ? "\"inf\"" : "\"-inf\"")
      } else {
        try write(number)
      }
      bytes.append(UInt8(ascii: "}"))
    case .text(let text):
      raw("{\"t\":")
      write(text)
      bytes.append(UInt8(ascii: "}"))
    case .blob(let data):
      raw("{\"b\":")
      write(data.base64EncodedString())
      bytes.append(UInt8(ascii: "}"))
    case .reference(let gid):
      raw("{\"g\":")
      write(gid)
      bytes.append(UInt8(ascii: "}"))
    }
  }

  private mutating func write(_ strings: [String]) {
    writeArray(strings) { json, string in json.write(string) }
  }

  private mutating func writeArray<Element>(_ elements: [Element], _ body: (inout LogJSON, Element) throws -> Void) rethrows {
    bytes.append(UInt8(ascii: "["))
    for index in elements.indices {
      if index != elements.startIndex { bytes.append(UInt8(ascii: ",")) }
      try body(&self, elements[index])
    }
    bytes.append(UInt8(ascii: "]"))
  }

  private mutating func write(_ number: Int64) {
    bytes.append(contentsOf: String(number).utf8)
  }

  /// A finite double as `JSONEncoder` writes it: Swift's shortest
  /// round-tripping form, without a trailing `.0`. A NaN (which SQLite
  /// stores as NULL) is refused, as `JSONEncoder` refuses it.
  private mutating func write(_ number: Double) throws {
    guard !number.isNaN else {
      throw EncodingError.invalidValue(
        number, .init(codingPath: [], debugDescription: "Unable to encode Double.nan directly in JSON."))
    }
    var text = number.description
    if text.hasSuffix(".0") { text.removeLast(2) }
    bytes.append(contentsOf: text.utf8)
  }

  /// A string with `JSONEncoder`'s escapes.
  private mutating func write(_ string: String) {
    bytes.append(UInt8(ascii: "\""))
    for byte in string.utf8 {
      switch byte {
      case UInt8(ascii: "\""): raw("\\\"")
      case UInt8(ascii: "\\"): raw("\\\\")
      case UInt8(ascii: "/"): raw("\\/")
      case 0x08: raw("\\b")
      case 0x0C: raw("\\f")
      case UInt8(ascii: "\n"): raw("\\n")
      case UInt8(ascii: "\r"): raw("\\r")
      case UInt8(ascii: "\t"): raw("\\t")
      case 0x00...0x1F:
        raw("\\u00")
        bytes.append(Self.hexDigits[Int(byte >> 4)])
        bytes.append(Self.hexDigits[Int(byte & 0x0F)])
      default: bytes.append(byte)
      }
    }
    bytes.append(UInt8(ascii: "\""))
  }

  private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}
