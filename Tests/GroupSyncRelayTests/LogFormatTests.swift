import Foundation
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay

/// The log's formats as texts: format 1 is the text relays always wrote;
/// a later one wraps it, names itself, and is never read as another.
@Suite(.timed) struct LogFormatTests {
  static let entry = LogEntry(
    tables: [
      TableImage(
        name: "note", columns: ["title", "body", "n"], isSnapshot: false,
        rows: [
          RowImage(gid: "g1", rowID: 7, base: 0, values: [.text("t"), .text("b"), .integer(3)], lost: nil),
          RowImage(gid: "g2", rowID: 8, base: 4, values: nil, lost: nil),
        ]),
    ],
    conflicts: [], notes: nil)

  @Test func formatOneIsTheTextRelaysAlwaysWrote() throws {
    let text = try Self.entry.encoded()
    #expect(text.hasPrefix("{") && !text.contains("\"f\""), "\(text)")
    // What a relay from before formats decodes, as it always did.
    #expect(try JSONDecoder().decode(LogEntry.self, from: Data(text.utf8)) == Self.entry)
    #expect(try LogEntry.decode(text, store: "main", sequence: 5, formats: [.v1]) == Self.entry)
    #expect(LogFormat.of(text) == .v1)
  }

  @Test func aLaterFormatNamesItselfAndChangesMeaning() throws {
    let text = try Self.entry.encoded(format: .testing)
    #expect(text.hasPrefix("{\"f\":\(LogFormat.testing.rawValue),\"e\":"), "\(text)")
    #expect(LogFormat.of(text) == .testing)
    // Its values are listed the other way round: read as format 1, they
    // would land in other columns.
    let prefix = "{\"f\":\(LogFormat.testing.rawValue),\"e\":"
    let inner = try JSONDecoder().decode(LogEntry.self, from: Data(text.dropFirst(prefix.count).dropLast().utf8))
    #expect(inner.tables[0].rows[0].values == [.integer(3), .text("b"), .text("t")])
    #expect(try LogEntry.decode(text, store: "main", sequence: 5, formats: [.v1, .testing]) == Self.entry)
    // A relay from before formats cannot decode it: it stops there.
    #expect(throws: DecodingError.self) { try JSONDecoder().decode(LogEntry.self, from: Data(text.utf8)) }
  }

  @Test func aFormatNotReadIsHeldNeverDecoded() throws {
    let text = try Self.entry.encoded(format: .testing)
    #expect(throws: RelayError.unreadableFormat(store: "main", position: 9, format: .testing)) {
      try LogEntry.decode(text, store: "main", sequence: 9, formats: [.v1])
    }
    let image = try StoredImage.encode([.text("t"), .null], format: .testing)
    #expect(throws: RelayError.unreadableFormat(store: "main", position: 4, format: .testing)) {
      try StoredImage.decode(image, formats: [.v1], store: "main", position: 4)
    }
    let message = RelayError.unreadableFormat(store: "main", position: 9, format: .testing).description
    #expect(message.contains("entry #9") && message.contains("upgrade") && message.contains("Nothing is skipped"))
  }

  @Test func rowImagesNameTheirFormat() throws {
    let values: [RowValue] = [.text("a"), .integer(1), .null, .real(2.5), .blob(Data([0, 1]))]
    let plain = try StoredImage.encode(values, format: .v1)
    #expect(plain.hasPrefix("["))
    #expect(try StoredImage.decode(plain, formats: [.v1], store: "s", position: 1) == values)
    let later = try StoredImage.encode(values, format: .testing)
    #expect(later.hasPrefix("{\"f\":\(LogFormat.testing.rawValue),\"v\":["))
    #expect(try StoredImage.decode(later, formats: [.v1, .testing], store: "s", position: 1) == values)
    #expect(throws: DecodingError.self) { try JSONDecoder().decode([RowValue].self, from: Data(later.utf8)) }
  }

  @Test(arguments: [
    "{\"f\":}", "{\"f\":x}", "{\"f\":12345,\"e\":{}}", "{\"f\":3,\"e\":\"not an entry\"}", "{\"f\":1,\"e\":{}}",
  ])
  func aBrokenFormatMarkIsAnInvalidEntry(text: String) throws {
    #expect {
      try LogEntry.decode(text, store: "main", sequence: 3, formats: [.v1, .testing])
    } throws: { error in
      guard case RelayError.invalidEntry(let store, let sequence, _) = error else { return false }
      return store == "main" && sequence == 3
    }
  }

  @Test func aRelayWritesTheNewestFormatItSharesWithTheGroup() {
    #expect(RelayVersion.current.writes(groupFormat: .v1) == .v1)
    #expect(RelayVersion.current.writes(groupFormat: .v2) == .v2)
    #expect(RelayVersion.testing.writes(groupFormat: .v1) == .v1)
    #expect(RelayVersion.testing.writes(groupFormat: .v2) == .v2)
    #expect(RelayVersion.testing.writes(groupFormat: .testing) == .testing)
    // Rolled back below the group's format: its own newest, which the
    // adjacent version still reads.
    #expect(RelayVersion.current.writes(groupFormat: .testing) == .v2)
    #expect(RelayVersion.current.description.contains("reads 1, 2"))
    #expect(RelayVersion.testing.reads == [.v1, .v2, .testing])
  }
}
