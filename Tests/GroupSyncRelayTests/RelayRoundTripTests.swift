import Foundation
import GRDB
import GroupSync
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// The round trips of shipping and applying, counted on the relay's own
/// connections against a real server: a shipment costs one, an entry the
/// notification carried costs none, a larger one is read back, and the
/// applied place rides on the next round trip.
@Suite(.timed) struct RelayRoundTripTests {
  /// Two hosts' stores driven by hand (no relay processes), each with a
  /// connection of its own, as a relay has them.
  private struct Pair {
    let root: HostsFolder
    let a: (group: GroupFolder, context: ReplicaContext, log: SharedLog)
    let b: (group: GroupFolder, context: ReplicaContext, log: SharedLog)

    init(_ server: PostgresServer) async throws {
      let root = try HostsFolder()
      self.root = root
      a = try await Self.host("a", root: root, server)
      b = try await Self.host("b", root: root, server)
      // Each learns that the other listens (as relays do within their
      // format check), then listens on the group's channel.
      for (name, log) in [("a", a.log), ("b", b.log)] {
        try log.advanceFormat(group: "app", host: name, rules: MergeRules(policy: .objectTrump).fingerprint)
        try log.listen(on: [try #require(log.wakes.channel)])
      }
    }

    private static func host(_ name: String, root: HostsFolder, _ server: PostgresServer) async throws
      -> (GroupFolder, ReplicaContext, SharedLog)
    {
        let host = try await GroupHost(name, root: root.path, server: server)
        let group = try GroupFolder(path: host.folder, create: false)
        let context = try ReplicaContext(
          store: group.store, storeName: "main", group: "app", host: name, merge: MergeRules(policy: .objectTrump),
          author: "groupsync-relay@" + name, emit: { _ in })
        let log = SharedLog(try server.connect())
        try log.createTables()
        try log.announce(
          group: "app", host: name, version: .current, rules: MergeRules(policy: .objectTrump).fingerprint,
          transport: .notify)
        _ = try log.enroll(context.replica, place: 0)
        return (group, context, log)
    }

    /// Waits for the next notifications about the store on `log`, hands
    /// them to `context`, and returns the last.
    func receive(_ log: SharedLog, _ context: ReplicaContext) async throws -> SharedLog.Hint {
      let deadline = ContinuousClock.now + .seconds(30)
      while ContinuousClock.now < deadline {
        let tag = try #require(log.tags["main"])
        let hints = try log.notifications().compactMap { SharedLog.Hint.parse($0.payload, tag: tag) }
        hints.forEach(context.take)
        if let last = hints.last { return last }
        try await Task.sleep(for: .milliseconds(5))
      }
      throw RelayTestFailure("no notification came")
    }

    /// Takes notifications until one tells of `position`, then applies
    /// everything.
    func catchUp(_ log: SharedLog, _ context: ReplicaContext, through position: Int64) async throws {
      while context.logHead < position { _ = try await receive(log, context) }
      while try Applier(context: context).apply(log) {}
    }

    /// What `body` returned, and the round trips it made on `log`.
    func counted<T>(_ log: SharedLog, _ body: () throws -> T) rethrows -> (result: T, roundTrips: Int64) {
      let before = log.roundTrips
      let result = try body()
      return (result, log.roundTrips - before)
    }
  }

  @Test func aShipmentIsOneRoundTripAndACarriedEntryNone() async throws {
    try await PostgresServer.with { server in
      let pair = try await Pair(server)
      let (a, b) = (pair.a, pair.b)
      try await a.group.store.write { db in try db.execute(sql: "INSERT INTO note(title, body) VALUES ('t1', 'small')") }
      let through = try a.group.store.currentSequence()
      #expect(try pair.counted(a.log) { try Shipper(context: a.context).ship(a.log) } == (.shipped, 1))

      // A's own entry, as A wrote it, counts as applied there at once.
      #expect(a.context.place.current.applied == 1)
      // Its bookkeeping commits no change set (the relay's tables are not
      // captured): nothing is left for the shipper to read.
      #expect(try a.context.place.current.shipped == a.group.store.currentSequence())
      #expect(try !Applier(context: a.context).apply(a.log))
      // B applies the entry its notification carried, and tells the
      // server nothing yet: its applied place waits for a round trip.
      let hint = try await pair.receive(b.log, b.context)
      #expect(hint.position == 1 && hint.entry?.origin == EntryOrigin(host: "a", sequence: through))
      #expect(try pair.counted(b.log) { try Applier(context: b.context).apply(b.log) } == (true, 0))
      #expect(try await b.group.store.read { db in try String.fetchOne(db, sql: "SELECT body FROM note") } == "small")
      #expect(b.context.place.current.applied == 1)
      let appliedOnServer = { try server.query("SELECT applied_seq FROM gs_host WHERE host = 'b'").first?[0] }
      #expect(try appliedOnServer() == "0")
      #expect(try pair.counted(b.log) { try b.log.flushDeferred() }.roundTrips == 1)
      #expect(try appliedOnServer() == "1")

      // An entry too large for a notification is read back: one round trip.
      let large = String(repeating: "x", count: 10_000)
      try await a.group.store.write { db in
        try db.execute(sql: "INSERT INTO note(title, body) VALUES ('t2', ?)", arguments: [large])
      }
      #expect(try pair.counted(a.log) { try Shipper(context: a.context).ship(a.log) } == (.shipped, 1))
      let told = try await pair.receive(b.log, b.context)
      #expect(told.position == 2 && told.entry == nil)
      #expect(try pair.counted(b.log) { try Applier(context: b.context).apply(b.log) } == (true, 1))
      #expect(try await b.group.store.read { db in try String.fetchOne(db, sql: "SELECT body FROM note WHERE title = 't2'") } == large)
      // Nothing past the place and no hint of more: no round trip.
      #expect(try pair.counted(b.log) { try Applier(context: b.context).apply(b.log) } == (false, 0))
    }
  }

  /// A row another host wrote meanwhile: the one-statement shipment finds
  /// it moved and writes nothing, and the shipment is settled in two more
  /// round trips, the conflict recorded.
  @Test func aShipmentWhoseRowMovedIsSettledInTwoMoreRoundTrips() async throws {
    try await PostgresServer.with { server in
      let pair = try await Pair(server)
      let (a, b) = (pair.a, pair.b)
      // Each ships its folder as made first: the table, whole.
      #expect(try Shipper(context: a.context).ship(a.log) == .shipped)
      #expect(try Shipper(context: b.context).ship(b.log) == .shipped)
      try await a.group.store.write { db in try db.execute(sql: "INSERT INTO note(title, body) VALUES ('r', 'v0')") }
      #expect(try Shipper(context: a.context).ship(a.log) == .shipped)
      try await pair.catchUp(b.log, b.context, through: 3)
      try await a.group.store.write { db in try db.execute(sql: "UPDATE note SET body = 'a'") }
      try await b.group.store.write { db in try db.execute(sql: "UPDATE note SET body = 'b'") }
      #expect(try pair.counted(a.log) { try Shipper(context: a.context).ship(a.log) } == (.shipped, 1))
      #expect(try pair.counted(b.log) { try Shipper(context: b.context).ship(b.log) } == (.shipped, 3))
      #expect(try server.query("SELECT count(*) FROM gs_conflict").first?[0] == "1")
      // B's entry settled a conflict, after A's entry B has not applied yet:
      // both are applied in the log's order.
      #expect(b.context.place.current.applied == 3)
      try await pair.catchUp(b.log, b.context, through: 5)
      #expect(b.context.place.current.applied == 5)
      #expect(try server.query("SELECT data FROM gs_row").first?[0]?.contains("{\"t\":\"b\"}") == true)
    }
  }

  /// A round trip that fails takes the applied place it carried down with
  /// it, and the place waits for the next one.
  @Test func theAppliedPlaceWaitsOnWhenTheRoundTripItRodeFails() async throws {
    try await PostgresServer.with { server in
      let pair = try await Pair(server)
      let (a, b) = (pair.a, pair.b)
      try await a.group.store.write { db in try db.execute(sql: "INSERT INTO note(title, body) VALUES ('t', 'x')") }
      #expect(try Shipper(context: a.context).ship(a.log) == .shipped)
      _ = try await pair.receive(b.log, b.context)
      #expect(try Applier(context: b.context).apply(b.log))
      #expect(b.log.oldestDeferred != nil)
      #expect(throws: RelayError.self) { try b.log.exchange([.init("SELECT 1 / 0")]) }
      #expect(b.log.oldestDeferred != nil)
      #expect(try server.query("SELECT applied_seq FROM gs_host WHERE host = 'b'").first?[0] == "0")
      try b.log.flushDeferred()
      #expect(b.log.oldestDeferred == nil)
      #expect(try server.query("SELECT applied_seq FROM gs_host WHERE host = 'b'").first?[0] == "1")
    }
  }

  /// What a wake-up's payload tells a store, and what it does not: by
  /// the store's tag on the group's channel, by name on the legacy one.
  @Test(arguments: [false, true]) func aNotificationTellsItsStoreOnly(legacy: Bool) {
    let replica = SharedLog.Replica(group: "g", store: "s", host: "me")
    let tag = "0f3a9c"
    let prefix = legacy ? "g/s:" : tag + ":"
    let parse = { (payload: String) in
      legacy ? SharedLog.Hint.parseLegacy(payload, for: replica) : SharedLog.Hint.parse(payload, tag: tag)
    }
    #expect(parse(prefix + "12") == .init(position: 12, entry: nil))
    let carried = parse(prefix + "3\nother-host 41\n{\"tables\":[]}")
    #expect(carried?.entry == .init(position: 3, origin: EntryOrigin(host: "other-host", sequence: 41), body: "{\"tables\":[]}"))
    // A body may hold newlines and spaces of its own.
    #expect(parse(prefix + "3\nh 1\na b\nc")?.entry?.body == "a b\nc")
    let others = [
      "g/s2:4", "g/t:4", "gg/s:4", "0f3a9c0:4", "0f3a9:4", "x0f3a9c:4", "g/s:1/x:5", "", "other",
      legacy ? tag + ":4" : "g/s:4",
    ]
    for other in others + ["", "-1", "1x", "99999999999999999999"].map({ prefix + $0 }) {
      #expect(parse(other) == nil, "\(other)")
    }
    // An entry it cannot read is read from the log: the position still counts.
    for unreadable in ["4\nnohost", "4\n 9\n{}", "4\nh x\n{}", "4\nh 9"] {
      #expect(parse(prefix + unreadable) == .init(position: 4, entry: nil), "\(unreadable)")
    }
  }


  /// Commits that follow a shipment within the batch window ship together,
  /// as one entry: a stream of commits costs one round trip per window,
  /// not one per commit.
  @Test func commitsWithinTheBatchWindowShipAsOneEntry() async throws {
    try await PostgresServer.with { server in
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      a.batchWindow = 2
      try await a.startRelay()
      try await b.startRelay()
      let entries: @Sendable () throws -> Int = {
        Int(try server.query("SELECT count(*) FROM gs_change WHERE origin_host = 'a'").first?[0] ?? "") ?? -1
      }
      // The table's own entry first.
      try await waitForConvergence([a, b], server: server)
      let before = try entries()
      try await a.exec(["INSERT INTO note(title) VALUES ('first')"])
      try await waitUntil("the first commit shipped") { (try? entries()) == before + 1 }
      // Four transactions, right after it: within the window.
      try await a.exec(["INSERT INTO note(title) VALUES ('streamed-' || (SELECT count(*) FROM note))"], repeat: 4)
      try await waitForConvergence([a, b], server: server)
      #expect(try entries() == before + 2)
      #expect(try b.rows("SELECT count(*) FROM note") == ["5"])
    }
  }

  /// A batch window out of range is refused, naming it.
  @Test func aBatchWindowOutOfRangeIsRefused() throws {
    var configuration = RelayConfiguration(folder: "/nonexistent", conninfo: "host=/nonexistent")
    configuration.batchWindow = .seconds(-1)
    #expect(throws: RelayError.self) { try Relay(configuration) }
    configuration.batchWindow = .seconds(11)
    let error = try #require(throws: RelayError.self) { try Relay(configuration) }
    #expect("\(error)".contains("batch window"))
  }
}
