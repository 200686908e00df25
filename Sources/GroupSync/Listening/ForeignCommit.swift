#if canImport(Glibc)
import Glibc
#endif

/// A commit a listener saw that came without a change set: a program that
/// does not use GroupSync wrote the store, or ran VACUUM. Each listener
/// records the last one it saw in `listeners/NAME/foreign` (16 bytes: when,
/// in ns since 1970, and the store's sequence then, little endian), so that
/// `groupsync status` can show it from any process.
public struct ForeignCommit: Sendable, Codable, Equatable {
  /// When the listener noticed it, in ns since 1970.
  public let detectedAtNanoseconds: Int64
  /// The store's last sequence number at that moment.
  public let sequence: Int64
  /// The listener that noticed it.
  public let listener: String

  static let fileName = "foreign"

  static func record(in folder: SafeDirectory, sequence: Int64) {
    guard let file = try? folder.openFile(fileName, O_WRONLY | O_CREAT) else { return }
    let bytes = [Store.nowNanoseconds(), sequence].flatMap { value in
      (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: value) >> ($0 * 8)) }
    }
    _ = bytes.withUnsafeBytes { pwrite(file.rawValue, $0.baseAddress, 16, 0) }
  }

  static func read(in folder: SafeDirectory, listener: String) -> ForeignCommit? {
    guard let file = try? folder.openFile(fileName, O_RDONLY) else { return nil }
    var bytes = [UInt8](repeating: 0, count: 16)
    guard bytes.withUnsafeMutableBytes({ pread(file.rawValue, $0.baseAddress, 16, 0) }) == 16 else { return nil }
    func value(_ offset: Int) -> Int64 {
      Int64(bitPattern: (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[offset + $1]) << ($1 * 8) })
    }
    return ForeignCommit(detectedAtNanoseconds: value(0), sequence: value(8), listener: listener)
  }
}
