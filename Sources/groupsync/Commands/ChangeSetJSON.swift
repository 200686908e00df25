import Foundation
import GroupSync

/// The JSON lines `watch --json` and `exec --json` print.
enum ChangeSetJSON {
  static func line(_ changeSet: ChangeSet, deliveredAtNs: Int64? = nil) -> String {
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
    return encode(object)
  }

  static func line(_ reset: Reset, store: UUID) -> String {
    encode(["reset": true, "reason": reset.reason, "seq": reset.sequence, "store": store.uuidString])
  }

  static func encode(_ object: [String: Any]) -> String {
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    return String(decoding: data, as: UTF8.self)
  }
}
