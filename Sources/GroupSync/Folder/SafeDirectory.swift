#if canImport(Glibc)
import Glibc
#endif
import Logging

/// A folder inside the group folder, reached without following a symlink.
///
/// Every folder GroupSync uses is opened from its parent's descriptor with
/// `O_DIRECTORY | O_NOFOLLOW`, one component at a time, and checked to be
/// on the group folder's device; every file in it is reached with `*at()`
/// calls relative to it. A symlink, a FIFO or a file planted where a folder
/// should be is refused, never followed: nothing outside the group folder
/// is read, written or removed. (Since every open resolves a single name
/// relative to a checked folder, `openat2`'s `RESOLVE_BENEATH` would add
/// nothing.)
final class SafeDirectory: Sendable {
  let descriptor: FileDescriptor
  let identity: FileIdentity
  /// For messages only: never used to reach the folder.
  let path: String

  private init(descriptor: FileDescriptor, path: String) throws {
    self.descriptor = descriptor
    self.path = path
    identity = FileIdentity(try descriptor.status(path: path))
  }

  /// Opens the group folder itself (an absolute path without symlinks).
  static func root(_ path: String) throws -> SafeDirectory {
    let fd = try System.call("open", path) { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
    return try SafeDirectory(descriptor: FileDescriptor(adopting: fd), path: path)
  }

  /// The folder `name` in this one, created if missing when `create`.
  ///
  /// - Throws: ``GroupSyncError/unsafeEntry(path:reason:)`` when `name` is
  ///   a symlink, not a folder, or on another device; a system error else.
  func child(_ name: String, create: Bool) throws -> SafeDirectory {
    let childPath = path + "/" + name
    if create && mkdirat(descriptor.rawValue, name, 0o755) != 0 && errno != EEXIST {
      throw GroupSyncError.system(call: "mkdirat", path: childPath, errno: errno)
    }
    let fd = openat(descriptor.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0 else {
      let code = errno
      switch code {
      case ELOOP: throw GroupSyncError.unsafeEntry(path: childPath, reason: "it is a symlink")
      case ENOTDIR: throw GroupSyncError.unsafeEntry(path: childPath, reason: "it is not a folder")
      default: throw GroupSyncError.system(call: "openat", path: childPath, errno: code)
      }
    }
    let child = try SafeDirectory(descriptor: FileDescriptor(adopting: fd), path: childPath)
    guard child.identity.device == identity.device else {
      throw GroupSyncError.unsafeEntry(path: childPath, reason: "it is on another device")
    }
    return child
  }

  /// The folder `name` in this one, created if missing. An entry there
  /// that is not a folder of the group (a symlink, a file, a FIFO, another
  /// device) is refused, removed itself (never followed), and the folder
  /// made anew; `who` (a listener's name, or nil) goes in the log line.
  func ownedChild(_ name: String, for who: String? = nil) throws -> SafeDirectory {
    let open = { try self.child(name, create: true) }
    return try replacingUnsafeEntry(name, for: who, open: open, recreate: open)
  }

  /// The regular file `name`, opened with `flags | O_CREAT`. An entry there
  /// that is not a regular file is refused, removed itself and the file
  /// made anew, as ``ownedChild(_:for:)`` does for folders.
  func openOwnedFile(_ name: String, _ flags: Int32, for who: String? = nil) throws -> FileDescriptor {
    try replacingUnsafeEntry(
      name, for: who, open: { try self.openFile(name, flags | O_CREAT) },
      recreate: { try self.openFile(name, flags | O_CREAT | O_EXCL) })
  }

  /// The rule "refuse, remove, recreate", written once: `open`, and when
  /// the entry is unsafe, remove the entry itself and `recreate`.
  private func replacingUnsafeEntry<T>(
    _ name: String, for who: String?, open: () throws -> T, recreate: () throws -> T
  ) throws -> T {
    do {
      return try open()
    } catch GroupSyncError.unsafeEntry(let path, let reason) {
      let prefix = who.map { "listener '\($0)': " } ?? ""
      Logger.groupSync.error("\(prefix)refused '\(path)' (\(reason)); replacing it")
      remove(name)
      return try recreate()
    }
  }

  /// The identity of the entry `name` (not following a symlink), or nil if
  /// there is none.
  func identity(of name: String) -> FileIdentity? {
    var info = stat()
    guard fstatat(descriptor.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
    return FileIdentity(info)
  }

  /// `fstatat(2)` of the entry named by `name` (bytes), not following a
  /// symlink; nil if there is none.
  func status(of name: UnsafeBufferPointer<UInt8>) -> stat? {
    var info = stat()
    let found = withCString(name) { fstatat(descriptor.rawValue, $0, &info, AT_SYMLINK_NOFOLLOW) == 0 }
    return found ? info : nil
  }

  /// Whether this folder is still the entry `name` of `parent`.
  func isStill(_ name: String, in parent: SafeDirectory) -> Bool {
    parent.identity(of: name) == identity
  }

  /// Opens the regular file `name`, refusing anything else; never blocks
  /// (a FIFO is refused, not waited on).
  func openFile(_ name: String, _ flags: Int32, mode: mode_t = 0o644) throws -> FileDescriptor {
    if flags & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL {
      // O_EXCL (with O_NOFOLLOW) fails on any existing entry: what opens is
      // a regular file this call made in this folder; no fstat to check it.
      let fd = openat(descriptor.rawValue, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode)
      guard fd >= 0 else { throw GroupSyncError.system(call: "openat", path: path + "/" + name, errno: errno) }
      return FileDescriptor(adopting: fd)
    }
    return try openRegularFile(name, flags, mode: mode).file
  }

  /// ``openFile(_:_:mode:)``, also giving the `fstat(2)` it checked with.
  func openRegularFile(_ name: String, _ flags: Int32, mode: mode_t = 0o644) throws -> (file: FileDescriptor, status: stat) {
    let filePath = path + "/" + name
    let fd = openat(descriptor.rawValue, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode)
    guard fd >= 0 else {
      let code = errno
      if code == ELOOP { throw GroupSyncError.unsafeEntry(path: filePath, reason: "it is a symlink") }
      throw GroupSyncError.system(call: "openat", path: filePath, errno: code)
    }
    let file = FileDescriptor(adopting: fd)
    let info = try file.status(path: filePath)
    guard info.st_mode & S_IFMT == S_IFREG else {
      throw GroupSyncError.unsafeEntry(path: filePath, reason: "it is not a regular file")
    }
    guard UInt64(info.st_dev) == identity.device else {
      throw GroupSyncError.unsafeEntry(path: filePath, reason: "it is on another device")
    }
    return (file, info)
  }

  /// Calls `body` with the name of each entry (without `.` and `..`), as
  /// the bytes the kernel gave, valid during the call only. Entries may be
  /// removed with ``remove(_:)`` from inside `body`.
  func forEachEntry(_ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
    // fdopendir takes the descriptor it is given: give it a copy.
    let copy = try System.call("dup", path) { dup(descriptor.rawValue) }
    guard let stream = fdopendir(copy) else {
      let code = errno
      System.close(copy)
      throw GroupSyncError.system(call: "fdopendir", path: path, errno: code)
    }
    defer { closedir(stream) }
    rewinddir(stream)  // the copy shares the offset of earlier listings
    let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
    while let entry = readdir(stream) {
      // d_name is as long as the name, not 256 bytes: never copy the field.
      let start = (UnsafeRawPointer(entry) + nameOffset).assumingMemoryBound(to: UInt8.self)
      let name = UnsafeBufferPointer(start: start, count: strlen(UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self)))
      if name.count == 1 && name[0] == UInt8(ascii: ".") { continue }
      if name.count == 2 && name[0] == UInt8(ascii: ".") && name[1] == UInt8(ascii: ".") { continue }
      try body(name)
    }
  }

  /// Removes the entry named by `name` (bytes, any encoding) whatever it
  /// is; a folder with everything in it, never following a symlink: a
  /// symlink is removed itself, not what it points to.
  @discardableResult
  func remove(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    withCString(name) { remove(cName: $0) }
  }

  /// When the entry named by `name` last changed (ns since 1970: a
  /// rename into this folder sets it); nil when it is gone.
  func changeTime(_ name: UnsafeBufferPointer<UInt8>) -> Int64? {
    withCString(name) { changeTime(cName: $0) }
  }

  /// When the entry `name` last changed; see ``changeTime(_:)``.
  func changeTime(_ name: String) -> Int64? {
    name.withCString { changeTime(cName: $0) }
  }

  private func changeTime(cName: UnsafePointer<CChar>) -> Int64? {
    var info = stat()
    guard fstatat(descriptor.rawValue, cName, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
    return info.changeTimeNanoseconds
  }

  /// Removes the entry `name`; see ``remove(_:)``.
  @discardableResult
  func remove(_ name: String) -> Bool {
    name.withCString { remove(cName: $0) }
  }

  private func remove(cName: UnsafePointer<CChar>) -> Bool {
    if unlinkat(descriptor.rawValue, cName, 0) == 0 || errno == ENOENT { return true }
    guard errno == EISDIR else { return false }
    let fd = openat(descriptor.rawValue, cName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0, let folder = try? SafeDirectory(descriptor: FileDescriptor(adopting: fd), path: path + "/?"),
      folder.identity.device == identity.device
    else { return false }
    try? folder.forEachEntry { folder.remove($0) }
    return unlinkat(descriptor.rawValue, cName, AT_REMOVEDIR) == 0 || errno == ENOENT
  }

  private func withCString<T>(_ bytes: UnsafeBufferPointer<UInt8>, _ body: (UnsafePointer<CChar>) -> T) -> T {
    var copy = [CChar](repeating: 0, count: bytes.count + 1)
    for index in 0..<bytes.count { copy[index] = CChar(bitPattern: bytes[index]) }
    return copy.withUnsafeBufferPointer { body($0.baseAddress!) }
  }

  /// Removes the folder `name` so that it leaves its name in one step:
  /// renamed to a hidden name first (no listener name starts with '.'),
  /// then emptied and removed. Whoever looks up `name` meanwhile finds the
  /// whole folder or nothing, never a folder half emptied.
  @discardableResult
  func removeAtOnce(_ name: String) -> Bool {
    let hidden = ".removing-\(System.processID)-\(name)"
    guard renameat(descriptor.rawValue, name, descriptor.rawValue, hidden) == 0 else { return remove(name) }
    return remove(hidden)
  }

  /// Removes every entry.
  func clear() throws {
    try forEachEntry { remove($0) }
  }

  /// A name as it can be logged: UTF-8 as is, other bytes escaped.
  static func printable(_ name: UnsafeBufferPointer<UInt8>) -> String {
    if let text = String(validating: name, as: UTF8.self) { return text }
    return name.map { $0 < 0x80 ? String(UnicodeScalar($0)) : "\\x" + String($0, radix: 16) }.joined()
  }
}

extension stat {
  /// The inode's change time, in ns since 1970.
  var changeTimeNanoseconds: Int64 { Int64(st_ctim.tv_sec) * 1_000_000_000 + Int64(st_ctim.tv_nsec) }
}
