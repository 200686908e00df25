import Foundation

/// A folder shared by the processes of a group: the SQLite store, and one
/// inbox per listening process.
///
/// Open it in every process; write through ``store``, and ``listen(as:options:)``
/// to be told what the other processes commit. For example:
///
/// ```swift
/// let group = try GroupFolder(path: "/srv/app/group")
/// let listener = try group.listen(as: "indexer")
/// try group.store.write { try $0.execute("UPDATE notes SET pinned = 1 WHERE rowid = 7") }
/// ```
public final class GroupFolder: Sendable {
  /// The folder, as an absolute path without symlinks.
  public let path: String
  /// The shared store, which publishes every commit to the listeners.
  public let store: Store
  let layout: GroupLayout

  /// Opens a group folder.
  ///
  /// - Parameters:
  ///   - path: the folder.
  ///   - create: create the folder and its store if missing; if false, a
  ///     folder without a store throws ``GroupSyncError/notAGroupFolder(_:)``.
  ///   - forceUpdateHook: capture with SQLite's update hook even where the
  ///     pre-update hook exists (tests of the fallback).
  public init(path: String, create: Bool = true, forceUpdateHook: Bool = false) throws {
    if create {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    guard let resolved = realpath(path, nil) else {
      throw create ? GroupSyncError.system(call: "realpath", path: path, errno: errno)
        : GroupSyncError.notAGroupFolder(path)
    }
    self.path = String(cString: resolved)
    free(resolved)
    layout = GroupLayout(root: self.path)
    if !create && !FileManager.default.fileExists(atPath: layout.store) {
      throw GroupSyncError.notAGroupFolder(path)
    }
    try System.makeDirectory(layout.tmp)
    try System.makeDirectory(layout.listeners)
    store = try Store(path: layout.store, forceUpdateHook: forceUpdateHook)
    let fanOut = FanOut(layout: layout)
    store.didCommit = { fanOut.deliver($0) }
  }

  /// Starts listening under `name`.
  ///
  /// - Parameter name: the listener's folder name; 1-64 letters, digits,
  ///   `-`, `_` or `.`. Without one, a unique name is made up and the
  ///   folder removed on close.
  /// - Throws: ``GroupSyncError/listenerNameInUse(_:)`` if a live listener
  ///   holds the name, ``GroupSyncError/invalidListenerName(_:)``.
  public func listen(as name: String? = nil, options: ListenerOptions = ListenerOptions()) throws -> Listener {
    let ephemeral = name == nil
    let name = name ?? "p\(System.processID)-\(UUID().uuidString.prefix(8).lowercased())"
    return try Listener(group: layout, name: name, storeID: store.storeID, options: options, ephemeral: ephemeral)
  }

  /// The store and every listener folder, live or dead.
  public func status() throws -> GroupStatus {
    var listeners: [GroupStatus.ListenerStatus] = []
    for name in try System.listDirectory(layout.listeners).sorted() where GroupLayout.isValidListenerName(name) {
      let backlog = (try? System.listDirectory(layout.inbox(name)).count) ?? 0
      let lockPath = layout.lockFile(name)
      let live = ListenerLock.isHeld(at: lockPath)
      listeners.append(
        .init(name: name, isLive: live, processID: live ? ListenerLock.recordedProcessID(at: lockPath) : nil,
              backlog: backlog))
    }
    return GroupStatus(
      path: path, storeID: store.storeID, sequence: try store.currentSequence(),
      usesPreUpdateHook: store.usesPreUpdateHook, listeners: listeners)
  }
}

/// A snapshot of a group folder, as `groupsync status` prints it.
public struct GroupStatus: Sendable, Codable, Equatable {
  public struct ListenerStatus: Sendable, Codable, Equatable {
    public let name: String
    public let isLive: Bool
    public let processID: Int32?
    /// Change-set files waiting in its inbox.
    public let backlog: Int
  }

  public let path: String
  public let storeID: UUID
  /// The last sequence number committed.
  public let sequence: Int64
  public let usesPreUpdateHook: Bool
  public let listeners: [ListenerStatus]
}
