import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync
import GroupSyncProcess

/// Group defaults and the group notification center, in one process.
@Suite(.serialized, .timed)
struct DefaultsTests {
  let folder: TemporaryFolder
  init() throws { folder = try TemporaryFolder() }

  struct WidgetState: Codable, Equatable {
    var title: String
    var expanded: Bool
  }

  @Test func valuesReadBackWithTheirTypes() throws {
    let group = try GroupFolder(path: folder.child("group"))
    let ui = try group.defaults(suite: "ui")
    let now = Date(timeIntervalSince1970: 1_763_800_000.25)
    let values: [String: DefaultsValue] = [
      "bool": .bool(true), "int": .int(-42), "double": .double(2.5), "string": .string("héllo"),
      "data": .data(Data([0, 1, 255])), "date": .date(now),
      "array": .array([.int(1), .string("two")]), "dictionary": .dictionary(["a": .bool(false)]),
    ]
    for (key, value) in values { try ui.set(value, forKey: key) }
    try ui.set(encoding: WidgetState(title: "Inbox", expanded: true), forKey: "widget")
    for (key, value) in values { #expect(try ui.value(forKey: key) == value, "\(key)") }
    #expect(try ui.decode(WidgetState.self, forKey: "widget") == WidgetState(title: "Inbox", expanded: true))
    #expect(try ui.allValues().count == values.count + 1)
    // Suites are separate.
    #expect(try group.defaults(suite: "other").value(forKey: "bool") == nil)
    try ui.removeValue(forKey: "bool")
    #expect(try ui.value(forKey: "bool") == nil)
    #expect(throws: GroupSyncError.self) { try ui.value(forKey: "int")?.decode(WidgetState.self) }
  }

  @Test func badKeysAndOversizedValuesAreRefusedAndChangeNothing() throws {
    let group = try GroupFolder(path: folder.child("group"))
    let ui = try group.defaults(suite: "ui")
    try ui.set(.int(1), forKey: "kept")
    let before = try group.store.currentSequence()
    #expect(throws: GroupSyncError.self) { try ui.set(.int(1), forKey: "") }
    #expect {
      try ui.set(.data(Data(count: GroupDefaults.maximumValueSize)), forKey: "huge")
    } throws: { "\($0)".contains("over the 262144-byte maximum") }
    #expect {
      try ui.transaction { tx in
        try tx.set(.int(2), forKey: "kept")
        try tx.set(.data(Data(count: GroupDefaults.maximumValueSize)), forKey: "huge")
      }
    } throws: { $0 is GroupSyncError }
    #expect(try ui.value(forKey: "kept") == .int(1), "the transaction rolled back as a whole")
    #expect(try group.store.currentSequence() == before)
    #expect(throws: GroupSyncError.self) { try group.defaults(suite: "") }
  }

  @Test func observersSeeEachNetChangeInOrder() async throws {
    let group = try GroupFolder(path: folder.child("group"))
    let ui = try group.defaults(suite: "ui")
    try ui.set(.int(0), forKey: "count")
    let changes = try ui.changes()
    try ui.set(.int(1), forKey: "count")
    try ui.set(.int(1), forKey: "count")  // same value: no notice
    try ui.transaction { tx in
      try tx.set(.string("a"), forKey: "doc")
      try tx.set(.string("b"), forKey: "doc")  // set twice: one notice, old -> final
      try tx.set(.int(5), forKey: "count")
      try tx.set(.int(1), forKey: "count")  // back to what it was: none
    }
    try ui.removeValue(forKey: "count")
    try group.defaults(suite: "other").set(.bool(true), forKey: "x")  // another suite
    var iterator = changes.makeAsyncIterator()
    var seen: [DefaultsChange] = []
    for _ in 0..<3 {
      guard case .changed(let change)? = await iterator.next() else { break }
      seen.append(change)
    }
    #expect(seen == [
      DefaultsChange(suite: "ui", key: "count", oldValue: .int(0), newValue: .int(1)),
      DefaultsChange(suite: "ui", key: "doc", oldValue: nil, newValue: .string("b")),
      DefaultsChange(suite: "ui", key: "count", oldValue: .int(1), newValue: nil),
    ])
  }

  @Test func aNotificationPostedInARolledBackWriteReachesNobody() async throws {
    let group = try GroupFolder(path: folder.child("group"))
    try await group.store.write { try $0.execute(sql: "CREATE TABLE t(x)") }
    let center = group.notifications
    let received = try center.notifications(matching: "import.")
    struct Abort: Error {}
    await #expect(throws: Abort.self) {
      try await group.store.write { db in
        try db.execute(sql: "INSERT INTO t VALUES (1)")
        try center.post("import.failed", in: db)
        throw Abort()
      }
    }
    let (_, changeSet) = try await group.store.writeAndReturnChangeSet { db in
      try db.execute(sql: "INSERT INTO t VALUES (2)")
      try center.post("import.finished", payload: Array("2 rows".utf8), in: db)
    }
    try center.post("other.thing")
    try center.post("import.progress", encoding: ["done": 3])
    var iterator = received.makeAsyncIterator()
    let first = await iterator.next()
    #expect(first?.name == "import.finished" && first?.payload == Array("2 rows".utf8))
    #expect(first?.sequence == changeSet?.sequence)
    #expect(changeSet?.notifications.map(\.name) == ["import.finished"])
    let second = await iterator.next()
    #expect(second?.name == "import.progress")
    #expect(try second?.decode([String: Int].self) == ["done": 3])
  }

  @Test func badNotificationsAreRefused() throws {
    let group = try GroupFolder(path: folder.child("group"))
    let before = try group.store.currentSequence()
    #expect(throws: GroupSyncError.self) { try group.notifications.post("") }
    #expect {
      try group.notifications.post("big", payload: [UInt8](repeating: 0, count: GroupNotificationCenter.maximumPayloadSize + 1))
    } throws: { "\($0)".contains("over the 65536-byte maximum") }
    #expect(throws: GroupSyncError.noteOutsideWrite) {
      try group.store.pool.write { db in try group.notifications.post("sneaky", in: db) }
    }
    #expect(try group.store.currentSequence() == before)
  }
}

/// Group defaults and notifications across real processes.
@Suite(.serialized, .timed)
struct DefaultsAcrossProcessesTests {
  @Test func twoProcessesSettingKeysLoseNothingAndObserversSeeEveryChange() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE TABLE t(x);")
    let group = try GroupFolder(path: directory, create: false)
    let ui = try group.defaults(suite: "ui")
    let changes = try ui.changes()
    let watch = try await ProcessHarness.startWatch([directory, "--json", "--count", "60"])
    let bin = CLI.executable
    let writers = ["a", "b"].map { prefix in
      Thread.detachNewThreadWithResult {
        (try? ChildProcess.run(
          "/bin/sh",
          ["-c", "for i in $(seq 30); do \"$0\" defaults \"$1\" set \(prefix)-$i \(prefix)$i --suite ui || exit 1; done",
           bin, directory],
          timeout: 120))?.succeeded ?? false
      }
    }
    for writer in writers { #expect(await writer.value) }
    #expect(try ui.allValues().count == 60, "no update was lost")
    var seen: [DefaultsChange] = []
    var iterator = changes.makeAsyncIterator()
    while seen.count < 60, case .changed(let change)? = await iterator.next() { seen.append(change) }
    #expect(Set(seen.map(\.key)).count == 60)
    // Each process's own keys arrive in the order it set them.
    for prefix in ["a", "b"] {
      #expect(seen.filter { $0.key.hasPrefix(prefix + "-") }.map(\.key) == (1...30).map { "\(prefix)-\($0)" })
    }
    let lines = try jsonLines(try await ProcessHarness.finish(watch, timeout: 30).stdout)
    let noted = lines.flatMap { ($0["notes"] as? [[String: Any]]) ?? [] }.filter { ($0["name"] as? String) == "defaults/ui" }
    #expect(noted.count == 60, "the other process's listener saw every notice")
    let get = try await ProcessHarness.run(["defaults", directory, "get", "a-7", "--suite", "ui"])
    #expect(get.status == 0 && get.stdout == "a7\n")
    let missing = try await ProcessHarness.run(["defaults", directory, "get", "nope", "--suite", "ui"])
    #expect(missing.status == 2)
    let badType = try await ProcessHarness.run(["defaults", directory, "set", "n", "x", "--type", "int"])
    #expect(badType.status != 0 && badType.stderr.contains("'x' is not an int"), "\(badType.stderr)")
    let json = try await ProcessHarness.run(["defaults", directory, "set", "size", #"{"w": 3, "ok": true}"#, "--type", "json"])
    #expect(json.status == 0)
    #expect(try group.defaults(suite: "default").value(forKey: "size") == .dictionary(["w": .int(3), "ok": .bool(true)]))
  }

  @Test func listPrintsArraysDictionariesAndCodableValuesAsJSON() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE TABLE t(x);")
    let defaults = try GroupFolder(path: directory, create: false).defaults(suite: "default")
    let nested: DefaultsValue = .dictionary([
      "a": .array([.int(1), .int(2)]), "b \"q\"": .string("x/y\n"), "c": .data(Data([1, 2])), "d": .double(0.5),
      "e": .bool(false),
    ])
    try defaults.set(nested, forKey: "nested")
    try defaults.set(.array([.string("one"), .dictionary([:])]), forKey: "list")
    try defaults.set(.string("plain"), forKey: "text")
    let list = try await ProcessHarness.run(["defaults", directory, "list"])
    #expect(list.status == 0, "\(list.stderr)")
    var values: [String: String] = [:]
    for line in list.stdout.split(separator: "\n") {
      let parts = line.split(separator: "\t", maxSplits: 1).map(String.init)
      try #require(parts.count == 2, "\(line)")
      values[parts[0]] = parts[1]
    }
    #expect(values["text"] == "plain", "a string stays as it is")
    #expect(values["list"] == #"["one",{}]"#)
    let nestedText = try #require(values["nested"])
    let object = try #require(try JSONSerialization.jsonObject(with: Data(nestedText.utf8)) as? [String: Any])
    #expect(object["a"] as? [Int] == [1, 2])
    #expect(object["b \"q\""] as? String == "x/y\n")
    #expect(object["c"] as? String == Data([1, 2]).base64EncodedString())
    #expect(object["d"] as? Double == 0.5 && object["e"] as? Bool == false)
    for (type, value, message) in [
      ("bool", "yes", "'yes' is not a bool"), ("double", "x", "'x' is not a double"),
      ("date", "now", "'now' is not a date"), ("data", "%%", "'%%' is not base64 data"), ("json", "{", "'{' is not JSON"),
    ] {
      let bad = try await ProcessHarness.run(["defaults", directory, "set", "k", value, "--type", type])
      #expect(bad.status != 0 && bad.stderr.contains(message), "\(bad.stderr)")
    }
  }

  @Test func aPostedNotificationReachesEveryMemberOnceAndADurableListenerReplaysIt() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: "CREATE TABLE t(x);")
    let group = try GroupFolder(path: directory, create: false)
    let received = try group.notifications.notifications(matching: "import.")
    let durable = try await ProcessHarness.startWatch([directory, "--name", "late", "--durable", "--json"])
    durable.signal(SIGKILL)
    _ = try await ProcessHarness.finish(durable, timeout: 10)
    let post = try await ProcessHarness.run(["post", directory, "import.finished", "--payload", "42 rows"])
    #expect(post.status == 0, "\(post.stderr)")
    _ = try await ProcessHarness.run(["post", directory, "other.thing"])
    var iterator = received.makeAsyncIterator()
    let notification = await iterator.next()
    #expect(notification?.name == "import.finished" && notification?.payload == Array("42 rows".utf8))
    // The durable listener was not running: it replays both on its next start.
    let again = try await ProcessHarness.startWatch([directory, "--name", "late", "--durable", "--count", "2"])
    let text = try await ProcessHarness.finish(again, timeout: 20).stdout
    #expect(text.contains("notification import.finished: 42 rows") && text.contains("notification other.thing"), "\(text)")
    let bad = try await ProcessHarness.run([
      "post", directory, "big", "--payload", String(repeating: "x", count: GroupNotificationCenter.maximumPayloadSize + 1),
    ])
    #expect(bad.status == 1 && bad.stderr.contains("65536-byte maximum"))
  }
}

extension Thread {
  /// Runs `body` on a new thread; its result is awaited.
  static func detachNewThreadWithResult<T: Sendable>(_ body: @escaping @Sendable () -> T) -> Task<T, Never> {
    Task {
      await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
      }
    }
  }
}
