// The group folder: opening it, its stores, and listening to it.
import Foundation
import GRDB

/// A folder shared by the processes of a group: the SQLite store, and one
/// inbox per listening process.
///
/// Open it in every process; write through ``store``, and ``listen(as:durable:options:)``
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
  /// The group folder, open: everything in it is reached from here.
  let root: SafeDirectory
  /// Hands notes (defaults changes, notifications) to in-process observers.
  let noteHub: NoteHub
  /// Every store of the group, opened on first use.
  let directory: StoreDirectory

  /// Opens a group folder.
  ///
  /// - Parameters:
  ///   - path: the folder.
  ///   - create: create the folder and its store if missing; if false, a
  ///     folder without a store throws ``GroupSyncError/notAGroupFolder(_:)``.
  ///   - configuration: GRDB's configuration of the store's pool, which
  ///     GroupSync extends (busy timeout, `synchronous = NORMAL`).
  ///   - options: how the store captures changes.
  public init(
    path: String, create: Bool = true, configuration: Configuration = Configuration(),
    options: StoreOptions = StoreOptions()
  ) throws {
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
    root = try SafeDirectory.root(self.path)
    var storeInfo = stat()
    if fstatat(root.descriptor.rawValue, GroupLayout.storeFile, &storeInfo, AT_SYMLINK_NOFOLLOW) == 0 {
      // SQLite follows symlinks: a store that is not a plain file of the
      // group folder is refused.
      guard storeInfo.st_mode & S_IFMT == S_IFREG, UInt64(storeInfo.st_dev) == root.identity.device else {
        throw GroupSyncError.unsafeEntry(path: layout.store, reason: "the store is not a regular file of the group folder")
      }
    } else if !create {
      throw GroupSyncError.notAGroupFolder(path)
    }
    // This process's listeners get its change sets in memory.
    directory = try StoreDirectory(
      root: root, layout: layout, configuration: configuration, options: options,
      inProcessInboxes: { LocalListeners.shared.inboxes(in: $0) })
    store = directory.main
    let directory = directory
    noteHub = NoteHub {
      try Listener(
        directory: directory, name: GroupFolder.ephemeralName(), options: ListenerOptions(), ephemeral: true,
        durable: false)
    }
  }

  /// Starts listening under `name`.
  ///
  /// For example:
  ///
  /// ```swift
  /// let listener = try group.listen(as: "indexer", durable: true)
  /// for await event in listener.events { try await index(event) }
  /// ```
  ///
  /// - Parameters:
  ///   - name: the listener's folder name; 1-64 letters, digits, `-`, `_`
  ///     or `.`. Without one, a unique name is made up and the folder
  ///     removed on close.
  ///   - durable: keep the listener's place while its process is not
  ///     running: on the next start it replays, from the store's history,
  ///     everything committed after the last change set it acknowledged
  ///     (see ``ListenerOptions/acknowledgement``), then goes on live, with
  ///     no gap and no duplicate. If retention purged that place meanwhile,
  ///     its first event is a reset that says the place expired.
  ///   - options: how the listener behaves.
  /// - Throws: ``GroupSyncError/listenerNameInUse(_:)`` if a live listener
  ///   holds the name, ``GroupSyncError/invalidListenerName(_:)``,
  ///   ``GroupSyncError/durableListenerNeedsName`` for a durable listener
  ///   without a name.
  public func listen(
    as name: String? = nil, durable: Bool = false, options: ListenerOptions = ListenerOptions()
  ) throws -> Listener {
    if durable && name == nil { throw GroupSyncError.durableListenerNeedsName }
    let ephemeral = name == nil
    let name = name ?? Self.ephemeralName()
    let listener = try Listener(directory: directory, name: name, options: options, ephemeral: ephemeral, durable: durable)
    removeDeadEphemeralListeners()
    return listener
  }

  /// Forgets a durable listener that is gone for good, so that retention
  /// no longer keeps history for it: its folder and its place go.
  /// - Throws: ``GroupSyncError/listenerNameInUse(_:)`` if it is running.
  public func removeDurableListener(_ name: String) throws {
    guard GroupLayout.isValidListenerName(name) else { throw GroupSyncError.invalidListenerName(name) }
    let listeners = try root.child(GroupLayout.listenersFolder, create: true)
    if let folder = try? listeners.child(name, create: false) {
      // Taken, not only tested: no listener starts under this name while
      // its folder goes, and a lock a child process still shares for a
      // moment after close (until its exec) is waited for, not refused.
      let lock = try ListenerLock(in: folder, name: name)
      defer { lock.release() }
      listeners.remove(name)
    }
    for store in try allStores() where !store.isReadOnly {
      try store.writeBookkeeping { db in
        if try db.tableExists(DurableCursor.table) {
          try db.execute(sql: "DELETE FROM \(DurableCursor.table) WHERE name = ?", arguments: [name])
        }
      }
    }
  }

  /// A unique listener name for this process, its folder removed on close.
  static func ephemeralName() -> String {
    "p\(System.processID)-\(UUID().uuidString.prefix(8).lowercased())"
  }

  /// The group defaults of one suite (see ``GroupDefaults``).
  public func defaults(suite: String) throws -> GroupDefaults {
    try GroupDefaults(suite: suite, store: store, hub: noteHub)
  }

  /// The group's notification center (see ``GroupNotificationCenter``).
  public var notifications: GroupNotificationCenter {
    GroupNotificationCenter(store: store, hub: noteHub)
  }

  /// The store and every listener folder, live or dead; the folders that
  /// ephemeral listeners of dead processes left are removed first.
  public func status() throws -> GroupStatus {
    removeDeadEphemeralListeners()
    var listeners: [GroupStatus.ListenerStatus] = []
    let listenersFolder = try root.child(GroupLayout.listenersFolder, create: true)
    var names: [String] = []
    var lastForeign: ForeignCommit?
    try listenersFolder.forEachEntry { bytes in
      if let name = String(validating: bytes, as: UTF8.self), GroupLayout.isValidListenerName(name) { names.append(name) }
    }
    for name in names.sorted() {
      // Never blocks, never follows: a FIFO or symlink planted as a lock
      // means "not live".
      guard let folder = try? listenersFolder.child(name, create: false) else { continue }
      var backlog = 0
      if let inbox = try? folder.child(GroupLayout.inboxFolder, create: false) {
        try? inbox.forEachEntry { _ in backlog += 1 }
      }
      if let foreign = ForeignCommit.read(in: folder, listener: name),
        foreign.detectedAtNanoseconds > lastForeign?.detectedAtNanoseconds ?? .min
      {
        lastForeign = foreign
      }
      let live = ListenerLock.isHeld(in: folder)
      let place = (try? DurableCursor(file: folder, readOnly: true).read()) ?? nil
      listeners.append(
        .init(name: name, isLive: live, processID: live ? ListenerLock.recordedProcessID(in: folder) : nil,
              backlog: backlog, acknowledged: place))
    }
    let storePlaces = try store.read { db -> [String: Int64] in
      guard try db.tableExists(DurableCursor.table) else { return [:] }
      return Dictionary(
        try Row.fetchAll(db, sql: "SELECT name, acked FROM \(DurableCursor.table)").map { ($0[0], $0[1]) },
        uniquingKeysWith: { a, _ in a })
    }
    listeners = listeners.map { listener in
      guard listener.acknowledged == nil, let place = storePlaces[listener.name] else { return listener }
      return .init(
        name: listener.name, isLive: listener.isLive, processID: listener.processID, backlog: listener.backlog,
        acknowledged: place)
    }
    let stores = try allStores().map { try Self.status(of: $0) }
    let main = stores[0]
    // Durable places in the other stores, from each listener's cursor files.
    for index in listeners.indices {
      guard let folder = try? listenersFolder.child(listeners[index].name, create: false) else { continue }
      var places: [String: Int64] = [:]
      for store in stores.dropFirst() {
        if let place = (try? DurableCursor(file: folder, store: store.name, readOnly: true).read()) ?? nil,
          !store.isReadOnly
        {
          places[store.name] = place
        }
      }
      listeners[index].places = places
    }
    var status = GroupStatus(
      path: path, storeID: store.storeID, sequence: main.sequence, usesPreUpdateHook: store.usesPreUpdateHook,
      history: main.history, lastForeignCommit: lastForeign, listeners: listeners, stores: stores)
    status.relays = RelayStatusFile.readAll(group: path)
    return status
  }

  /// One store's part of ``status()``.
  private static func status(of store: Store) throws -> GroupStatus.StoreStatus {
    guard !store.isReadOnly else {
      let info = try? FileManager.default.attributesOfItem(atPath: store.path)
      return .init(
        name: store.name, storeID: store.storeID, path: store.path, isReadOnly: true, sequence: 0,
        history: .init(oldest: 0, newest: 0, count: 0, bytes: 0),
        fileSize: (info?[.size] as? NSNumber)?.int64Value, fileModified: info?[.modificationDate] as? Date)
    }
    let history = try store.read { try History.summary($0) }
    return .init(
      name: store.name, storeID: store.storeID, path: store.path, isReadOnly: false, sequence: history.newest,
      history: history, fileSize: nil, fileModified: nil)
  }
}

/// A snapshot of a group folder, as `groupsync status` prints it. The
/// top-level store fields are the main store's; ``stores`` has every store.
public struct GroupStatus: Sendable, Codable, Equatable {
  /// One folder under `listeners/`.
  public struct ListenerStatus: Sendable, Codable, Equatable {
    /// The listener's name (its folder's).
    public let name: String
    /// Whether a running process holds its lock.
    public let isLive: Bool
    /// The process that holds the lock, as its lock file records it.
    public let processID: Int32?
    /// Change-set files waiting in its inbox.
    public let backlog: Int
    /// A durable listener's place in the main store: the last sequence it
    /// acknowledged.
    public let acknowledged: Int64?
    /// A durable listener's places in the other writable stores, by name.
    public internal(set) var places: [String: Int64] = [:]
  }

  /// One store of the group.
  public struct StoreStatus: Sendable, Codable, Equatable {
    /// The store's name (`main` for the group's first store).
    public let name: String
    /// The store's UUID, as object IDs name it.
    public let storeID: UUID
    /// The store's file.
    public let path: String
    /// Whether it is a read-only store, replaced as a whole.
    public let isReadOnly: Bool
    /// The last sequence number committed (0 for a read-only store).
    public let sequence: Int64
    /// What its history holds.
    public let history: HistoryStatus
    /// A read-only store's file: its size and when it was installed.
    public let fileSize: Int64?
    /// When a read-only store's file was installed.
    public let fileModified: Date?
  }

  /// The group folder.
  public let path: String
  /// The main store's UUID.
  public let storeID: UUID
  /// The last sequence number committed.
  public let sequence: Int64
  /// Whether the capture uses SQLite's pre-update hook (false: GRDB's
  /// observer, the fallback that cannot see rows deleted by REPLACE).
  public let usesPreUpdateHook: Bool
  /// What the store's history holds.
  public let history: HistoryStatus
  /// The last commit a listener saw that came without a change set.
  public let lastForeignCommit: ForeignCommit?
  /// Every folder under `listeners/`, by name.
  public let listeners: [ListenerStatus]
  /// Every store: the main store first, then by name.
  public let stores: [StoreStatus]
  /// The relays to other hosts that ever ran on this folder, by host.
  public internal(set) var relays: [RelayStatus] = []

  /// What a store's history holds.
  public struct HistoryStatus: Sendable, Codable, Equatable {
    /// The oldest sequence number held (0 when empty).
    public let oldest: Int64
    /// The newest sequence number held (0 when empty).
    public let newest: Int64
    /// How many change sets it holds.
    public let count: Int64
    /// The payloads' total size.
    public let bytes: Int64
  }
}
