#if canImport(Glibc)
import Glibc
#endif

/// Whole-file open-file-description (OFD) locks, the one kind of file lock
/// GroupSync takes: a listener's `listeners/NAME/lock` and a relay's
/// `relays/HOST.lock`.
///
/// An OFD lock belongs to the open file description, not to the process:
/// it is released when the last descriptor of that description closes
/// (with the process, at the latest) or by ``unlock(_:)``, closing another
/// descriptor of the same file does not drop it, and a descriptor opened
/// `O_CLOEXEC` does not pass it to programs the process starts. No call
/// waits.
///
/// For example:
///
/// ```swift
/// let file = try folder.openFile("lock", O_RDWR | O_CREAT)
/// guard try FileLock.tryLock(file, path: folder.path + "/lock") else {
///   throw GroupSyncError.listenerNameInUse(name)
/// }
/// ```
enum FileLock {
  /// Takes a write lock on the whole of `file`, without waiting: `true`
  /// once held, `false` if another open file description holds a lock on
  /// it (`EAGAIN` or `EACCES`).
  ///
  /// The corresponding C function is `fcntl` with `F_OFD_SETLK`.
  ///
  /// - Throws: ``GroupSyncError/system(_:)`` naming
  ///   `fcntl(F_OFD_SETLK)` and `path` for any other failure.
  static func tryLock(_ file: FileDescriptor, path: String) throws -> Bool {
    var lock = wholeFile(F_WRLCK)
    if fcntl(file.rawValue, setLock, &lock) == 0 { return true }
    let code = errno
    guard code == EAGAIN || code == EACCES else {
      throw GroupSyncError.system(call: "fcntl(F_OFD_SETLK)", path: path, errno: code)
    }
    return false
  }

  /// Drops this open file description's lock on `file`, at once.
  ///
  /// Closing the descriptor is not enough: a child process another thread
  /// is starting holds a copy of every descriptor until its exec closes
  /// the `O_CLOEXEC` ones, and the lock lasts as long as any copy does (a
  /// listener closed while its process starts programs still looked live
  /// to the next one taking its name). Unlocking acts on the description
  /// itself, whatever copies of it exist.
  ///
  /// The corresponding C function is `fcntl` with `F_OFD_SETLK` and
  /// `F_UNLCK`.
  static func unlock(_ file: FileDescriptor) {
    var lock = wholeFile(F_UNLCK)
    _ = fcntl(file.rawValue, setLock, &lock)
  }

  /// Whether another open file description holds a write lock on `file`,
  /// asked without taking anything; `false` if the kernel cannot tell.
  ///
  /// The corresponding C function is `fcntl` with `F_OFD_GETLK`.
  static func isLocked(_ file: FileDescriptor) -> Bool {
    var lock = wholeFile(F_RDLCK)
    guard fcntl(file.rawValue, getLock, &lock) == 0 else { return false }
    return Int32(lock.l_type) != F_UNLCK
  }

  // Linux's OFD lock commands (fcntl.h defines them under _GNU_SOURCE).
  private static let getLock: Int32 = 36  // F_OFD_GETLK
  private static let setLock: Int32 = 37  // F_OFD_SETLK

  private static func wholeFile(_ type: Int32) -> flock {
    var lock = flock()
    lock.l_type = Int16(type)
    lock.l_whence = Int16(SEEK_SET)
    lock.l_start = 0
    lock.l_len = 0  // to the end, however long
    lock.l_pid = 0  // required by OFD locks
    return lock
  }
}
