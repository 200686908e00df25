// A pipe that wakes the relay's thread from another (a local commit, a stop).
import Foundation
import GroupSync
#if canImport(Glibc)
import Glibc
#endif

/// A self-pipe that wakes the relay's `poll`: rung from any thread (a
/// local commit's doorbell, ``Relay/stop()``), drained by the relay.
///
/// `@unchecked Sendable`: the descriptors are read and closed under
/// `lock`, so a ring that races the close never writes into a descriptor
/// number the process has meanwhile reused for another file.
final class WakePipe: @unchecked Sendable {
  private let lock = NSLock()
  private var descriptors: (read: Int32, write: Int32)?

  /// - Throws: ``RelayError/system(_:)`` naming `pipe` or
  ///   `fcntl`.
  init() throws {
    var fds: [Int32] = [-1, -1]
    // pipe2 is hidden without _GNU_SOURCE: pipe, then the flags.
    guard pipe(&fds) == 0 else { throw RelayError.system(SystemCallError(call: "pipe", path: nil, errno: errno)) }
    for fd in fds {
      guard fcntl(fd, F_SETFD, FD_CLOEXEC) == 0, fcntl(fd, F_SETFL, O_NONBLOCK) == 0 else {
        let code = errno
        fds.forEach { Glibc.close($0) }
        throw RelayError.system(SystemCallError(call: "fcntl", path: nil, errno: code))
      }
    }
    descriptors = (fds[0], fds[1])
  }

  deinit { close() }

  /// The end to poll, or -1 once closed.
  var readEnd: Int32 { lock.withLock { descriptors?.read ?? -1 } }

  /// Wakes the poller (a full pipe already will).
  func ring() {
    lock.withLock {
      guard let descriptors else { return }
      var byte: UInt8 = 1
      _ = write(descriptors.write, &byte, 1)
    }
  }

  /// Reads every pending byte.
  func drain() {
    lock.withLock {
      guard let descriptors else { return }
      var buffer = [UInt8](repeating: 0, count: 256)
      while read(descriptors.read, &buffer, buffer.count) > 0 {}
    }
  }

  func close() {
    lock.withLock {
      guard let descriptors else { return }
      Glibc.close(descriptors.read)
      Glibc.close(descriptors.write)
      self.descriptors = nil
    }
  }
}
