// The rule that settled a conflict, as a ``ConflictRecord`` names it.

/// The rule that settled a conflict. It travels as text (`rawValue`) in
/// records, events and the server's `gs_conflict.rule`, and as the `rule`
/// label of the conflicts metric.
public enum ConflictRule: Sendable, Hashable, Codable, RawRepresentable, CustomStringConvertible,
  ExpressibleByStringLiteral
{
  /// A policy (`object-trump`, `store-trump`): relays before log format 2
  /// wrote `last-writer-wins` and `first-writer-wins`, read as these.
  case policy(ConflictPolicy)
  /// A merge of the program's own (`merge:NAME`, ``CustomMerge``): the
  /// record's `merged` holds what it returned.
  case merge(name: String)
  /// Two rows with the same value of a unique index (`unique-key`): the
  /// one earlier in the log keeps it, the other is not applied.
  case uniqueKey
  /// A row whose referenced row another host deleted
  /// (`parent-deleted:ACTION`): the deletion won, and the row followed it
  /// as the reference's `ON DELETE` action says.
  case parentDeleted(RowReference.DeleteAction)
  /// A rule a newer relay wrote that this one does not know, as written.
  case other(String)

  public init(rawValue: String) {
    if let policy = ConflictPolicy(rawValue: rawValue) {
      self = .policy(policy)
    } else if rawValue == "unique-key" {
      self = .uniqueKey
    } else if rawValue.hasPrefix("merge:") {
      self = .merge(name: String(rawValue.dropFirst("merge:".count)))
    } else if rawValue.hasPrefix("parent-deleted:"),
      let action = RowReference.DeleteAction(rawValue: String(rawValue.dropFirst("parent-deleted:".count)))
    {
      self = .parentDeleted(action)
    } else {
      self = .other(rawValue)
    }
  }

  public var rawValue: String {
    switch self {
    case .policy(let policy): policy.rawValue
    case .merge(let name): "merge:" + name
    case .uniqueKey: "unique-key"
    case .parentDeleted(let action): "parent-deleted:" + action.rawValue
    case .other(let text): text
    }
  }

  public init(stringLiteral text: String) { self.init(rawValue: text) }

  public var description: String { rawValue }

  public init(from decoder: any Decoder) throws {
    self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
  }

  public func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    try container.encode(rawValue)
  }
}
