/// Where things live in a group folder:
///
/// ```
/// GROUP/store.sqlite                  the shared store (+ -wal, -shm)
/// GROUP/tmp/                          writers build change-set files here
/// GROUP/listeners/NAME/lock           held (flock) by the live listener
/// GROUP/listeners/NAME/inbox/         its change sets, one file each
/// ```
///
/// `tmp/` and the inboxes share a filesystem, so a finished file enters an
/// inbox in one step with link(2), as in maildir's tmp/ → new/.
struct GroupLayout: Sendable {
  let root: String

  var store: String { root + "/store.sqlite" }
  var tmp: String { root + "/tmp" }
  var listeners: String { root + "/listeners" }

  func listenerFolder(_ name: String) -> String { listeners + "/" + name }
  func lockFile(_ name: String) -> String { listenerFolder(name) + "/lock" }
  func inbox(_ name: String) -> String { listenerFolder(name) + "/inbox" }
  func inboxFile(_ name: String, sequence: Int64) -> String {
    inbox(name) + "/" + Self.fileName(sequence: sequence)
  }

  static let fileSuffix = ".changeset"
  static let sequenceDigits = 20

  /// `00000000000000000042.changeset`: zero-padded so names sort in order.
  static func fileName(sequence: Int64) -> String {
    let digits = String(sequence)
    return String(repeating: "0", count: max(0, sequenceDigits - digits.count)) + digits + fileSuffix
  }

  /// The sequence number in a change-set file name, or nil for any other name.
  static func sequence(inFileName name: Substring) -> Int64? {
    guard name.utf8.count == sequenceDigits + fileSuffix.utf8.count, name.hasSuffix(fileSuffix) else { return nil }
    let digits = name.utf8.prefix(sequenceDigits)
    guard digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
    guard let sequence = Int64(Substring(digits)), sequence > 0 else { return nil }
    return sequence
  }

  /// Listener names: 1-64 letters, digits, `-`, `_`, `.`; no leading `.`.
  static func isValidListenerName(_ name: String) -> Bool {
    guard (1...64).contains(name.utf8.count), name.utf8.first != UInt8(ascii: ".") else { return false }
    return name.utf8.allSatisfy {
      ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z"))
        || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: "-")
        || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")
    }
  }
}
