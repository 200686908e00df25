import GRDB

/// A listener's own read-only connection to the store: the sequence to
/// start from or reset to, change sets missing from the inbox (read from
/// the history), commits made without GroupSync, and the tables a change
/// set may name.
///
/// Used only by the listener's consuming task.
final class StoreReader {
  private let queue: DatabaseQueue
  private let path: String
  private var knownTables = Set<TableName>()

  init(path: String) throws {
    self.path = path
    var configuration = Configuration()
    configuration.readonly = true
    BusyWait.applyDefault(to: &configuration)
    queue = try DatabaseQueue(path: path, configuration: configuration)
  }

  func sequence() throws -> Int64 { try queue.read { try History.lastSequence($0) } }

  /// `PRAGMA data_version`, the last sequence, GroupSync's quiet commits
  /// and the WAL's commit counter, all of one snapshot: the counter is read
  /// before the snapshot's first read and after its last, and kept only
  /// when both agree (no commit fell in between); nil when they did not or
  /// it cannot be read.
  func sample() throws -> (dataVersion: Int64, sequence: Int64, quietCommits: Int64, commits: UInt32?, counterMoved: Bool) {
    try queue.read { db in
      let before = WALCommitCounter.read(db)
      let version = try Int64.fetchOne(db.cachedStatement(sql: "PRAGMA data_version")) ?? 0
      let sequence = try History.lastSequence(db)
      let quiet = try StoreState.quietCommits(db)
      let after = WALCommitCounter.read(db)
      guard let before, let after else { return (version, sequence, quiet, nil, false) }
      return (version, sequence, quiet, before == after ? before : nil, before != after)
    }
  }

  /// The history entry of `sequence`, or nil if the history does not hold it.
  func historyEntry(_ sequence: Int64) throws -> HistoryEntry? {
    try queue.read { db in
      try History.entries(after: sequence - 1, limit: 1, path: path, db).first { $0.sequence == sequence }
    }
  }

  /// When change set `sequence` was committed (ns since 1970), or nil if
  /// the history does not hold it.
  func committedAt(_ sequence: Int64) throws -> Int64? {
    try queue.read { try History.committedAt(sequence, $0) }
  }

  /// History entries after `sequence`, oldest first.
  func historyEntries(after sequence: Int64, limit: Int) throws -> [HistoryEntry] {
    try queue.read { try History.entries(after: sequence, limit: limit, path: path, $0) }
  }

  func oldestHistorySequence() throws -> Int64? { try queue.read { try History.oldestSequence($0) } }

  /// A table the change set names that the store does not have, if any.
  /// The table list is reread only when a name is not in it.
  func unknownTable(in changeSet: ChangeSet) -> TableName? {
    // Checked without building an array: this runs for every change set.
    let missing = changeSet.tables.keys.first { !knownTables.contains($0) }
      ?? changeSet.invalidatedTableNames.first { !knownTables.contains($0) }
    guard let missing else { return nil }
    let names = Array(changeSet.tables.keys) + Array(changeSet.invalidatedTableNames)
    let tables: [String] = (try? queue.read { db in
      try StoreSchema.tableNames(db)
    }) ?? []
    knownTables = Set(tables.map { TableName($0) })
    if !knownTables.contains(missing) { return missing }
    return names.first { !knownTables.contains($0) }
  }
}
