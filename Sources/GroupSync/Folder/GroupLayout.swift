/// Where things live in a group folder:
///
/// ```
/// GROUP/store.sqlite                  the main store (+ -wal, -shm)
/// GROUP/stores/NAME.sqlite            another writable store of the group
/// GROUP/stores/NAME.readonly.sqlite   a read-only store, replaced as a whole
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
  static let storesFolder = "stores"
  /// The store every group has, in `store.sqlite`.
  static let mainStoreName = "main"
  private static let writableSuffix = ".sqlite"
  private static let readOnlySuffix = ".readonly.sqlite"
  static let tmpFolder = "tmp"
  static let listenersFolder = "listeners"
  static let inboxFolder = "inbox"

  var store: String { root + "/" + Self.storeFile }
  var stores: String { root + "/" + Self.storesFolder }

  /// The path of store `name`'s file.
  func storePath(_ name: String, readOnly: Bool) -> String {
    name == Self.mainStoreName ? store : stores + "/" + Self.storeFileName(name, readOnly: readOnly)
  }

  /// `NAME.sqlite` or `NAME.readonly.sqlite`, in `stores/`.
  static func storeFileName(_ name: String, readOnly: Bool) -> String {
    name + (readOnly ? readOnlySuffix : writableSuffix)
  }

  /// The store a file of `stores/` holds, and whether it is read-only; nil
  /// for any other name (SQLite's `-wal`, `-shm`, `-journal` among them).
  static func store(inFileName name: String) -> (name: String, isReadOnly: Bool)? {
    for (suffix, readOnly) in [(readOnlySuffix, true), (writableSuffix, false)] where name.hasSuffix(suffix) {
      let store = String(name.dropLast(suffix.utf8.count))
      return isValidStoreName(store) && store != mainStoreName ? (store, readOnly) : nil
    }
    return nil
  }

  /// Store names: 1-32 lowercase ASCII letters, digits, `-`, `_`; the
  /// first a letter or digit (they appear in file names and URIs).
  static func isValidStoreName(_ name: String) -> Bool {
    guard (1...32).contains(name.utf8.count) else { return false }
    return name.utf8.enumerated().allSatisfy { index, byte in
      (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
        || (index > 0 && (byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")))
    }
  }
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

  /// The inbox file of change set `sequence` of store `store`: the main
  /// store's is `00000000000000000042.changeset`, another's
  /// `NAME.00000000000000000042.changeset`.
  static func fileName(store: String, sequence: Int64) -> String {
    store == mainStoreName ? fileName(sequence: sequence) : store + "." + fileName(sequence: sequence)
  }

  /// An inbox file's store and sequence, or nil for any other name. The
  /// store name is checked for its form only, not that the group has it.
  static func storeAndSequence(inFileNameBuffer bytes: UnsafeBufferPointer<UInt8>) -> (store: String, sequence: Int64)? {
    if bytes.count == fileNameLength {
      return sequence(inFileNameBuffer: bytes).map { (mainStoreName, $0) }
    }
    let prefixLength = bytes.count - fileNameLength - 1
    guard prefixLength >= 1, bytes[prefixLength] == UInt8(ascii: "."),
      let sequence = sequence(inFileNameBuffer: UnsafeBufferPointer(rebasing: bytes[(prefixLength + 1)...]))
    else { return nil }
    let store = String(decoding: UnsafeBufferPointer(rebasing: bytes[..<prefixLength]), as: UTF8.self)
    guard isValidStoreName(store), store != mainStoreName else { return nil }
    return (store, sequence)
  }

  /// `storeAndSequence(inFileNameBuffer:)` of a name given as a string.
  static func storeAndSequence(inFileName name: String) -> (store: String, sequence: Int64)? {
    var name = name
    return name.withUTF8 { storeAndSequence(inFileNameBuffer: $0) }
  }

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
