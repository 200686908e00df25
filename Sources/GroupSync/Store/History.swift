import Foundation
import GRDB

/// One committed change set as the store's history keeps it.
public struct HistoryEntry: Sendable, Equatable {
  /// The sequence number.
  public let sequence: Int64
  /// When the writer was about to commit, in ns since 1970.
  public let committedAtNanoseconds: Int64
  /// The writer's author label (``StoreOptions/author``).
  public let author: String?
  /// The writer's process ID.
  public let processID: Int32
  /// The change set, or why it cannot be read (a store upgraded from before
  /// the history, a migration that could not record its rows, a corrupt
  /// payload). A reader answers an unreadable entry with a reset.
  public let changeSet: Result<ChangeSet, GroupSyncError>
  /// The payload's size in bytes.
  public let byteCount: Int
}

/// How much history a group keeps: change sets older, more numerous or
/// bigger than the soft limits are purged by writers, but never past the
/// place of a durable listener; the hard limits purge even that, and the
/// durable listener is told its place expired.
public struct HistoryRetention: Codable, Sendable, Equatable {
  /// Soft limits (nil: none).
  public var maximumAgeSeconds: Int64?
  public var maximumCount: Int64?
  public var maximumBytes: Int64?
  /// Hard limits (nil: none).
  public var hardMaximumAgeSeconds: Int64?
  public var hardMaximumCount: Int64?
  public var hardMaximumBytes: Int64?

  /// One week, 100,000 change sets, 64 MiB; hard: 30 days, 10,000,000
  /// change sets, 1 GiB.
  public init(
    maximumAgeSeconds: Int64? = 7 * 86_400, maximumCount: Int64? = 100_000, maximumBytes: Int64? = 64 << 20,
    hardMaximumAgeSeconds: Int64? = 30 * 86_400, hardMaximumCount: Int64? = 10_000_000,
    hardMaximumBytes: Int64? = 1 << 30
  ) {
    self.maximumAgeSeconds = maximumAgeSeconds
    self.maximumCount = maximumCount
    self.maximumBytes = maximumBytes
    self.hardMaximumAgeSeconds = hardMaximumAgeSeconds
    self.hardMaximumCount = hardMaximumCount
    self.hardMaximumBytes = hardMaximumBytes
  }
}

/// The store's history: `groupsync_history`, read and purged.
enum History {
  static let retentionTable = "groupsync_retention"
  /// Writers purge on every this-many-th sequence number.
  static let purgeInterval: Int64 = 256

  static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(retentionTable) (id INTEGER PRIMARY KEY CHECK (id = 1), json TEXT NOT NULL)
      """)
  }

  static func retention(_ db: Database) throws -> HistoryRetention {
    guard let json = try String.fetchOne(db, sql: "SELECT json FROM \(retentionTable) WHERE id = 1") else {
      return HistoryRetention()
    }
    return try JSONDecoder().decode(HistoryRetention.self, from: Data(json.utf8))
  }

  static func setRetention(_ retention: HistoryRetention, _ db: Database) throws {
    let json = String(decoding: try JSONEncoder().encode(retention), as: UTF8.self)
    try db.execute(sql: "INSERT OR REPLACE INTO \(retentionTable)(id, json) VALUES (1, ?)", arguments: [json])
  }

  /// The oldest and newest sequence numbers the history holds (0 when
  /// empty), how many entries and how many payload bytes.
  static func summary(_ db: Database) throws -> GroupStatus.HistoryStatus {
    let row = try Row.fetchOne(db, sql: """
      SELECT coalesce(min(seq), 0), coalesce(max(seq), 0), count(*), coalesce(sum(length(payload)), 0)
      FROM \(StoreState.historyTable)
      """)!
    return .init(oldest: row[0], newest: row[1], count: row[2], bytes: row[3])
  }

  /// The last sequence number committed (0 before any). (The writer's own
  /// commit path reads it through a statement prepared once, in
  /// WriterStatements.)
  static func lastSequence(_ db: Database) throws -> Int64 {
    // max() of an INTEGER PRIMARY KEY reads the last b-tree entry: O(log n).
    try Int64.fetchOne(db.cachedStatement(sql: "SELECT coalesce(max(seq), 0) FROM \(StoreState.historyTable)")) ?? 0
  }

  /// When entry `sequence` was committed (ns since 1970), or nil if the
  /// history does not hold it.
  static func committedAt(_ sequence: Int64, _ db: Database) throws -> Int64? {
    try Int64.fetchOne(
      db.cachedStatement(sql: "SELECT committed_at FROM \(StoreState.historyTable) WHERE seq = ?"), arguments: [sequence])
  }

  /// How many entries after `sequence` `author` did not write (an entry
  /// without an author counts).
  static func count(after sequence: Int64, notWrittenBy author: String, _ db: Database) throws -> Int64 {
    try Int64.fetchOne(
      db.cachedStatement(sql: "SELECT count(*) FROM \(StoreState.historyTable) WHERE seq > ? AND author IS NOT ?"),
      arguments: [sequence, author]) ?? 0
  }

  /// The oldest sequence number the history still holds (nil when empty).
  static func oldestSequence(_ db: Database) throws -> Int64? {
    try Int64.fetchOne(db.cachedStatement(sql: "SELECT min(seq) FROM \(StoreState.historyTable)"))
  }

  /// Entries after `sequence`, oldest first, at most `limit`.
  static func entries(after sequence: Int64, limit: Int, path: String, _ db: Database) throws -> [HistoryEntry] {
    let rows = try Row.fetchCursor(
      db.cachedStatement(sql: """
        SELECT seq, committed_at, author, pid, payload FROM \(StoreState.historyTable)
        WHERE seq > ? ORDER BY seq LIMIT ?
        """), arguments: [sequence, limit])
    var entries: [HistoryEntry] = []
    while let row = try rows.next() {
      let sequence: Int64 = row[0]
      let payload: Data = row[4] ?? Data()
      let changeSet: Result<ChangeSet, GroupSyncError>
      if payload.isEmpty {
        changeSet = .failure(.invalidChangeSet(file: "history #\(sequence)", reason: "its change set was not recorded"))
      } else {
        do {
          let decoded = try ChangeSetEncoding.decode([UInt8](payload), name: "history #\(sequence)")
          changeSet = decoded.sequence == sequence
            ? .success(decoded)
            : .failure(.invalidChangeSet(file: "history #\(sequence)", reason: "holds sequence \(decoded.sequence)"))
        } catch let error as GroupSyncError {
          changeSet = .failure(error)
        }
      }
      entries.append(HistoryEntry(
        sequence: sequence, committedAtNanoseconds: row[1], author: row[2], processID: row[3],
        changeSet: changeSet, byteCount: payload.count))
    }
    return entries
  }

  /// Purges what retention allows, inside the writer's transaction. Never
  /// touches the newest entry: its number is the next one's base.
  ///
  /// - Parameter floor: the lowest sequence a durable listener still needs
  ///   (asked only when a soft limit would purge something: it reads every
  ///   durable listener's place).
  static func purge(_ db: Database, newest: Int64, floor: () -> Int64?, now: Int64) throws {
    let retention = try retention(db)
    let oldest = try oldestSequence(db) ?? newest
    // Read once for both kinds of limit.
    var averageBytes: Double?
    let history = HistorySpan(oldest: oldest, newest: newest, now: now) {
      if let averageBytes { return averageBytes }
      let average = try averagePayloadBytes(newest: newest, db)
      averageBytes = average
      return average
    }
    let soft = try cutoff(
      db, history, age: retention.maximumAgeSeconds, count: retention.maximumCount, bytes: retention.maximumBytes)
    let hard = try cutoff(
      db, history, age: retention.hardMaximumAgeSeconds, count: retention.hardMaximumCount,
      bytes: retention.hardMaximumBytes)
    // Soft limits stop below a durable listener's place; hard ones do not.
    var below: Int64 = 0
    if let soft, soft > oldest {
      below = floor().map { min(soft, $0) } ?? soft
    }
    if let hard { below = max(below, hard) }
    below = min(below, newest)
    guard below > 0 else { return }
    try db.execute(sql: "DELETE FROM \(StoreState.historyTable) WHERE seq < ?", arguments: [below])
  }

  /// What a purge looks at: the history's span, the time, and the average
  /// payload size (read when first asked).
  private struct HistorySpan {
    let oldest: Int64
    let newest: Int64
    let now: Int64
    let averageBytes: () throws -> Double
  }

  /// The lowest sequence the limits keep (entries below it may go), or nil
  /// when no limit is exceeded.
  private static func cutoff(
    _ db: Database, _ history: HistorySpan, age: Int64?, count: Int64?, bytes: Int64?
  ) throws -> Int64? {
    var keepFrom: Int64?
    func raise(_ value: Int64) { keepFrom = max(keepFrom ?? value, value) }
    if let count { raise(history.newest - count + 1) }
    if let age { raise(try firstSequence(committedAfter: history.now - age * 1_000_000_000, history, db)) }
    if let bytes {
      let average = try history.averageBytes()
      if average > 0 { raise(history.newest - Int64(Double(bytes) / average) + 1) }
    }
    return keepFrom
  }

  /// The newest 1,000 entries' average payload size: summing every payload
  /// on each purge would cost a scan of the whole history. (Sequences are
  /// gapless, so the newest 1,000 are those above `newest - 1000`; a range
  /// of the primary key, whose payload lengths SQLite reads without the
  /// payloads.)
  private static func averagePayloadBytes(newest: Int64, _ db: Database) throws -> Double {
    try Double.fetchOne(
      db, sql: "SELECT avg(length(payload)) FROM \(StoreState.historyTable) WHERE seq > ?",
      arguments: [newest - 1000]) ?? 0
  }

  /// The first sequence committed at or after `time`, by binary search over
  /// sequence numbers (commit times grow with them).
  private static func firstSequence(committedAfter time: Int64, _ history: HistorySpan, _ db: Database) throws -> Int64 {
    let statement = try db.cachedStatement(sql: """
      SELECT seq, committed_at FROM \(StoreState.historyTable) WHERE seq >= ? ORDER BY seq LIMIT 1
      """)
    var low = history.oldest
    var high = history.newest
    // The common case: even the oldest entry is young enough.
    if let row = try Row.fetchOne(statement, arguments: [low]), (row[1] as Int64) >= time { return row[0] }
    while low < high {
      let middle = low + (high - low) / 2
      guard let row = try Row.fetchOne(statement, arguments: [middle]) else { break }
      let (sequence, committedAt): (Int64, Int64) = (row[0], row[1])
      if committedAt < time { low = sequence + 1 } else { high = sequence }
    }
    return low
  }
}
