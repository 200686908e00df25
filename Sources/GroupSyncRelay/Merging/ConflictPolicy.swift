// The policies that settle a column (or a row) two writes both changed.
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
