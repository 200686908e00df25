#if canImport(Glibc)
import Glibc
#endif

/// An open file descriptor that closes itself when released.
///
/// `@unchecked Sendable`: the descriptor number never changes, and the
/// kernel serializes what is done with it.
final class FileDescriptor: @unchecked Sendable {
  let rawValue: Int32

  init(adopting rawValue: Int32) {
    self.rawValue = rawValue
  }

  deinit { System.close(rawValue) }

  /// `fstat(2)` of the descriptor.
  func status(path: String) throws -> stat {
    var info = stat()
    try System.call("fstat", path) { fstat(rawValue, &info) }
    return info
  }

  /// Opens `name` (one path component) in the directory `directory`.
  ///
  /// The corresponding C function is `openat`; `O_CLOEXEC` is always set.
  static func open(
    _ name: String, in directory: FileDescriptor, _ flags: Int32, _ mode: mode_t = 0o644, path: String
  ) throws -> FileDescriptor {
    FileDescriptor(adopting: try System.call("openat", path) { openat(directory.rawValue, name, flags | O_CLOEXEC, mode) })
  }
}

/// The identity of a file: device and inode.
struct FileIdentity: Equatable, Hashable, Sendable {
  let device: UInt64
  let inode: UInt64

  init(_ info: stat) {
    device = UInt64(info.st_dev)
    inode = UInt64(info.st_ino)
  }
}
