// A reference declared to the relay: a column that holds another
// table's key, and what a deletion of that row does to it.
import Foundation
import GRDB

/// A column that holds the rowid of a row of a replicated table: a foreign
/// key to an `INTEGER PRIMARY KEY` (or to the parent's primary key when
/// that is its rowid), or a relation declared to the relay.
///
/// Rowids are each host's own (two hosts inserting at once both get 42),
/// so such a column never travels as a number: the shipper replaces the
/// rowid with the referenced row's global ID, and each host stores its own
/// rowid of that row. The relation holds on every host; nothing is ever
/// applied as a number that means another row there.
///
/// Columns that refer to anything else (a `TEXT` key, a composite key of
/// application values) travel as they are: they are the same everywhere.
public struct RowReference: Sendable, Hashable, Codable, CustomStringConvertible {
  /// The table and column holding the reference.
  public var table: String
  public var column: String
  /// The table of the rows it points at.
  public var parent: String
  /// What a row that points at a row deleted on another host becomes (the
  /// deletion wins: nothing is left pointing at a row that is gone).
  public var onDelete: DeleteAction

  /// What becomes of a row whose referenced row was deleted.
  public enum DeleteAction: String, Sendable, Codable, CaseIterable {
    /// The row is deleted too (`ON DELETE CASCADE`, and `RESTRICT` or
    /// `NO ACTION`: the deletion happened on another host, which could not
    /// see this row, and it stands).
    case cascade
    /// The column becomes NULL (`ON DELETE SET NULL`).
    case setNull = "set-null"
    /// The column takes its declared default, when that is a number or
    /// NULL (`ON DELETE SET DEFAULT`); else NULL.
    case setDefault = "set-default"
  }

  public init(table: String, column: String, parent: String, onDelete: DeleteAction = .cascade) {
    self.table = table
    self.column = column
    self.parent = parent
    self.onDelete = onDelete
  }

  /// Parses a declared relation: `TABLE.COLUMN=PARENT`, optionally
  /// followed by `:set-null` (or `:cascade`, the default).
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming what is wrong.
  public init(parsing text: String) throws {
    let sides = text.split(separator: "=", maxSplits: 1).map(String.init)
    let source = sides.first?.split(separator: ".", maxSplits: 1).map(String.init) ?? []
    let target = sides.count == 2 ? sides[1].split(separator: ":", maxSplits: 1).map(String.init) : []
    guard sides.count == 2, source.count == 2, !source[0].isEmpty, !source[1].isEmpty, let parent = target.first,
      !parent.isEmpty
    else {
      throw RelayError.invalidConfiguration("reference '\(text)': write TABLE.COLUMN=PARENT[:cascade|set-null]")
    }
    var action = DeleteAction.cascade
    if target.count == 2 {
      guard let named = DeleteAction(rawValue: target[1]), named != .setDefault else {
        throw RelayError.invalidConfiguration(
          "reference '\(text)': '\(target[1])' is no action on delete (cascade or set-null)")
      }
      action = named
    }
    self.init(table: source[0], column: source[1], parent: parent, onDelete: action)
  }

  public var description: String {
    "\(table).\(column)=\(parent)" + (onDelete == .cascade ? "" : ":\(onDelete.rawValue)")
  }
}
