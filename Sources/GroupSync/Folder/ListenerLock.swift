import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The lock a live listener holds on `listeners/NAME/lock` for its whole
/// life: an exclusive flock on a descriptor opened O_CLOEXEC, so that it
/// dies with the process and is not inherited by children it spawns.
final class ListenerLock: Sendable {
  private let fd: Int32
  private let released = Atomic<Bool>(false)

  /// Takes the lock, or throws ``GroupSyncError/listenerNameInUse(_:)``.
  ///
  /// Writers probe liveness with a brief shared lock, so a failed attempt
  /// is retried for a moment before the name is declared in use.
  init(path: String, name: String) throws {
    let fd = try System.open(path, O_RDWR | O_CREAT, 0o644)
    var attempts = 0
    while flock(fd, LOCK_EX | LOCK_NB) != 0 {
      let code = errno
      guard code == EWOULDBLOCK || code == EINTR else {
        System.close(fd)
        throw GroupSyncError.system(call: "flock", path: path, errno: code)
      }
      attempts += 1
      if attempts > 50 {
        System.close(fd)
        throw GroupSyncError.listenerNameInUse(name)
      }
      usleep(2_000)
    }
    // Record who holds it, for `groupsync status`.
    let pid = Array("\(System.processID)\n".utf8)
    _ = ftruncate(fd, 0)
    _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    self.fd = fd
  }

  deinit { release() }

  /// Releases the lock by closing its descriptor; later calls do nothing.
  func release() {
    if !released.exchange(true, ordering: .acquiringAndReleasing) { System.close(fd) }
  }

  /// Whether a live listener holds the lock at `path`. A missing or
  /// unlockable file means no live listener.
  static func isHeld(at path: String) -> Bool {
    let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return false }
    defer { System.close(fd) }
    return isHeld(fd: fd)
  }

  /// Whether a live listener holds the lock of the open lock file `fd`.
  static func isHeld(fd: Int32) -> Bool {
    if flock(fd, LOCK_SH | LOCK_NB) == 0 {
      flock(fd, LOCK_UN)
      return false
    }
    return errno == EWOULDBLOCK
  }

  /// The process ID written into the lock file, if any.
  static func recordedProcessID(at path: String) -> Int32? {
    guard let fd = try? System.open(path, O_RDONLY) else { return nil }
    defer { System.close(fd) }
    guard let bytes = try? System.readAll(fd, size: 32, path: path) else { return nil }
    return Int32(String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
  }
}
