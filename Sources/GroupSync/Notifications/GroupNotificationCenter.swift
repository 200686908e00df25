import Foundation
import GRDB

/// A notification passed between the processes of a group: a name and a
/// small payload.
public struct GroupNotification: Sendable, Equatable {
  /// The name it was posted under.
  public let name: String
  /// Its content, as posted (at most 64 KiB).
  public let payload: [UInt8]
  /// The sequence number of the transaction that posted it.
  public let sequence: Int64

  /// Decodes a payload posted with ``GroupNotificationCenter/post(_:encoding:)``.
  public func decode<T: Decodable>(_ type: T.Type) throws -> T {
    try JSONDecoder().decode(type, from: Data(payload))
  }

  /// Notes of notifications are named `notify/<name>`.
  static let notePrefix = "notify/"

  /// The notification a note carries, or nil for any other note.
  init?(_ note: ChangeSetNote, sequence: Int64) {
    guard note.name.hasPrefix(Self.notePrefix) else { return nil }
    name = String(note.name.dropFirst(Self.notePrefix.count))
    payload = note.payload
    self.sequence = sequence
  }
}

/// A notification center shared by the processes of a group: what one
/// posts reaches every member listening for that name or a prefix of it,
/// exactly once, in commit order together with data changes.
///
/// A notification is committed like a row: posted on its own it is one
/// store transaction; posted inside a write, it is sent if and only if that
/// transaction commits. For example:
///
/// ```swift
/// try group.notifications.post("import.finished", payload: Array("42 rows".utf8))
/// try group.store.write { db in
///   try Note(body: "x").insert(db)
///   try group.notifications.post("note.added", in: db)      // only if this commits
/// }
/// for await notification in try group.notifications.notifications(matching: "import.") { … }
/// ```
public struct GroupNotificationCenter: Sendable {
  let store: Store
  let hub: NoteHub

  /// Payloads larger than this are refused.
  public static let maximumPayloadSize = 64 << 10
  /// Names are 1 to this many bytes of UTF-8.
  public static let maximumNameLength = 1024

  /// Posts a notification in a transaction of its own.
  public func post(_ name: String, payload: [UInt8] = []) throws {
    try store.write { db in try post(name, payload: payload, in: db) }
  }

  /// Posts a notification with `value` encoded as JSON.
  public func post<T: Encodable>(_ name: String, encoding value: T) throws {
    try post(name, payload: [UInt8](try JSONEncoder().encode(value)))
  }

  /// Posts a notification as part of the open `Store.write` transaction:
  /// it is sent if and only if the transaction commits.
  public func post(_ name: String, payload: [UInt8] = [], in db: Database) throws {
    guard (1...Self.maximumNameLength).contains(name.utf8.count) else {
      throw GroupSyncError.invalidNotification(
        reason: "a name is 1 to \(Self.maximumNameLength) bytes, not \(name.utf8.count)")
    }
    guard payload.count <= Self.maximumPayloadSize else {
      throw GroupSyncError.invalidNotification(
        reason: "the payload of '\(name)' is \(payload.count) bytes, over the \(Self.maximumPayloadSize)-byte maximum")
    }
    try store.addNote(ChangeSetNote(name: GroupNotification.notePrefix + name, payload: payload), in: db)
  }

  /// The notifications whose name starts with `prefix` ("" for all), posted
  /// by any process of the group (this one included) from now on.
  public func notifications(matching prefix: String = "") throws -> AsyncStream<GroupNotification> {
    try hub.subscribe { changeSet in
      changeSet.notifications.filter { $0.name.hasPrefix(prefix) }
    }
  }
}

extension ChangeSet {
  /// The notifications posted in this change set's transaction.
  public var notifications: [GroupNotification] {
    notes.compactMap { GroupNotification($0, sequence: sequence) }
  }

  /// The group-defaults changes committed in this change set's transaction.
  public var defaultsChanges: [DefaultsChange] {
    notes.compactMap(DefaultsChange.init)
  }
}
