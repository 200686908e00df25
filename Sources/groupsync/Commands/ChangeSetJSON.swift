import Foundation
import GroupSync
import Synchronization

/// The JSON lines `watch --json` and `exec --json` print.
enum ChangeSetJSON {
  /// `globalIDs`: the rows' global IDs across hosts, where a relay gave
  /// them (``Store/globalIDs(of:)``), as `{"URI": "global ID"}`.
  static func line(
    _ changeSet: ChangeSet, storeName: String? = nil, deliveredAtNs: Int64? = nil,
    globalIDs: [ObjectID: String] = [:]
  ) -> String {
    var object: [String: Any] = [
      "seq": changeSet.sequence,
      "store": changeSet.storeID.uuidString,
      "inserted": changeSet.inserted.map(\.uri).sorted(),
      "updated": changeSet.updated.map(\.uri).sorted(),
      "deleted": changeSet.deleted.map(\.uri).sorted(),
      "invalidatedTables": changeSet.invalidatedTables.map(\.uri).sorted(),
      "committedAtNs": changeSet.committedAtNanoseconds,
      "pid": changeSet.writerProcessID,
      "notes": changeSet.notes.map { note -> [String: Any] in
        var object: [String: Any] = ["name": note.name, "payload": Data(note.payload).base64EncodedString()]
        if let text = String(validating: note.payload, as: UTF8.self) { object["text"] = text }
        return object
      },
    ]
    if let deliveredAtNs { object["deliveredAtNs"] = deliveredAtNs }
    if !globalIDs.isEmpty { object["globalIDs"] = Self.globalIDs(globalIDs) }
    if let storeName { object["storeName"] = storeName }
    return encode(object)
  }

  /// A reset: `storeName` null means every store of the group.
  static func line(_ reset: Reset, mainStore: UUID) -> String {
    encode([
      "reset": true, "reason": reset.reason, "seq": reset.sequence, "expired": reset.isExpired,
      "store": (reset.storeID ?? mainStore).uuidString, "storeName": reset.store ?? NSNull(),
    ])
  }

  static func globalIDs(_ ids: [ObjectID: String]) -> [String: String] {
    Dictionary(uniqueKeysWithValues: ids.map { ($0.key.uri, $0.value) })
  }

  /// The global IDs of the rows a change set names, when its store is in
  /// `group` and a relay ran on it (none otherwise; a lookup that fails
  /// leaves them out: they are extra information).
  static func globalIDs(of changeSet: ChangeSet, in store: Store?) -> [ObjectID: String] {
    guard let store, isReplicated(store) else { return [:] }
    return (try? store.globalIDs(of: Array(changeSet.inserted.union(changeSet.updated).union(changeSet.deleted)))) ?? [:]
  }

  /// Whether a relay ran on `store`, asked at most once a second while it
  /// has not (a listener prints change sets as fast as they come, and most
  /// stores never have a relay).
  private static func isReplicated(_ store: Store) -> Bool {
    let now = ContinuousClock.now
    if let known = replicated.withLock({ $0[store.storeID] }), known.isReplicated || now - known.checked < .seconds(1) {
      return known.isReplicated
    }
    let isReplicated = (try? store.hasGlobalIDs()) ?? false
    replicated.withLock { $0[store.storeID] = (isReplicated, now) }
    return isReplicated
  }

  private static let replicated = Mutex<[UUID: (isReplicated: Bool, checked: ContinuousClock.Instant)]>([:])

  static func encode(_ object: [String: Any]) -> String {
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    return String(decoding: data, as: UTF8.self)
  }
}
