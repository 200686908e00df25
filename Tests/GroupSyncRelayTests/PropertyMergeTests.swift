import Foundation
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// Merging by property, the rule alone (no server): what each column of
/// two concurrent writes becomes, and what is reported.
@Suite(.timed) struct PropertyMergeTests {
  static let columns = ["title", "tags", "n"]
  static let base: [String: RowValue] = ["title": .text("t0"), "tags": .text("g0"), "n": .integer(5)]

  static func merge(_ rules: MergeRules = MergeRules(), table: String = "note") -> PropertyMerge {
    PropertyMerge(store: "main", table: table, gid: "g", columns: columns, ourHost: "b", theirHost: "a", rules: rules)
  }

  @Test func columnsOnlyOneWriteChangedKeepItsValueWithNoConflict() {
    let result = Self.merge().merge(
      base: Self.base, ours: [.text("t1"), .text("g0"), .integer(5)], theirs: [.text("t0"), .text("g1"), .integer(6)])
    #expect(result.values == [.text("t1"), .text("g1"), .integer(6)])
    #expect(result.conflicts.isEmpty)
    // Both set the same value: no conflict either.
    let same = Self.merge().merge(
      base: Self.base, ours: [.text("t1"), .text("g0"), .integer(5)], theirs: [.text("t1"), .text("g0"), .integer(5)])
    #expect(same.values == [.text("t1"), .text("g0"), .integer(5)] && same.conflicts.isEmpty)
  }

  @Test(arguments: [ConflictPolicy.objectTrump, .storeTrump])
  func aColumnBothChangedIsSettledByThePolicyAndReportedAlone(policy: ConflictPolicy) {
    let result = Self.merge(MergeRules(policy: policy)).merge(
      base: Self.base, ours: [.text("ours"), .text("g1"), .integer(5)], theirs: [.text("theirs"), .text("g0"), .integer(6)])
    let title: RowValue = policy == .objectTrump ? .text("ours") : .text("theirs")
    #expect(result.values == [title, .text("g1"), .integer(6)])
    #expect(result.conflicts.count == 1)
    let record = result.conflicts[0]
    #expect(record.columns == ["title"] && record.base == [.text("t0")] && record.rule == .policy(policy))
    #expect(record.winnerValues == [title] && record.winnerHost == (policy == .objectTrump ? "b" : "a"))
    #expect(record.loserValues == [policy == .objectTrump ? .text("theirs") : .text("ours")])
    #expect(record.reason == nil)
  }

  @Test func aColumnsRuleTrumpsItsTablesAndATablesTrumpsTheGroups() {
    var rules = MergeRules(policy: .objectTrump)
    rules.set(.storeTrump, table: "NOTE")
    rules.set(.policy(.objectTrump), table: "note", column: "Tags")
    let result = Self.merge(rules).merge(
      base: Self.base, ours: [.text("ours"), .text("ours"), .integer(5)],
      theirs: [.text("theirs"), .text("theirs"), .integer(5)])
    #expect(result.values == [.text("theirs"), .text("ours"), .integer(5)])
    #expect(result.conflicts.map(\.rule) == ["store-trump", "object-trump"])
    #expect(rules.fingerprint == "object-trump; note: store-trump; note.tags: object-trump")
  }

  @Test func aMergeOfYourOwnRunsOnColumnsBothChanged() {
    var rules = MergeRules()
    rules.set(.merge(.counter), table: "note", column: "n")
    let result = Self.merge(rules).merge(
      base: Self.base, ours: [.text("t0"), .text("g0"), .integer(7)], theirs: [.text("t0"), .text("g0"), .integer(8)])
    #expect(result.values == [.text("t0"), .text("g0"), .integer(10)], "5 + 2 + 3")
    #expect(result.conflicts.count == 1)
    #expect(result.conflicts[0].rule == "merge:counter" && result.conflicts[0].merged == [.integer(10)])
    #expect(result.conflicts[0].winnerValues == [.integer(7)] && result.conflicts[0].loserValues == [.integer(8)])
    // Only one side changed it: the merge does not run.
    let one = Self.merge(rules).merge(
      base: Self.base, ours: [.text("t0"), .text("g0"), .integer(7)], theirs: [.text("t1"), .text("g0"), .integer(5)])
    #expect(one.values == [.text("t1"), .text("g0"), .integer(7)] && one.conflicts.isEmpty)
    #expect(rules.fingerprint == "object-trump; note.n: merge:counter")
  }

  @Test func aMergeThatThrowsLeavesTheColumnAsThePolicyWouldAndSaysSo() {
    var rules = MergeRules(policy: .storeTrump)
    rules.set(.merge(.counter), table: "note", column: "title")
    let result = Self.merge(rules).merge(
      base: Self.base, ours: [.text("ours"), .text("g0"), .integer(5)], theirs: [.text("theirs"), .text("g0"), .integer(5)])
    #expect(result.values == [.text("theirs"), .text("g0"), .integer(5)])
    #expect(result.conflicts.count == 1)
    #expect(result.conflicts[0].rule == "store-trump")
    let reason = result.conflicts[0].reason ?? ""
    #expect(reason.contains("merge 'counter' failed") && reason.contains("not both integers"), "\(reason)")
  }

  @Test(arguments: [ConflictPolicy.objectTrump, .storeTrump])
  func anUpdateAgainstADeleteFollowsThePolicyForTheWholeRow(policy: ConflictPolicy) {
    let rules = MergeRules(policy: policy)
    let changed: [RowValue] = [.text("t1"), .text("g0"), .integer(5)]
    // Changed here (the later write), deleted there.
    let update = Self.merge(rules).merge(base: Self.base, ours: changed, theirs: nil)
    #expect(update.values == (policy == .objectTrump ? changed : nil))
    #expect(update.conflicts.count == 1 && update.conflicts[0].columns == Self.columns)
    #expect(update.conflicts[0].reason == "changed on b, deleted on a")
    // Deleted here, changed there.
    let delete = Self.merge(rules).merge(base: Self.base, ours: nil, theirs: changed)
    #expect(delete.values == (policy == .objectTrump ? nil : changed))
    #expect(delete.conflicts.count == 1 && delete.conflicts[0].reason == "deleted on b, changed on a")
    // A side that changed nothing does not contest the other's delete.
    let unchanged: [RowValue] = [.text("t0"), .text("g0"), .integer(5)]
    #expect(Self.merge(rules).merge(base: Self.base, ours: unchanged, theirs: nil) == .init(values: nil, conflicts: []))
    #expect(Self.merge(rules).merge(base: Self.base, ours: nil, theirs: unchanged) == .init(values: nil, conflicts: []))
  }

  @Test func aTableOfWholeRowsTakesOneWritesRowWhenBothChangedIt() {
    var rules = MergeRules(policy: .objectTrump)
    rules.settleWholeRows("note")
    let ours: [RowValue] = [.text("t1"), .text("g0"), .integer(5)]
    let result = Self.merge(rules).merge(base: Self.base, ours: ours, theirs: [.text("t0"), .text("g1"), .integer(5)])
    #expect(result.values == ours)
    #expect(result.conflicts.count == 1 && result.conflicts[0].columns == Self.columns)
    #expect(result.conflicts[0].reason == "table note settles whole rows")
    // Another table of the group merges by property.
    let other = Self.merge(rules, table: "task").merge(
      base: Self.base, ours: ours, theirs: [.text("t0"), .text("g1"), .integer(5)])
    #expect(other.values == [.text("t1"), .text("g1"), .integer(5)] && other.conflicts.isEmpty)
    #expect(rules.fingerprint == "object-trump; note: whole rows")
  }

  @Test func withoutABaseEveryColumnThatDiffersIsInConflict() {
    let result = Self.merge().merge(
      base: nil, ours: [.text("t1"), .text("g0"), .integer(5)], theirs: [.text("t0"), .text("g1"), .integer(5)])
    #expect(result.values == [.text("t1"), .text("g0"), .integer(5)])
    #expect(result.conflicts.map(\.columns) == [["title"], ["tags"]])
  }

  @Test func rulesAreReadAsTheCommandLineGivesThemAndBadOnesAreNamed() throws {
    var rules = MergeRules()
    for text in ["first-writer-wins", "note=last-writer-wins", "note.title=store-trump"] { try rules.parse(text) }
    #expect(rules.policy == .storeTrump && rules.policy(of: "Note") == .objectTrump)
    #expect(rules.fingerprint == "store-trump; note: object-trump; note.title: store-trump")
    for (text, message) in [
      ("newest-wins", "--policy 'newest-wins': not a policy"),
      ("note=loudest", "--policy 'note=loudest': 'loudest' is not a policy"),
      ("a.b.c=store-trump", "--policy 'a.b.c=store-trump': name a table"),
      (".x=store-trump", "--policy '.x=store-trump': name a table"),
    ] {
      #expect {
        try rules.parse(text)
      } throws: { error in
        "\(error)".contains(message)
      }
    }
    #expect(ConflictPolicy(rawValue: "last-writer-wins") == .objectTrump)
    #expect(ConflictPolicy(rawValue: "first-writer-wins") == .storeTrump)
    #expect(ConflictPolicy.allCases.map(\.rawValue) == ["object-trump", "store-trump"])
  }

  /// Format 2 ships the changed columns of an update; its body names them,
  /// and a body whose changed columns do not fit its table is refused.
  @Test func anUpdateShipsItsChangedColumnsAndABadListIsRefused() throws {
    let image = RowImage(gid: "g", rowID: 3, base: 7, values: [.text("t1"), .text("g0"), .integer(5)], lost: nil)
      .changes(from: Self.base, columns: Self.columns)
    #expect(image.changed == [0] && image.values == [.text("t1")])
    #expect(image.assignments(Self.columns).columns == ["title"])
    let entry = LogEntry(
      tables: [TableImage(name: "note", columns: Self.columns, isSnapshot: false, rows: [image])], conflicts: [], notes: nil)
    let text = try entry.encoded(format: .v2)
    #expect(try LogEntry.decode(text, store: "main", sequence: 9, formats: [.v1, .v2]) == entry)
    // The next format lists values the other way round; changed columns stay.
    let testing = try entry.encoded(format: .testing)
    #expect(try LogEntry.decode(testing, store: "main", sequence: 9, formats: [.v1, .v2, .testing]) == entry)

    func refused(_ body: String, format: LogFormat, _ reason: String) {
      let wrapped = format.wrap(body, as: "e")
      #expect {
        try LogEntry.decode(wrapped, store: "main", sequence: 9, formats: [.v1, .v2])
      } throws: { error in
        guard case RelayError.invalidEntry(_, _, let why) = error else { return false }
        return why.contains(reason)
      }
    }
    let table = #"{"n":"note","k":["title","tags","n"],"s":false,"r":[ROW]}"#
    func body(_ row: String) -> String { #"{"t":["# + table.replacingOccurrences(of: "ROW", with: row) + #"],"c":[]}"# }
    refused(body(#"{"g":"g","b":1,"v":[{"t":"x"}],"c":[3]}"#), format: .v2, "do not match")
    refused(body(#"{"g":"g","b":1,"v":[{"t":"x"}],"c":[0,1]}"#), format: .v2, "do not match")
    refused(body(#"{"g":"g","b":1,"v":[{"t":"x"},{"t":"y"}],"c":[1,1]}"#), format: .v2, "do not match")
    refused(body(#"{"g":"g","b":1,"v":[{"t":"x"}],"c":[0]}"#), format: .v1, "lists changed columns")
    refused(body(#"{"g":"g","b":1,"v":[{"t":"x"}]}"#), format: .v2, "has 1 values for 3 columns")
  }
}
