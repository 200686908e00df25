// SharedLog+Hint: the notification a shipment sends, and how a relay reads it.
import Foundation

extension SharedLog {
  /// A notification on ``SharedLog/channel``, sent by `gs_ship` as the
  /// shipment commits:
  ///
  /// ```
  /// GROUP/STORE:POSITION
  /// ORIGIN_HOST ORIGIN_SEQUENCE      (these two lines only when the
  /// BODY                              whole payload fits in 8,000 bytes)
  /// ```
  ///
  /// Under row-level security (``AccessSetup``) the payload is the first
  /// line only: any session may LISTEN, and the entry is for the group's
  /// members alone.
  ///
  /// With the entry in it, a relay applies the entry without reading it
  /// back; without, it reads the log from its place. Either way the log
  /// is the truth: notifications come in commit order, which is the log's
  /// order for a store, and an entry is applied only right after the one
  /// before it.
  struct Hint: Sendable, Equatable {
    /// PostgreSQL refuses payloads of 8,000 bytes or more.
    static let payloadLimit = 8000

    let position: Int64
    /// The entry itself, when it fitted.
    let entry: StoredEntry?

    /// The hint `payload` gives about `replica`'s store, nil when it is
    /// about another store (or no hint at all).
    static func parse(_ payload: String, for replica: Replica) -> Hint? {
      let bytes = payload.utf8
      let prefix = (replica.group + "/" + replica.store + ":").utf8
      guard bytes.starts(with: prefix) else { return nil }
      let afterPrefix = bytes.index(bytes.startIndex, offsetBy: prefix.count)
      let newline = UInt8(ascii: "\n")
      let lineEnd = bytes[afterPrefix...].firstIndex(of: newline) ?? bytes.endIndex
      guard let position = number(bytes[afterPrefix..<lineEnd]) else { return nil }
      guard lineEnd != bytes.endIndex else { return Hint(position: position, entry: nil) }
      // An entry that cannot be read from the payload is read from the log.
      let originStart = bytes.index(after: lineEnd)
      guard let originEnd = bytes[originStart...].firstIndex(of: newline),
        let space = bytes[originStart..<originEnd].lastIndex(of: UInt8(ascii: " ")),
        let originSequence = number(bytes[bytes.index(after: space)..<originEnd]),
        let host = String(bytes[originStart..<space]), !host.isEmpty,
        let body = String(bytes[bytes.index(after: originEnd)...])
      else { return Hint(position: position, entry: nil) }
      return Hint(
        position: position,
        entry: StoredEntry(position: position, origin: EntryOrigin(host: host, sequence: originSequence), body: body))
    }

    /// Decimal digits only, as `Int64`.
    private static func number(_ digits: Substring.UTF8View) -> Int64? {
      guard !digits.isEmpty, digits.count <= 18,
        digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
      else { return nil }
      return digits.reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
    }
  }
}
