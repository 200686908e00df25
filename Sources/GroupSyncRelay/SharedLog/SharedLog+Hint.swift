// SharedLog+Hint: the notification a shipment sends, and how a relay reads it.
import Foundation

extension SharedLog {
  /// A wake-up, sent on the group's channel (``Wakes/channel``) once a
  /// shipment committed (``wakeStatements(_:through:body:)``):
  ///
  /// ```
  /// TAG:POSITION
  /// ORIGIN_HOST ORIGIN_SEQUENCE      (these two lines only when the
  /// BODY                              whole payload fits in 8,000 bytes)
  /// ```
  ///
  /// `TAG` is the store's random tag (`gs_clock.tag`): neither the
  /// channel nor the payload names the group or the store, and only the
  /// group's members (under row-level security, ``AccessSetup``) can
  /// read the channel's name to listen. A relay before version 4 shipped
  /// `GROUP/STORE:POSITION` on ``legacyChannel`` instead
  /// (``parseLegacy(_:for:)``), and is woken there while it is a member.
  ///
  /// With the entry in it, a relay applies the entry without reading it
  /// back; without, it reads the log from its place. Either way the log
  /// is the truth: wake-ups come in commit order, which is the log's
  /// order for a store, and an entry is applied only right after the one
  /// before it.
  struct Hint: Sendable, Equatable {
    /// PostgreSQL refuses payloads of 8,000 bytes or more.
    static let payloadLimit = 8000

    let position: Int64
    /// The entry itself, when it fitted.
    let entry: StoredEntry?

    /// The hint a wake-up on the group's channel gives about the store
    /// tagged `tag`, nil when it is about another store (or no hint).
    static func parse(_ payload: String, tag: String) -> Hint? { parse(payload, prefix: tag + ":") }

    /// The hint a notification of a relay before version 4 (on
    /// ``SharedLog/legacyChannel``) gives about `replica`'s store.
    static func parseLegacy(_ payload: String, for replica: Replica) -> Hint? {
      parse(payload, prefix: replica.group + "/" + replica.store + ":")
    }

    private static func parse(_ payload: String, prefix: String) -> Hint? {
      let bytes = payload.utf8
      let prefix = prefix.utf8
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
