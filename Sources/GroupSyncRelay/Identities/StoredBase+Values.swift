// A stored base's values as the relay reads and writes them: JSON of
// `RowValue`s by lowercased column name.
import Foundation
import GroupSync

extension GlobalIDTable.StoredBase {
  init(_ values: [String: RowValue]) {
    self.init(text: String(decoding: (try? JSONEncoder().encode(values)) ?? Data("{}".utf8), as: UTF8.self))
  }

  /// `values` of `columns`.
  init(_ values: [RowValue], columns: [String]) {
    var base = [String: RowValue](minimumCapacity: columns.count)
    for (column, value) in zip(columns, values) { base[column.lowercased()] = value }
    self.init(base)
  }

  /// The values by lowercased column name; nil (unknown) for text that
  /// is none.
  var values: [String: RowValue]? { try? JSONDecoder().decode([String: RowValue].self, from: Data(text.utf8)) }
}
