/// SQL identifiers as SQLite reads them.
enum SQLIdentifier {
  /// `name` in double quotes, each double quote doubled. (GRDB's
  /// `quotedDatabaseIdentifier` leaves quotes inside as they are.)
  static func quoted(_ name: String) -> String {
    "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
  }

  /// The bytes of `name` with ASCII letters lowercased: SQLite folds the
  /// case of identifiers (and `NOCASE` text) in ASCII only.
  static func asciiFolded(_ name: String) -> [UInt8] {
    name.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
  }

  static func asciiLowercased(_ name: String) -> String {
    String(decoding: asciiFolded(name), as: UTF8.self)
  }
}
