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

  /// The newest format of this build (what it writes once every member of
  /// the group reads it).
  public static let newest = v1

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
}

/// This relay's version, and the log formats and server schema it speaks.
///
/// Two adjacent versions run side by side: each announces the formats it
/// reads when it connects, and the group writes the newest format every
/// member reads (see ``LogFormat``).
public struct RelayVersion: Sendable, Equatable, Codable {
  /// The version's name, as `groupsync-relay --version` prints it.
  public var name: String
  /// The formats it applies; an entry of any other it holds.
  public var reads: [LogFormat]
  /// The newest format it writes (when the group has moved up to it).
  public var newestWritten: LogFormat
  /// The version of the server's objects it makes and needs
  /// (``SharedSchema/version``).
  public var serverSchema: Int

  /// This build: relay 2 reads and writes format 1 and announces it;
  /// relay 1 (every relay from before formats were versioned) announced
  /// nothing, and reads format 1 only.
  public static let current = RelayVersion(
    name: "2", reads: [.v1], newestWritten: .newest, serverSchema: SharedSchema.version)

  /// This build speaking the testing format too (see ``LogFormat/testing``).
  public static let testing = RelayVersion(
    name: current.name + "+testing", reads: current.reads + [.testing], newestWritten: .testing,
    serverSchema: SharedSchema.version)

  /// The format this relay writes while the group's format is `group`:
  /// the newest it both reads and writes that the group has reached (a
  /// relay rolled back below the group's format writes its own newest,
  /// which the adjacent version still reads).
  func writes(groupFormat group: LogFormat) -> LogFormat {
    reads.filter { $0 <= min(group, newestWritten) }.max() ?? reads.min() ?? .v1
  }

  /// `"2 (log formats: reads 1, writes up to 1; server schema 2)"`.
  public var description: String {
    let read = reads.map { String($0.rawValue) }.joined(separator: ", ")
    return "\(name) (log formats: reads \(read), writes up to \(newestWritten.rawValue); server schema \(serverSchema))"
  }
}
