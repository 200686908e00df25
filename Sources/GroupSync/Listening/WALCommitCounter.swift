#if canImport(Glibc)
import Glibc
#endif

/// The commit counter of a WAL-mode store, read from its wal-index (the
/// `-shm` file): `iChange` of the header, which SQLite moves by one on
/// every commit and on nothing else.
///
/// `PRAGMA data_version` moves whenever the wal-index header changes, and
/// that also happens without a commit: a writer that restarts the WAL
/// (after a full checkpoint) and then rolls back, or is killed, before its
/// COMMIT leaves new salts behind. Counting commits tells such a writer
/// from a program that committed without GroupSync.
///
/// The header's layout is SQLite's documented file format (walformat.html,
/// "The WAL-Index Header"): two copies of 48 bytes, native byte order,
/// `iChange` at byte 8, `isInit` at byte 12; SQLite writes the second copy,
/// then the first, so equal copies are a consistent header.
enum WALCommitCounter {
  /// The counter, or nil when it cannot be read consistently (no `-shm`
  /// file, not a regular file, not initialised, torn by a writer three
  /// times in a row): callers then assume a commit.
  ///
  /// The `-shm` file is opened once per file and kept open: SQLite's WAL
  /// locks are POSIX locks on that file, which belong to the process, and
  /// closing *any* descriptor of the file drops every one of them. A
  /// process whose listener opened and closed the `-shm` on each tick lost
  /// its connections' read and write locks, and concurrent writers then
  /// corrupted the store ("database disk image is malformed").
  static func read(storePath: String) -> UInt32? {
    let path = storePath + "-shm"
    var now = stat()
    guard lstat(path, &now) == 0, now.st_mode & S_IFMT == S_IFREG else { return nil }
    let fd: Int32? = openFiles.withLock { files in
      if let open = files[path], open.device == now.st_dev, open.inode == now.st_ino { return open.fd }
      let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
      guard fd >= 0 else { return nil }
      var info = stat()
      guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
        // Never closed: see above (a stray descriptor beats lost locks).
        return nil
      }
      // The file was replaced: the old descriptor is of another inode (the
      // one SQLite unlinked), whose locks no connection needs any more.
      if let old = files[path] { Glibc.close(old.fd) }
      files[path] = OpenFile(fd: fd, device: info.st_dev, inode: info.st_ino)
      return fd
    }
    guard let fd else { return nil }
    var header = [UInt8](repeating: 0, count: 96)
    for _ in 0..<3 {
      let count = header.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 96, 0) }
      guard count == 96 else { return nil }
      guard header[0..<48].elementsEqual(header[48..<96]) else { continue }
      guard header[12] == 1 else { return nil }
      return header.withUnsafeBytes { $0.load(fromByteOffset: 8, as: UInt32.self) }
    }
    return nil
  }

  private struct OpenFile {
    let fd: Int32
    let device: UInt
    let inode: UInt
  }

  /// The `-shm` files read so far, by path, each open for the process's
  /// life.
  private static let openFiles = Locked<[String: OpenFile]>([:])
}
