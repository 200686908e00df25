import Foundation

/// The body of one entry of the shared log (`gs_change.body`): the row
/// images of the local change sets one shipment covered, per table.
///
/// The images are read from the store in one snapshot, after the change
/// sets committed, so an image may already hold a later local commit than
/// the last change set the entry covers. That is the state as of the
/// snapshot: the later commit ships again in the next entry, with the same
/// or a newer image, and receivers only ever move a row forward in the
/// log's order.
struct LogEntry: Codable, Sendable, Equatable {
  var tables: [TableImage]
  /// Conflicts the shipping transaction settled, for every host to report.
  /// Their ``ConflictRecord/sequence`` is the entry's position, which the
  /// server assigns as the entry commits: it is stamped on decoding.
  var conflicts: [ConflictRecord]
  /// The notes of the local change sets shipped (group-defaults changes,
  /// notifications), in commit order.
  var notes: [ShippedNote]?

  enum CodingKeys: String, CodingKey {
    case tables = "t"
    case conflicts = "c"
    case notes = "n"
  }

  var rowCount: Int { tables.reduce(0) { $0 + $1.rows.count } }

  func encoded() throws -> String {
    String(decoding: try JSONEncoder().encode(self), as: UTF8.self)
  }

  static func decode(_ text: String, store: String, sequence: Int64) throws -> LogEntry {
    do {
      var entry = try JSONDecoder().decode(LogEntry.self, from: Data(text.utf8))
      for index in entry.conflicts.indices { entry.conflicts[index].sequence = sequence }
      return entry
    } catch {
      throw RelayError.invalidEntry(store: store, sequence: sequence, reason: "\(error)")
    }
  }
}

/// A change set's note as the log carries it: its name and its payload
/// (base64).
struct ShippedNote: Codable, Sendable, Equatable {
  var name: String
  var payload: Data
}

/// The rows of one table in a log entry.
struct TableImage: Codable, Sendable, Equatable {
  /// The table's name.
  var name: String
  /// Its columns in order, without the rowid alias (rowids are local to
  /// each host; rows travel by ``RowImage/gid``).
  var columns: [String]
  /// Whether `rows` is the whole table: rows missing from it, written
  /// before this entry, are deleted (a table the change set invalidated,
  /// or one whose history the origin could no longer read).
  var isSnapshot: Bool
  var rows: [RowImage]

  enum CodingKeys: String, CodingKey {
    case name = "n"
    case columns = "k"
    case isSnapshot = "s"
    case rows = "r"
  }
}

/// One row's image: its values after the commit, or nil for a deleted row.
struct RowImage: Codable, Sendable, Equatable {
  /// The row's global identity, the same on every host.
  var gid: String
  /// The rowid on the origin host (for the origin's own bookkeeping).
  var rowID: Int64?
  /// The log position of the row's image the origin wrote on (0: a new
  /// row). A base older than the row's last position is a concurrent write.
  var base: Int64
  /// The values in ``TableImage/columns`` order; nil: the row is deleted.
  var values: [RowValue]?
  /// First-writer-wins: the origin's write lost, and these are the
  /// winner's values, which the origin applies too.
  var lost: Bool?

  enum CodingKeys: String, CodingKey {
    case gid = "g"
    case rowID = "i"
    case base = "b"
    case values = "v"
    case lost = "l"
  }
}
