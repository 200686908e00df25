#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// Delivers a committed change set to every live listener of a group.
///
/// The file is written once into `tmp/` and hard-linked into each live
/// listener's inbox, the last one by rename: each name appears complete,
/// in one step. Listeners of the writer's own process get the change set
/// in memory instead: a process never reads its own change sets back from
/// disk.
final class FanOut: Sendable {
  let layout: GroupLayout
  /// Open lock files of the listeners seen so far, so that probing one
  /// costs two flock calls rather than an open and a close as well.
  private let locks = Mutex<[String: LockProbe]>([:])
  /// Makes temporary names unique to this process and this FanOut.
  private let token = UInt32.random(in: 0...UInt32.max)

  init(layout: GroupLayout) {
    self.layout = layout
  }

  deinit {
    locks.withLock { $0.values.forEach { System.close($0.fd) } }
  }

  func deliver(_ changeSet: ChangeSet) {
    let local = LocalListeners.shared.listeners(in: layout.root)
    for listener in local { listener.receiveInProcess(changeSet) }
    let entries: [(name: String, inode: UInt64)]
    do {
      entries = try System.listDirectoryEntries(layout.listeners)
    } catch {
      Logger.groupSync.error("cannot list listeners: \(error)")
      return
    }
    let localNames = Set(local.map(\.name))
    var targets: [(name: String, inbox: String)] = []
    locks.withLock { locks in
      for (name, inode) in entries where !localNames.contains(name) && GroupLayout.isValidListenerName(name) {
        // A dead listener is skipped: its inbox does not grow.
        if let probe = liveProbe(name, folderInode: inode, cache: &locks) {
          targets.append((name, probe.inboxPrefix))
        }
      }
      // Forget listener folders that are gone.
      if locks.count > entries.count {
        let present = Set(entries.map(\.name))
        for (name, probe) in locks where !present.contains(name) {
          System.close(probe.fd)
          locks[name] = nil
        }
      }
    }
    guard !targets.isEmpty else { return }
    let fileName = GroupLayout.fileName(sequence: changeSet.sequence)
    let tmpPath = "\(layout.tmp)/\(fileName).\(System.processID).\(token).tmp"
    do {
      try write(ChangeSetEncoding.encode(changeSet), to: tmpPath)
    } catch {
      Logger.groupSync.error("cannot publish change set \(changeSet.sequence): \(error)")
      return
    }
    var renamed = false
    for (index, target) in targets.enumerated() {
      let destination = target.inbox + fileName
      // The last inbox takes the temporary name itself.
      let isLast = index == targets.count - 1
      let (call, result) = isLast ? ("rename", rename(tmpPath, destination)) : ("link", link(tmpPath, destination))
      if result == 0 {
        renamed = isLast
      } else if errno != ENOENT {  // ENOENT: the listener went away meanwhile
        let error = GroupSyncError.system(call: call, path: destination, errno: errno)
        Logger.groupSync.error("cannot deliver change set \(changeSet.sequence) to '\(target.name)': \(error)")
      }
    }
    if !renamed { _ = unlink(tmpPath) }
  }

  /// An open lock file of one listener folder, and its inbox path.
  private struct LockProbe {
    let fd: Int32
    let folderInode: UInt64
    /// `listeners/NAME/inbox/`, ready for a file name.
    let inboxPrefix: String
  }

  /// The probe of `name` if a live listener holds its lock. A listener
  /// folder that was replaced (a new inode) gets its lock file opened anew.
  private func liveProbe(_ name: String, folderInode: UInt64, cache: inout [String: LockProbe]) -> LockProbe? {
    if let probe = cache[name], probe.folderInode != folderInode {
      System.close(probe.fd)
      cache[name] = nil
    }
    if cache[name] == nil {
      let fd = Glibc.open(layout.lockFile(name), O_RDONLY | O_CLOEXEC)
      guard fd >= 0 else { return nil }  // being created, or not a listener
      cache[name] = LockProbe(fd: fd, folderInode: folderInode, inboxPrefix: layout.inbox(name) + "/")
    }
    let probe = cache[name]!
    return ListenerLock.isHeld(fd: probe.fd) ? probe : nil
  }

  private func write(_ bytes: [UInt8], to path: String) throws {
    var fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
    if fd < 0 && errno == EEXIST {
      // A leftover of a crashed writer may still be linked into inboxes:
      // replace the name rather than truncate the file behind it.
      try System.unlinkIfPresent(path)
      fd = try System.open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
    } else if fd < 0 {
      throw GroupSyncError.system(call: "open", path: path, errno: errno)
    }
    defer { System.close(fd) }
    try bytes.withUnsafeBytes { try System.writeAll(fd, $0, path: path) }
  }
}

/// The listeners of this process, by group folder, so that fan-out hands
/// them change sets in memory and skips their inboxes.
final class LocalListeners: Sendable {
  static let shared = LocalListeners()

  private let entries = Mutex<[String: [ObjectIdentifier: WeakListener]]>([:])

  private struct WeakListener: @unchecked Sendable {
    weak var listener: Listener?
  }

  func add(_ listener: Listener, group: String) {
    entries.withLock { $0[group, default: [:]][ObjectIdentifier(listener)] = WeakListener(listener: listener) }
  }

  func remove(_ listener: Listener, group: String) {
    entries.withLock { $0[group]?[ObjectIdentifier(listener)] = nil }
  }

  func listeners(in group: String) -> [Listener] {
    entries.withLock { $0[group]?.values.compactMap(\.listener) ?? [] }
  }
}
