import GroupSyncTestSupport
import Testing

@testable import GroupSync

@Suite(.timed) struct GroupLayoutTests {
  @Test(arguments: [Int64(1), 42, 7919, 1_000_000, 9_999_999_999_999_999, Int64.max])
  func fileNamesRoundTrip(_ sequence: Int64) {
    let name = GroupLayout.fileName(sequence: sequence)
    #expect(name.utf8.count == 30)
    #expect(name.hasSuffix(".changeset"))
    #expect(name == String(repeating: "0", count: 20 - String(sequence).count) + String(sequence) + ".changeset")
    #expect(GroupLayout.sequence(inFileName: Substring(name)) == sequence)
    // Also out of a longer string (a path), as the listener sees it.
    let path = "/group/listeners/a/inbox/" + name
    #expect(GroupLayout.sequence(inFileName: path[path.index(path.endIndex, offsetBy: -30)...]) == sequence)
  }

  @Test func fileNamesAreExact() {
    #expect(GroupLayout.fileName(sequence: 1) == "00000000000000000001.changeset")
    #expect(GroupLayout.fileName(sequence: 42) == "00000000000000000042.changeset")
    #expect(GroupLayout.fileName(sequence: .max) == "09223372036854775807.changeset")
    #expect(GroupLayout.fileName(sequence: 0) == "00000000000000000000.changeset")
  }

  @Test func fileNamesSortInSequenceOrder() {
    let sequences: [Int64] = [1, 9, 10, 99, 100, 123_456_789, 1 << 40, .max]
    let names = sequences.map { GroupLayout.fileName(sequence: $0) }
    #expect(names.sorted() == names)
  }

  @Test(arguments: [
    "",
    "00000000000000000000.changeset",  // zero
    "0000000000000000001.changeset",  // 19 digits
    "000000000000000000001.changeset",  // 21 digits
    "99999999999999999999.changeset",  // overflows Int64 (and UInt64)
    "09223372036854775808.changeset",  // Int64.max + 1
    "19223372036854775807.changeset",  // 20 significant digits
    "0000000000000000004a.changeset",  // a non-digit
    "000000000000000000-1.changeset",  // a sign
    "+0000000000000000001.changeset",
    "00000000000000000 42.changeset",
    "0000000000000000004٢.changeset",  // a non-ASCII digit
    "00000000000000000042.changesex",  // wrong suffix
    "00000000000000000042.Changeset",
    "00000000000000000042-changeset",
    "00000000000000000042.changeset~",  // too long
    "00000000000000000042.changese",  // too short
    "00000000000000000042.json",
    "00000000000000000042",
    ".changeset",
    "tmp.00000000000000000042.changeset",
    "00000000000000000042.changeset\u{0}",
    "0000000000000000004é.changeset",
  ])
  func rejectsOtherNames(_ name: String) {
    #expect(GroupLayout.sequence(inFileName: Substring(name)) == nil)
  }
}
