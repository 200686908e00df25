// One column's value as the log carries it (references as global IDs).
import Foundation
import GRDB

/// One column value of a shipped row image, with its SQLite storage class,
/// so that every host stores exactly what the origin stored: `null`,
/// `{"i":42}`, `{"r":1.5}` (`{"r":"inf"}`, `{"r":"-inf"}`), `{"t":"text"}`,
/// `{"b":"<base64>"}`, and `{"g":"<global ID>"}` for a reference: a
/// column that holds another row's rowid travels as that row's global ID
/// (rowids are each host's own; see ``RowReference``). Images carry
/// values, never SQL text: replayed `random()`, `now()` or triggers would
/// differ on each host.
public enum RowValue: Sendable, Equatable, Hashable, Codable, CustomStringConvertible {
  case null
  case integer(Int64)
  case real(Double)
  case text(String)
  case blob(Data)
  /// The row a reference column points at, by its global ID (only in
  /// shipped images; a host stores the row's rowid there).
  case reference(String)

  init(_ value: DatabaseValue) {
    switch value.storage {
    case .null: self = .null
    case .int64(let value): self = .integer(value)
    case .double(let value): self = .real(value)
    case .string(let value): self = .text(value)
    case .blob(let value): self = .blob(value)
    }
  }

  var databaseValue: DatabaseValue {
    switch self {
    case .null: .null
    case .integer(let value): value.databaseValue
    case .real(let value): value.databaseValue
    case .text(let value): value.databaseValue
    case .blob(let value): value.databaseValue
    // Translated before it reaches the store; never stored as such.
    case .reference(let gid): gid.databaseValue
    }
  }

  public var description: String {
    switch self {
    case .null: "NULL"
    case .integer(let value): String(value)
    case .real(let value): String(value)
    case .text(let value): "'" + value + "'"
    case .blob(let value): "x'" + value.map { String(format: "%02x", $0) }.joined() + "'"
    case .reference(let gid): "→" + gid
    }
  }

  private enum Key: String, CodingKey { case i, r, t, b, g }

  public init(from decoder: any Decoder) throws {
    if try decoder.singleValueContainer().decodeNil() {
      self = .null
      return
    }
    let container = try decoder.container(keyedBy: Key.self)
    if let value = try container.decodeIfPresent(Int64.self, forKey: .i) {
      self = .integer(value)
    } else if container.contains(.r) {
      if let value = try? container.decode(Double.self, forKey: .r) {
        self = .real(value)
      } else {
        switch try container.decode(String.self, forKey: .r) {
        case "inf": self = .real(.infinity)
        case "-inf": self = .real(-.infinity)
        case let other:
          throw DecodingError.dataCorruptedError(forKey: .r, in: container, debugDescription: "not a real: \(other)")
        }
      }
    } else if let value = try container.decodeIfPresent(String.self, forKey: .t) {
      self = .text(value)
    } else if let value = try container.decodeIfPresent(String.self, forKey: .g) {
      self = .reference(value)
    } else if let value = try container.decodeIfPresent(String.self, forKey: .b) {
      guard let data = Data(base64Encoded: value) else {
        throw DecodingError.dataCorruptedError(forKey: .b, in: container, debugDescription: "not base64")
      }
      self = .blob(data)
    } else {
      throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "no value key"))
    }
  }

  public func encode(to encoder: any Encoder) throws {
    if case .null = self {
      var container = encoder.singleValueContainer()
      try container.encodeNil()
      return
    }
    var container = encoder.container(keyedBy: Key.self)
    switch self {
    case .null: break
    case .integer(let value): try container.encode(value, forKey: .i)
    case .real(let value):
      // SQLite keeps infinities (a NaN becomes NULL); JSON has neither.
      if value.isInfinite {
        try container.encode(value > 0 ? "inf" : "-inf", forKey: .r)
      } else {
        try container.encode(value, forKey: .r)
      }
    case .text(let value): try container.encode(value, forKey: .t)
    case .blob(let value): try container.encode(value.base64EncodedString(), forKey: .b)
    case .reference(let gid): try container.encode(gid, forKey: .g)
    }
  }
}
