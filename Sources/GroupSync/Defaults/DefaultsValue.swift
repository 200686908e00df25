import Foundation

/// A value in group defaults: the property-list types, arrays and
/// dictionaries of them, and `Codable` values (kept as JSON).
///
/// For example:
///
/// ```swift
/// try defaults.set(.bool(true), forKey: "sync.enabled")
/// try defaults.set(.dictionary(["w": .int(320), "h": .int(200)]), forKey: "widget.size")
/// ```
public indirect enum DefaultsValue: Sendable, Equatable, Hashable {
  case bool(Bool)
  case int(Int64)
  case double(Double)
  case string(String)
  case data(Data)
  case date(Date)
  case array([DefaultsValue])
  case dictionary([String: DefaultsValue])
  /// A `Codable` value, as the JSON its encoder wrote.
  case codable(Data)

  /// Encodes `value` with a JSONEncoder (sorted keys, so that equal values
  /// are equal bytes).
  public init<T: Encodable>(encoding value: T) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    encoder.dateEncodingStrategy = .millisecondsSince1970
    self = .codable(try encoder.encode(value))
  }

  /// Decodes a `.codable` value.
  public func decode<T: Decodable>(_ type: T.Type) throws -> T {
    guard case .codable(let json) = self else {
      throw GroupSyncError.invalidDefaultsValue(reason: "\(self.kind) value is not a Codable value")
    }
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .millisecondsSince1970
    return try decoder.decode(type, from: json)
  }

  /// The value's kind, as the CLI and errors name it.
  public var kind: String {
    switch self {
    case .bool: "bool"
    case .int: "int"
    case .double: "double"
    case .string: "string"
    case .data: "data"
    case .date: "date"
    case .array: "array"
    case .dictionary: "dictionary"
    case .codable: "codable"
    }
  }

  /// The value if it is a `.bool`, else nil.
  public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
  /// The value if it is an `.int`, else nil.
  public var intValue: Int64? { if case .int(let value) = self { value } else { nil } }
  /// The value if it is a `.double`, else nil.
  public var doubleValue: Double? { if case .double(let value) = self { value } else { nil } }
  /// The value if it is a `.string`, else nil.
  public var stringValue: String? { if case .string(let value) = self { value } else { nil } }
  /// The value if it is `.data`, else nil.
  public var dataValue: Data? { if case .data(let value) = self { value } else { nil } }
  /// The value if it is a `.date`, else nil.
  public var dateValue: Date? { if case .date(let value) = self { value } else { nil } }
  /// The value if it is an `.array`, else nil.
  public var arrayValue: [DefaultsValue]? { if case .array(let value) = self { value } else { nil } }
  /// The value if it is a `.dictionary`, else nil.
  public var dictionaryValue: [String: DefaultsValue]? { if case .dictionary(let value) = self { value } else { nil } }
}

extension DefaultsValue: Codable {
  /// Stored as a one-key JSON object naming the type: `{"int": 42}`,
  /// `{"data": "base64"}`, `{"date": 1763800000.5}`, `{"codable": "base64 of JSON"}`,
  /// so every value reads back with the type it was written with.
  private enum Key: String, CodingKey {
    case bool, int, double, string, data, date, array, dictionary, codable
  }

  public init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: Key.self)
    guard container.allKeys.count == 1, let key = container.allKeys.first else {
      throw DecodingError.dataCorrupted(
        .init(codingPath: decoder.codingPath, debugDescription: "a defaults value has exactly one type key"))
    }
    switch key {
    case .bool: self = .bool(try container.decode(Bool.self, forKey: key))
    case .int: self = .int(try container.decode(Int64.self, forKey: key))
    case .double: self = .double(try container.decode(Double.self, forKey: key))
    case .string: self = .string(try container.decode(String.self, forKey: key))
    case .data: self = .data(try container.decode(Data.self, forKey: key))
    case .date: self = .date(Date(timeIntervalSince1970: try container.decode(Double.self, forKey: key)))
    case .array: self = .array(try container.decode([DefaultsValue].self, forKey: key))
    case .dictionary: self = .dictionary(try container.decode([String: DefaultsValue].self, forKey: key))
    case .codable: self = .codable(try container.decode(Data.self, forKey: key))
    }
  }

  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: Key.self)
    switch self {
    case .bool(let value): try container.encode(value, forKey: .bool)
    case .int(let value): try container.encode(value, forKey: .int)
    case .double(let value): try container.encode(value, forKey: .double)
    case .string(let value): try container.encode(value, forKey: .string)
    case .data(let value): try container.encode(value, forKey: .data)
    case .date(let value): try container.encode(value.timeIntervalSince1970, forKey: .date)
    case .array(let value): try container.encode(value, forKey: .array)
    case .dictionary(let value): try container.encode(value, forKey: .dictionary)
    case .codable(let value): try container.encode(value, forKey: .codable)
    }
  }

  /// The stored form: compact JSON with sorted keys.
  func encoded() throws -> Data {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return try encoder.encode(self)
  }

  static func decoded(_ data: Data) throws -> DefaultsValue {
    try JSONDecoder().decode(DefaultsValue.self, from: data)
  }
}
