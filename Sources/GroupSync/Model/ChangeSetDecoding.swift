import Foundation

/// Decoding of change-set files: a single-pass parser over the bytes, as
/// every listener runs it on every delivery.
extension ChangeSetEncoding {

  /// How deeply a file's arrays and objects may nest, the top-level object
  /// counting as one. Deeper files are rejected as corrupt; the parser
  /// never recurses, so hostile input cannot exhaust the stack.
  static let maximumDepth = 64

  /// Decodes a file; `name` is only used in errors.
  ///
  /// A single pass over the bytes accepts exactly JSON text (RFC 8259) in
  /// UTF-8, after an optional UTF-8 byte-order mark. Keys may come in any
  /// order (a repeated key: the last one wins) and unknown keys are skipped
  /// whatever their value. Where an integer is required, a number with a
  /// fraction or an exponent, or one outside Int64, is the wrong type.
  /// Keys are checked in a fixed order, `format` and `version` first, so a
  /// foreign file is reported as such even if the rest is unreadable.
  public static func decode(_ bytes: [UInt8], name: String = "<bytes>") throws -> ChangeSet {
    let fields: Fields
    do {
      fields = try bytes.withUnsafeBufferPointer { buffer throws(Malformed) in
        var parser = Parser(buffer)
        defer { parser.scratch?.deallocate() }
        return try parser.document()
      }
    } catch {
      let reason =
        error == .notAnObject ? "not a change-set JSON object" : "not a change-set JSON object (corrupt JSON)"
      throw GroupSyncError.invalidChangeSet(file: name, reason: reason)
    }
    return try fields.changeSet(file: name)
  }

  /// Why the bytes are not a JSON object.
  fileprivate enum Malformed: Error {
    /// Not JSON text, or nested too deeply.
    case corrupt
    /// JSON text whose top level is an array.
    case notAnObject
  }

  /// A value at a key that must be a string or an integer, as parsed.
  fileprivate enum Field<Value> {
    case missing
    case wrongType
    case value(Value)
  }

  /// A value at a key that must be an array or an object.
  fileprivate enum Presence {
    case missing
    case wrongType
    case present
  }

  /// The first thing wrong in one entry of `tables`.
  fileprivate enum TableIssue {
    case badName
    case notAnObject
    case notIntegers(key: StaticString)
  }

  /// The top-level keys of a file as parsed: syntax is checked while
  /// parsing, types and values afterwards, in the order `changeSet` asks.
  fileprivate struct Fields {
    /// nil: the expected format; otherwise the other one.
    var format: Field<String?> = .missing
    var version: Field<Int64> = .missing
    /// The store UUID, or the string that is not one.
    var store: Field<Result<UUID, StoreIDError>> = .missing
    var sequence: Field<Int64> = .missing
    var committedAt: Field<Int64> = .missing
    var pid: Field<Int64> = .missing
    var tablesPresence = Presence.missing
    var tables: [String: TableChanges] = [:]
    /// Tables with an issue, with their position in the file; usually empty.
    var tableIssues: [String: (position: Int, issue: TableIssue)] = [:]
    var invalidatedPresence = Presence.missing
    var invalidated: Set<String> = []
    var invalidatedHasBadName = false

    func changeSet(file: String) throws -> ChangeSet {
      func fail(_ reason: String) -> GroupSyncError { GroupSyncError.invalidChangeSet(file: file, reason: reason) }
      func integer(_ field: Field<Int64>, _ key: String) throws -> Int64 {
        switch field {
        case .missing: throw fail("missing key '\(key)'")
        case .wrongType: throw fail("wrong type at '\(key)': expected an integer")
        case .value(let value): return value
        }
      }
      func present(_ presence: Presence, _ key: String) throws {
        switch presence {
        case .missing: throw fail("missing key '\(key)'")
        case .wrongType: throw fail("wrong type at '\(key)'")
        case .present: break
        }
      }

      switch format {
      case .missing: throw fail("missing key 'format'")
      case .wrongType: throw fail("wrong type at 'format'")
      case .value(nil): break
      case .value(let other?): throw fail("format is '\(other)', expected '\(ChangeSetEncoding.format)'")
      }
      let fileVersion = try integer(version, "version")
      guard fileVersion >= 1 && fileVersion <= ChangeSetEncoding.version else {
        throw fail("version \(fileVersion) is not supported (this library reads 1...\(ChangeSetEncoding.version))")
      }
      let storeID: UUID
      switch store {
      case .missing: throw fail("missing key 'store'")
      case .wrongType: throw fail("wrong type at 'store'")
      case .value(.success(let id)): storeID = id
      case .value(.failure(let error)): throw fail("'\(error.text)' is not a store UUID")
      }
      let fileSequence = try integer(sequence, "seq")
      guard fileSequence > 0 else { throw fail("seq \(fileSequence) is not positive") }
      let fileCommittedAt = try integer(committedAt, "committedAtNs")
      guard let filePID = Int32(exactly: try integer(pid, "pid")) else {
        throw fail("wrong type at 'pid': expected an integer")
      }
      try present(tablesPresence, "tables")
      if let (table, (_, issue)) = tableIssues.min(by: { $0.value.position < $1.value.position }) {
        switch issue {
        case .badName: throw fail("a table name is empty or contains NUL")
        case .notAnObject: throw fail("wrong type at 'tables.\(table)': expected an object")
        case .notIntegers(let key): throw fail("wrong type at 'tables.\(table).\(key)': expected an array of integers")
        }
      }
      try present(invalidatedPresence, "invalidatedTables")
      if invalidatedHasBadName { throw fail("an invalidated table name is empty or contains NUL") }
      return ChangeSet(
        storeID: storeID, sequence: fileSequence, committedAtNanoseconds: fileCommittedAt, writerProcessID: filePID,
        tables: tables, invalidatedTableNames: invalidated)
    }
  }

  /// A `store` string that is not a UUID.
  fileprivate struct StoreIDError: Error {
    let text: String
  }

  /// A decoded string: bytes of the input when it has no escapes, else of
  /// the parser's scratch buffer (valid until the next string is parsed).
  fileprivate struct Span {
    var start: UnsafePointer<UInt8>
    var count: Int
    /// Whether it contains U+0000 (only possible through `\u0000`).
    var hasNUL: Bool
  }

  /// The keys the parser knows.
  fileprivate enum Key {
    case format, version, store, seq, committedAtNs, pid, tables, invalidatedTables
    case inserted, updated, deleted
    case unknown
  }

  /// A JSON parser specialised to the change-set file. Reading past the end
  /// yields 0, which no rule accepts, so bounds need no separate checks.
  fileprivate struct Parser {
    let base: UnsafePointer<UInt8>?
    let end: Int
    var position = 0
    /// Where strings with escapes are decoded, allocated on first use with
    /// room for the rest of the input (a decoded string is never longer
    /// than its JSON form); the caller deallocates it.
    var scratch: UnsafeMutablePointer<UInt8>?
    var scratchCount = 0

    init(_ buffer: UnsafeBufferPointer<UInt8>) {
      base = buffer.baseAddress
      end = buffer.count
    }

    @inline(__always) func byte(_ index: Int) -> UInt8 {
      index < end ? base.unsafelyUnwrapped[index] : 0
    }

    @inline(__always) static func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

    // MARK: Structure

    mutating func document() throws(Malformed) -> Fields {
      if byte(0) == 0xEF && byte(1) == 0xBB && byte(2) == 0xBF { position = 3 }
      skipWhitespace()
      switch byte(position) {
      case UInt8(ascii: "{"):
        let fields = try topLevelObject()
        skipWhitespace()
        guard position == end else { throw .corrupt }
        return fields
      case UInt8(ascii: "["):
        try skipValue(depth: 0)
        skipWhitespace()
        guard position == end else { throw .corrupt }
        throw .notAnObject
      default:
        throw .corrupt
      }
    }

    @inline(__always) mutating func skipWhitespace() {
      while true {
        switch byte(position) {
        case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): position += 1
        default: return
        }
      }
    }

    /// At `{` or `[`: enters the container. False if it is empty (and has
    /// been left); true with the position at its first member or element.
    @inline(__always) mutating func enter(closedBy close: UInt8) -> Bool {
      position += 1
      skipWhitespace()
      if byte(position) == close {
        position += 1
        return false
      }
      return true
    }

    /// After a member or element: true at the next one, false once the
    /// container is left.
    @inline(__always) mutating func next(closedBy close: UInt8) throws(Malformed) -> Bool {
      skipWhitespace()
      let separator = byte(position)
      position += 1
      if separator == UInt8(ascii: ",") {
        skipWhitespace()
        return true
      }
      guard separator == close else { throw .corrupt }
      return false
    }

    /// A member's key and colon; leaves the position at its value.
    @inline(__always) mutating func memberKey() throws(Malformed) -> Span {
      guard byte(position) == UInt8(ascii: "\"") else { throw .corrupt }
      let key = try string()
      skipWhitespace()
      guard byte(position) == UInt8(ascii: ":") else { throw .corrupt }
      position += 1
      skipWhitespace()
      return key
    }

    mutating func topLevelObject() throws(Malformed) -> Fields {
      var fields = Fields()
      guard enter(closedBy: UInt8(ascii: "}")) else { return fields }
      repeat {
        let key = try memberKey()
        switch classify(key) {
        case .format:
          if let value = try stringValue(depth: 1) {
            fields.format = .value(equals(value, "groupsync-changeset") ? nil : makeString(value))
          } else {
            fields.format = .wrongType
          }
        case .version: fields.version = try integerValue(depth: 1)
        case .store:
          if let value = try stringValue(depth: 1) {
            let id = uuid(Self.bytes(value))
            fields.store = .value(id.map { .success($0) } ?? .failure(StoreIDError(text: makeString(value))))
          } else {
            fields.store = .wrongType
          }
        case .seq: fields.sequence = try integerValue(depth: 1)
        case .committedAtNs: fields.committedAt = try integerValue(depth: 1)
        case .pid: fields.pid = try integerValue(depth: 1)
        case .tables: try tables(into: &fields)
        case .invalidatedTables: try invalidatedTables(into: &fields)
        case .inserted, .updated, .deleted, .unknown: try skipValue(depth: 1)
        }
      } while try next(closedBy: UInt8(ascii: "}"))
      return fields
    }

    /// The value of `tables`, a member of the top-level object.
    mutating func tables(into fields: inout Fields) throws(Malformed) {
      fields.tables = [:]
      fields.tableIssues = [:]
      guard byte(position) == UInt8(ascii: "{") else {
        try skipValue(depth: 1)
        fields.tablesPresence = .wrongType
        return
      }
      fields.tablesPresence = .present
      guard enter(closedBy: UInt8(ascii: "}")) else { return }
      var index = 0
      repeat {
        let nameSpan = try memberKey()
        let name = makeString(nameSpan)
        var issue: TableIssue? = nameSpan.count == 0 || nameSpan.hasNUL ? .badName : nil
        var changes = TableChanges()
        if byte(position) == UInt8(ascii: "{") {
          var insertedOK = true
          var updatedOK = true
          var deletedOK = true
          if enter(closedBy: UInt8(ascii: "}")) {
            repeat {
              let key = try memberKey()
              switch classify(key, inTable: true) {
              case .inserted:
                let rowIDs = try integerArray(depth: 3)
                changes.inserted = rowIDs ?? []
                insertedOK = rowIDs != nil
              case .updated:
                let rowIDs = try integerArray(depth: 3)
                changes.updated = rowIDs ?? []
                updatedOK = rowIDs != nil
              case .deleted:
                let rowIDs = try integerArray(depth: 3)
                changes.deleted = rowIDs ?? []
                deletedOK = rowIDs != nil
              default:
                try skipValue(depth: 3)
              }
            } while try next(closedBy: UInt8(ascii: "}"))
          }
          if issue == nil {
            if !insertedOK {
              issue = .notIntegers(key: "inserted")
            } else if !updatedOK {
              issue = .notIntegers(key: "updated")
            } else if !deletedOK {
              issue = .notIntegers(key: "deleted")
            }
          }
        } else {
          try skipValue(depth: 2)
          if issue == nil { issue = .notAnObject }
        }
        // A repeated name: the last entry wins, as in a dictionary.
        if let issue {
          fields.tables.removeValue(forKey: name)
          fields.tableIssues[name] = (index, issue)
        } else {
          if !fields.tableIssues.isEmpty { fields.tableIssues.removeValue(forKey: name) }
          fields.tables[name] = changes
        }
        index += 1
      } while try next(closedBy: UInt8(ascii: "}"))
    }

    /// The value of `invalidatedTables`, a member of the top-level object.
    mutating func invalidatedTables(into fields: inout Fields) throws(Malformed) {
      fields.invalidated = []
      fields.invalidatedHasBadName = false
      guard byte(position) == UInt8(ascii: "[") else {
        try skipValue(depth: 1)
        fields.invalidatedPresence = .wrongType
        return
      }
      var allStrings = true
      if enter(closedBy: UInt8(ascii: "]")) {
        repeat {
          if allStrings && byte(position) == UInt8(ascii: "\"") {
            let table = try string()
            if table.count == 0 || table.hasNUL { fields.invalidatedHasBadName = true }
            fields.invalidated.insert(makeString(table))
          } else {
            try skipValue(depth: 2)
            allStrings = false
          }
        } while try next(closedBy: UInt8(ascii: "]"))
      }
      fields.invalidatedPresence = allStrings ? .present : .wrongType
      if !allStrings {
        fields.invalidated = []
        fields.invalidatedHasBadName = false
      }
    }

    /// A value that must be an array of integers; nil if it is anything else.
    /// `depth`: the containers around it.
    mutating func integerArray(depth: Int) throws(Malformed) -> [Int64]? {
      guard byte(position) == UInt8(ascii: "[") else {
        try skipValue(depth: depth)
        return nil
      }
      var values: [Int64] = []
      guard enter(closedBy: UInt8(ascii: "]")) else { return values }
      var allIntegers = true
      repeat {
        let first = byte(position)
        if allIntegers && (first == UInt8(ascii: "-") || Self.isDigit(first)) {
          if let value = try number() {
            values.append(value)
          } else {
            allIntegers = false
          }
        } else {
          try skipValue(depth: depth + 1)
          allIntegers = false
        }
      } while try next(closedBy: UInt8(ascii: "]"))
      return allIntegers ? values : nil
    }

    /// A value that must be an integer.
    mutating func integerValue(depth: Int) throws(Malformed) -> Field<Int64> {
      let first = byte(position)
      if first == UInt8(ascii: "-") || Self.isDigit(first) {
        if let value = try number() { return .value(value) }
        return .wrongType
      }
      try skipValue(depth: depth)
      return .wrongType
    }

    /// A value that must be a string; nil (after skipping it) if it is not.
    mutating func stringValue(depth: Int) throws(Malformed) -> Span? {
      if byte(position) == UInt8(ascii: "\"") { return try string() }
      try skipValue(depth: depth)
      return nil
    }

    /// Skips any value, checking its syntax, without recursion. `depth`:
    /// the containers around it.
    mutating func skipValue(depth: Int) throws(Malformed) {
      // Bit i is set when the i-th container opened here is an object.
      var objects: UInt64 = 0
      var levels = 0
      while true {
        // At a value.
        let first = byte(position)
        switch first {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
          guard depth + levels < maximumDepth else { throw .corrupt }
          let isObject = first == UInt8(ascii: "{")
          if enter(closedBy: isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
            if isObject {
              objects |= 1 << UInt64(levels)
              _ = try memberKey()
            } else {
              objects &= ~(1 << UInt64(levels))
            }
            levels += 1
            continue
          }
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try number()
        default: throw .corrupt
        }
        // After a value: leave the containers it completes.
        while true {
          if levels == 0 { return }
          let isObject = objects & (1 << UInt64(levels - 1)) != 0
          if try next(closedBy: isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
            if isObject { _ = try memberKey() }
            break
          }
          levels -= 1
        }
      }
    }

    mutating func literal(_ text: StaticString) throws(Malformed) {
      let bytes = UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
      for offset in 0..<bytes.count where byte(position + offset) != bytes[offset] { throw .corrupt }
      position += bytes.count
    }

    // MARK: Numbers

    /// At `-` or a digit: a JSON number, or nil if it has a fraction or an
    /// exponent or lies outside Int64.
    mutating func number() throws(Malformed) -> Int64? {
      let negative = byte(position) == UInt8(ascii: "-")
      if negative { position += 1 }
      var current = byte(position)
      guard Self.isDigit(current) else { throw .corrupt }
      var magnitude: UInt64 = 0
      let digitsStart = position
      if current == UInt8(ascii: "0") {
        position += 1
        current = byte(position)
        guard !Self.isDigit(current) else { throw .corrupt }  // a leading zero
      } else {
        repeat {
          magnitude = magnitude &* 10 &+ UInt64(current &- UInt8(ascii: "0"))
          position += 1
          current = byte(position)
        } while Self.isDigit(current)
      }
      // 19 digits always fit in UInt64 (more wrap around, but never fit in Int64).
      var isInteger = position - digitsStart <= 19
      if current == UInt8(ascii: ".") {
        position += 1
        try skipDigits()
        isInteger = false
        current = byte(position)
      }
      if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
        position += 1
        if byte(position) == UInt8(ascii: "+") || byte(position) == UInt8(ascii: "-") { position += 1 }
        try skipDigits()
        isInteger = false
      }
      guard isInteger else { return nil }
      if negative {
        return magnitude <= UInt64(1) << 63 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil
      }
      return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }

    /// One or more digits.
    @inline(__always) mutating func skipDigits() throws(Malformed) {
      guard Self.isDigit(byte(position)) else { throw .corrupt }
      repeat { position += 1 } while Self.isDigit(byte(position))
    }

    // MARK: Strings

    /// At `"`: a string, its UTF-8 checked and its escapes decoded.
    mutating func string() throws(Malformed) -> Span {
      position += 1
      let start = position
      while true {
        // Skip plain ASCII eight bytes at a time.
        while position &+ 8 <= end {
          let word = UnsafeRawPointer(base.unsafelyUnwrapped + position).loadUnaligned(as: UInt64.self)
          let flags = Self.specialBytes(word)
          if flags != 0 {
            position += flags.trailingZeroBitCount >> 3
            break
          }
          position += 8
        }
        let current = byte(position)
        if current == UInt8(ascii: "\"") {
          position += 1
          return Span(start: base.unsafelyUnwrapped + start, count: position - 1 - start, hasNUL: false)
        }
        if current == UInt8(ascii: "\\") { return try escapedString(from: start) }
        if current < 0x20 { throw .corrupt }  // a control character, or the end
        position += current < 0x80 ? 1 : try utf8SequenceLength()
      }
    }

    /// The high bit of each byte of `word` (eight bytes of input, the first
    /// lowest) that is `"`, `\\`, below 0x20 or above 0x7F, except that bytes
    /// after such a byte may be flagged too: the lowest flag is exact.
    @inline(__always) static func specialBytes(_ word: UInt64) -> UInt64 {
      let ones: UInt64 = 0x0101_0101_0101_0101
      let word = UInt64(littleEndian: word)
      let quote = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
      let backslash = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
      let zeroInQuote = (quote &- ones) & ~quote
      let zeroInBackslash = (backslash &- ones) & ~backslash
      let control = (word &- ones &* 0x20) & ~word
      return (zeroInQuote | zeroInBackslash | control | word) & (ones &* 0x80)
    }

    /// The rest of a string that has escapes, decoded into `scratch`.
    mutating func escapedString(from start: Int) throws(Malformed) -> Span {
      if scratch == nil { scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: end - start) }
      let output = scratch.unsafelyUnwrapped
      scratchCount = position - start
      output.update(from: base.unsafelyUnwrapped + start, count: scratchCount)
      var hasNUL = false
      while true {
        let current = byte(position)
        if current == UInt8(ascii: "\"") {
          position += 1
          return Span(start: output, count: scratchCount, hasNUL: hasNUL)
        }
        if current == UInt8(ascii: "\\") {
          let escaped = byte(position + 1)
          position += 2
          switch escaped {
          case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): append(escaped)
          case UInt8(ascii: "b"): append(0x08)
          case UInt8(ascii: "f"): append(0x0C)
          case UInt8(ascii: "n"): append(0x0A)
          case UInt8(ascii: "r"): append(0x0D)
          case UInt8(ascii: "t"): append(0x09)
          case UInt8(ascii: "u"):
            var scalar = try hex4()
            if scalar & 0xFC00 == 0xD800 {
              guard byte(position) == UInt8(ascii: "\\") && byte(position + 1) == UInt8(ascii: "u") else {
                throw .corrupt  // a lone high surrogate
              }
              position += 2
              let low = try hex4()
              guard low & 0xFC00 == 0xDC00 else { throw .corrupt }
              scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if scalar & 0xFC00 == 0xDC00 {
              throw .corrupt  // a lone low surrogate
            }
            if scalar == 0 { hasNUL = true }
            appendUTF8(scalar)
          default:
            throw .corrupt
          }
        } else if current < 0x20 {
          throw .corrupt
        } else if current < 0x80 {
          append(current)
          position += 1
        } else {
          let length = try utf8SequenceLength()
          (output + scratchCount).update(from: base.unsafelyUnwrapped + position, count: length)
          scratchCount += length
          position += length
        }
      }
    }

    @inline(__always) mutating func append(_ byte: UInt8) {
      scratch.unsafelyUnwrapped[scratchCount] = byte
      scratchCount += 1
    }

    /// Four hex digits of a `\u` escape.
    mutating func hex4() throws(Malformed) -> UInt32 {
      var value: UInt32 = 0
      for offset in 0..<4 {
        guard let digit = hexValue(byte(position + offset)) else { throw .corrupt }
        value = value << 4 | UInt32(digit)
      }
      position += 4
      return value
    }

    mutating func appendUTF8(_ scalar: UInt32) {
      switch scalar {
      case 0..<0x80:
        append(UInt8(scalar))
      case 0x80..<0x800:
        append(UInt8(0xC0 | scalar >> 6))
        append(UInt8(0x80 | scalar & 0x3F))
      case 0x800..<0x10000:
        append(UInt8(0xE0 | scalar >> 12))
        append(UInt8(0x80 | scalar >> 6 & 0x3F))
        append(UInt8(0x80 | scalar & 0x3F))
      default:
        append(UInt8(0xF0 | scalar >> 18))
        append(UInt8(0x80 | scalar >> 12 & 0x3F))
        append(UInt8(0x80 | scalar >> 6 & 0x3F))
        append(UInt8(0x80 | scalar & 0x3F))
      }
    }

    /// At a byte ≥ 0x80: the length of the well-formed UTF-8 sequence there
    /// (no overlong forms, surrogates or values above U+10FFFF).
    mutating func utf8SequenceLength() throws(Malformed) -> Int {
      let lead = byte(position)
      let second = byte(position + 1)
      switch lead {
      case 0xC2...0xDF:
        guard second & 0xC0 == 0x80 else { throw .corrupt }
        return 2
      case 0xE0...0xEF:
        let lower: UInt8 = lead == 0xE0 ? 0xA0 : 0x80
        let upper: UInt8 = lead == 0xED ? 0x9F : 0xBF
        guard second >= lower && second <= upper && byte(position + 2) & 0xC0 == 0x80 else { throw .corrupt }
        return 3
      case 0xF0...0xF4:
        let lower: UInt8 = lead == 0xF0 ? 0x90 : 0x80
        let upper: UInt8 = lead == 0xF4 ? 0x8F : 0xBF
        guard second >= lower && second <= upper && byte(position + 2) & 0xC0 == 0x80
          && byte(position + 3) & 0xC0 == 0x80
        else { throw .corrupt }
        return 4
      default:
        throw .corrupt
      }
    }

    // MARK: Decoded strings

    @inline(__always) static func bytes(_ span: Span) -> UnsafeBufferPointer<UInt8> {
      UnsafeBufferPointer(start: span.start, count: span.count)
    }

    @inline(__always) func makeString(_ span: Span) -> String {
      String(decoding: Self.bytes(span), as: UTF8.self)
    }

    @inline(__always) func equals(_ span: Span, _ text: StaticString) -> Bool {
      guard span.count == text.utf8CodeUnitCount else { return false }
      let expected = text.utf8Start
      for index in 0..<span.count where span.start[index] != expected[index] { return false }
      return true
    }

    func classify(_ key: Span, inTable: Bool = false) -> Key {
      if inTable {
        switch key.count {
        case 8: return equals(key, "inserted") ? .inserted : .unknown
        case 7: return equals(key, "updated") ? .updated : equals(key, "deleted") ? .deleted : .unknown
        default: return .unknown
        }
      }
      switch key.count {
      case 3: return equals(key, "seq") ? .seq : equals(key, "pid") ? .pid : .unknown
      case 5: return equals(key, "store") ? .store : .unknown
      case 6: return equals(key, "format") ? .format : equals(key, "tables") ? .tables : .unknown
      case 7: return equals(key, "version") ? .version : .unknown
      case 13: return equals(key, "committedAtNs") ? .committedAtNs : .unknown
      case 17: return equals(key, "invalidatedTables") ? .invalidatedTables : .unknown
      default: return .unknown
      }
    }
  }

  @inline(__always) private static func hexValue(_ byte: UInt8) -> UInt8? {
    let digit = byte &- UInt8(ascii: "0")
    if digit < 10 { return digit }
    let letter = (byte | 0x20) &- UInt8(ascii: "a")
    if letter < 6 { return letter + 10 }
    return nil
  }

  /// `6F9619FF-8B86-D011-B42D-00C04FC964FF` (hex digits in either case),
  /// or nil.
  fileprivate static func uuid(_ text: UnsafeBufferPointer<UInt8>) -> UUID? {
    guard text.count == 36, let start = text.baseAddress else { return nil }
    guard start[8] == UInt8(ascii: "-") && start[13] == UInt8(ascii: "-") && start[18] == UInt8(ascii: "-")
      && start[23] == UInt8(ascii: "-")
    else { return nil }
    // The 32 hex digits, big-endian, in two halves.
    var high: UInt64 = 0
    var low: UInt64 = 0
    func hexDigits(_ offset: Int, _ count: Int, into value: inout UInt64) -> Bool {
      for index in offset..<offset + count {
        guard let digit = hexValue(start[index]) else { return false }
        value = value << 4 | UInt64(digit)
      }
      return true
    }
    guard hexDigits(0, 8, into: &high), hexDigits(9, 4, into: &high), hexDigits(14, 4, into: &high),
      hexDigits(19, 4, into: &low), hexDigits(24, 12, into: &low)
    else { return nil }
    var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    withUnsafeMutableBytes(of: &raw) { bytes in
      bytes.storeBytes(of: high.bigEndian, toByteOffset: 0, as: UInt64.self)
      bytes.storeBytes(of: low.bigEndian, toByteOffset: 8, as: UInt64.self)
    }
    return UUID(uuid: raw)
  }
}
