#if canImport(Glibc)
import Glibc
#endif

/// A system call that failed: the call, the path it was given, and errno.
///
/// GroupSync's errors carry one as ``GroupSyncError/system(_:)``. Match a
/// particular errno with a pattern, as GRDB matches result codes:
///
/// ```swift
/// do {
///   try something()
/// } catch GroupSyncError.system(ENOENT) {
///   // the file is gone
/// }
/// ```
public struct SystemCallError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The call, such as `open` or `fcntl(F_OFD_SETLK)`.
  public let call: String
  /// The path the call was given, if any.
  public let path: String?
  /// The `errno` it failed with.
  public let errno: Int32

  /// The failure of `call` on `path` with `errno`.
  public init(call: String, path: String?, errno: Int32) {
    self.call = call
    self.path = path
    self.errno = errno
  }

  public var description: String {
    let detail = String(cString: strerror(errno))
    if let path { return "\(call)(\(path)) failed: \(detail)" }
    return "\(call) failed: \(detail)"
  }

  /// Whether `error` failed with `errno`: `catch GroupSyncError.system(ENOENT)`.
  public static func ~= (errno: Int32, error: SystemCallError) -> Bool { error.errno == errno }
}
