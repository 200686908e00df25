import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The lock a live listener holds on `listeners/NAME/lock` for its whole
/// life: an open-file-description (OFD) write lock on a descriptor opened
/// `O_CLOEXEC`, so that it dies with the process and is not inherited by
/// programs it starts. Writers test it with ``FileLock/isLocked(_:)`` (one
/// `F_OFD_GETLK`), which takes nothing.
///
/// The lock file is opened with `O_NOFOLLOW | O_NONBLOCK` relative to the
/// listener's folder and must be a regular file: a symlink or a FIFO
/// planted there is removed (the entry itself) and replaced.
final class ListenerLock: Sendable {
  private let file = Locked<FileDescriptor?>(nil)

  static let fileName = "lock"

  /// Takes the lock, or throws ``GroupSyncError/listenerNameInUse(_:)``.
  init(in folder: SafeDirectory, name: String) throws {
    let lockFile = try folder.openOwnedFile(Self.fileName, O_RDWR, for: name)
    // A lock whose holder died without releasing it (a crash) can stay
    // held for a moment: a child process another thread of that process
    // was starting shares the descriptor until its exec closes it. Ask
    // again briefly before saying "in use".
    var attempts = 0
    while try !FileLock.tryLock(lockFile, path: folder.path + "/" + Self.fileName) {
      attempts += 1
      if attempts > 60 { throw GroupSyncError.listenerNameInUse(name) }
      usleep(5_000)
    }
    // Record who holds it, for `groupsync status`.
    let pid = Array("\(System.processID)\n".utf8)
    _ = ftruncate(lockFile.rawValue, 0)
    _ = pid.withUnsafeBytes { pwrite(lockFile.rawValue, $0.baseAddress, $0.count, 0) }
    file.withLock { $0 = lockFile }
  }

  /// Releases the lock at once (``FileLock/unlock(_:)``: whatever copies
  /// of the descriptor a child being started holds) and closes its
  /// descriptor; later calls do nothing.
  func release() {
    file.withLock { file in
      if let held = file { FileLock.unlock(held) }
      file = nil
    }
  }

  /// Whether a live listener holds the lock of the open lock file `fd`,
  /// asked without taking anything.
  static func isHeld(_ fd: FileDescriptor) -> Bool {
    FileLock.isLocked(fd)
  }

  /// Whether a live listener holds the lock in `folder` (a listener's
  /// folder). A missing or unsafe lock file means no live listener.
  static func isHeld(in folder: SafeDirectory) -> Bool {
    guard let fd = try? folder.openFile(fileName, O_RDONLY) else { return false }
    return isHeld(fd)
  }

  /// The process ID written into the lock file in `folder`, if any.
  static func recordedProcessID(in folder: SafeDirectory) -> Int32? {
    guard let fd = try? folder.openFile(fileName, O_RDONLY),
      let bytes = try? System.readAll(fd.rawValue, size: 32, path: folder.path + "/lock")
    else { return nil }
    return Int32(String(decoding: bytes, as: UTF8.self).filter(\.isNumber))
  }
}
