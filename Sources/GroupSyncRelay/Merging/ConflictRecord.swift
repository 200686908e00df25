import Foundation

/// How concurrent writes to one row are settled, named as a context's
/// `MergePolicy` (of `GroupSync`) names them. Every conflict is settled once, by
/// the relay whose shipment meets it, and its result ships to every host.
///
/// Since log format 2 the relays merge by property: a column only one of
/// the two writes changed keeps that write's value, with no conflict; the
/// policy settles only the columns both changed (or the whole row, where
/// ``MergeRules/wholeRowTables`` says so, or a row the merge cannot make).
public enum ConflictPolicy: String, Sendable, Codable, CaseIterable {
  /// The later write in PostgreSQL's order trumps (Core Data's
  /// `mergeByPropertyObjectTrump`): for each column both changed, its
  /// value wins; a row it changed that the earlier write deleted comes
  /// back; a row it deleted goes.
  case objectTrump = "object-trump"
  /// The earlier write in PostgreSQL's order trumps (Core Data's
  /// `mergeByPropertyStoreTrump`): for each column both changed, the
  /// earlier value stays, and the later writer takes it too; a row the
  /// earlier write deleted stays deleted; a later delete of a row the
  /// earlier write changed is cancelled.
  case storeTrump = "store-trump"

  /// The name relays before log format 2 gave ``objectTrump`` (which then
  /// settled whole rows): still accepted.
  public static let lastWriterWins = ConflictPolicy.objectTrump
  /// The name relays before log format 2 gave ``storeTrump``: still accepted.
  public static let firstWriterWins = ConflictPolicy.storeTrump

  /// A policy by its name, or by the name it had before log format 2
  /// (`last-writer-wins`, `first-writer-wins`).
  public init?(rawValue: String) {
    switch rawValue {
    case "object-trump", "last-writer-wins": self = .objectTrump
    case "store-trump", "first-writer-wins": self = .storeTrump
    default: return nil
    }
  }

  /// Every name a policy is known by, for messages.
  static let acceptedNames = "object-trump, store-trump (or last-writer-wins, first-writer-wins)"
}

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
