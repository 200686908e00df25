// Two concurrent writes of one row merged column by column against the
// values both were made on.
import Foundation

/// Settles one row two hosts wrote concurrently, column by column, as a
/// context's merge by property does: a column only one write changed (from
/// the values both wrote on, the base) keeps that write's value with no
/// conflict; a column both changed to different values is settled by its
/// rule and reported alone. "Ours" is the later write in the log's order
/// (the shipment being settled), "theirs" the earlier, which the log holds.
///
/// A row deleted by one write and changed by the other, a table that
/// settles whole rows, and a merged row the caller finds the table refuses
/// (``wholeRow(ours:theirs:reason:)``) are settled for the whole row by the
/// table's policy.
struct PropertyMerge {
  let store: String
  let table: String
  let gid: String
  /// The row's columns, in the order of the values.
  let columns: [String]
  let ourHost: String
  let theirHost: String
  let rules: MergeRules

  struct Result: Equatable {
    /// The row every host ends with (nil: deleted).
    var values: [RowValue]?
    var conflicts: [ConflictRecord]
  }

  /// Merges `ours` into `theirs`; `base` holds the values ours was made on
  /// by lowercased column name (a column it lacks, or a nil base: unknown,
  /// so that column counts as changed by both writes where they differ).
  func merge(base: [String: RowValue]?, ours: [RowValue]?, theirs: [RowValue]?) -> Result {
    func unchanged(_ values: [RowValue]) -> Bool {
      guard let base else { return false }
      return columns.indices.allSatisfy { base[columns[$0].lowercased()] == values[$0] }
    }
    switch (ours, theirs) {
    case (nil, nil):
      return Result(values: nil, conflicts: [])
    case (nil, let theirs?):
      // Deleted here, changed there since (unless the change came to nothing).
      if unchanged(theirs) { return Result(values: nil, conflicts: []) }
      return wholeRow(ours: nil, theirs: theirs, reason: "deleted on \(ourHost), changed on \(theirHost)")
    case (let ours?, nil):
      if unchanged(ours) { return Result(values: nil, conflicts: []) }
      return wholeRow(ours: ours, theirs: nil, reason: "changed on \(ourHost), deleted on \(theirHost)")
    case (let ours?, let theirs?):
      return mergeColumns(base: base, ours: ours, theirs: theirs)
    }
  }

  private func mergeColumns(base: [String: RowValue]?, ours: [RowValue], theirs: [RowValue]) -> Result {
    var merged = theirs
    var conflicts: [ConflictRecord] = []
    var both: [Int] = []
    var oursChangedAny = false, theirsChangedAny = false
    for index in columns.indices {
      let known = base?[columns[index].lowercased()]
      let oursChanged = known.map { ours[index] != $0 } ?? (ours[index] != theirs[index])
      let theirsChanged = known.map { theirs[index] != $0 } ?? (ours[index] != theirs[index])
      oursChangedAny = oursChangedAny || oursChanged
      theirsChangedAny = theirsChangedAny || theirsChanged
      if ours[index] == theirs[index] || !oursChanged { continue }
      if !theirsChanged {
        merged[index] = ours[index]
        continue
      }
      both.append(index)
    }
    if rules.settlesWholeRows(table), oursChangedAny, theirsChangedAny, ours != theirs {
      // Its columns must agree: one write's row, whole.
      return wholeRow(ours: ours, theirs: theirs, reason: "table \(table) settles whole rows")
    }
    guard !both.isEmpty else { return Result(values: merged, conflicts: []) }
    for index in both {
      let column = columns[index]
      let values = CustomMerge.Values(
        table: table, column: column, base: base?[column.lowercased()], ours: ours[index], theirs: theirs[index])
      var record = ConflictRecord(
        store: store, table: table, gid: gid, sequence: 0, columns: [column],
        winnerHost: ourHost, winnerValues: [ours[index]], loserHost: theirHost, loserValues: [theirs[index]],
        rule: .policy(rules.policy(of: table)), base: values.base.map { [$0] })
      var policy = rules.policy(of: table)
      switch rules.rule(table: table, column: column) {
      case .policy(let own):
        policy = own
      case .merge(let custom):
        do {
          merged[index] = try custom.merge(values)
          record.rule = .merge(name: custom.name)
          record.merged = [merged[index]]
          conflicts.append(record)
          continue
        } catch {
          record.reason = "merge '\(custom.name)' failed (\(error)); settled by \(policy.rawValue)"
        }
      }
      record.rule = .policy(policy)
      if policy == .objectTrump {
        merged[index] = ours[index]
      } else {
        swap(&record.winnerHost, &record.loserHost)
        swap(&record.winnerValues, &record.loserValues)
      }
      conflicts.append(record)
    }
    return Result(values: merged, conflicts: conflicts)
  }

  /// Settles the whole row by the table's policy, with one conflict
  /// record listing every column.
  func wholeRow(ours: [RowValue]?, theirs: [RowValue]?, reason: String?) -> Result {
    let policy = rules.policy(of: table)
    var record = ConflictRecord(
      store: store, table: table, gid: gid, sequence: 0, columns: columns,
      winnerHost: ourHost, winnerValues: ours, loserHost: theirHost, loserValues: theirs,
      rule: .policy(policy), reason: reason)
    if policy == .storeTrump {
      swap(&record.winnerHost, &record.loserHost)
      swap(&record.winnerValues, &record.loserValues)
    }
    return Result(values: record.winnerValues, conflicts: [record])
  }
}
