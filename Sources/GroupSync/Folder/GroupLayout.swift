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

  static let storeFile = "store.sqlite"
  static let tmpFolder = "tmp"
  static let listenersFolder = "listeners"
  static let inboxFolder = "inbox"

  var store: String { root + "/" + Self.storeFile }
  var tmp: String { root + "/" + Self.tmpFolder }
  var listeners: String { root + "/" + Self.listenersFolder }

  func listenerFolder(_ name: String) -> String { listeners + "/" + name }
  func lockFile(_ name: String) -> String { listenerFolder(name) + "/lock" }
  func inbox(_ name: String) -> String { listenerFolder(name) + "/inbox" }
  func inboxFile(_ name: String, sequence: Int64) -> String {
    inbox(name) + "/" + Self.fileName(sequence: sequence)
  }

  static let fileSuffix = ".changeset"
  static let sequenceDigits = 20
  /// `sequenceDigits` + the suffix.
  private static let fileNameLength = 30
  private static let suffixBytes: StaticString = ".changeset"

  /// `00000000000000000042.changeset`: zero-padded so names sort in order.
  static func fileName(sequence: Int64) -> String {
    precondition(sequence >= 0, "sequence numbers are not negative")
    return String(unsafeUninitializedCapacity: fileNameLength) { buffer in
      var value = UInt64(sequence)
      var index = sequenceDigits
      repeat {
        index -= 1
        buffer[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
        value /= 10
      } while value != 0
      while index > 0 {
        index -= 1
        buffer[index] = UInt8(ascii: "0")
      }
      for index in 0..<suffixBytes.utf8CodeUnitCount {
        buffer[sequenceDigits + index] = suffixBytes.utf8Start[index]
      }
      return fileNameLength
    }
  }

  /// The sequence number in a change-set file name, or nil for any other name:
  /// exactly 20 ASCII digits then `.changeset`, for a value in 1...Int64.max.
  /// One pass over the UTF-8, no allocation (this runs on every inotify event).
  static func sequence(inFileName name: Substring) -> Int64? {
    if let parsed = name.utf8.withContiguousStorageIfAvailable({ sequence(inFileNameBuffer: $0) }) { return parsed }
    return Array(name.utf8).withUnsafeBufferPointer { sequence(inFileNameBuffer: $0) }
  }

  /// The sequence number in a file name given as bytes (see above).
  static func sequence(inFileNameBuffer bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
    // Int64.max has 19 digits, so the first of the 20 must be 0; the other
    // 19 always fit in UInt64.
    guard bytes.count == fileNameLength, bytes[0] == UInt8(ascii: "0") else { return nil }
    var value: UInt64 = 0
    for index in 1..<sequenceDigits {
      let digit = bytes[index] &- UInt8(ascii: "0")
      guard digit < 10 else { return nil }
      value = value &* 10 &+ UInt64(digit)
    }
    for index in 0..<suffixBytes.utf8CodeUnitCount where bytes[sequenceDigits + index] != suffixBytes.utf8Start[index] {
      return nil
    }
    guard value > 0, value <= UInt64(Int64.max) else { return nil }
    return Int64(value)
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
