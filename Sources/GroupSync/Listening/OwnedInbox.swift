// The inbox a listener or a doorbell owns under `listeners/`: its folders,
// its lock, the watch on it, its registration for this process's commits,
// remaking its folders when something replaced them, and closing it.
import Foundation

/// An inbox under `listeners/NAME/` owned by one ``Listener`` or
/// ``Doorbell`` of this process, for its whole life.
///
/// Opening it makes the folders (the inbox exists before the lock is
/// held: a writer that sees the lock held always finds the inbox to
/// deliver into), takes the lock and empties the inbox (the stores already
/// hold every earlier change). The owner then ``register(_:)``s itself, so
/// that this process's commits come in memory, never through the inbox,
/// and starts the ``watch(_:)``. On each rescan tick the owner's consumer
/// calls ``remakeIfReplaced()``; ``close()`` lets everything go.
///
/// `@unchecked Sendable`: ``folders`` is read and remade by the owner's
/// one consumer only (a listener's consuming task, or the watcher thread);
/// what ``close()`` and ``wake()`` use from any thread is under `state`'s
/// mutex.
final class OwnedInbox: @unchecked Sendable {
  /// The folder's name under `listeners/`.
  let name: String
  private let root: SafeDirectory
  /// The group folder's path: where this process's inboxes are registered.
  private let group: String
  private let rescanMilliseconds: UInt64
  private let removeFolderOnClose: Bool
  private let lock: ListenerLock

  /// The folders as the owner's consumer uses them: remade by
  /// ``remakeIfReplaced()`` (consumer only).
  private(set) var folders: ListenerFolders
  /// The inbox folder itself (consumer only).
  var folder: SafeDirectory { folders.inbox }
  /// The owner's folder, `listeners/NAME/`, where the lock is (consumer only).
  var ownerFolder: SafeDirectory { folders.folder }

  /// What ``close()`` and ``wake()`` share with the consumer.
  private struct State {
    /// The folders as close() may use them from any thread.
    var folders: ListenerFolders
    var watch: FolderWatcher.Watch?
    /// The watch's handler, for the watch on a remade inbox.
    var handler: FolderWatcher.Handler?
    /// The owner, as registered in `LocalListeners`.
    var owner: ObjectIdentifier?
    /// Locks taken on folders made anew, held until close.
    var replacementLocks: [ListenerLock] = []
    var closed = false
  }

  private let state: Locked<State>

  /// Opens the inbox of `name` in the group folder `root` (at path
  /// `group`), takes its lock and empties it. Throws
  /// ``GroupSyncError/listenerNameInUse(_:)`` if a live owner holds it.
  init(root: SafeDirectory, group: String, name: String, rescanMilliseconds: UInt64, removeFolderOnClose: Bool) throws {
    self.root = root
    self.group = group
    self.name = name
    self.rescanMilliseconds = rescanMilliseconds
    self.removeFolderOnClose = removeFolderOnClose
    let folders = try ListenerFolders.open(in: root, name: name)
    lock = try ListenerLock(in: folders.folder, name: name)
    do {
      try folders.inbox.clear()
    } catch {
      lock.release()
      throw error
    }
    self.folders = folders
    state = Locked(State(folders: folders))
  }

  /// Registers `owner` in-process: this process's commits from now on are
  /// handed to it in memory, and fan-out skips its folder.
  func register(_ owner: any InProcessInbox) {
    LocalListeners.shared.add(owner, group: group)
    state.withLock { $0.owner = ObjectIdentifier(owner) }
  }

  /// Watches the inbox through the descriptor held, so that the watch is
  /// on that very folder, whatever its path became; a remade inbox is
  /// watched with the same `handler`. Only arrivals wake the watcher: the
  /// owner's own removals and a writer's links into other inboxes
  /// (link-count changes) do not. Events of the short time before this
  /// returns may be missed: look once after it.
  func watch(_ handler: @escaping FolderWatcher.Handler) throws {
    let watch = try FolderWatcher.shared.watch(
      folders.inbox, rescanMilliseconds: rescanMilliseconds, arrivalsOnly: true, handler: handler)
    let old = state.withLock { state -> FolderWatcher.Watch? in
      defer {
        state.watch = watch
        state.handler = handler
      }
      return state.watch
    }
    old?.cancel()
  }

  /// Has the watch's handler called once with ``FolderWatcher/Event/wake``
  /// on the watcher thread, soon; nothing once closed.
  func wake() {
    state.withLock { $0.watch }?.wake()
  }

  /// Whether ``close()`` was called (by anyone, from any thread).
  var isClosed: Bool { state.withLock { $0.closed } }

  /// What ``remakeIfReplaced()`` found.
  enum Upkeep {
    /// The folders are the ones held.
    case intact
    /// Closed (before or while looking): nothing was made.
    case closed
    /// Something replaced or removed them: they were made anew, locked
    /// and watched.
    case remade
    /// They were replaced and cannot be made again.
    case unrecoverable(any Error)
  }

  /// On each rescan tick (consumer only): are `listeners/`, the owner's
  /// folder and its inbox still the folders held? If anything replaced or
  /// removed them, make them anew, lock and watch them.
  func remakeIfReplaced() -> Upkeep {
    guard !folders.areIntact(in: root, name: name) else { return .intact }
    // An owner being closed removes its folder itself: not made again.
    if isClosed { return .closed }
    let made: ListenerFolders
    let lock: ListenerLock?
    let watch: FolderWatcher.Watch
    do {
      made = try ListenerFolders.open(in: root, name: name)
      // Writers find the lock through the folder: a new folder needs it
      // too, taken once its inbox exists.
      lock = made.folder.identity == folders.folder.identity ? nil : try ListenerLock(in: made.folder, name: name)
      do {
        let handler: FolderWatcher.Handler = state.withLock { $0.handler } ?? { @Sendable _ in }
        watch = try FolderWatcher.shared.watch(
          made.inbox, rescanMilliseconds: rescanMilliseconds, arrivalsOnly: true, handler: handler)
      } catch {
        lock?.release()
        throw error
      }
    } catch {
      return .unrecoverable(error)
    }
    // Under the same mutex as close(): an owner closed meanwhile must not
    // keep a watch or a lock it would never release.
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
      // Made while close() removed the folder: it goes too.
      if made.folder.identity != folders.folder.identity && made.folder.isStill(name, in: made.listeners) {
        _ = made.listeners.removeAtOnce(name)
      }
      return .closed
    }
    old?.cancel()
    folders = made
    return .remade
  }

  /// Stops the watch, unregisters the owner, empties the inbox, removes
  /// the owner's folder if asked at open, and releases the locks (writers
  /// stop delivering; the name is free again). Safe to call from any
  /// thread, any number of times.
  func close() {
    let taken = state.withLock { state -> (FolderWatcher.Watch?, ListenerFolders, ObjectIdentifier?, [ListenerLock])? in
      guard !state.closed else { return nil }
      state.closed = true
      defer {
        state.watch = nil
        state.handler = nil
        state.owner = nil
        state.replacementLocks = []
      }
      return (state.watch, state.folders, state.owner, state.replacementLocks)
    }
    guard let (watch, folders, owner, locks) = taken else { return }
    watch?.cancel()
    if let owner { LocalListeners.shared.remove(owner, group: group) }
    try? folders.inbox.clear()
    if removeFolderOnClose && folders.folder.isStill(name, in: folders.listeners) {
      // Gone from its name at once: a writer that saw the lock held
      // finds no folder, not one whose inbox is already removed.
      folders.listeners.removeAtOnce(name)
    }
    lock.release()
    locks.forEach { $0.release() }
  }
}
