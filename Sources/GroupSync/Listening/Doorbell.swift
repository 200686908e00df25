// The doorbell: an inbox that rings on each commit to a group's stores,
// for a consumer that reads the histories itself.
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

  private let ring: @Sendable () -> Void
  /// This process's commits under this author do not ring (nil: all do).
  private let ignoredAuthor: String?
  /// Its inbox; the watcher thread is its consumer.
  private let inbox: OwnedInbox

  init(
    root: SafeDirectory, group: String, name: String, rescanInterval: Duration, ignoredAuthor: String? = nil,
    ring: @escaping @Sendable () -> Void
  ) throws {
    self.ignoredAuthor = ignoredAuthor
    self.name = name
    self.ring = ring
    inbox = try OwnedInbox(
      root: root, group: group, name: name, rescanMilliseconds: UInt64(max(rescanInterval.milliseconds, 1)),
      removeFolderOnClose: true)
    do {
      inbox.register(self)
      try inbox.watch { [weak self] event in self?.handle(event) }
      inbox.wake()  // what arrived before the watch started
    } catch {
      inbox.close()
      throw error
    }
  }

  deinit { close() }

  /// Whether ``close()`` was called.
  public var isClosed: Bool { inbox.isClosed }

  /// Stops ringing: releases the doorbell's lock and removes its folder.
  /// Safe to call from any thread, any number of times.
  public func close() { inbox.close() }

  /// A commit of this process, handed over in memory: it rings at once,
  /// unless its author is the one the doorbell ignores.
  func receiveInProcess(_ changeSet: ChangeSet, store: String, author: String?) {
    guard ignoredAuthor == nil || author != ignoredAuthor else { return }
    if !isClosed { ring() }
  }

  // MARK: On the watcher thread

  private func handle(_ event: FolderWatcher.Event) {
    guard !inbox.isClosed else { return }
    let folder = inbox.folder
    switch event {
    case .entry(let fileName):
      folder.remove(fileName)
      ring()
    case .rescan:
      emptyInbox(folder)
      ring()
    case .failed(let status):
      Logger.groupSync.error("watching inbox of doorbell '\(name)' failed: uv error \(status)")
      emptyInbox(folder)
      ring()
    case .tick, .wake:
      if remakeFoldersIfReplaced() || emptyInbox(folder) > 0 { ring() }
    }
  }

  /// Removes what the inbox holds, unread; returns how many entries.
  @discardableResult
  private func emptyInbox(_ folder: SafeDirectory) -> Int {
    var count = 0
    try? folder.forEachEntry {
      folder.remove($0)
      count += 1
    }
    return count
  }

  /// Makes the folders anew if anything replaced or removed them, and
  /// watches the new inbox; true when it did, or tried and failed.
  private func remakeFoldersIfReplaced() -> Bool {
    switch inbox.remakeIfReplaced() {
    case .intact, .closed:
      return false
    case .remade:
      Logger.groupSync.error("doorbell '\(name)': its inbox or folder was removed or replaced; made anew")
    case .unrecoverable(let error):
      Logger.groupSync.error("doorbell '\(name)': its folders were replaced and cannot be made again: \(error)")
    }
    return true
  }
}
