import Foundation
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// A lock released is free at once, even while a copy of its descriptor
/// lives on: what a child process has that another thread is starting,
/// from its clone until its exec closes the `O_CLOEXEC` descriptors. Here
/// the copy is a `dup` of the lock's descriptor, which shares its open
/// file description as the child's copy does.
@Suite(.timed)
struct LockReleaseTests {
  /// Copies of this process's descriptors open on `path`, made with `dup`
  /// (found through /proc/self/fd); the caller closes them.
  static func duplicateDescriptors(of path: String) throws -> [Int32] {
    let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    // Listed first, copied after: a copy made while listing is listed too.
    let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { entry -> Int32? in
      guard let fd = Int32(entry),
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)")) == target
      else { return nil }
      return fd
    }
    return open.map { dup($0) }.filter { $0 >= 0 }
  }

  @Test func aClosedListenersNameIsFreeWhileACopyOfItsLockLives() async throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    let listener = try group.listen(as: "ui", options: ListenerFixture.options)
    let copies = try Self.duplicateDescriptors(of: group.layout.listenerFolder("ui") + "/" + ListenerLock.fileName)
    defer { copies.forEach { close($0) } }
    try #require(copies.count == 1, "the lock's descriptor was found")
    listener.close()
    #expect(try group.status().listeners.filter(\.isLive).isEmpty, "a closed listener is not live")
    let again = try group.listen(as: "ui", options: ListenerFixture.options)
    again.close()
  }

  @Test func aReleasedRelayLockIsFreeWhileACopyOfItLives() throws {
    let folder = try TemporaryFolder()
    let lock = try #require(try RelayStatusFile.lock(group: folder.path, host: "web-1"))
    let path = folder.path + "/" + RelayStatusFile.folderName + "/web-1.lock"
    let copies = try Self.duplicateDescriptors(of: path)
    defer { copies.forEach { close($0) } }
    try #require(copies.count == 1, "the lock's descriptor was found")
    #expect(try RelayStatusFile.lock(group: folder.path, host: "web-1") == nil, "a held lock is not given twice")
    lock.release()
    #expect(!RelayStatusFile.isHeld(path))
    let again = try RelayStatusFile.lock(group: folder.path, host: "web-1")
    again?.release()
    #expect(again != nil)
  }
}
