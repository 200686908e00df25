// PreparedStatementTests: statements a session prepares once, and what happens when the server forgets them.
import Foundation
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// The named prepared statements of ``PostgresConnection``: prepared once
/// per session in the pipeline of their first use, prepared again on a new
/// session, and never a failure when the server forgot them
/// (`DEALLOCATE ALL`, a pooler) or holds them already.
@Suite(.timed) struct PreparedStatementTests {
  static let square = PostgresConnection.PreparedSQL("test_square", "SELECT $1::bigint * $1::bigint")

  /// What the session itself says it holds prepared (`pg_prepared_statements`
  /// shows the session's own only).
  static func preparedOnServer(_ connection: PostgresConnection) throws -> [[String?]] {
    try connection.execute("SELECT name, statement FROM pg_prepared_statements ORDER BY name")
  }

  static func square(_ value: Int64, _ connection: PostgresConnection) throws -> Int64 {
    try #require(try connection.query([.init(square, [value])])[0].first).decode(Int64.self, at: 0)
  }

  @Test func aNameStandsForItsTextAlone() {
    let again = PostgresConnection.PreparedSQL("test_square", "SELECT $1::bigint * $1::bigint")
    let other = PostgresConnection.PreparedSQL("test_square", "SELECT $1::bigint * $1::bigint ")
    #expect(again.name == Self.square.name && other.name != Self.square.name)
    #expect(Self.square.name.hasPrefix("gs_test_square_") && Self.square.name.count == "gs_test_square_".count + 16)
    // The relay's own: every name distinct.
    let names = [SharedLog.shipCall, SharedLog.lockShippedPlace, SharedLog.lockRows, SharedLog.readWindow, SharedLog.updateApplied]
      .map(\.name)
    #expect(Set(names).count == names.count)
  }

  /// Prepared in the pipeline of its first use (one round trip), once
  /// also when a batch sends it twice, then only bound; a new session
  /// starts with none and prepares it again.
  @Test func aStatementIsPreparedOncePerSession() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      #expect(try Self.preparedOnServer(connection).isEmpty)
      let before = connection.roundTrips
      #expect(try Self.square(7, connection) == 49)
      #expect(connection.roundTrips == before + 1)
      #expect(try Self.preparedOnServer(connection) == [[Self.square.name, Self.square.sql]])
      let twice = try connection.query([.init(Self.square, [Int64(2)]), .init(Self.square, [Int64(3)])])
      #expect(try twice.map { try $0.first?.decode(Int64.self, at: 0) } == [4, 9])
      #expect(try Self.square(-5, connection) == 25)
      #expect(connection.prepared == [Self.square.name] && connection.preparationsLost == 0)
      #expect(try Self.preparedOnServer(connection).count == 1)

      let fresh = try server.connect()
      #expect(try fresh.prepared.isEmpty && Self.preparedOnServer(fresh).isEmpty)
      #expect(try Self.square(11, fresh) == 121)
      #expect(fresh.prepared == [Self.square.name])
    }
  }

  /// A batch that fails before its preparation leaves nothing prepared;
  /// one that fails after it leaves it prepared (a rollback does not undo
  /// a preparation): either way the next batch runs.
  @Test func aFailedBatchKeepsTrackOfWhatWasPrepared() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      #expect(throws: (any Error).self) {
        try connection.query([.init("SELECT 1 / 0"), .init(Self.square, [Int64(2)])])
      }
      #expect(connection.prepared.isEmpty)
      #expect(throws: (any Error).self) {
        try connection.query([.init(Self.square, [Int64(2)]), .init("SELECT 1 / 0")])
      }
      #expect(connection.prepared == [Self.square.name])
      #expect(try Self.square(3, connection) == 9)
      #expect(connection.preparationsLost == 0)
    }
  }

  /// The server forgot what the session prepared (`DEALLOCATE ALL` on it):
  /// the batch, which ran outside a transaction and so did nothing, goes
  /// again, preparing anew, and what rode with it happens once.
  @Test func statementsTheServerForgotArePreparedAgain() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      try connection.execute("CREATE TABLE done(n bigint)")
      #expect(try Self.square(4, connection) == 16)
      try connection.execute("DEALLOCATE ALL")
      let before = connection.roundTrips
      let results = try connection.query([.init("INSERT INTO done VALUES (1)"), .init(Self.square, [Int64(6)])])
      #expect(try results[1].first?.decode(Int64.self, at: 0) == 36)
      #expect(connection.roundTrips == before + 2, "one failed round trip, one retried")
      #expect(try connection.execute("SELECT count(*) FROM done") == [["1"]])
      #expect(connection.preparationsLost == 1 && connection.preparesStatements)
      #expect(try Self.preparedOnServer(connection) == [[Self.square.name, Self.square.sql]])
    }
  }

  /// A batch that committed a part of itself before the loss is not sent
  /// again: what it committed stays, and would be done twice.
  @Test func aBatchThatCommittedAPartIsNotSentAgain() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      try connection.execute("CREATE TABLE done(n bigint)")
      #expect(try Self.square(4, connection) == 16)
      try connection.execute("DEALLOCATE ALL")
      do {
        _ = try connection.query([
          .init("BEGIN"), .init("INSERT INTO done VALUES (1)"), .init("COMMIT"), .init(Self.square, [Int64(5)]),
        ])
        Issue.record("a statement the server forgot ran")
      } catch SQLState.invalidSQLStatementName {
      }
      #expect(try connection.execute("SELECT count(*) FROM done") == [["1"]])
      #expect(try Self.square(5, connection) == 25)
    }
  }

  /// Inside a transaction the loss cannot be undone by sending again: it
  /// is thrown, the transaction rolls back, and the next batch prepares
  /// anew.
  @Test func forgottenInATransactionItIsThrownAndPreparedAnewAfter() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      #expect(try Self.square(4, connection) == 16)
      try connection.execute("BEGIN")
      try connection.execute("DEALLOCATE ALL")
      do {
        _ = try Self.square(5, connection)
        Issue.record("a statement the server forgot ran in a transaction")
      } catch SQLState.invalidSQLStatementName {
      }
      #expect(connection.isInTransaction)
      connection.rollBackQuietly()
      #expect(try Self.square(5, connection) == 25)
      #expect(connection.preparesStatements)
    }
  }

  /// A name the session holds prepared already (made by `PREPARE`, as
  /// another client of a pooler's backend would): same name, same text,
  /// so it is used.
  @Test func aNamePreparedAlreadyIsUsed() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      try connection.execute("PREPARE \(Self.square.name) AS \(Self.square.sql)")
      #expect(try Self.square(8, connection) == 64)
      #expect(connection.prepared == [Self.square.name] && connection.preparationsLost == 1)
      #expect(try Self.square(9, connection) == 81)
      #expect(connection.preparationsLost == 1)
    }
  }

  /// Forgotten again right after being prepared anew (here by the batch
  /// itself; in life, a pooler that hands each transaction another
  /// backend), or time after time: the session stops preparing and sends
  /// its statements unnamed, and nothing fails.
  @Test func aSessionThatKeepsLosingThemSendsThemUnnamed() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      let results = try connection.query([
        .init(Self.square, [Int64(2)]), .init("DEALLOCATE ALL"), .init(Self.square, [Int64(3)]),
      ])
      #expect(try results[2].first?.decode(Int64.self, at: 0) == 9)
      #expect(!connection.preparesStatements && connection.preparationsLost == 2)
      #expect(try Self.square(4, connection) == 16)
      #expect(try Self.preparedOnServer(connection).isEmpty)

      let other = try server.connect()
      for value in Int64(1)...Int64(PostgresConnection.preparationsLostTolerated) {
        #expect(try Self.square(value, other) == value * value)
        try other.execute("DEALLOCATE ALL")
      }
      #expect(try Self.square(10, other) == 100)
      #expect(!other.preparesStatements && other.preparationsLost == PostgresConnection.preparationsLostTolerated)
    }
  }

  /// A connection told not to prepare (a transport that does not keep a
  /// session's prepared statements) sends them unnamed from the start.
  @Test func aConnectionThatDoesNotPrepareSendsThemUnnamed() async throws {
    try await PostgresServer.with { server in
      let connection = try PostgresConnection(conninfo: server.conninfo, preparesStatements: false)
      #expect(try Self.square(12, connection) == 144)
      #expect(try connection.prepared.isEmpty && Self.preparedOnServer(connection).isEmpty)
    }
  }

  /// A relay's log whose session forgot its prepared statements mid-way
  /// (`DEALLOCATE ALL` on that session) ships on, with the bookkeeping
  /// that rode along written once; the settled path's opening batch, which
  /// begins its own transaction, and the apply's read go on too.
  @Test func aLogWhoseSessionForgotItsStatementsShipsOn() async throws {
    try await PostgresServer.with { server in
      let log = SharedLog(try PostgresConnection(conninfo: server.conninfo))
      try log.prepareAccess(group: "app", host: "a")
      let replica = SharedLog.Replica(group: "app", store: "main", host: "a")
      _ = try log.enroll(replica, place: 0)
      // The group ships in format 2 once its one member says it reads it.
      try log.announce(
        group: "app", host: "a", version: .current, rules: MergeRules(policy: .objectTrump).fingerprint, transport: .notify)
      #expect(log.groupFormat == .v2)
      func shipment(_ through: Int64) throws -> SharedLog.Shipment {
        let values: [RowValue] = [.text("t\(through)")]
        let entry = LogEntry(
          tables: [
            TableImage(
              name: "note", columns: ["title"], isSnapshot: false,
              rows: [RowImage(gid: "g\(through)", rowID: through, base: 0, values: values, lost: nil)])
          ], conflicts: [], notes: nil)
        return SharedLog.Shipment(
          through: through, body: try entry.encoded(format: .v2), format: .v2,
          winners: [
            .init(
              table: "note", gid: "g\(through)", base: 0, columns: #"["title"]"#,
              data: try StoredImage.encode(values, format: .v2))
          ], conflicts: [])
      }
      let forget = { () throws -> Void in try log.connection.execute("DEALLOCATE ALL") }
      #expect(try log.ship(replica, shipment(1), settled: false) == .shipped(position: 1))
      log.recordApplied(replica, through: 1)
      try forget()
      #expect(try log.ship(replica, shipment(2), settled: false) == .shipped(position: 2))
      #expect(log.connection.preparationsLost == 1 && log.oldestDeferred == nil, "\(log.connection.preparationsLost) \(log.connection.preparesStatements)")
      #expect(
        try server.query("SELECT seq, origin_seq FROM gs_change WHERE grp = 'app' ORDER BY seq") == [["1", "1"], ["2", "2"]])
      #expect(try server.query("SELECT shipped_seq, applied_seq FROM gs_host WHERE grp = 'app'") == [["2", "1"]])

      // The settled path: its opening batch begins its own transaction,
      // so a loss there is rolled back and the batch sent again.
      _ = try log.beginShipment(replica, targets: [(table: "note", gid: "g1")])
      #expect(try log.ship(replica, shipment(3), settled: true) == .shipped(position: 3))
      try forget()
      let opening = try log.beginShipment(replica, targets: [(table: "note", gid: "g1")])
      #expect(opening.shippedPlace == 3 && opening.rows.map(\.gid) == ["g1"])
      #expect(log.connection.preparationsLost == 2 && log.connection.isInTransaction)
      #expect(try log.ship(replica, shipment(4), settled: true) == .shipped(position: 4))
      #expect(!log.connection.isInTransaction)
      // Lost inside a transaction begun before: thrown (the relay rolls
      // back and ships again on its next pass); a third loss, and the
      // session prepares no more.
      _ = try log.beginShipment(replica, targets: [(table: "note", gid: "g1")])
      try forget()
      do {
        _ = try log.ship(replica, shipment(5), settled: true)
        Issue.record("shipped on a statement the server forgot, in a transaction")
      } catch SQLState.invalidSQLStatementName {
      }
      log.rollBackQuietly()
      #expect(log.connection.preparationsLost == 3 && !log.connection.preparesStatements)
      #expect(try log.ship(replica, shipment(5), settled: false) == .shipped(position: 5))
      let window = try #require(try log.window(replica, from: 1, limit: 10, bodiesAfter: 1))
      #expect(window.head == 5 && window.entries.map(\.position) == [1, 2, 3, 4, 5])
      #expect(window.entries.map { $0.body == nil } == [true, false, false, false, false])
    }
  }

  /// A relay ships through its named statement, on every session it
  /// opens: after the server ended its first, it prepares anew rather than
  /// trusting what the old one held (the server would log the statement it
  /// lacks). One run with `--no-prepared-statements` ships through unnamed
  /// ones. The server's log names every statement it ran, and whose.
  @Test func relaysShipThroughPreparedStatementsUnlessToldNot() async throws {
    try await PostgresServer.with { server in
      _ = try server.query("ALTER SYSTEM SET log_statement = 'all'")
      _ = try server.query("ALTER SYSTEM SET log_line_prefix = '%a: '")
      _ = try server.query("SELECT pg_reload_conf()")
      let root = try HostsFolder()
      let a = try await GroupHost("a", root: root.path, server: server)
      let b = try await GroupHost("b", root: root.path, server: server)
      b.launch = { executable, arguments in (executable, arguments + ["--no-prepared-statements"]) }
      try await a.startRelay()
      try await b.startRelay()
      for (host, title) in [(a, "a1"), (b, "b1")] { try await host.exec(["INSERT INTO note(title) VALUES ('\(title)')"]) }
      try await waitForConvergence([a, b], server: server)
      let terminated = try server.query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'groupsync-relay %'")
      #expect(terminated.first?[0] == "2")
      try await waitUntil("both relays reconnect") { a.events("connected").count == 2 && b.events("connected").count == 2 }
      for (host, title) in [(a, "a2"), (b, "b2")] { try await host.exec(["INSERT INTO note(title) VALUES ('\(title)')"]) }
      #expect(try await waitForConvergence([a, b], server: server).count == 4)

      let log = try String(contentsOfFile: server.folder + "/server.log", encoding: .utf8).split(separator: "\n")
      func lines(_ host: String, _ text: String) -> Int {
        log.filter { $0.hasPrefix("groupsync-relay \(host): ") && $0.contains(text) }.count
      }
      let named = "execute \(SharedLog.shipCall.name): SELECT outcome"
      let unnamed = "execute <unnamed>: SELECT outcome, pos, group_format FROM gs_ship_5"
      #expect(lines("a", named) >= 2 && lines("a", unnamed) == 0, "\(log.filter { $0.contains("gs_ship_5") })")
      #expect(lines("b", unnamed) >= 2 && lines("b", "execute gs_") == 0)
      #expect(log.filter { $0.contains("prepared statement") }.isEmpty, "\(log.filter { $0.contains("prepared statement") })")
    }
  }
}
