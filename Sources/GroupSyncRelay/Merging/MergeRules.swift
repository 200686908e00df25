// The merge rules: a policy for the group, per table and per column,
// merges of the program's own, and tables settled as whole rows.
import Foundation

/// How a group's relays settle concurrent writes: a policy for the group,
/// per table and per column, tables that settle whole rows, and merges of
/// the program's own. Every relay of a group must have the same rules: a
/// relay that finds another member announcing other rules says so and
/// ships nothing until they agree (``fingerprint``), rather than settle
/// conflicts in two ways.
///
/// The rules take effect once the group writes log format 2; before, every
/// conflict is settled for the whole row by the group's ``policy``.
public struct MergeRules: Sendable {
  /// The group's policy: for every column no rule below names.
  public var policy: ConflictPolicy
  /// A policy per table, for its columns no column rule names.
  public var tables: [String: ConflictPolicy] = [:]
  /// A rule per column, by table then column.
  public var columns: [String: [String: ColumnRule]] = [:]
  /// Tables whose rows are settled whole (columns that must agree, a CHECK
  /// across columns): when both writes changed any column, the table's
  /// policy picks one write's whole row.
  public var wholeRowTables: Set<String> = []

  /// A rule for one column.
  public enum ColumnRule: Sendable {
    case policy(ConflictPolicy)
    case merge(CustomMerge)
  }

  public init(policy: ConflictPolicy = .objectTrump) { self.policy = policy }

  /// The policy of `table` (its own, else the group's).
  public func policy(of table: String) -> ConflictPolicy { tables[Self.key(table)] ?? policy }

  /// The rule of `column` of `table`: its own, else the table's policy.
  func rule(table: String, column: String) -> ColumnRule {
    columns[Self.key(table)]?[Self.key(column)] ?? .policy(policy(of: table))
  }

  /// Whether `table` settles whole rows.
  func settlesWholeRows(_ table: String) -> Bool { wholeRowTables.contains(Self.key(table)) }

  /// Sets `policy` for `table`.
  public mutating func set(_ policy: ConflictPolicy, table: String) { tables[Self.key(table)] = policy }

  /// Sets `rule` for `column` of `table`.
  public mutating func set(_ rule: ColumnRule, table: String, column: String) {
    columns[Self.key(table), default: [:]][Self.key(column)] = rule
  }

  /// Makes `table` settle whole rows.
  public mutating func settleWholeRows(_ table: String) { wholeRowTables.insert(Self.key(table)) }

  /// SQLite names are case-insensitive: rules are kept by lowercased name.
  private static func key(_ name: String) -> String { name.lowercased() }

  /// The rules as one line, the same for the same rules on every host
  /// (what relays announce to compare): `object-trump; note: store-trump,
  /// whole rows; note.count: merge:counter`.
  public var fingerprint: String {
    var parts = [policy.rawValue]
    let named = Set(tables.keys).union(wholeRowTables).union(columns.keys).sorted()
    for table in named {
      var settings: [String] = []
      if let policy = tables[table] { settings.append(policy.rawValue) }
      if wholeRowTables.contains(table) { settings.append("whole rows") }
      if !settings.isEmpty { parts.append("\(table): " + settings.joined(separator: ", ")) }
      for (column, rule) in (columns[table] ?? [:]).sorted(by: { $0.key < $1.key }) {
        parts.append("\(table).\(column): \(rule.name)")
      }
    }
    return parts.joined(separator: "; ")
  }

  /// Reads one rule as the command line gives it: `POLICY` (the group's),
  /// `TABLE=POLICY` or `TABLE.COLUMN=POLICY`.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming what is wrong.
  public mutating func parse(_ text: String) throws {
    guard let equals = text.firstIndex(of: "=") else {
      guard let policy = ConflictPolicy(rawValue: text) else {
        throw RelayError.invalidConfiguration(
          "--policy '\(text)': not a policy (\(ConflictPolicy.acceptedNames), or TABLE=POLICY, TABLE.COLUMN=POLICY)")
      }
      self.policy = policy
      return
    }
    let target = String(text[..<equals]), name = String(text[text.index(after: equals)...])
    guard let policy = ConflictPolicy(rawValue: name) else {
      throw RelayError.invalidConfiguration(
        "--policy '\(text)': '\(name)' is not a policy (\(ConflictPolicy.acceptedNames))")
    }
    let path = target.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    guard (1...2).contains(path.count), path.allSatisfy({ !$0.isEmpty }) else {
      throw RelayError.invalidConfiguration("--policy '\(text)': name a table (TABLE=POLICY) or a column (TABLE.COLUMN=POLICY)")
    }
    if path.count == 1 {
      set(policy, table: path[0])
    } else {
      set(.policy(policy), table: path[0], column: path[1])
    }
  }
}

extension MergeRules.ColumnRule {
  /// The rule's name as conflict records and metrics give it.
  var name: String {
    switch self {
    case .policy(let policy): policy.rawValue
    case .merge(let merge): "merge:" + merge.name
    }
  }
}

/// A merge of the program's own for a column both writes changed (a
/// counter, a set, a text merged by lines): given the value both wrote on
/// (nil where the writer did not know it), the later write's (ours) and
/// the earlier's (theirs), it returns the value every host stores. It runs
/// once, in the relay that settles the conflict, and its result ships to
/// every host. A merge that throws leaves the column as the table's policy
/// would, and the conflict record says so.
///
/// Its ``name`` is part of the group's rules: a relay that lacks it (the
/// `groupsync-relay` command, say) announces other rules, and the group's
/// relays hold their shipments until every member has the same.
public struct CustomMerge: Sendable {
  public let name: String
  public let merge: @Sendable (CustomMerge.Values) throws -> RowValue

  /// The values of one conflicting column.
  public struct Values: Sendable {
    public var table: String
    public var column: String
    /// The value both writes were made on (nil: unknown).
    public var base: RowValue?
    /// The later write's value (in the log's order).
    public var ours: RowValue
    /// The earlier write's value, which the log held.
    public var theirs: RowValue
  }

  public init(name: String, merge: @escaping @Sendable (CustomMerge.Values) throws -> RowValue) {
    self.name = name
    self.merge = merge
  }

  /// A counter: each write's increment counts (`theirs + ours − base`);
  /// integers only (a base it does not know counts as zero).
  public static let counter = CustomMerge(name: "counter") { values in
    guard case .integer(let ours) = values.ours, case .integer(let theirs) = values.theirs else {
      throw RelayError.invalidConfiguration(
        "merge 'counter' of \(values.table).\(values.column): \(values.ours) and \(values.theirs) are not both integers")
    }
    var base: Int64 = 0
    if case .integer(let value)? = values.base { base = value }
    return .integer(theirs &+ ours &- base)
  }
}
