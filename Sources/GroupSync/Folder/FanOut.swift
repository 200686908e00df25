import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import Logging

/// Delivers a committed change set to every live listener of a group.
///
/// The file is written once into `tmp/`, hard-linked into each live
/// listener's inbox (each link appears complete, in one step), and the
/// temporary name removed. Listeners of the writer's own process get the
/// change set in memory instead: a process never reads its own change
/// sets back from disk.
struct FanOut: Sendable {
  let layout: GroupLayout

  /// What one delivery did, for tests and benchmarks.
  struct Report: Equatable {
    var delivered: [String] = []
    var skippedDead: [String] = []
    var inProcess: [String] = []
  }

  @discardableResult
  func deliver(_ changeSet: ChangeSet) -> Report {
    var report = Report()
    let local = LocalListeners.shared.listeners(in: layout.root)
    for listener in local {
      listener.receiveInProcess(changeSet)
      report.inProcess.append(listener.name)
    }
    let names: [String]
    do {
      names = try System.listDirectory(layout.listeners)
    } catch {
      Logger.groupSync.error("cannot list listeners: \(error)")
      return report
    }
    let localNames = Set(local.map(\.name))
    var targets: [String] = []
    for name in names where !localNames.contains(name) && GroupLayout.isValidListenerName(name) {
      if ListenerLock.isHeld(at: layout.lockFile(name)) {
        targets.append(name)
      } else {
        report.skippedDead.append(name)
      }
    }
    guard !targets.isEmpty else { return report }
    let fileName = GroupLayout.fileName(sequence: changeSet.sequence)
    let tmpPath = "\(layout.tmp)/\(fileName).\(System.processID).tmp"
    do {
      try write(ChangeSetEncoding.encode(changeSet), to: tmpPath)
    } catch {
      Logger.groupSync.error("cannot publish change set \(changeSet.sequence): \(error)")
      return report
    }
    defer { _ = unlink(tmpPath) }
    for name in targets {
      let destination = layout.inbox(name) + "/" + fileName
      if link(tmpPath, destination) == 0 {
        report.delivered.append(name)
      } else if errno != ENOENT {  // ENOENT: the listener went away meanwhile
        let error = GroupSyncError.system(call: "link", path: destination, errno: errno)
        Logger.groupSync.error("cannot deliver change set \(changeSet.sequence) to '\(name)': \(error)")
      }
    }
    return report
  }

  private func write(_ bytes: [UInt8], to path: String) throws {
    // A leftover of a crashed writer may still be linked into inboxes:
    // replace the name rather than truncate the file behind it.
    try System.unlinkIfPresent(path)
    let fd = try System.open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
    defer { System.close(fd) }
    try bytes.withUnsafeBytes { buffer throws in try System.writeAll(fd, buffer, path: path) }
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
