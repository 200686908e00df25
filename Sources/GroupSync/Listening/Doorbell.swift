import Foundation
import Logging

/// Rings on each commit to a group's stores, without reading what was
/// committed: for a consumer that reads the stores' histories itself (a
/// relay) and only needs to know when to look.
///
/// A doorbell owns an inbox under `listeners/`, as a listener does, so
/// every writer of every process delivers to it; each file that arrives
/// is removed unread and `ring` is called. Nothing is decoded, nothing is
/// read from a store or its history, and there are no resets: a file that
/// is not a change set at all just rings too. It also rings when the
/// kernel dropped the inbox's events, or when its folders were removed or
/// replaced (made anew), where a listener would reset: look again then.
/// For example:
///
/// ```swift
/// let doorbell = try group.doorbell { wake.ring() }
/// defer { doorbell.close() }
/// ```
///
/// `ring` runs on the process's watcher thread, or, for a commit of this
/// process, on the committing thread: keep it short (write to a pipe,
/// signal a semaphore). Several commits may ring once, when one listing of
/// the inbox finds them. A commit whose change set never reaches the inbox
/// (its writer died right after COMMIT, or a program that does not use
/// GroupSync wrote) does not ring: look on a timer as well.
public final class Doorbell: InProcessInbox, Sendable {
  /// The doorbell's folder under `listeners/`, made up per doorbell and
  /// removed on close.
  public let name: String

  private let root: SafeDirectory
  private let group: String
  private let rescanMilliseconds: UInt64
  private let ring: @Sendable () -> Void
  /// This process's commits under this author do not ring (nil: all do).
  private let ignoredAuthor: String?
  private let lock: ListenerLock

  /// What the watcher thread and ``close()`` share.
  private struct State {
    var folders: ListenerFolders
    var watch: FolderWatcher.Watch?
    /// Locks taken on folders made anew, held until close.
    var replacementLocks: [ListenerLock] = []
    var closed = false
  }

  private let state: Locked<State>

  init(
    root: SafeDirectory, group: String, name: String, rescanInterval: Duration, ignoredAuthor: String? = nil,
    ring: @escaping @Sendable () -> Void
  ) throws {
    self.root = root
    self.ignoredAuthor = ignoredAuthor
    self.group = group
    self.name = name
    self.ring = ring
    rescanMilliseconds = UInt64(max(rescanInterval.milliseconds, 1))
    let folders = try ListenerFolders.open(in: root, name: name)
    lock = try ListenerLock(in: folders.folder, name: name)
    state = Locked(State(folders: folders))
    do {
      try folders.inbox.clear()
      LocalListeners.shared.add(self, group: group)
      let watch = try watchInbox(folders.inbox)
      state.withLock { $0.watch = watch }
      watch.wake()  // what arrived before the watch started
    } catch {
      LocalListeners.shared.remove(self, group: group)
      lock.release()
      throw error
    }
  }

  deinit { close() }

  /// Whether ``close()`` was called.
  public var isClosed: Bool { state.withLock { $0.closed } }

  /// Stops ringing: releases the doorbell's lock and removes its folder.
  /// Safe to call from any thread, any number of times.
  public func close() {
    guard let (watch, folders, locks) = state.withLock({ state -> (FolderWatcher.Watch?, ListenerFolders, [ListenerLock])? in
      guard !state.closed else { return nil }
      state.closed = true
      defer {
        state.watch = nil
        state.replacementLocks = []
      }
      return (state.watch, state.folders, state.replacementLocks)
    }) else { return }
    watch?.cancel()
    LocalListeners.shared.remove(self, group: group)
    try? folders.inbox.clear()
    if folders.folder.isStill(name, in: folders.listeners) { folders.listeners.removeAtOnce(name) }
    lock.release()
    locks.forEach { $0.release() }
  }

  /// A commit of this process, handed over in memory: it rings at once,
  /// unless its author is the one the doorbell ignores.
  func receiveInProcess(_ changeSet: ChangeSet, store: String, author: String?) {
    guard ignoredAuthor == nil || author != ignoredAuthor else { return }
    if !isClosed { ring() }
  }

  // MARK: On the watcher thread

  private func watchInbox(_ inbox: SafeDirectory) throws -> FolderWatcher.Watch {
    try FolderWatcher.shared.watch(inbox, rescanMilliseconds: rescanMilliseconds, arrivalsOnly: true) {
      [weak self] event in self?.handle(event)
    }
  }

  private func handle(_ event: FolderWatcher.Event) {
    guard let inbox = state.withLock({ $0.closed ? nil : $0.folders.inbox }) else { return }
    switch event {
    case .entry(let fileName):
      inbox.remove(fileName)
      ring()
    case .rescan:
      emptyInbox(inbox)
      ring()
    case .failed(let status):
      Logger.groupSync.error("watching inbox of doorbell '\(name)' failed: uv error \(status)")
      emptyInbox(inbox)
      ring()
    case .tick, .wake:
      if remakeFoldersIfReplaced() || emptyInbox(inbox) > 0 { ring() }
    }
  }

  /// Removes what the inbox holds, unread; returns how many entries.
  @discardableResult
  private func emptyInbox(_ inbox: SafeDirectory) -> Int {
    var count = 0
    try? inbox.forEachEntry {
      inbox.remove($0)
      count += 1
    }
    return count
  }

  /// Makes the folders anew if anything replaced or removed them, and
  /// watches the new inbox; true when it did.
  private func remakeFoldersIfReplaced() -> Bool {
    let held = state.withLock { $0.folders }
    guard !held.areIntact(in: root, name: name) else { return false }
    do {
      let made = try ListenerFolders.open(in: root, name: name)
      // Writers find the lock through the folder: a new one needs it too.
      let lock = made.folder.identity == held.folder.identity ? nil : try ListenerLock(in: made.folder, name: name)
      let watch = try watchInbox(made.inbox)
      // Under the same mutex as close(): a doorbell closed meanwhile must
      // not keep a watch or a lock it would never release.
      let old = state.withLock { state -> FolderWatcher.Watch?? in
        guard !state.closed else { return nil }
        defer { state.watch = watch }
        state.folders = made
        if let lock { state.replacementLocks.append(lock) }
        return .some(state.watch)
      }
      guard let old else {
        watch.cancel()
        lock?.release()
        return false
      }
      old?.cancel()
      Logger.groupSync.error("doorbell '\(name)': its inbox or folder was removed or replaced; made anew")
    } catch {
      Logger.groupSync.error("doorbell '\(name)': its folders were replaced and cannot be made again: \(error)")
    }
    return true
  }
}
