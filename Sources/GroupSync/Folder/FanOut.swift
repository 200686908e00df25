import CGroupSync
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Delivers a committed change set to every live listener of a group.
///
/// The file is written once into `tmp/` and hard-linked into each live
/// listener's inbox, the last one by rename: each name appears complete,
/// in one step. Listeners of the writer's own process get the change set
/// in memory instead: a process never reads its own change sets back from
/// disk. Every folder is reached through descriptors opened without
/// following symlinks (``SafeDirectory``) and checked again before each
/// delivery (a listener's folder through the times of `listeners/`, which
/// replacing or moving it changes), so a folder replaced or moved away is
/// never written into.
final class FanOut: Sendable {
  private let root: SafeDirectory
  private let rootPath: String
  /// Makes temporary names unique to this process and this FanOut.
  private let token = UInt32.random(in: 0...UInt32.max)

  private struct Folders {
    var listeners: SafeDirectory?
    var tmp: SafeDirectory?
    /// The last listing of `listeners/`, and the folder's times then.
    var targets: [String: Target] = [:]
    /// The names of `targets` in delivery order, sorted when listed.
    var names: [String] = []
    var listedChange: (mtime: timespec, ctime: timespec)?
    var lastTmpSweep: ContinuousClock.Instant?
  }

  /// One listener's folders, opened once and checked before each use.
  private struct Target {
    var folder: SafeDirectory?
    var inbox: SafeDirectory?
    var lock: FileDescriptor?
  }

  private let folders = Locked(Folders())

  /// Finds this process's own inboxes of a group, by the group folder's
  /// path: change sets go to them in memory, and their folders on disk
  /// are skipped.
  private let inProcessInboxes: @Sendable (String) -> [any InProcessInbox]

  /// Temporary files older than this, of a writer that is gone, are removed.
  static let staleTemporaryAge: Double = 300
  private static let tmpSweepInterval: Duration = .seconds(60)

  init(root: SafeDirectory, inProcessInboxes: @escaping @Sendable (String) -> [any InProcessInbox]) {
    self.root = root
    rootPath = root.path
    self.inProcessInboxes = inProcessInboxes
  }

  /// Delivers `committed` of store `store` (its encoding as the file, its
  /// author to in-process inboxes) and says which live listeners did not
  /// get it; they fill the gap from the store's history.
  func deliver(_ committed: CommittedChangeSet, store: String) -> [PublishFailure] {
    let changeSet = committed.changeSet
    let local = inProcessInboxes(rootPath)
    for inbox in local { inbox.receiveInProcess(changeSet, store: store, author: committed.author) }
    let localNames = local.isEmpty ? [] : Set(local.map(\.name))
    return folders.withLock { folders in
      var failures: [PublishFailure] = []
      let targets: [(name: String, inbox: SafeDirectory)]
      do {
        targets = try liveTargets(&folders, excluding: localNames, failures: &failures)
      } catch {
        return [PublishFailure(listener: nil, error: error)]
      }
      sweepTemporaryFiles(&folders)
      guard !targets.isEmpty else { return failures }
      let fileName = GroupLayout.fileName(store: store, sequence: changeSet.sequence)
      let tmpName = Self.temporaryName(fileName, token: token)
      guard let tmp = try? tmpFolder(&folders) else {
        return failures + targets.map { PublishFailure(listener: $0.name, error: GroupSyncError.unsafeEntry(
          path: rootPath + "/tmp", reason: "it cannot be opened as a folder")) }
      }
      do {
        try write(committed.encoded, named: tmpName, in: tmp)
      } catch {
        tmp.remove(tmpName)
        Logger.groupSync.error("cannot publish change set \(changeSet.sequence): \(error)")
        return failures + [PublishFailure(listener: nil, error: error)]
      }
      var renamed = false
      for (index, target) in targets.enumerated() {
        // The last inbox takes the temporary name itself.
        let isLast = index == targets.count - 1
        let result = isLast
          ? renameat(tmp.descriptor.rawValue, tmpName, target.inbox.descriptor.rawValue, fileName)
          : linkat(tmp.descriptor.rawValue, tmpName, target.inbox.descriptor.rawValue, fileName, 0)
        if result == 0 {
          renamed = isLast
        } else if errno != ENOENT {  // ENOENT: the listener went away meanwhile
          let error = GroupSyncError.system(
            call: isLast ? "renameat" : "linkat", path: target.inbox.path + "/" + fileName, errno: errno)
          Logger.groupSync.error("cannot deliver change set \(changeSet.sequence) to '\(target.name)': \(error)")
          failures.append(PublishFailure(listener: target.name, error: error))
          folders.targets[target.name] = nil  // opened anew next time
        }
      }
      if !renamed { tmp.remove(tmpName) }
      return failures
    }
  }

  // MARK: Folders

  private func listenersFolder(_ folders: inout Folders) throws -> SafeDirectory {
    if let listeners = folders.listeners, listeners.isStill(GroupLayout.listenersFolder, in: root) { return listeners }
    folders.listeners = nil
    folders.targets = [:]
    folders.names = []
    folders.listedChange = nil
    let listeners = try root.child(GroupLayout.listenersFolder, create: true)
    folders.listeners = listeners
    return listeners
  }

  /// `tmp/`, made anew if something else took its place.
  func tmpFolder() throws -> SafeDirectory {
    try folders.withLock { try tmpFolder(&$0) }
  }

  private func tmpFolder(_ folders: inout Folders) throws -> SafeDirectory {
    if let tmp = folders.tmp, tmp.isStill(GroupLayout.tmpFolder, in: root) { return tmp }
    folders.tmp = nil
    let tmp = try root.ownedChild(GroupLayout.tmpFolder)
    folders.tmp = tmp
    return tmp
  }

  /// The inboxes of the live listeners, other than this process's own.
  /// `listeners/` is listed again only when it changed.
  private func liveTargets(
    _ folders: inout Folders, excluding localNames: Set<String>, failures: inout [PublishFailure]
  ) throws -> [(name: String, inbox: SafeDirectory)] {
    let listeners = try listenersFolder(&folders)
    let info = try listeners.descriptor.status(path: listeners.path)
    // Times are coarse (gs_file_time_settled): they are kept only if this
    // listing reads them settled, so that unchanged times then mean an
    // unchanged folder; until they settle every call lists again.
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    let settled = gs_file_time_settled(info.st_mtim, now) != 0 && gs_file_time_settled(info.st_ctim, now) != 0
    let change: (mtime: timespec, ctime: timespec)? = settled ? (info.st_mtim, info.st_ctim) : nil
    let relist =
      folders.listedChange.map({ !Self.same($0.mtime, info.st_mtim) || !Self.same($0.ctime, info.st_ctim) }) ?? true
    if relist {
      var names = Set<String>()
      try listeners.forEachEntry { bytes in
        if let name = String(validating: bytes, as: UTF8.self), GroupLayout.isValidListenerName(name) {
          names.insert(name)
        }
      }
      folders.targets = folders.targets.filter { names.contains($0.key) }
      for name in names where folders.targets[name] == nil { folders.targets[name] = Target() }
      folders.names = names.sorted()
      folders.listedChange = change
    }
    var live: [(name: String, inbox: SafeDirectory)] = []
    for name in folders.names where !localNames.contains(name) {
      guard var target = folders.targets[name] else { continue }
      // An entry of listeners/ replaced or moved changes its times: while
      // they stand still, the folders held are still its entries.
      if relist, let folder = target.folder, !folder.isStill(name, in: listeners) { target = Target() }
      if target.folder == nil { target.folder = try? listeners.child(name, create: false) }
      guard let folder = target.folder else {
        folders.targets[name] = target
        continue  // being created, removed, or not a folder: not a listener
      }
      if target.lock == nil { target.lock = try? folder.openFile(ListenerLock.fileName, O_RDONLY) }
      // A dead listener is skipped: its inbox does not grow.
      guard let lock = target.lock, ListenerLock.isHeld(lock) else {
        if target.lock != nil && folder.identity(of: ListenerLock.fileName) == nil { target.lock = nil }
        folders.targets[name] = target
        continue
      }
      if let inbox = target.inbox, !inbox.isStill(GroupLayout.inboxFolder, in: folder) { target.inbox = nil }
      if target.inbox == nil {
        do {
          target.inbox = try folder.child(GroupLayout.inboxFolder, create: false)
        } catch where !folder.isStill(name, in: listeners) {
          // The listener closed meanwhile and took its folder away: gone,
          // not a failure.
          folders.targets[name] = nil
          continue
        } catch {
          // The live listener will see its inbox is gone or wrong and
          // recreate it; this change set it reads from the history.
          failures.append(PublishFailure(listener: name, error: error))
        }
      }
      folders.targets[name] = target
      if let inbox = target.inbox { live.append((name, inbox)) }
    }
    return live
  }

  /// A name in `tmp/` for `base`, unique to this process and `token`,
  /// which the sweep of stale files recognizes.
  static func temporaryName(_ base: String, token: UInt32) -> String {
    "\(base).\(System.processID).\(token).tmp"
  }

  private static func same(_ a: timespec, _ b: timespec) -> Bool { a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec }

  private func write(_ bytes: [UInt8], named name: String, in folder: SafeDirectory) throws {
    let file: FileDescriptor
    do {
      file = try folder.openFile(name, O_WRONLY | O_CREAT | O_EXCL)
    } catch GroupSyncError.system(EEXIST) {
      // A leftover of a crashed writer may still be linked into inboxes:
      // replace the name rather than truncate the file behind it.
      folder.remove(name)
      file = try folder.openFile(name, O_WRONLY | O_CREAT | O_EXCL)
    }
    try bytes.withUnsafeBytes { try System.writeAll(file.rawValue, $0, path: folder.path + "/" + name) }
  }

  /// Removes files of `tmp/` left by writers that died mid-publish (or
  /// planted there) once they are a few minutes old; at most once a minute.
  private func sweepTemporaryFiles(_ folders: inout Folders) {
    let now = ContinuousClock.now
    if let last = folders.lastTmpSweep, now - last < Self.tmpSweepInterval { return }
    folders.lastTmpSweep = now
    guard let tmp = try? tmpFolder(&folders) else { return }
    let cutoff = Date().timeIntervalSince1970 - Self.staleTemporaryAge
    try? tmp.forEachEntry { name in
      guard let info = tmp.status(of: name) else { return }
      let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
      guard modified < cutoff, !Self.isFromLiveWriter(name) else { return }
      tmp.remove(name)
    }
  }

  /// Whether a temporary name (`[STORE.]SEQ.changeset.PID.TOKEN.tmp`, or
  /// a store being installed, `install.STORE.PID.TOKEN.tmp`) is of a
  /// process that is still running.
  private static func isFromLiveWriter(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    let parts = name.split(separator: UInt8(ascii: "."))
    guard parts.count >= 5, let pid = Int32(String(decoding: parts[parts.count - 3], as: UTF8.self)), pid > 0 else {
      return false
    }
    return kill(pid, 0) == 0 || errno == EPERM
  }
}

/// A live listener a committed change set could not be delivered to: it
/// reads that change set from the store's history instead.
public struct PublishFailure: Error, Sendable, CustomStringConvertible {
  /// The listener, or nil when the file could not be written at all.
  public let listener: String?
  /// What went wrong.
  public let error: any Error

  public var description: String {
    "\(listener.map { "listener '\($0)'" } ?? "every listener"): \(error)"
  }
}

/// An inbox of this process, which takes a group's change sets in memory:
/// fan-out hands them over and skips its folder on disk.
protocol InProcessInbox: AnyObject, Sendable {
  /// The name of the folder under `listeners/` that fan-out skips.
  var name: String { get }
  /// Takes change set `changeSet` of store `store`, committed by this
  /// process under `author` (nil: none); called by the committing thread,
  /// so quick.
  func receiveInProcess(_ changeSet: ChangeSet, store: String, author: String?)
}
