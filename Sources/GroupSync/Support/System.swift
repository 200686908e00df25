import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Thin wrappers over the system calls GroupSync makes: each retries EINTR
/// and turns errno into a ``GroupSyncError/system(_:)`` that
/// names the call and the path.
enum System {
  /// Runs `body` until it stops failing with EINTR; throws on -1.
  @discardableResult
  static func call<T: BinaryInteger>(
    _ name: String, _ path: String? = nil, _ body: () -> T
  ) throws -> T {
    while true {
      let result = body()
      if result != -1 { return result }
      if errno == EINTR { continue }
      throw GroupSyncError.system(call: name, path: path, errno: errno)
    }
  }

  static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0o644) throws -> Int32 {
    try call("open", path) { Glibc.open(path, flags | O_CLOEXEC, mode) }
  }

  static func close(_ fd: Int32) {
    _ = Glibc.close(fd)  // EINTR on close must not be retried on Linux
  }

  /// Writes all of `bytes` to `fd`.
  static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
    var offset = 0
    while offset < bytes.count {
      let n = try call("write", path) {
        Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
      }
      offset += n
    }
  }

  /// Reads a whole file of at most `limit` bytes from `fd`.
  static func readAll(_ fd: Int32, size: Int, path: String) throws -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: size)
    var offset = 0
    while offset < size {
      let n = try bytes.withUnsafeMutableBytes { buffer throws in
        try call("read", path) { Glibc.read(fd, buffer.baseAddress! + offset, size - offset) }
      }
      if n == 0 { break }
      offset += n
    }
    if offset < size { bytes.removeSubrange(offset...) }
    return bytes
  }

  /// This process's ID, read once (glibc no longer caches getpid: it was a
  /// system call on every commit) and read again in a child after fork.
  static var processID: Int32 {
    let cached = cachedProcessID.load(ordering: .relaxed)
    if cached != 0 { return cached }
    _ = forkHandlerInstalled
    let pid = getpid()
    cachedProcessID.store(pid, ordering: .relaxed)
    return pid
  }

  private static let cachedProcessID = Atomic<Int32>(0)
  /// A forked child forgets the parent's ID.
  private static let forkHandlerInstalled: Bool = {
    pthread_atfork(nil, nil, { System.cachedProcessID.store(0, ordering: .relaxed) })
    return true
  }()
}
