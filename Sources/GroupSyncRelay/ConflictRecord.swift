import Foundation

/// How concurrent writes to one row are settled. Every host applies the
/// log in the same order, so every host settles them the same way.
public enum ConflictPolicy: String, Sendable, Codable, CaseIterable {
  /// The write later in PostgreSQL's order wins, row by row (Core Data's
  /// `mergeByPropertyObjectTrump` at the row level): a host's late write
  /// overwrites what another host wrote meanwhile, and the overwritten
  /// values are reported.
  case lastWriterWins = "last-writer-wins"
  /// The first write in PostgreSQL's order wins; a write made on an older
  /// image loses and is reported, and its host takes the winner's values
  /// (Core Data's `NSErrorMergePolicy`, settled instead of thrown).
  case firstWriterWins = "first-writer-wins"
}

/// One conflict: two hosts wrote the same row concurrently (or inserted
/// the same value of a unique key), and one write won.
public struct ConflictRecord: Codable, Sendable, Equatable {
  /// Store name, table and the row's global ID.
  public var store: String
  public var table: String
  public var gid: String
  /// The log position of the entry that settled it.
  public var sequence: Int64
  /// The columns of both images.
  public var columns: [String]
  /// The winner's and the loser's host and values (nil: deleted).
  public var winnerHost: String
  public var winnerValues: [RowValue]?
  public var loserHost: String
  public var loserValues: [RowValue]?
  /// `last-writer-wins`, `first-writer-wins`, or `unique-key` (two rows
  /// with the same value of a unique index: the one earlier in the log
  /// keeps it, the other is not applied).
  public var rule: String

  enum CodingKeys: String, CodingKey {
    case store, table, gid, sequence, columns, winnerHost, winnerValues, loserHost, loserValues, rule
  }
}
