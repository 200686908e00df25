// The connection: one libpq session, its pipelined round trips, waits and errors.
import CLibPQ
import Foundation
import GroupSync
#if canImport(Glibc)
import Glibc
#endif

/// One libpq connection (`PGconn`), used by one thread: the relay's.
///
/// Every call goes through libpq's asynchronous API on a non-blocking
/// socket, waited for with `poll` against a deadline and against the
/// relay's stop signal, so no call can hang on a silent link and a stop
/// abandons any call at once. Statements are sent in libpq's pipeline
/// mode: a batch of them (``run(_:)``) costs one round trip, and a batch
/// outside `BEGIN` runs in one implicit transaction, all or nothing. The
/// statements sent with every shipment and apply are prepared once per
/// session and then only bound (``PreparedSQL``).
/// Parameters travel apart from the SQL text, in text format
/// (``PostgresBindable``), rows come back as ``PostgresRows`` to decode
/// (``PostgresRow``), and every failure becomes a ``RelayError`` naming
/// the libpq call, with the server's SQLSTATE, DETAIL and HINT.
///
/// `@unchecked Sendable`: libpq connections may move between threads but
/// must not be used by two at once; the relay uses it from its thread only
/// and closes it there.
final class PostgresConnection: @unchecked Sendable {
  /// One statement of a batch, its parameters bound (``PostgresBindable``:
  /// written in text format here, once).
  struct Statement: Sendable {
    let sql: String
    /// The parameters as libpq sends them (nil: NULL).
    let parameters: [String?]
    /// The name the session prepares `sql` under (nil: sent unnamed, so
    /// parsed and planned on every call).
    let preparedName: String?

    init(_ sql: String, _ parameters: [any PostgresBindable] = []) {
      self.sql = sql
      self.parameters = parameters.map(\.postgresText)
      preparedName = nil
    }

    /// Whether it is a `COMMIT` (or `END`): a batch holding one is never
    /// sent again, as what came before it stays.
    var commits: Bool {
      let head = sql.drop { $0.isWhitespace }.prefix(6).uppercased()
      return head.hasPrefix("COMMIT") || head.hasPrefix("END")
    }

    /// `prepared`'s SQL, which the session prepares once under its name
    /// (see ``PreparedSQL``).
    init(_ prepared: PreparedSQL, _ parameters: [any PostgresBindable]) {
      sql = prepared.sql
      self.parameters = parameters.map(\.postgresText)
      preparedName = prepared.name
    }
  }

  /// SQL a session prepares once, under a name, and then only binds and
  /// runs (`PQsendQueryPrepared`): the server parses and plans its text once
  /// per session rather than on every call. For the statements sent with
  /// every shipment and every apply; the text and its parameters are the
  /// same as unnamed (text parameters, their types from the casts in the
  /// SQL).
  struct PreparedSQL: Sendable, Hashable {
    let sql: String
    /// `gs_LABEL_HASH`, the hash of `sql` (FNV-1a, 64 bits): one name
    /// always means one text, also to another relay build whose session
    /// a pooler hands this one, so a name found prepared is the statement.
    let name: String

    init(_ label: String, _ sql: String) {
      self.sql = sql
      var hash: UInt64 = 0xcbf2_9ce4_8422_2325
      for byte in sql.utf8 {
        hash ^= UInt64(byte)
        hash &*= 0x0000_0100_0000_01b3
      }
      let digits = String(hash, radix: 16)
      name = "gs_\(label)_" + String(repeating: "0", count: 16 - digits.count) + digits
    }
  }

  private let connection: OpaquePointer
  private let timeouts: RelayTimeouts
  /// Batches sent and answered: each is one round trip.
  private(set) var roundTrips: Int64 = 0
  /// Whether statements with a prepared name are prepared on this session
  /// (else they go unnamed). Off from the start for a transport that does
  /// not keep a session's prepared statements (a pooler in transaction
  /// mode), and turned off when the server forgets them again right after
  /// they were prepared anew.
  private(set) var preparesStatements: Bool
  /// The names prepared on this session: the server keeps them until it
  /// ends (a rolled-back transaction does not undo a preparation), and a
  /// new connection starts with none.
  private(set) var prepared: Set<String> = []
  /// How many batches failed because the server had forgotten (or already
  /// had) what this session thought it had prepared.
  private(set) var preparationsLost = 0
  /// The names the last batch prepared, whether or not it failed after.
  private var preparedByLastBatch: Set<String> = []
  /// Readable once the owner stops: every wait then gives up.
  private let stop: WakePipe?

  /// Connects with `conninfo` (libpq's `key=value` string or URI; several
  /// hosts are tried in turn, as libpq does), adding the client-side
  /// timeouts of `timeouts` and `applicationName` where neither the
  /// conninfo nor libpq's environment sets them. `preparesStatements`
  /// false sends every statement unnamed (see ``PreparedSQL``): for a
  /// transport that does not keep a session's prepared statements.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` for a conninfo
  ///   libpq cannot parse; ``RelayError/postgres(call:message:sqlState:detail:hint:)``
  ///   naming `PQconnectPoll` when no server can be reached or all refuse;
  ///   ``RelayError/timedOut(call:seconds:)`` past the connect timeout per
  ///   host; ``RelayError/stopped`` when `stop` is rung meanwhile.
  init(
    conninfo: String, timeouts: RelayTimeouts = RelayTimeouts(), applicationName: String? = nil,
    stop: WakePipe? = nil, preparesStatements: Bool = true
  ) throws {
    self.timeouts = timeouts
    self.stop = stop
    self.preparesStatements = preparesStatements
    let (parameters, hostCount) = try Self.parameters(conninfo, timeouts: timeouts, applicationName: applicationName)
    let started = Self.withCStringArrays(parameters) { keywords, values in
      PQconnectStartParams(keywords, values, 0)
    }
    guard let started else {
      throw RelayError.postgres(
        call: "PQconnectStartParams", message: "out of memory", sqlState: nil, detail: nil, hint: nil)
    }
    connection = started
    // libpq leaves connect_timeout to the caller in asynchronous mode: it
    // applies per host, and every host of the conninfo may be tried.
    let deadline = ContinuousClock.now + timeouts.connect * hostCount + .milliseconds(500)
    // Every stored property is set: a throw from here on runs deinit,
    // which closes the connection.
    guard PQstatus(connection) != CONNECTION_BAD else { throw failure("PQconnectStartParams") }
    var polling = PGRES_POLLING_WRITING
    while polling != PGRES_POLLING_OK {
      switch polling {
      case PGRES_POLLING_READING: try wait(for: Int16(POLLIN), until: deadline, call: "PQconnectPoll")
      case PGRES_POLLING_WRITING: try wait(for: Int16(POLLOUT), until: deadline, call: "PQconnectPoll")
      default: throw failure("PQconnectPoll")
      }
      polling = PQconnectPoll(connection)
    }
    guard PQsetnonblocking(connection, 1) == 0 else { throw failure("PQsetnonblocking") }
    guard PQenterPipelineMode(connection) == 1 else { throw failure("PQenterPipelineMode") }
  }

  /// Checks that libpq can parse `conninfo`, without connecting.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` with libpq's reason
  ///   (what it quotes elided when the string may hold a password).
  static func validate(conninfo: String) throws {
    _ = try parameters(conninfo, timeouts: RelayTimeouts(), applicationName: nil)
  }

  /// Closes the connection without waiting: libpq sends the server a
  /// goodbye if the socket takes it at once; a server that never gets it
  /// drops the session by its own timeouts.
  deinit { PQfinish(connection) }

  /// Whether libpq still considers the connection good.
  var isConnected: Bool { PQstatus(connection) == CONNECTION_OK }

  /// The connection's socket, for `poll`.
  var socket: Int32 { PQsocket(connection) }

  /// The backend's process ID (to terminate it in tests).
  var backendProcessID: Int32 { PQbackendPID(connection) }

  /// The server's version as a number (150004 for 15.4).
  var serverVersion: Int32 { PQserverVersion(connection) }

  /// Whether a transaction is open (or failed and not rolled back yet).
  var isInTransaction: Bool {
    let status = PQtransactionStatus(connection)
    return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
  }

  /// Runs one statement and returns its rows, to decode.
  ///
  /// - Throws: ``RelayError/postgres(call:message:sqlState:detail:hint:)``
  ///   with the server's SQLSTATE; ``RelayError/timedOut(call:seconds:)``;
  ///   ``RelayError/stopped``.
  @discardableResult
  func query(_ sql: String, _ parameters: [any PostgresBindable] = []) throws -> PostgresRows {
    try query([Statement(sql, parameters)])[0]
  }

  /// ``query(_:_:)``'s rows as text (nil for NULL), for checks and tests.
  @discardableResult
  func execute(_ sql: String, _ parameters: [any PostgresBindable] = []) throws -> [[String?]] {
    try query(sql, parameters).texts
  }

  /// A batch's rows as text (nil for NULL), for checks and tests.
  func run(_ statements: [Statement]) throws -> [[[String?]]] {
    try query(statements).map(\.texts)
  }

  /// Sends `statements` in one pipeline, one round trip, and returns each
  /// one's rows. Outside an explicit transaction they form one implicit
  /// transaction: a failure rolls back every one of them.
  ///
  /// A statement with a prepared name that this session has not prepared
  /// yet is prepared in the same pipeline, just before it. When the server
  /// turns out not to hold what this session prepared (`DEALLOCATE ALL`,
  /// `DISCARD ALL`, a pooler that gave this client another backend), the
  /// batch is sent again, preparing anew, if it began outside any
  /// transaction, so that nothing of it took effect (a transaction it
  /// opened is rolled back first); and once more unnamed, preparing
  /// nothing from then on, if the server forgets them again at once. In a
  /// transaction begun before the batch the error is thrown (that
  /// transaction is aborted), and the next batch prepares anew.
  ///
  /// - Throws: the first failing statement's error (the ones after it are
  ///   not run); ``RelayError/timedOut(call:seconds:)`` when the server
  ///   does not answer within the statement timeout plus the dead-link
  ///   time (the connection is then unusable); ``RelayError/stopped``.
  func query(_ statements: [Statement]) throws -> [PostgresRows] {
    var attempts = 0
    while true {
      let standsAlone = PQtransactionStatus(connection) == PQTRANS_IDLE
      let usesPrepared = preparesStatements && statements.contains { $0.preparedName != nil }
      do {
        return try send(statements)
      } catch let error where usesPrepared && Self.forgotPrepared(error) {
        // The server holds other prepared statements than this session
        // thinks. Forgotten: it holds at most those the failed batch
        // prepared (a rollback does not undo them); the others are
        // prepared anew. One found prepared already, ``send(_:)`` counted.
        if !Self.duplicatePrepared(error) { prepared = preparedByLastBatch }
        preparationsLost += 1
        attempts += 1
        // Forgotten again right after they were prepared anew, or time
        // after time: whatever lies between does not keep them.
        if attempts >= 2 || preparationsLost >= Self.preparationsLostTolerated { preparesStatements = false }
        // Begun outside any transaction, the batch did nothing that stays
        // (the transaction it opened, if any, rolled back first), unless
        // it committed a part of itself.
        let status = PQtransactionStatus(connection)
        guard standsAlone, status == PQTRANS_IDLE || status == PQTRANS_INERROR, isConnected, attempts <= 2,
          !statements.contains(where: \.commits)
        else { throw error }
        if status == PQTRANS_INERROR { _ = try send([Statement("ROLLBACK")]) }
      }
    }
  }

  /// How many times a session may find its prepared statements forgotten
  /// before it stops preparing any.
  static let preparationsLostTolerated = 3

  /// `invalid_sql_statement_name` (a prepared statement the server does
  /// not hold) or `duplicate_prepared_statement` (one it holds already).
  private static func forgotPrepared(_ error: any Error) -> Bool {
    switch error {
    case SQLState.invalidSQLStatementName: true
    default: duplicatePrepared(error)
    }
  }

  private static func duplicatePrepared(_ error: any Error) -> Bool {
    switch error {
    case SQLState.duplicatePreparedStatement: true
    default: false
    }
  }

  /// What a pipeline answers, in the order it was sent: a statement, or
  /// the preparation of one (by name).
  private enum Answer {
    case statement
    case preparation(String)
  }

  /// ``query(_:)``'s one round trip.
  private func send(_ statements: [Statement]) throws -> [PostgresRows] {
    let deadline = ContinuousClock.now + timeouts.statement + timeouts.deadLink
    var answers: [Answer] = []
    answers.reserveCapacity(statements.count)
    var preparing: Set<String> = []
    preparedByLastBatch = []
    for statement in statements {
      let sent: Int32
      if let name = statement.preparedName, preparesStatements {
        if !prepared.contains(name), preparing.insert(name).inserted {
          guard PQsendPrepare(connection, name, statement.sql, 0, nil) == 1 else { throw failure("PQsendPrepare") }
          answers.append(.preparation(name))
        }
        sent = try Self.withCStrings(statement.parameters) { pointers in
          PQsendQueryPrepared(connection, name, Int32(pointers.count), pointers, nil, nil, 0)
        }
        guard sent == 1 else { throw failure("PQsendQueryPrepared") }
      } else {
        sent = try Self.withCStrings(statement.parameters) { pointers in
          PQsendQueryParams(connection, statement.sql, Int32(pointers.count), nil, pointers, nil, nil, 0)
        }
        guard sent == 1 else { throw failure("PQsendQueryParams") }
      }
      answers.append(.statement)
    }
    guard PQpipelineSync(connection) == 1 else { throw failure("PQpipelineSync") }
    roundTrips += 1
    try flush(until: deadline)
    var results: [PostgresRows] = []
    results.reserveCapacity(statements.count)
    var firstError: RelayError?
    for answer in answers {
      var rows = PostgresRows()
      while let result = try nextResult(until: deadline) {
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_TUPLES_OK: rows = Self.rows(of: result)
        case PGRES_COMMAND_OK:
          if case .preparation(let name) = answer {
            prepared.insert(name)
            preparedByLastBatch.insert(name)
          }
        case PGRES_PIPELINE_ABORTED: break
        default:
          let error = serverError(result)
          // Prepared already (by this session, or by a pooler's other
          // client: the name says the text is the same), it is usable.
          if case .preparation(let name) = answer, Self.duplicatePrepared(error) { prepared.insert(name) }
          firstError = firstError ?? error
        }
      }
      if case .statement = answer { results.append(rows) }
    }
    // The synchronisation point closes the batch; nothing follows it.
    var empty = 0
    while true {
      guard let result = try nextResult(until: deadline) else {
        // libpq has nothing more to give and no sync came: the connection
        // is broken (or libpq lost track); either way it cannot go on.
        empty += 1
        guard isConnected, empty < 2 else { throw firstError ?? failure("PQgetResult") }
        continue
      }
      empty = 0
      let status = PQresultStatus(result)
      if status != PGRES_PIPELINE_SYNC && status != PGRES_PIPELINE_ABORTED && status != PGRES_COMMAND_OK {
        firstError = firstError ?? serverError(result)
      }
      PQclear(result)
      if status == PGRES_PIPELINE_SYNC { break }
    }
    if let firstError { throw firstError }
    return results
  }

  /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it
  /// throws (quietly: see ``rollBackQuietly()``).
  func transaction<T>(_ body: () throws -> T) throws -> T {
    try execute("BEGIN")
    do {
      let result = try body()
      try execute("COMMIT")
      return result
    } catch {
      rollBackQuietly()
      throw error
    }
  }

  /// Rolls back an open transaction, if any, ignoring failures: a broken
  /// connection is dropped by its owner, and the server rolls back then.
  func rollBackQuietly() {
    guard isConnected, isInTransaction else { return }
    _ = try? execute("ROLLBACK")
  }

  /// Reads what the server sent and returns the notifications received
  /// (channel and payload), without blocking.
  ///
  /// - Throws: naming `PQconsumeInput` when the connection broke.
  func notifications() throws -> [(channel: String, payload: String)] {
    guard PQconsumeInput(connection) == 1 else { throw failure("PQconsumeInput") }
    var received: [(String, String)] = []
    while let notify = PQnotifies(connection) {
      received.append((String(cString: notify.pointee.relname), String(cString: notify.pointee.extra)))
      PQfreemem(notify)
    }
    return received
  }

  // MARK: Waiting

  /// Sends what libpq holds back; reads meanwhile, so a server that
  /// answers while the client still sends never deadlocks the two.
  private func flush(until deadline: ContinuousClock.Instant) throws {
    while true {
      let flushed = PQflush(connection)
      if flushed == 0 { return }
      guard flushed > 0 else { throw failure("PQflush") }
      try wait(for: Int16(POLLIN | POLLOUT), until: deadline, call: "PQflush")
      guard PQconsumeInput(connection) == 1 else { throw failure("PQconsumeInput") }
    }
  }

  /// The next result of the pipeline (nil ends one statement's results),
  /// waiting until libpq can give it without blocking.
  private func nextResult(until deadline: ContinuousClock.Instant) throws -> OpaquePointer? {
    while PQisBusy(connection) == 1 {
      try wait(for: Int16(POLLIN), until: deadline, call: "PQgetResult")
      guard PQconsumeInput(connection) == 1 else { throw failure("PQconsumeInput") }
    }
    return PQgetResult(connection)
  }

  /// Waits until the socket is ready for `events`, the deadline passes
  /// (thrown as a timeout), or the stop signal rings (thrown as stopped).
  private func wait(for events: Int16, until deadline: ContinuousClock.Instant, call: String) throws {
    while true {
      let remaining = deadline - ContinuousClock.now
      guard remaining > .zero else {
        throw RelayError.timedOut(call: call, seconds: (timeouts.statement + timeouts.deadLink).inSeconds)
      }
      var fds = [pollfd(fd: PQsocket(connection), events: events, revents: 0)]
      let stopEnd = stop?.readEnd ?? -1
      if stopEnd >= 0 { fds.append(pollfd(fd: stopEnd, events: Int16(POLLIN), revents: 0)) }
      let ready = poll(&fds, nfds_t(fds.count), Int32(clamping: remaining.inMilliseconds))
      if ready < 0 {
        guard errno == EINTR else { throw RelayError.system(SystemCallError(call: "poll", path: nil, errno: errno)) }
        continue
      }
      if fds.count > 1, fds[1].revents != 0 { throw RelayError.stopped }
      if ready > 0, fds[0].revents != 0 { return }
    }
  }

  // MARK: Errors and values

  private func failure(_ call: String) -> RelayError {
    RelayError.postgres(
      call: call, message: String(cString: PQerrorMessage(connection)), sqlState: nil, detail: nil, hint: nil)
  }

  /// The server's error: its message as libpq words it, and its SQLSTATE,
  /// DETAIL and HINT fields.
  private func serverError(_ result: OpaquePointer) -> RelayError {
    let message = String(cString: PQresultErrorMessage(result))
    func field(_ code: Int32) -> String? { PQresultErrorField(result, code).map { String(cString: $0) } }
    return RelayError.postgres(
      call: "PQgetResult", message: message.isEmpty ? String(cString: PQerrorMessage(connection)) : message,
      sqlState: field(GS_PG_DIAG_SQLSTATE).map(SQLState.init(rawValue:)), detail: field(GS_PG_DIAG_MESSAGE_DETAIL),
      hint: field(GS_PG_DIAG_MESSAGE_HINT))
  }

  /// A result's column names (read once, shared by its rows) and rows.
  private static func rows(of result: OpaquePointer) -> PostgresRows {
    let rowCount = PQntuples(result), columnCount = PQnfields(result)
    let columns = (0..<columnCount).map { PQfname(result, $0).map { String(cString: $0) } ?? "?" }
    var rows: [[String?]] = []
    rows.reserveCapacity(Int(rowCount))
    for row in 0..<rowCount {
      var values: [String?] = []
      values.reserveCapacity(Int(columnCount))
      for column in 0..<columnCount {
        values.append(PQgetisnull(result, row, column) == 1 ? nil : String(cString: PQgetvalue(result, row, column)))
      }
      rows.append(values)
    }
    return PostgresRows(columns: columns, texts: rows)
  }

  /// The connection's parameters: the conninfo's own, then the defaults
  /// it (or libpq's environment) leaves unset; and how many hosts it names.
  /// What neither sets, `PQconnectStartParams` takes from libpq's
  /// environment (`PGHOST`, `PGSSLMODE`...) and service file, and a missing
  /// password from the password file (`PGPASSFILE`, else `~/.pgpass`): an
  /// empty conninfo leaves everything to them.
  private static func parameters(
    _ conninfo: String, timeouts: RelayTimeouts, applicationName: String?
  ) throws -> ([(String, String)], Int) {
    let (given, fromEnvironment) = try ConnectionString.options(conninfo)
    let set = Set(given.map(\.keyword)).union(fromEnvironment)
    var defaults = timeouts.clientParameters
    if let applicationName { defaults.append(("application_name", applicationName)) }
    // Hosts may come from the environment too (an empty conninfo).
    let hosts = given.first { $0.keyword == "host" || $0.keyword == "hostaddr" }?.value
      ?? (getenv("PGHOST") ?? getenv("PGHOSTADDR")).map { String(cString: $0) } ?? ""
    let hostCount = max(1, hosts.split(separator: ",").count)
    return (given.map { ($0.keyword, $0.value) } + defaults.filter { !set.contains($0.0) }, hostCount)
  }

  private static func withCStringArrays<R>(
    _ pairs: [(String, String)], _ body: (UnsafePointer<UnsafePointer<CChar>?>, UnsafePointer<UnsafePointer<CChar>?>) -> R
  ) -> R {
    let keywords = pairs.map { strdup($0.0) } + [nil]
    let values = pairs.map { strdup($0.1) } + [nil]
    defer {
      keywords.forEach { free($0) }
      values.forEach { free($0) }
    }
    let constKeywords = keywords.map { $0.map { UnsafePointer($0) } }
    let constValues = values.map { $0.map { UnsafePointer($0) } }
    return constKeywords.withUnsafeBufferPointer { keywordBuffer in
      constValues.withUnsafeBufferPointer { valueBuffer in
        body(keywordBuffer.baseAddress!, valueBuffer.baseAddress!)
      }
    }
  }

  private static func withCStrings<R>(
    _ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R
  ) throws -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = []
    pointers.reserveCapacity(strings.count)
    defer { for pointer in pointers { free(pointer) } }
    for string in strings {
      guard let string else {
        pointers.append(nil)
        continue
      }
      guard let copy = strdup(string) else {
        throw RelayError.system(SystemCallError(call: "strdup", path: nil, errno: errno))
      }
      pointers.append(copy)
    }
    return body(pointers.map { $0.map { UnsafePointer($0) } })
  }
}
