// LogFormat: the shared log's formats, how each is marked and who reads it.
import Foundation

/// A format of the shared log: how an entry's body (`gs_change.body`), a
/// row's current image (`gs_row.data`) and a conflict record
/// (`gs_conflict.record`) are written, and what they mean.
///
/// Every stored text names its format: format 1, what relays have always
/// written, is the text as it was (`{"t":…}` for an entry, a JSON array
/// for an image); every later format wraps it, `{"f":N,"e":…}` (an entry),
/// `{"f":N,"v":…}` (an image), `{"f":N,"r":…}` (a conflict record). A
/// relay from before formats fails to decode such a text (it lacks the
/// keys format 1 requires), so it stops there instead of misapplying it.
///
/// A relay applies only the formats it reads (``RelayVersion/reads``): an
/// entry of any other it holds, and says which relay version reads it.
public struct LogFormat: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
  public let rawValue: Int

  public init(rawValue: Int) { self.rawValue = rawValue }

  /// Format 1: the entry as relays have always written it (tables, rows
  /// with their values in the table's column order, conflicts, notes;
  /// references as global IDs, `{"g": …}`).
  public static let v1 = LogFormat(rawValue: 1)

  /// Format 2: merging by property. An update of a row the origin knew
  /// ships only the columns it changed since the image it wrote on
  /// (`"c"`, their indices, beside `"v"`), and conflicts are settled column by column
  /// (``ConflictRecord`` gains `base`, `merged` and `reason`). A relay that
  /// read it as format 1 would store the changed values in the first
  /// columns: relays before it cannot decode it, and hold.
  public static let v2 = LogFormat(rawValue: 2)

  /// The newest format of this build (what it writes once every member of
  /// the group reads it).
  public static let newest = v2

  /// A format for tests of rolling upgrades only (a relay speaks it when
  /// ``RelayConfiguration/speaksTestingFormat`` is set): ``newest``'s
  /// content with each row's values listed last column first. A relay
  /// that read it as ``newest`` would put every value in another column:
  /// the change of meaning a real next format brings, on purpose.
  public static let testing = LogFormat(rawValue: newest.rawValue + 1)

  public static func < (a: LogFormat, b: LogFormat) -> Bool { a.rawValue < b.rawValue }

  public var description: String { "format \(rawValue)" }

  public init(from decoder: any Decoder) throws {
    rawValue = try decoder.singleValueContainer().decode(Int.self)
  }

  public func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    try container.encode(rawValue)
  }

  /// Which relay versions read this format, in words (for a relay that
  /// holds an entry of it).
  public var readers: String {
    switch self {
    case .v1: "every relay version"
    case .v2: "relay 3 and later"
    case .testing: "relay \(RelayVersion.current.name) with the testing format (a test build)"
    default: "a relay version newer than \(RelayVersion.current.name)"
    }
  }

  // MARK: Stored texts

  /// The mark a text of a format after 1 starts with.
  private static let markPrefix = Array("{\"f\":".utf8)

  /// The format `text` names: the number after a leading `{"f":`, else 1;
  /// nil when the mark is there but holds no number.
  static func of(_ text: String) -> LogFormat? {
    var utf8 = text.utf8.makeIterator()
    for byte in markPrefix { guard utf8.next() == byte else { return .v1 } }
    var number = 0, digits = 0
    while let byte = utf8.next(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
      number = number * 10 + Int(byte - UInt8(ascii: "0"))
      digits += 1
      guard digits <= 4 else { return nil }
    }
    return digits == 0 ? nil : LogFormat(rawValue: number)
  }

  /// `json` as this format stores it under `key` (unchanged in format 1).
  func wrap(_ json: String, as key: String) -> String {
    guard self != .v1 else { return json }
    return "{\"f\":\(rawValue),\"\(key)\":" + json + "}"
  }

  /// Whether rows' values are stored last column first (``testing``).
  var reversesValues: Bool { self == .testing }

  /// Whether updates ship only their changed columns and conflicts are
  /// merged by property (format 2 and later).
  var mergesByProperty: Bool { self >= .v2 }
}
