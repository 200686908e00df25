import Foundation
import GRDB

/// Small settings shared by the processes of a group, in one suite: typed
/// values, read and written with no lost updates between processes, and
/// every change told to every other process with its old and new value.
///
/// Values live in the group's store (`groupsync_defaults`); each `set` is
/// one store transaction, which also records a notice of the change in its
/// change set, so notices reach other processes exactly once, in commit
/// order together with data changes, and only once the new value can be
/// read. For example:
///
/// ```swift
/// let ui = group.defaults(suite: "ui")
/// try ui.set(.bool(true), forKey: "sync.enabled")
/// try ui.transaction { tx in
///   try tx.set(.string("/docs/a.txt"), forKey: "lastDocument")
///   try tx.removeValue(forKey: "draft")
/// }
/// let enabled = try ui.value(forKey: "sync.enabled")?.boolValue ?? false
/// ```
public struct GroupDefaults: Sendable {
  /// The suite's name.
  public let suite: String
  let store: Store
  let hub: NoteHub

  /// Values whose stored form is larger than this are refused.
  public static let maximumValueSize = 256 << 10
  /// Keys and suite names are 1 to this many bytes of UTF-8.
  public static let maximumNameLength = 1024

  static let table = "groupsync_defaults"

  init(suite: String, store: Store, hub: NoteHub) throws {
    try Self.checkName(suite, what: "suite name")
    self.suite = suite
    self.store = store
    self.hub = hub
    try store.writeBookkeeping { db in try Self.setUp(db) }
  }

  static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(table) (
        suite TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (suite, key))
      """)
  }

  // MARK: Reading

  /// The value of `key`, or nil.
  public func value(forKey key: String) throws -> DefaultsValue? {
    try store.read { db in try Self.read(key, suite: suite, db) }
  }

  /// Decodes the `Codable` value of `key`, or nil.
  public func decode<T: Decodable>(_ type: T.Type, forKey key: String) throws -> T? {
    try value(forKey: key)?.decode(type)
  }

  /// Every key of the suite with its value.
  public func allValues() throws -> [String: DefaultsValue] {
    try store.read { db in
      var values: [String: DefaultsValue] = [:]
      for row in try Row.fetchAll(db, sql: "SELECT key, value FROM \(Self.table) WHERE suite = ?", arguments: [suite]) {
        values[row[0]] = try DefaultsValue.decoded(row[1])
      }
      return values
    }
  }

  /// Every change of the suite's keys from now on, made by any process of
  /// the group (this one included, in memory), in commit order, each
  /// delivered once the new value can be read; `.reset` when changes may
  /// have been missed (reload every key).
  public func changes() throws -> AsyncStream<DefaultsEvent> {
    let suite = suite
    return try hub.subscribe(onReset: .reset) { changeSet in
      changeSet.defaultsChanges.filter { $0.suite == suite }.map(DefaultsEvent.changed)
    }
  }

  // MARK: Writing

  /// Sets `key` to `value` (nil removes it), in one transaction.
  public func set(_ value: DefaultsValue?, forKey key: String) throws {
    try transaction { try $0.set(value, forKey: key) }
  }

  /// Sets `key` to `value` encoded as JSON.
  public func set<T: Encodable>(encoding value: T, forKey key: String) throws {
    try set(DefaultsValue(encoding: value), forKey: key)
  }

  /// Removes `key`.
  public func removeValue(forKey key: String) throws {
    try set(nil, forKey: key)
  }

  /// Runs `body` over several keys in one store transaction: it commits as
  /// a whole, and other processes are told of each key's net change
  /// (set twice: one notice; set back to the value it had: none).
  @discardableResult
  public func transaction<T>(_ body: (inout DefaultsTransaction) throws -> T) throws -> T {
    try store.write { db in
      var transaction = DefaultsTransaction(suite: suite, db: db)
      let result = try body(&transaction)
      for change in transaction.netChanges() { try store.addNote(change.note(), in: db) }
      return result
    }
  }

  // MARK: Storage

  static func read(_ key: String, suite: String, _ db: Database) throws -> DefaultsValue? {
    let stored = try Data.fetchOne(
      db.cachedStatement(sql: "SELECT value FROM \(table) WHERE suite = ? AND key = ?"), arguments: [suite, key])
    return try stored.map(DefaultsValue.decoded)
  }

  static func checkName(_ name: String, what: String) throws {
    guard (1...maximumNameLength).contains(name.utf8.count) else {
      throw GroupSyncError.invalidDefaultsValue(reason: "a \(what) is 1 to \(maximumNameLength) bytes, not \(name.utf8.count)")
    }
  }
}

/// Changes to several keys of one suite, applied in one transaction (see
/// ``GroupDefaults/transaction(_:)``).
public struct DefaultsTransaction {
  let suite: String
  let db: Database
  /// Each key touched: its value before the transaction, and now.
  private var touched: [String: (old: DefaultsValue?, new: DefaultsValue?)] = [:]
  private var order: [String] = []

  init(suite: String, db: Database) {
    self.suite = suite
    self.db = db
  }

  /// The value of `key` as this transaction sees it.
  public func value(forKey key: String) throws -> DefaultsValue? {
    if let entry = touched[key] { return entry.new }
    return try GroupDefaults.read(key, suite: suite, db)
  }

  /// Sets `key` (nil removes it).
  public mutating func set(_ value: DefaultsValue?, forKey key: String) throws {
    try GroupDefaults.checkName(key, what: "key")
    let old = try touched[key].map(\.old) ?? GroupDefaults.read(key, suite: suite, db)
    if let value {
      let stored = try value.encoded()
      guard stored.count <= GroupDefaults.maximumValueSize else {
        throw GroupSyncError.invalidDefaultsValue(
          reason: "the value of '\(key)' is \(stored.count) bytes stored, over the \(GroupDefaults.maximumValueSize)-byte maximum")
      }
      try db.cachedStatement(sql: "INSERT OR REPLACE INTO \(GroupDefaults.table)(suite, key, value) VALUES (?, ?, ?)")
        .execute(arguments: [suite, key, stored])
    } else {
      try db.cachedStatement(sql: "DELETE FROM \(GroupDefaults.table) WHERE suite = ? AND key = ?")
        .execute(arguments: [suite, key])
    }
    if touched[key] == nil { order.append(key) }
    touched[key] = (old, value)
  }

  /// Removes `key`.
  public mutating func removeValue(forKey key: String) throws { try set(nil, forKey: key) }

  /// One change per key whose value differs from before the transaction.
  func netChanges() -> [DefaultsChange] {
    order.compactMap { key in
      let (old, new) = touched[key]!
      return old == new ? nil : DefaultsChange(suite: suite, key: key, oldValue: old, newValue: new)
    }
  }
}

/// What ``GroupDefaults/changes()`` delivers.
public enum DefaultsEvent: Sendable, Equatable {
  /// One key's net change in one transaction.
  case changed(DefaultsChange)
  /// Changes may have been missed: read every key again.
  case reset
}

/// A change of one key, as other processes are told of it.
public struct DefaultsChange: Sendable, Equatable, Codable {
  /// The suite the key belongs to.
  public let suite: String
  /// The key whose value changed.
  public let key: String
  /// nil: the key had no value.
  public let oldValue: DefaultsValue?
  /// nil: the key was removed.
  public let newValue: DefaultsValue?

  /// Notes of defaults changes are named `defaults/<suite>`.
  static let notePrefix = "defaults/"

  func note() throws -> ChangeSetNote {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return ChangeSetNote(name: Self.notePrefix + suite, payload: [UInt8](try encoder.encode(self)))
  }

  init(suite: String, key: String, oldValue: DefaultsValue?, newValue: DefaultsValue?) {
    self.suite = suite
    self.key = key
    self.oldValue = oldValue
    self.newValue = newValue
  }

  /// The change a note tells, or nil for any other note.
  init?(_ note: ChangeSetNote) {
    guard note.name.hasPrefix(Self.notePrefix),
      let change = try? JSONDecoder().decode(DefaultsChange.self, from: Data(note.payload))
    else { return nil }
    self = change
  }
}

extension Store {
  /// Sets a group-defaults key as `change` says, inside the open
  /// `write(_:)` of this store, and tells the group's processes as a
  /// local change would (when the value actually changes). A relay
  /// applying another host's change uses it, so that the value and its
  /// notice commit with the applied place.
  public func applyDefaultsChange(_ change: DefaultsChange, in db: Database) throws {
    try GroupDefaults.setUp(db)
    var transaction = DefaultsTransaction(suite: change.suite, db: db)
    try transaction.set(change.newValue, forKey: change.key)
    for net in transaction.netChanges() { try addNote(net.note(), in: db) }
  }
}
