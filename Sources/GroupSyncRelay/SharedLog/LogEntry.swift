// LogEntry: an entry's body and a row's stored image, as the shared log carries them.
import Foundation

/// The body of one entry of the shared log (`gs_change.body`): the row
/// images of the local change sets one shipment covered, per table, in a
/// ``LogFormat`` the text names.
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

  /// The body in `format` (format 1: as relays have always written it),
  /// in one pass (``LogJSON``).
  func encoded(format: LogFormat = .v1) throws -> String {
    try LogJSON.entry(self, format: format)
  }

  /// Decodes an entry's body, in whichever of `formats` it names.
  ///
  /// - Throws: ``RelayError/unreadableFormat(store:position:format:)`` for
  ///   a format not in `formats`, ``RelayError/invalidEntry(store:sequence:reason:)``
  ///   for a text that is no entry.
  static func decode(_ text: String, store: String, sequence: Int64, formats: [LogFormat]) throws -> LogEntry {
    guard let format = LogFormat.of(text) else {
      throw RelayError.invalidEntry(store: store, sequence: sequence, reason: "its format mark holds no number")
    }
    guard formats.contains(format) else {
      throw RelayError.unreadableFormat(store: store, position: sequence, format: format)
    }
    do {
      let data = Data(text.utf8)
      var entry = format == .v1
        ? try JSONDecoder().decode(LogEntry.self, from: data) : try JSONDecoder().decode(Wrapped.self, from: data).entry
      if format.reversesValues { entry.reverseValues() }
      for index in entry.conflicts.indices { entry.conflicts[index].sequence = sequence }
      if let problem = entry.shapeProblem(format: format) {
        throw RelayError.invalidEntry(store: store, sequence: sequence, reason: problem)
      }
      return entry
    } catch let error as RelayError {
      throw error
    } catch {
      throw RelayError.invalidEntry(store: store, sequence: sequence, reason: "\(error)")
    }
  }

  /// What makes the decoded entry no entry of `format` (a row's values
  /// that do not match its table's columns), or nil.
  private func shapeProblem(format: LogFormat) -> String? {
    for table in tables {
      for row in table.rows {
        guard let values = row.values else { continue }
        if let changed = row.changed {
          guard format.mergesByProperty else { return "row \(row.gid) of \(table.name) lists changed columns, which \(format) has not" }
          guard changed.count == values.count, Set(changed).count == changed.count,
            changed.allSatisfy({ table.columns.indices.contains($0) })
          else { return "row \(row.gid) of \(table.name): its changed columns \(changed) do not match its \(values.count) values and the table's \(table.columns.count) columns" }
        } else if values.count != table.columns.count {
          return "row \(row.gid) of \(table.name) has \(values.count) values for \(table.columns.count) columns"
        }
      }
    }
    return nil
  }

  /// An entry of a format after 1.
  private struct Wrapped: Decodable {
    var entry: LogEntry
    enum CodingKeys: String, CodingKey { case entry = "e" }
  }

  /// Lists every row's values the other way round (``LogFormat/testing``).
  private mutating func reverseValues() {
    for table in tables.indices {
      for row in tables[table].rows.indices { tables[table].rows[row].values?.reverse() }
    }
  }
}

/// A row's current image as `gs_row.data` keeps it: its values in format
/// 1 a JSON array, in later formats `{"f":N,"v":[…]}`.
enum StoredImage {
  /// `values` as `gs_row.data` in `format`.
  static func encode(_ values: [RowValue], format: LogFormat) throws -> String {
    try LogJSON.image(values, format: format)
  }

  /// The values `data` holds, in whichever of `formats` it names.
  ///
  /// - Throws: ``RelayError/unreadableFormat(store:position:format:)``
  ///   (the image's `position`) for a format not in `formats`;
  ///   ``RelayError/invalidEntry(store:sequence:reason:)`` for text that
  ///   is no image.
  static func decode(_ data: String, formats: [LogFormat], store: String, position: Int64) throws -> [RowValue] {
    guard let format = LogFormat.of(data) else {
      throw RelayError.invalidEntry(store: store, sequence: position, reason: "a row image's format mark holds no number")
    }
    guard formats.contains(format) else {
      throw RelayError.unreadableFormat(store: store, position: position, format: format)
    }
    do {
      guard format != .v1 else { return try JSONDecoder().decode([RowValue].self, from: Data(data.utf8)) }
      let values = try JSONDecoder().decode(Wrapped.self, from: Data(data.utf8)).values
      return format.reversesValues ? values.reversed() : values
    } catch {
      throw RelayError.invalidEntry(store: store, sequence: position, reason: "a row image: \(error)")
    }
  }

  /// An image of a format after 1.
  private struct Wrapped: Decodable {
    var values: [RowValue]
    enum CodingKeys: String, CodingKey { case values = "v" }
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
  /// The settled row: the origin's write was merged with (or lost to) a
  /// concurrent one, and these values are the result, which the origin
  /// applies too.
  var lost: Bool?
  /// Format 2: the indices (in ``TableImage/columns``) of the columns the
  /// origin changed since the image of ``base``, which ``values`` lists in
  /// that order; nil: ``values`` lists every column (a new row, a table
  /// shipped whole, a settled row, a row whose base the origin did not
  /// know).
  var changed: [Int]?

  enum CodingKeys: String, CodingKey {
    case gid = "g"
    case rowID = "i"
    case base = "b"
    case values = "v"
    case lost = "l"
    case changed = "c"
  }

  /// Whether the image lists only the columns its origin changed.
  var isPartial: Bool { changed != nil }

  /// The columns and values this image sets, out of the table's `columns`.
  func assignments(_ columns: [String]) -> (columns: [String], values: [RowValue]?) {
    guard let changed, let values else { return (columns, values) }
    return (changed.map { columns[$0] }, values)
  }

  /// The image shipping only the columns whose values differ from `base`
  /// (by lowercased column name; a column it lacks counts as changed).
  func changes(from base: [String: RowValue], columns: [String]) -> RowImage {
    guard let values, changed == nil else { return self }
    var image = self
    let indices = columns.indices.filter { base[columns[$0].lowercased()] != values[$0] }
    image.changed = indices
    image.values = indices.map { values[$0] }
    return image
  }
}
