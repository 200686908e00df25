// The record of one conflict: what two writes did, which won and why.
import Foundation

/// One conflict: two hosts wrote the same row concurrently (or inserted
/// the same value of a unique key), and one write won.
///
/// Since log format 2 a conflict of a column both writes changed is
/// reported alone: ``columns`` names that column, the values are its
/// values, and ``base`` the value both wrote on. A conflict settled for
/// the whole row (an update against a delete, a table that settles whole
/// rows, a merged row a constraint refused) lists every column, and
/// ``reason`` says why.
public struct ConflictRecord: Codable, Sendable, Equatable {
  /// Store name, table and the row's global ID.
  public var store: String
  public var table: String
  public var gid: String
  /// The log position of the entry that settled it.
  public var sequence: Int64
  /// The columns the values list: the one column in conflict, or every
  /// column of the row.
  public var columns: [String]
  /// The winner's and the loser's host and values (nil: deleted). The
  /// hosts are empty where two rows rather than two hosts' writes met
  /// (`unique-key`, `parent-deleted:`): ``winnerRow`` and ``loserRow``
  /// name them.
  public var winnerHost: String
  public var winnerValues: [RowValue]?
  public var loserHost: String
  public var loserValues: [RowValue]?
  /// The rule that settled it (see ``ConflictRule``).
  public var rule: ConflictRule
  /// Where two rows met: the global ID of the row that won (the row that
  /// held the unique key first; the deleted parent, in the reference's
  /// parent table, where known) and of the row that lost (nil: a row of
  /// this host not shipped yet, which has none).
  public var winnerRow: String? = nil
  public var loserRow: String? = nil
  /// The values of ``columns`` both writes were made on, where the writer
  /// knew them (a column conflict of log format 2).
  public var base: [RowValue]? = nil
  /// What a merge of the program's own returned (`merge:NAME`; the
  /// winner's values are then the later write's, the loser's the earlier's).
  public var merged: [RowValue]? = nil
  /// Why it was settled as it was where the rule alone does not say: the
  /// whole row rather than column by column (an update against a delete, a
  /// table that settles whole rows, a merged row the table refused), or a
  /// merge of the program's own that threw. Nil in records before log
  /// format 2.
  public var reason: String? = nil

  enum CodingKeys: String, CodingKey {
    case store, table, gid, sequence, columns, winnerHost, winnerValues, loserHost, loserValues, rule, winnerRow,
      loserRow, base, merged, reason
  }
}
