// PostgresWireTests: the typed wire under SharedLog — parameters bound, rows decoded, server errors read.
import Foundation
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// How values become libpq's text format (``PostgresBindable``), how rows
/// decode (``PostgresRow``), and what a server error keeps, checked by hand
/// and, for what the server must read back as sent, against a real
/// PostgreSQL server.
@Suite(.timed) struct PostgresWireTests {
  /// Elements an array literal must keep as they are.
  static let awkward: [String?] = [
    "plain", "", "a,b", "{braces}", "}", "\"quoted\"", "back\\slash", "\\\"", "NULL", "null", nil, " spaced ",
    "new\nline", "tab\t", "é ünïcode 🙂", "'single'", "(a,b)", "\\N",
  ]

  @Test func valuesAreWrittenInTextFormatInOnePlace() {
    #expect(Int64(-9_007_199_254_740_993).postgresText == "-9007199254740993")
    #expect(42.postgresText == "42")
    #expect(true.postgresText == "true" && false.postgresText == "false")
    #expect("it's".postgresText == "it's")
    #expect((nil as String?).postgresText == nil && (Optional("x")).postgresText == "x")
    #expect(Data([0x00, 0xff, 0x10]).postgresText == "\\x00ff10" && Data().postgresText == "\\x")
    #expect([Int64(1), -2].postgresText == #"{"1","-2"}"#)
    #expect(([] as [String]).postgresText == "{}")
    #expect(["a,b", nil, "", "q\"\\"].postgresText == #"{"a,b",NULL,"","q\"\\"}"#)
    // A statement binds them in order, nil as NULL.
    let statement = PostgresConnection.Statement("SELECT $1, $2, $3", ["g", Int64(7), nil as Int64?])
    #expect(statement.parameters == ["g", "7", nil])
  }

  @Test func arraysRoundTripThroughTheServerAsSent() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      let texts = try connection.query(
        "SELECT u.v, u.v IS NULL, o.n FROM unnest($1::text[]) WITH ORDINALITY AS u(v, n) "
          + "JOIN generate_series(1, $2) AS o(n) ON o.n = u.n ORDER BY u.n",
        [Self.awkward, Self.awkward.count])
      #expect(texts.count == Self.awkward.count)
      #expect(try texts.map { try $0.decode(String?.self, at: 0) } == Self.awkward)
      #expect(try texts.map { try $0.decode(Bool.self, at: 1) } == Self.awkward.map { $0 == nil })
      // The other element types, empty arrays and a bytea.
      let numbers: [Int64] = [0, -1, Int64.max, Int64.min]
      let bytes = Data([0, 1, 0x7f, 0x80, 0xff, 0x5c, 0x22])
      let row = try #require(
        try connection.query(
          "SELECT array_length($1::bigint[], 1), ($1::bigint[])[3], cardinality($2::text[]), $3::bytea, "
            + "length($3::bytea), $4::boolean, $5::smallint[], $6::bigint",
          [numbers, [String](), bytes, true, [1, 2], nil as Int64?]
        ).first)
      #expect(try row.decode(Int.self, at: 0) == 4 && row.decode(Int64.self, at: 1) == Int64.max)
      #expect(try row.decode(Int.self, at: 2) == 0)
      #expect(try row.decode(Data.self, at: 3) == bytes && row.decode(Int.self, at: 4) == bytes.count)
      #expect(try row.decode(Bool.self, at: 5) && row.decode(String.self, at: 6) == "{1,2}")
      #expect(try row.decode(Int64?.self, at: 7) == nil)
    }
  }

  @Test func rowsDecodeIntoTypedValues() throws {
    let row = PostgresRow(
      columns: ["seq", "ok", "body", "lag", "b", "gone"], texts: ["12", "t", "x", "1.5", "\\x00FF", nil])
    #expect(try row.decode(Int64.self, at: 0) == 12 && row.decode(Int.self, at: 0) == 12)
    #expect(try row.decode(Bool.self, at: 1) && !(row.decode(Bool?.self, at: 5) ?? false))
    #expect(try row.decode(String.self, at: 2) == "x" && row.decode(Double.self, at: 3) == 1.5)
    #expect(try row.decode(Data.self, at: 4) == Data([0, 0xff]))
    #expect(try row.decode(String?.self, at: 5) == nil && row.decode(Int64?.self, at: 5) == nil)
    #expect(try row.decode(Int64?.self, at: 0) == 12)
  }

  /// Every unexpected value names its column and the text the server sent.
  @Test func unexpectedValuesNameTheColumnAndTheText() throws {
    let row = PostgresRow(columns: ["seq", "ok", "b", "gone"], texts: ["12x", "true", "\\x0", nil])
    #expect(throws: RelayError.unexpectedValue(column: "seq", text: "12x", expected: "bigint")) {
      try row.decode(Int64.self, at: 0)
    }
    #expect(throws: RelayError.unexpectedValue(column: "seq", text: "12x", expected: "bigint")) {
      try row.decode(Int64?.self, at: 0)
    }
    #expect(throws: RelayError.unexpectedValue(column: "ok", text: "true", expected: "boolean")) {
      try row.decode(Bool.self, at: 1)
    }
    #expect(throws: RelayError.unexpectedValue(column: "b", text: "\\x0", expected: "bytea")) {
      try row.decode(Data.self, at: 2)
    }
    for text in ["00", "\\xzz", "\\x0g"] {
      #expect(Data(postgresText: text) == nil, "\(text)")
    }
    #expect(throws: RelayError.unexpectedValue(column: "gone", text: nil, expected: "text")) {
      try row.decode(String.self, at: 3)
    }
    #expect(throws: RelayError.unexpectedValue(column: "#5 (the result has 4)", text: nil, expected: "integer")) {
      try row.decode(Int?.self, at: 4)
    }
    // Worded so that an administrator sees what came back, where.
    let error = RelayError.unexpectedValue(column: "seq", text: "12x", expected: "bigint")
    #expect(error.description == "PostgreSQL sent '12x' in column 'seq' where the relay reads a value of type bigint")
    #expect(!error.leavesConnectionUsable && !error.needsAdministrator)
    let long = RelayError.unexpectedValue(column: "body", text: String(repeating: "x", count: 500), expected: "bigint")
    #expect(long.description.count < 200 && long.description.contains("…"))
    #expect(RelayError.unexpectedValue(column: "ok", text: nil, expected: "boolean").description.contains("sent NULL"))
  }

  /// A column the server returns with garbage fails the read with the
  /// column named, on a real result.
  @Test func aServerResultThatIsNoNumberFailsNamingItsColumn() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      let row = try #require(try connection.query("SELECT 'abc' AS seq, NULL::bigint AS purged").first)
      #expect(throws: RelayError.unexpectedValue(column: "seq", text: "abc", expected: "bigint")) {
        try row.decode(Int64.self, at: 0)
      }
      #expect(throws: RelayError.unexpectedValue(column: "purged", text: nil, expected: "bigint")) {
        try row.decode(Int64.self, at: 1)
      }
      #expect(try row.decode(Int64?.self, at: 1) == nil)
    }
  }

  /// The server's SQLSTATE, DETAIL and HINT are kept apart, and shown once.
  @Test func aServerErrorKeepsItsSQLStateDetailAndHint() async throws {
    try await PostgresServer.with { server in
      let connection = try server.connect()
      try connection.query("CREATE TABLE t(id int PRIMARY KEY)")
      try connection.query("INSERT INTO t VALUES (1)")
      do {
        try connection.query("INSERT INTO t VALUES ($1)", [1])
        Issue.record("a duplicate key was accepted")
      } catch let error as RelayError {
        guard case .postgres(let call, _, let state, let detail, _) = error else {
          Issue.record("\(error)")
          return
        }
        #expect(call == "PQgetResult" && state == .uniqueViolation && detail == "Key (id)=(1) already exists.")
        #expect(error.description.components(separatedBy: "Key (id)=(1) already exists.").count == 2, "\(error)")
      }
      do {
        try connection.query("DO $$ BEGIN RAISE EXCEPTION 'no' USING DETAIL = 'why', HINT = 'do this'; END $$")
        Issue.record("the exception was not raised")
      } catch RelayError.postgres(_, _, let state, let detail, let hint) {
        #expect(state == "P0001" && detail == "why" && hint == "do this")
      }
      // Made elsewhere, with a message that does not hold them, an error
      // still shows its DETAIL and HINT.
      let made = RelayError.postgres(call: "PQgetResult", message: "boom", sqlState: nil, detail: "why", hint: "fix")
      #expect(made.description == "PQgetResult failed: boom\nDETAIL:  why\nHINT:  fix")
      #expect(RelayError.postgres(call: "PQflush", message: "gone\n", sqlState: nil).description == "PQflush failed: gone")
    }
  }

  /// The log's tables are listed once (``SharedSchema/tables``): every
  /// table the statements make is there, and made by its own entry.
  @Test func everyTableOfTheLogIsListedOnce() throws {
    let made = SharedSchema.statements.compactMap { statement -> String? in
      guard statement.hasPrefix("CREATE TABLE IF NOT EXISTS ") else { return nil }
      return statement.dropFirst("CREATE TABLE IF NOT EXISTS ".count).split(separator: " ").first.map(String.init)
    }
    #expect(made == ["gs_clock", "gs_change", "gs_row", "gs_host", "gs_conflict", "gs_member", "gs_peer", "gs_group", "gs_schema"])
    #expect(Set(made) == Set(SharedSchema.tableNames) && SharedSchema.tableNames.count == made.count)
    for table in SharedSchema.tables {
      #expect(SharedSchema.statements.filter { $0 == table.create }.count == 1, "\(table.name)")
    }
    #expect(SharedSchema.Table.member.create == """
      CREATE TABLE IF NOT EXISTS gs_member (
        role name NOT NULL, grp text NOT NULL, host text NOT NULL, PRIMARY KEY (grp, host))
      """)
  }
}
