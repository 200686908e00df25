import Foundation
import GRDB
import Logging

/// The stores of a group folder, each opened once per process on first
/// use: the main store (`store.sqlite`) and the named ones in `stores/`,
/// writable (`NAME.sqlite`) or read-only (`NAME.readonly.sqlite`).
///
/// The folder is the registry: a store another process created or
/// installed is found by its file, so every process sees the same stores.
final class StoreDirectory: Sendable {
  let root: SafeDirectory
  let layout: GroupLayout
  let fanOut: FanOut
  let main: Store
  private let configuration: Configuration
  private let options: StoreOptions
  private let opened = Locked<[String: Store]>([:])

  /// Where read-only stores' UUIDs are kept: in the main store, since a
  /// shipped file cannot keep one, and so that a replacement keeps it.
  static let readOnlyIDsTable = "groupsync_stores"

  /// One store of the group as its folder shows it.
  struct Entry: Sendable, Equatable {
    let name: String
    let isReadOnly: Bool
  }

  /// - Parameter inProcessInboxes: this process's own inboxes of a group,
  ///   by the group folder's path, which get change sets in memory.
  init(
    root: SafeDirectory, layout: GroupLayout, configuration: Configuration, options: StoreOptions,
    inProcessInboxes: @escaping @Sendable (String) -> [any InProcessInbox]
  ) throws {
    self.root = root
    self.layout = layout
    self.configuration = configuration
    self.options = options
    fanOut = FanOut(root: root, inProcessInboxes: inProcessInboxes)
    main = try Self.openWritable(
      GroupLayout.mainStoreName, path: layout.store, root: root, fanOut: fanOut, configuration: configuration,
      options: options)
  }

  /// Every store of the group: the main store first, then by name.
  func entries() throws -> [Entry] {
    var entries: [Entry] = []
    let folder: SafeDirectory?
    do {
      folder = try storesFolder(create: false)
    } catch let error as GroupSyncError {
      // Something planted where `stores/` belongs: no store is there.
      guard case .unsafeEntry = error else { throw error }
      Logger.groupSync.error("\(error)")
      folder = nil
    }
    if let folder {
      try folder.forEachEntry { bytes in
        guard let name = String(validating: bytes, as: UTF8.self),
          let store = GroupLayout.store(inFileName: name),
          folder.status(of: bytes).map({ $0.st_mode & S_IFMT == S_IFREG }) == true
        else { return }
        entries.append(Entry(name: store.name, isReadOnly: store.isReadOnly))
      }
    }
    // A name with both kinds of file counts once, as the writable store.
    let byName = Dictionary(entries.map { ($0.name, $0) }) { a, b in a.isReadOnly ? b : a }
    return [Entry(name: GroupLayout.mainStoreName, isReadOnly: false)] + byName.values.sorted { $0.name < $1.name }
  }

  /// Every store of the group, opened.
  func all() throws -> [Store] {
    try entries().map { try store(named: $0.name) }
  }

  /// Store `name`: opened if needed; with `create`, a writable store is
  /// made when the group has none of that name.
  func store(named name: String, create: Bool = false) throws -> Store {
    if name == GroupLayout.mainStoreName { return main }
    guard GroupLayout.isValidStoreName(name) else { throw GroupSyncError.invalidStoreName(name) }
    if let store = opened.withLock({ $0[name] }) { return store }
    guard let folder = try storesFolder(create: create) else { throw GroupSyncError.unknownStore(name) }
    let readOnlyName = GroupLayout.storeFileName(name, readOnly: true)
    let writableName = GroupLayout.storeFileName(name, readOnly: false)
    let hasWritable = folder.identity(of: writableName) != nil
    let store: Store
    if hasWritable || (create && folder.identity(of: readOnlyName) == nil) {
      // SQLite follows symlinks: only a regular file of the group folder.
      if hasWritable { _ = try folder.openFile(writableName, O_RDONLY) }
      store = try Self.openWritable(
        name, path: layout.storePath(name, readOnly: false), root: root, fanOut: fanOut,
        configuration: configuration, options: options)
    } else if folder.identity(of: readOnlyName) != nil {
      let file = try ReadOnlyStoreFile(folder: folder, fileName: readOnlyName, configuration: configuration)
      store = Store(readOnly: name, file: file, storeID: try readOnlyStoreID(name))
    } else {
      throw GroupSyncError.unknownStore(name)
    }
    return opened.withLock { opened in
      if let other = opened[name] { return other }  // another thread was first
      opened[name] = store
      return store
    }
  }

  /// The store whose UUID is `id`.
  func store(withID id: UUID) throws -> Store {
    if id == main.storeID { return main }
    if let store = opened.withLock({ $0.values.first { $0.storeID == id } }) { return store }
    guard let store = try all().first(where: { $0.storeID == id }) else { throw GroupSyncError.unknownStoreID(id) }
    return store
  }

  /// The UUID of read-only store `name`, made once and kept in the main
  /// store.
  func readOnlyStoreID(_ name: String) throws -> UUID {
    let table = Self.readOnlyIDsTable
    let read = { (db: Database) throws -> String? in
      guard try db.tableExists(table) else { return nil }
      return try String.fetchOne(db, sql: "SELECT uuid FROM \(table) WHERE name = ?", arguments: [name])
    }
    let text = try main.read(read) ?? main.writeBookkeeping { db in
      try db.execute(sql: "CREATE TABLE IF NOT EXISTS \(table) (name TEXT PRIMARY KEY, uuid TEXT NOT NULL)")
      try db.execute(
        sql: "INSERT OR IGNORE INTO \(table)(name, uuid) VALUES (?, ?)", arguments: [name, UUID().uuidString])
      return try read(db)
    }
    guard let text, let id = UUID(uuidString: text) else {
      throw GroupSyncError.invalidStore(path: main.path, reason: "\(table) holds no UUID for store '\(name)'")
    }
    return id
  }

  /// `stores/`, or nil if it does not exist and `create` is false.
  func storesFolder(create: Bool) throws -> SafeDirectory? {
    do {
      return try root.child(GroupLayout.storesFolder, create: create)
    } catch GroupSyncError.system(ENOENT) where !create {
      return nil
    }
  }

  static func openWritable(
    _ name: String, path: String, root: SafeDirectory, fanOut: FanOut, configuration: Configuration,
    options: StoreOptions
  ) throws -> Store {
    try Store(
      name: name, path: path, configuration: configuration, options: options,
      durableFloor: { db in DurableCursor.lowestPlace(root: root, store: name, db).map { $0 + 1 } }
    ) { fanOut.deliver($0, store: name) }
  }

  // MARK: Read-only stores

  /// Copies the SQLite database at `source` in as read-only store `name`,
  /// replacing the one there: a consistent copy (`VACUUM INTO`, so a live
  /// WAL database is fine) in rollback-journal mode is made in `tmp/`,
  /// synced, and renamed over the store's file in one step. Processes
  /// reading the old file go on reading it whole, and see the new one on
  /// their next read; listeners get a reset for this store.
  func installReadOnly(_ name: String, from source: String) throws -> Store {
    guard GroupLayout.isValidStoreName(name), name != GroupLayout.mainStoreName else {
      throw GroupSyncError.invalidStoreName(name)
    }
    guard let folder = try storesFolder(create: true) else { throw GroupSyncError.unknownStore(name) }
    if folder.identity(of: GroupLayout.storeFileName(name, readOnly: false)) != nil {
      throw GroupSyncError.storeKindMismatch(name, isReadOnly: false)
    }
    let tmp = try fanOut.tmpFolder()
    let tmpName = FanOut.temporaryName("install.\(name)", token: UInt32.random(in: 0...UInt32.max))
    let tmpPath = tmp.path + "/" + tmpName
    tmp.remove(tmpName)
    defer { tmp.remove(tmpName) }  // gone by rename on success
    do {
      var sourceConfiguration = Configuration()
      sourceConfiguration.readonly = true
      let sourceQueue = try DatabaseQueue(path: source, configuration: sourceConfiguration)
      try sourceQueue.inDatabase { db in try db.execute(sql: "VACUUM INTO ?", arguments: [tmpPath]) }
      try sourceQueue.close()
      let copy = try DatabaseQueue(path: tmpPath)
      try copy.inDatabase { db in
        _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = DELETE")
        if let problem = try String.fetchOne(db, sql: "PRAGMA quick_check"), problem != "ok" {
          throw GroupSyncError.invalidStore(path: source, reason: "quick_check: \(problem)")
        }
      }
      try copy.close()
    } catch let error as DatabaseError {
      throw GroupSyncError.invalidStore(path: source, reason: "cannot be copied in as a read-only store: \(error)")
    }
    let file = try tmp.openFile(tmpName, O_RDONLY)
    try System.call("fsync", tmpPath) { fsync(file.rawValue) }
    let target = GroupLayout.storeFileName(name, readOnly: true)
    try System.call("renameat", folder.path + "/" + target) {
      renameat(tmp.descriptor.rawValue, tmpName, folder.descriptor.rawValue, target)
    }
    _ = fsync(folder.descriptor.rawValue)
    Logger.groupSync.debug("installed read-only store '\(name)' from \(source)")
    return try store(named: name)
  }
}
