import ArgumentParser
import Foundation
import GroupSync

struct DefaultsCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "defaults",
    abstract: "Read, change and watch the group's shared defaults.",
    discussion: """
      groupsync defaults DIR get KEY | set KEY VALUE [--type T] | remove KEY | list | watch
      VALUE is JSON for --type json (arrays, objects, numbers), else taken as the given type
      (string by default; bool, int, double, date as seconds since 1970, data as base64).
      """)

  @Argument(help: "The group folder.")
  var directory: String

  @Argument(help: "get, set, remove, list or watch.")
  var action: String

  @Argument(help: "The key (get, set, remove) and the value (set).")
  var operands: [String] = []

  @Option(name: .long, help: "The suite.")
  var suite: String = "default"

  @Option(name: .long, help: "The value's type for set: string, bool, int, double, date, data or json.")
  var type: String = "string"

  func validate() throws {
    let expected = ["get": 1, "set": 2, "remove": 1, "list": 0, "watch": 0]
    guard let count = expected[action] else { throw ValidationError("unknown action '\(action)': use get, set, remove, list or watch") }
    guard operands.count == count else { throw ValidationError("\(action) takes \(count) operand(s), not \(operands.count)") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      let defaults = try group.defaults(suite: suite)
      switch action {
      case "get":
        guard let value = try defaults.value(forKey: operands[0]) else { throw ExitCode(2) }
        printLine(Self.describe(value))
      case "set":
        try defaults.set(try Self.parse(operands[1], as: type), forKey: operands[0])
      case "remove":
        try defaults.removeValue(forKey: operands[0])
      case "list":
        for (key, value) in try defaults.allValues().sorted(by: { $0.key < $1.key }) {
          printLine("\(key)\t\(Self.describe(value))")
        }
      default:
        let changes = try defaults.changes()
        let stopper = SignalStopper { Foundation.exit(0) }
        defer { withExtendedLifetime(stopper) {} }
        FileHandle.standardError.write(Data("groupsync: watching defaults suite \(suite)\n".utf8))
        for await event in changes {
          switch event {
          case .changed(let change):
            printLine("\(change.key)\t\(Self.describe(change.oldValue)) -> \(Self.describe(change.newValue))")
          case .reset:
            printLine("reset: read every key again")
          }
        }
      }
    }
  }

  static func parse(_ text: String, as type: String) throws -> DefaultsValue {
    let expected = [
      "bool": "a bool (true or false)", "int": "an int", "double": "a double",
      "date": "a date (seconds since 1970)", "data": "base64 data", "json": "JSON",
    ]
    func bad() -> ValidationError { ValidationError("'\(text)' is not \(expected[type] ?? type)") }
    switch type {
    case "string": return .string(text)
    case "bool":
      guard let value = Bool(text) else { throw bad() }
      return .bool(value)
    case "int":
      guard let value = Int64(text) else { throw bad() }
      return .int(value)
    case "double":
      guard let value = Double(text) else { throw bad() }
      return .double(value)
    case "date":
      guard let value = Double(text) else { throw bad() }
      return .date(Date(timeIntervalSince1970: value))
    case "data":
      guard let value = Data(base64Encoded: text) else { throw bad() }
      return .data(value)
    case "json":
      guard let value = try? JSONDecoder().decode(PlainJSON.self, from: Data(text.utf8)).value else { throw bad() }
      return value
    default:
      throw ValidationError("unknown type '\(type)': use string, bool, int, double, date, data or json")
    }
  }

  /// A value as `get`, `list` and `watch` print it: a string as it is,
  /// other scalars as text, arrays, dictionaries and `Codable` values as
  /// JSON (in which data is a base64 string and a date an ISO 8601 one).
  static func describe(_ value: DefaultsValue?) -> String {
    guard let value else { return "(none)" }
    switch value {
    case .bool(let value): return String(value)
    case .int(let value): return String(value)
    case .double(let value): return String(value)
    case .string(let value): return value
    case .data(let value): return "data:" + value.base64EncodedString()
    case .date(let value): return ISO8601DateFormatter().string(from: value)
    case .array, .dictionary, .codable: return json(value)
    }
  }

  /// `value` as JSON text (object keys sorted).
  static func json(_ value: DefaultsValue) -> String {
    switch value {
    case .bool(let value): return String(value)
    case .int(let value): return String(value)
    case .double(let value): return value.isFinite ? String(value) : quoted(String(value))
    case .string(let value): return quoted(value)
    case .data(let value): return quoted(value.base64EncodedString())
    case .date(let value): return quoted(ISO8601DateFormatter().string(from: value))
    case .array(let values): return "[" + values.map(json).joined(separator: ",") + "]"
    case .dictionary(let values):
      return "{" + values.sorted { $0.key < $1.key }.map { quoted($0.key) + ":" + json($0.value) }.joined(separator: ",")
        + "}"
    case .codable(let json): return String(decoding: json, as: UTF8.self)
    }
  }

  /// A JSON string literal.
  private static func quoted(_ text: String) -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.withoutEscapingSlashes]
    return String(decoding: (try? encoder.encode(text)) ?? Data("\"\"".utf8), as: UTF8.self)
  }
}

/// Plain JSON as a defaults value: true/false, integers, other numbers,
/// strings, arrays and objects (null has none).
private struct PlainJSON: Decodable {
  let value: DefaultsValue

  init(from decoder: any Decoder) throws {
    if var array = try? decoder.unkeyedContainer() {
      var values: [DefaultsValue] = []
      while !array.isAtEnd { values.append(try array.decode(PlainJSON.self).value) }
      value = .array(values)
    } else if let object = try? decoder.container(keyedBy: AnyKey.self) {
      var values: [String: DefaultsValue] = [:]
      for key in object.allKeys { values[key.stringValue] = try object.decode(PlainJSON.self, forKey: key).value }
      value = .dictionary(values)
    } else {
      let single = try decoder.singleValueContainer()
      if let bool = try? single.decode(Bool.self) {
        value = .bool(bool)
      } else if let int = try? single.decode(Int64.self) {
        value = .int(int)
      } else if let double = try? single.decode(Double.self) {
        value = .double(double)
      } else {
        value = .string(try single.decode(String.self))
      }
    }
  }

  struct AnyKey: CodingKey {
    let stringValue: String
    init(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
  }
}

struct Post: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Post a notification to every member of the group listening for its name or a prefix of it.")

  @Argument(help: "The group folder.")
  var directory: String

  @Argument(help: "The notification's name.")
  var name: String

  @Option(name: .long, help: "The payload, as text (at most 64 KiB).")
  var payload: String = ""

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      try GroupFolder(path: directory, create: false).notifications.post(name, payload: Array(payload.utf8))
    }
  }
}
