import CGroupSync
import Foundation
import GRDB
import GroupSync

/// The rows the benchmark writes, and the writers that run them: raw SQLite
/// (C calls), plain GRDB (`DatabasePool.write`) and GroupSync
/// (`Store.write`).
///
/// All use WAL, synchronous=NORMAL and a 10 s busy timeout (the store's
/// pragmas) and IMMEDIATE transactions, each on a file of its own. GroupSync
/// runs each baseline's own statement code, so that each comparison differs
/// only by what GroupSync adds (capture, the history row, the change set, the
/// fan-out): one C statement stepped once per row against raw SQLite, GRDB's
/// cached statement executed with arguments against plain GRDB.
enum BenchWorkload {
  static let schema = "CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, a INTEGER NOT NULL, b TEXT NOT NULL)"
  static let insertSQL = "INSERT INTO items(a, b) VALUES (?, ?)"
  static let updateSQL = "UPDATE items SET a = a + 1, b = ? WHERE id = ?"
  /// Rows an update workload cycles through.
  static let updateRows = 1000

  enum Operation: String, Codable, CaseIterable, Sendable {
    case insert, update
  }
}

/// A prepared statement stepped once per row, binding a fixed 32-byte text
/// without copying it.
final class BenchStatement {
  let handle: OpaquePointer
  private let text: UnsafeMutablePointer<CChar>
  private let operation: BenchWorkload.Operation

  init(connection: OpaquePointer, operation: BenchWorkload.Operation) throws {
    self.operation = operation
    var statement: OpaquePointer?
    let sql = operation == .insert ? BenchWorkload.insertSQL : BenchWorkload.updateSQL
    let code = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
    guard code == SQLITE_OK, let statement else {
      throw BenchError("prepare \(sql): \(String(cString: sqlite3_errmsg(connection)))")
    }
    handle = statement
    text = strdup("the quick brown fox jumps over t")!
  }

  deinit {
    sqlite3_finalize(handle)
    free(text)
  }

  /// Inserts one row, or updates row `row` (1...updateRows).
  @inline(__always)
  func step(_ row: Int64) throws {
    switch operation {
    case .insert:
      sqlite3_bind_int64(handle, 1, row)
      sqlite3_bind_text(handle, 2, text, 32, nil)
    case .update:
      sqlite3_bind_text(handle, 1, text, 32, nil)
      sqlite3_bind_int64(handle, 2, row)
    }
    let code = sqlite3_step(handle)
    sqlite3_reset(handle)
    guard code == SQLITE_DONE else { throw BenchError("step: SQLite error \(code)") }
  }
}

/// The rows a transaction writes: inserts of fresh rows, or updates that
/// cycle through rows 1...updateRows.
struct BenchRowCursor {
  var next: Int64 = 0
  mutating func take(_ operation: BenchWorkload.Operation) -> Int64 {
    next += 1
    return operation == .insert ? next : (next - 1) % Int64(BenchWorkload.updateRows) + 1
  }
}

/// Plain SQLite: no hooks, no sequence, no change set.
final class BenchPlainWriter {
  let connection: OpaquePointer
  private var statements: [BenchWorkload.Operation: BenchStatement] = [:]
  private var cursor = BenchRowCursor()

  init(path: String) throws {
    var handle: OpaquePointer?
    let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
    guard code == SQLITE_OK, let handle else { throw BenchError("cannot open \(path)") }
    connection = handle
    sqlite3_busy_timeout(handle, 10_000)
    try exec("PRAGMA journal_mode = WAL")
    try exec("PRAGMA synchronous = NORMAL")
    try exec(BenchWorkload.schema)
  }

  deinit {
    statements = [:]
    sqlite3_close_v2(connection)
  }

  func exec(_ sql: String) throws {
    let code = sqlite3_exec(connection, sql, nil, nil, nil)
    guard code == SQLITE_OK else { throw BenchError("\(sql): \(String(cString: sqlite3_errmsg(connection)))") }
  }

  /// Inserts the rows updates will cycle through.
  func prepareUpdates() throws {
    try transaction(rows: BenchWorkload.updateRows, .insert)
  }

  /// One transaction of `rows` rows; returns its wall time in ns.
  @discardableResult
  func transaction(rows: Int, _ operation: BenchWorkload.Operation) throws -> Int64 {
    let statement = try statement(operation)
    let start = BenchClock.monotonic()
    try exec("BEGIN IMMEDIATE")
    for _ in 0..<rows { try statement.step(cursor.take(operation)) }
    try exec("COMMIT")
    return BenchClock.monotonic() - start
  }

  private func statement(_ operation: BenchWorkload.Operation) throws -> BenchStatement {
    if let statement = statements[operation] { return statement }
    let statement = try BenchStatement(connection: connection, operation: operation)
    statements[operation] = statement
    return statement
  }
}

/// The same writes through GroupSync's `Store.write`: the raw SQLite
/// writer's C statement, or with `grdbStatements` the plain GRDB writer's
/// cached statements.
final class BenchGroupWriter {
  let group: GroupFolder
  let grdbStatements: Bool
  private var statements: [BenchWorkload.Operation: BenchStatement] = [:]
  private var cursor = BenchRowCursor()

  /// Whether each transaction stamps its COMMIT time (for latency):
  /// `afterNextTransaction` adds a GRDB observer per transaction, which the
  /// plain writers do not pay, so the capture-overhead workload goes without.
  let stampsCommit: Bool

  init(path: String, grdbStatements: Bool = false, stampsCommit: Bool = true) throws {
    group = try GroupFolder(path: path)
    self.grdbStatements = grdbStatements
    self.stampsCommit = stampsCommit
    try group.store.write { try $0.execute(sql: BenchWorkload.schema) }
  }

  deinit { statements = [:] }

  func prepareUpdates() throws {
    try transaction(rows: BenchWorkload.updateRows, .insert)
  }

  /// One transaction of `rows` rows; returns its wall time in ns.
  @discardableResult
  func transaction(rows: Int, _ operation: BenchWorkload.Operation) throws -> Int64 {
    try commit(rows: rows, operation).duration
  }

  /// One transaction: its wall time (ns), sequence, commit time
  /// (CLOCK_REALTIME, stamped when GRDB saw COMMIT return), the
  /// rowid of its last row, and how long `write` ran after COMMIT returned
  /// (building the change set and publishing it), in ns; and the change
  /// set's own stamp, taken inside the transaction before COMMIT.
  func commit(rows: Int, _ operation: BenchWorkload.Operation) throws
    -> (duration: Int64, sequence: Int64, committedAt: Int64, lastRowID: Int64, afterCommit: Int64,
        commitRequestedAt: Int64)
  {
    let statement = try grdbStatements ? nil : self.statement(operation)
    let committed = BenchBox<Int64>(0)
    let start = BenchClock.monotonic()
    let (lastRowID, changeSet) = try group.store.writeAndReturnChangeSet { db in
      // Latency runs from COMMIT returned, as the floor's from its file
      // written: GRDB tells this right after the COMMIT statement executed.
      // (ChangeSet.committedAtNanoseconds is stamped before COMMIT.)
      if stampsCommit {
        db.afterNextTransaction(onCommit: { _ in committed.withLock { $0 = BenchClock.realtime() } })
      }
      var row: Int64 = 0
      if let statement {
        for _ in 0..<rows {
          row = cursor.take(operation)
          try statement.step(row)
        }
      } else {
        row = try BenchGRDBRows.write(db, rows: rows, operation, cursor: &cursor)
      }
      return operation == .insert ? sqlite3_last_insert_rowid(db.sqliteConnection) : row
    }
    let end = BenchClock.monotonic()
    let endRealtime = BenchClock.realtime()
    guard let changeSet else { throw BenchError("a benchmark transaction produced no change set") }
    let committedAt = committed.withLock { $0 }
    return (end - start, changeSet.sequence, committedAt, lastRowID, endRealtime - committedAt,
            changeSet.committedAtNanoseconds)
  }

  private func statement(_ operation: BenchWorkload.Operation) throws -> BenchStatement {
    if let statement = statements[operation] { return statement }
    // Prepared on the writer connection, where the transactions run.
    let statement = try group.store.pool.writeWithoutTransaction { db in
      try BenchStatement(connection: db.sqliteConnection!, operation: operation)
    }
    statements[operation] = statement
    return statement
  }
}

/// The workload's rows through GRDB's statement API, as a GRDB user writes
/// them: `db.cachedStatement(sql:)`, executed with arguments once per row.
enum BenchGRDBRows {
  /// The same 32 bytes `BenchStatement` binds.
  static let text = "the quick brown fox jumps over t"

  /// Writes `rows` rows; returns the last row's id.
  @inline(__always)
  static func write(_ db: Database, rows: Int, _ operation: BenchWorkload.Operation, cursor: inout BenchRowCursor) throws
    -> Int64
  {
    let statement = try db.cachedStatement(sql: operation == .insert ? BenchWorkload.insertSQL : BenchWorkload.updateSQL)
    var row: Int64 = 0
    for _ in 0..<rows {
      row = cursor.take(operation)
      switch operation {
      case .insert: try statement.execute(arguments: [row, text])
      case .update: try statement.execute(arguments: [text, row])
      }
    }
    return row
  }
}

/// Plain GRDB: a `DatabasePool` configured as the store configures its own
/// (busy timeout 10 s, synchronous=NORMAL), `pool.write` with GRDB's cached
/// statements; no GroupSync. What a GRDB user pays today.
final class BenchGRDBWriter {
  let pool: DatabasePool
  private var cursor = BenchRowCursor()

  /// With `observed`, one no-op transaction observer for the writer
  /// connection's life (see `BenchCapture.Mode.grdbObserved`).
  init(path: String, observed: Bool = false) throws {
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    configuration.prepareDatabase { db in
      if !db.configuration.readonly { try db.execute(sql: "PRAGMA synchronous = NORMAL") }
    }
    pool = try DatabasePool(path: path, configuration: configuration)
    try pool.write { try $0.execute(sql: BenchWorkload.schema) }
    if observed {
      pool.writeWithoutTransaction { $0.add(transactionObserver: BenchNoOpObserver(), extent: .databaseLifetime) }
    }
  }

  func prepareUpdates() throws {
    try transaction(rows: BenchWorkload.updateRows, .insert)
  }

  /// One transaction of `rows` rows; returns its wall time in ns.
  @discardableResult
  func transaction(rows: Int, _ operation: BenchWorkload.Operation) throws -> Int64 {
    let start = BenchClock.monotonic()
    try pool.write { db in _ = try BenchGRDBRows.write(db, rows: rows, operation, cursor: &cursor) }
    return BenchClock.monotonic() - start
  }
}

/// Observes nothing: GRDB still asks it before every statement and tells
/// it of every commit.
final class BenchNoOpObserver: TransactionObserver {
  func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
  func databaseDidChange(with event: DatabaseEvent) {}
  func databaseDidCommit(_ db: Database) {}
  func databaseDidRollback(_ db: Database) {}
}
