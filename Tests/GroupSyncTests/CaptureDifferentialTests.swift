import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

// The randomized differential test of the capture (issue 9): random schemas
// and random transactions (CaptureFuzzGenerator.swift); the ground truth is
// the whole store, read right before each transaction (on the writer
// connection, inside the transaction, before its statements) and right
// after it committed. A change set may over-report; it must never
// under-report, nor name a row in the wrong category.
//
// `make test` runs a short seeded form. `make fuzz-capture` runs a long one:
//   GROUPSYNC_FUZZ_SECONDS       how long (the long run is enabled by it)
//   GROUPSYNC_FUZZ_SEED          the first seed (else a random one, printed);
//                                seeds follow it one by one
//   GROUPSYNC_FUZZ_TRANSACTIONS  transactions per seed (300)
//   GROUPSYNC_FUZZ_OUT           where failures are written (a temp folder)
// A failure prints its seed and transaction, the violations, and a
// reproducer verified and minimized on a fresh store.

@Suite(.serialized, .timed)
struct CaptureDifferentialTests {
  @Test(arguments: [1, 2, 3] as [UInt64])
  func shortSeededRun(seed: UInt64) throws {
    var fuzzer = CaptureFuzzer(log: { _ in })
    // One thread, nothing for ThreadSanitizer to see: a quarter under it.
    let transactions = ProcessInfo.processInfo.environment["GROUPSYNC_SANITIZER"] == "thread" ? 50 : 200
    try fuzzer.run(seed: seed, transactions: transactions, deadline: nil)
    for failure in fuzzer.failures { Issue.record(Comment(rawValue: failure)) }
    #expect(fuzzer.stats.transactions == transactions)
    #expect(fuzzer.stats.changeSets > transactions / 2, "the generator commits changes: \(fuzzer.stats.summary)")
  }

  @Test(.enabled(if: CaptureFuzzer.environment("GROUPSYNC_FUZZ_SECONDS") != nil))
  func longRun() throws {
    let seconds = Double(CaptureFuzzer.environment("GROUPSYNC_FUZZ_SECONDS") ?? "") ?? 600
    let firstSeed = CaptureFuzzer.environment("GROUPSYNC_FUZZ_SEED").flatMap(UInt64.init)
      ?? UInt64.random(in: 1...999_999_999)
    let perSeed = CaptureFuzzer.environment("GROUPSYNC_FUZZ_TRANSACTIONS").flatMap(Int.init) ?? 300
    print("fuzz-capture: \(Int(seconds)) s, first seed \(firstSeed) (GROUPSYNC_FUZZ_SEED=\(firstSeed) replays), \(perSeed) transactions per seed")
    let deadline = Date().addingTimeInterval(seconds)
    var fuzzer = CaptureFuzzer(log: { print($0) })
    var seed = firstSeed
    var seeds = 0
    while Date() < deadline {
      let before = fuzzer.failures.count
      try fuzzer.run(seed: seed, transactions: perSeed, deadline: deadline)
      seeds += 1
      print("fuzz-capture: seed \(seed) done, \(fuzzer.failures.count - before) failure(s); \(fuzzer.stats.summary)")
      seed += 1
    }
    print("fuzz-capture: finished: \(seeds) seeds from \(firstSeed), \(fuzzer.failureCount) failing transaction(s)")
    print(fuzzer.stats.details)
    for failure in fuzzer.failures.prefix(20) { Issue.record(Comment(rawValue: failure)) }
    if fuzzer.failureCount > 20 { Issue.record("\(fuzzer.failureCount - 20) more failing transactions, not shown") }
  }

  /// The oracle is not vacuous: a change set that misses a row, names a
  /// row in the wrong category or misses a schema change fails it.
  @Test func theOracleCatchesUnderReports() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE t(id INTEGER PRIMARY KEY, v); CREATE TABLE w(k PRIMARY KEY, v) WITHOUT ROWID;
        INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'); INSERT INTO w VALUES ('k', 1);
        """)
    }
    var before: StoreImage?
    let (_, changeSet) = try group.store.writeAndReturnChangeSet { db in
      before = try StoreImage.read(db)
      try db.execute(sql: """
        UPDATE t SET v = 'z' WHERE id = 1; DELETE FROM t WHERE id = 2; INSERT INTO t VALUES (4, 'd');
        UPDATE w SET v = 2; ALTER TABLE t ADD COLUMN x
        """)
    }
    let after = try group.store.read { try StoreImage.read($0) }
    let real = try #require(changeSet)
    #expect(FuzzOracle.check(before: before!, after: after, changeSet: real).isEmpty)
    let none = FuzzOracle.check(before: before!, after: after, changeSet: nil).map(\.kind)
    #expect(Set(none) == [.unreportedInsert, .unreportedUpdate, .unreportedDelete, .withoutRowIDNotInvalidated, .schemaNotInvalidated])
    let swapped = ChangeSet(
      storeID: real.storeID, sequence: real.sequence, committedAtNanoseconds: 0, writerProcessID: 0,
      tables: ["t": TableChanges(inserted: [1, 9], updated: [2, 4], deleted: [3])], invalidatedTableNames: ["w"])
    let kinds = Set(FuzzOracle.check(before: before!, after: after, changeSet: swapped).map(\.kind))
    #expect(kinds.isSuperset(of: [.wrongCategory, .falseInsert, .falseUpdate, .falseDelete, .schemaNotInvalidated]))
  }

  /// Reproducers replay: a store dumped as SQL reads back the same.
  @Test func theDumpReplaysTheStore() throws {
    let folder = try TemporaryFolder()
    let group = try GroupFolder(path: folder.child("group"))
    try group.store.write { db in
      try db.execute(sql: """
        CREATE TABLE "q""uote"(id INTEGER PRIMARY KEY AUTOINCREMENT, "é" TEXT, g AS ("é" || '!'));
        CREATE TABLE "café"(rowid TEXT, v); CREATE TABLE "cafe\u{301}"(k PRIMARY KEY, v) WITHOUT ROWID;
        CREATE VIRTUAL TABLE ft USING fts5(a, b); CREATE VIRTUAL TABLE r USING rtree(id, x0, x1, +label);
        CREATE VIRTUAL TABLE ext USING fts5(v, content='café');
        INSERT INTO "q""uote"("é") VALUES ('x'), (X'00ff'), (1.5); DELETE FROM "q""uote" WHERE id = 3;
        INSERT INTO "café"(_rowid_, rowid, v) VALUES (7, 'shadowed', 'hello');
        INSERT INTO "cafe\u{301}" VALUES (1, NULL), ('k', -0.0);
        INSERT INTO ft(rowid, a, b) VALUES (3, 'a b', 'c'); INSERT INTO r VALUES (2, 0.5, 1.5, 'lbl');
        INSERT INTO ext(ext) VALUES ('rebuild');
        CREATE INDEX "i x" ON "café"(v); CREATE VIEW vv AS SELECT * FROM ft;
        CREATE TRIGGER trg AFTER INSERT ON "cafe\u{301}" BEGIN INSERT INTO "café"(v) VALUES (new.a); END;
        """)
    }
    let image = try group.store.read { try StoreImage.read($0) }
    let dump = FuzzDump.units(image).flatMap(\.statements)
    let copy = try GroupFolder(path: folder.child("copy"))
    try copy.store.write { db in for sql in dump { try db.execute(sql: sql) } }
    let replayed = try copy.store.read { try StoreImage.read($0) }
    #expect(replayed.sameContent(as: image), "\(dump.joined(separator: ";\n"))")
    #expect(replayed.schemaEntries.map(\.sql) == image.schemaEntries.map(\.sql))
    #expect(replayed.sequences.map(\.1) == [3])
  }
}

// MARK: - The ground truth

/// One value of a row, compared by storage class and bytes: `1` and `1.0`,
/// or NFC and NFD text, are different values to a reader.
enum Cell: Hashable {
  case null
  case integer(Int64)
  case real(UInt64)
  case text([UInt8])
  case blob([UInt8])

  init(_ value: DatabaseValue) {
    switch value.storage {
    case .null: self = .null
    case .int64(let v): self = .integer(v)
    case .double(let v): self = .real(v.bitPattern)
    case .string(let v): self = .text(Array(v.utf8))
    case .blob(let v): self = .blob(Array(v))
    }
  }

  /// The value as an SQL literal.
  var sql: String {
    switch self {
    case .null: return "NULL"
    case .integer(let v): return v == Int64.min ? "-9223372036854775808" : String(v)
    case .real(let bits):
      let v = Double(bitPattern: bits)
      if v.isNaN { return "NULL" }
      if v.isInfinite { return v < 0 ? "-1e999" : "1e999" }
      return "\(v)"
    case .text(let bytes): return FuzzSQL.literal(String(decoding: bytes, as: UTF8.self))
    case .blob(let bytes): return "X'" + bytes.map { String(format: "%02x", $0) }.joined() + "'"
    }
  }
}

/// One table a reader can query, as read at one moment.
struct TableImage {
  enum Kind { case rowID, withoutRowID, virtual }

  let name: String
  let kind: Kind
  /// `sqlite_schema.sql`, by bytes.
  let definition: [UInt8]
  /// The columns of `SELECT *`, and which of them are generated.
  var columns: [String] = []
  var generated: [Bool] = []
  /// Rowid and virtual tables: each row by rowid.
  var rows: [Int64: [Cell]] = [:]
  /// WITHOUT ROWID tables: the rows, with their counts.
  var bag: [[Cell]: Int] = [:]
  /// Why the table could not be read (an external-content index whose
  /// content table is gone).
  var unreadable: String?
  /// The spelling of the rowid used to read it.
  var rowIDAlias = "rowid"

  var sqlText: String { String(decoding: definition, as: UTF8.self) }
}

/// Every table of the store a reader can query, with all its rows, and the
/// schema: the ground truth before or after one transaction.
struct StoreImage {
  var tables: [[UInt8]: TableImage] = [:]
  /// Tables in `sqlite_schema` order.
  var order: [[UInt8]] = []
  var shadows: Set<[UInt8]> = []
  /// Indexes, views and triggers (`sqlite_schema` order), for dumps.
  var schemaEntries: [(type: String, name: String, sql: String)] = []
  /// `sqlite_sequence`.
  var sequences: [(String, Int64)] = []

  static func read(_ db: Database) throws -> StoreImage {
    var image = StoreImage()
    var definitions: [[UInt8]: [UInt8]] = [:]
    var tableOrder: [[UInt8]] = []
    for row in try Row.fetchAll(db.makeStatement(sql: "SELECT type, name, sql FROM main.sqlite_schema ORDER BY rowid")) {
      let type: String = row[0]
      let name: String = row[1]
      guard !FuzzSchema.isInternal(name), let sql = row[2] as String? else { continue }
      if type == "table" {
        definitions[Array(name.utf8)] = Array(sql.utf8)
        tableOrder.append(Array(name.utf8))
      } else {
        image.schemaEntries.append((type, name, sql))
      }
    }
    var kinds: [[UInt8]: (String, TableImage.Kind)] = [:]
    for row in try Row.fetchAll(db.makeStatement(sql: "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main'")) {
      let name: String = row[0]
      guard !FuzzSchema.isInternal(name) else { continue }
      switch row[1] as String {
      case "shadow": image.shadows.insert(Array(name.utf8))
      case "virtual": kinds[Array(name.utf8)] = (name, .virtual)
      case "table": kinds[Array(name.utf8)] = (name, (row[2] as Int64) != 0 ? .withoutRowID : .rowID)
      default: break
      }
    }
    for key in tableOrder {
      guard let (name, kind) = kinds[key] else { continue }
      var table = TableImage(name: name, kind: kind, definition: definitions[key] ?? [])
      do {
        let xinfo = try Row.fetchAll(
          db.makeStatement(sql: "SELECT name, hidden FROM pragma_table_xinfo(?, 'main')"), arguments: [name])
        let visible = xinfo.filter { ($0[1] as Int) != 1 }
        table.columns = visible.map { $0[0] }
        table.generated = visible.map { ($0[1] as Int) >= 2 }
        let q = FuzzSQL.quoted(name)
        if kind == .withoutRowID {
          for row in try Row.fetchAll(db.makeStatement(sql: "SELECT * FROM \(q)")) {
            table.bag[row.databaseValues.map(Cell.init), default: 0] += 1
          }
        } else {
          if kind == .rowID {
            guard let alias = ["_rowid_", "rowid", "oid"].first(where: { alias in
              !table.columns.contains { FuzzSQL.sameIdentifier($0, alias) }
            }) else { throw FuzzAbort.unreadable("every spelling of the rowid is a column") }
            table.rowIDAlias = alias
          }
          for row in try Row.fetchAll(db.makeStatement(sql: "SELECT \(table.rowIDAlias), * FROM \(q)")) {
            let values = row.databaseValues
            table.rows[Int64.fromDatabaseValue(values.first!)!] = values.dropFirst().map(Cell.init)
          }
        }
      } catch {
        table.unreadable = "\(error)"
      }
      image.tables[key] = table
      image.order.append(key)
    }
    if try Bool.fetchOne(db.makeStatement(sql: "SELECT count(*) FROM sqlite_schema WHERE name = 'sqlite_sequence'")) == true {
      image.sequences = try Row.fetchAll(db.makeStatement(sql: "SELECT name, seq FROM sqlite_sequence ORDER BY rowid"))
        .map { ($0[0], $0[1]) }
    }
    return image
  }

  /// Same tables, definitions and rows.
  func sameContent(as other: StoreImage) -> Bool {
    guard Set(tables.keys) == Set(other.tables.keys) else { return false }
    return tables.allSatisfy { key, table in
      let o = other.tables[key]!
      return table.definition == o.definition && table.rows == o.rows && table.bag == o.bag
        && (table.unreadable == nil) == (o.unreadable == nil)
    }
  }
}

/// One way a change set contradicts the store.
struct FuzzProblem: CustomStringConvertible {
  enum Kind: String {
    case schemaNotInvalidated = "schema change not invalidated"
    case unreportedInsert = "inserted row not reported"
    case unreportedUpdate = "updated row not reported"
    case unreportedDelete = "deleted row not reported"
    case wrongCategory = "row reported in the wrong category"
    case withoutRowIDNotInvalidated = "WITHOUT ROWID table changed, not invalidated"
    case falseInsert = "reported inserted, absent after"
    case falseUpdate = "reported updated, absent after"
    case falseDelete = "reported deleted, exists after"
    case rowsForWithoutRowID = "rowids named for a table without rowids"
    case shadowReported = "shadow table reported"
    case writeFailed = "the transaction failed to commit"
    case rollbackChangedStore = "a rolled back transaction changed the store"
  }

  let kind: Kind
  let table: [UInt8]
  let detail: String

  var description: String {
    "\(kind.rawValue): \(FuzzSQL.quoted(String(decoding: table, as: UTF8.self))) \(detail)"
  }
}

enum FuzzOracle {
  /// Every way `changeSet` under-reports or mis-reports what changed from
  /// `before` to `after`. Table names are compared by their bytes.
  static func check(before: StoreImage, after: StoreImage, changeSet: ChangeSet?) -> [FuzzProblem] {
    var named: [[UInt8]: TableChanges] = [:]
    for (table, changes) in changeSet?.tables ?? [:] { named[Array(table.name.utf8), default: TableChanges()].merge(changes) }
    let invalidated = Set((changeSet?.invalidatedTableNames ?? []).map { Array($0.name.utf8) })
    var problems: [FuzzProblem] = []
    let keys = Set(before.tables.keys).union(after.tables.keys).sorted { $0.lexicographicallyPrecedes($1) }
    for key in keys {
      let old = before.tables[key], new = after.tables[key]
      let isInvalidated = invalidated.contains(key)
      func problem(_ kind: FuzzProblem.Kind, _ detail: String) { problems.append(FuzzProblem(kind: kind, table: key, detail: detail)) }
      if let old, !isInvalidated {
        if let new, new.definition != old.definition {
          problem(.schemaNotInvalidated, "changed from `\(old.sqlText)` to `\(new.sqlText)`")
        } else if new == nil {
          problem(.schemaNotInvalidated, "dropped or renamed away (it had \(old.rows.count + old.bag.count) rows)")
        }
      }
      if old?.unreadable != nil || new?.unreadable != nil { continue }
      if old?.kind == .withoutRowID || new?.kind == .withoutRowID {
        if (old?.bag ?? [:]) != (new?.bag ?? [:]) && !isInvalidated {
          problem(.withoutRowIDNotInvalidated, "\(old?.bag.count ?? 0) rows before, \(new?.bag.count ?? 0) after, differing")
        }
        if let changes = named[key], old?.kind != .rowID && old?.kind != .virtual && new?.kind != .rowID && new?.kind != .virtual {
          problem(.rowsForWithoutRowID, "\(changes)")
        }
        continue
      }
      let rowsBefore = old?.rows ?? [:], rowsAfter = new?.rows ?? [:]
      let changes = named[key] ?? TableChanges()
      let inserted = Set(changes.inserted), updated = Set(changes.updated), deleted = Set(changes.deleted)
      func reported(_ rowID: Int64) -> String {
        let categories = [(inserted, "inserted"), (updated, "updated"), (deleted, "deleted")].filter { $0.0.contains(rowID) }
        return categories.isEmpty ? "not named" : "named " + categories.map(\.1).joined(separator: "+")
      }
      if !isInvalidated {
        for rowID in Set(rowsBefore.keys).union(rowsAfter.keys).sorted() {
          let b = rowsBefore[rowID], a = rowsAfter[rowID]
          if b == nil, let a, !inserted.contains(rowID) {
            let kind: FuzzProblem.Kind = updated.contains(rowID) || deleted.contains(rowID) ? .wrongCategory : .unreportedInsert
            problem(kind, "row \(rowID) inserted \(row(a)), \(reported(rowID))\(old == nil ? " (a table new in the transaction)" : "")")
          } else if let b, a == nil, !deleted.contains(rowID) {
            problem(inserted.contains(rowID) || updated.contains(rowID) ? .wrongCategory : .unreportedDelete,
              "row \(rowID) deleted (was \(row(b))), \(reported(rowID))")
          } else if let b, let a, a != b, !updated.contains(rowID) {
            problem(inserted.contains(rowID) || deleted.contains(rowID) ? .wrongCategory : .unreportedUpdate,
              "row \(rowID) updated \(row(b)) -> \(row(a)), \(reported(rowID))")
          }
        }
      }
      for rowID in changes.inserted.sorted() {
        if rowsAfter[rowID] == nil { problem(.falseInsert, "row \(rowID) reported inserted, absent after") }
        else if rowsBefore[rowID] != nil { problem(.wrongCategory, "row \(rowID) reported inserted, existed before") }
      }
      for rowID in changes.updated.sorted() {
        if rowsAfter[rowID] == nil { problem(.falseUpdate, "row \(rowID) reported updated, absent after") }
        else if rowsBefore[rowID] == nil && old != nil { problem(.wrongCategory, "row \(rowID) reported updated, absent before") }
      }
      for rowID in changes.deleted.sorted() where rowsAfter[rowID] != nil {
        problem(.falseDelete, "row \(rowID) reported deleted, exists after \(row(rowsAfter[rowID]!))")
      }
    }
    for key in named.keys where before.shadows.contains(key) || after.shadows.contains(key) {
      problems.append(FuzzProblem(kind: .shadowReported, table: key, detail: "\(named[key]!)"))
    }
    return problems
  }

  static func row(_ cells: [Cell]) -> String { "(" + cells.map(\.sql).joined(separator: ", ") + ")" }
}

extension TableChanges {
  fileprivate mutating func merge(_ other: TableChanges) {
    inserted += other.inserted
    updated += other.updated
    deleted += other.deleted
  }
}

enum FuzzAbort: Error {
  /// The generator asked for the transaction to roll back.
  case rollback
  /// A statement ended the transaction (`OR ROLLBACK`, `RAISE(ROLLBACK)`).
  case transactionEnded
  case unreadable(String)
}

// MARK: - Reproducers

/// A store image as SQL statements that rebuild it, in units that can be
/// left out one by one when a reproducer is minimized.
enum FuzzDump {
  struct Unit {
    let label: String
    let statements: [String]
  }

  static func units(_ image: StoreImage) -> [Unit] {
    var tables: [Unit] = []
    var late: [Unit] = []  // external-content indexes, rebuilt once their content is in
    for key in image.order {
      guard let table = image.tables[key] else { continue }
      let q = FuzzSQL.quoted(table.name)
      var statements = [table.sqlText]
      let insertable = table.columns.indices.filter { !table.generated[$0] }
      let columnList = insertable.map { FuzzSQL.quoted(table.columns[$0]) }
      var tuples: [String] = []
      let sql = table.sqlText.lowercased()
      switch table.kind {
      case .withoutRowID:
        for (row, count) in table.bag.sorted(by: { FuzzOracle.row($0.key) < FuzzOracle.row($1.key) }) {
          for _ in 0..<count { tuples.append("(" + insertable.map { row[$0].sql }.joined(separator: ", ") + ")") }
        }
        if !tuples.isEmpty { statements += batches("INSERT INTO \(q)(\(columnList.joined(separator: ", "))) VALUES ", tuples) }
      case .virtual where sql.contains("content='") && !sql.contains("content=''"):
        late.append(Unit(label: "virtual table \(q)", statements: [table.sqlText, "INSERT INTO \(q)(\(q)) VALUES('rebuild')"]))
        continue
      case .virtual where sql.contains("using rtree"):
        for (_, row) in table.rows.sorted(by: { $0.key < $1.key }) {
          tuples.append("(" + row.map(\.sql).joined(separator: ", ") + ")")
        }
        if !tuples.isEmpty { statements += batches("INSERT INTO \(q) VALUES ", tuples) }
      default:
        let alias = table.kind == .virtual ? "rowid" : table.rowIDAlias
        for (rowID, row) in table.rows.sorted(by: { $0.key < $1.key }) {
          tuples.append("(" + ([String(rowID)] + insertable.map { row[$0].sql }).joined(separator: ", ") + ")")
        }
        if !tuples.isEmpty {
          statements += batches("INSERT INTO \(q)(\(([alias] + columnList).joined(separator: ", "))) VALUES ", tuples)
        }
      }
      for (name, seq) in image.sequences where name.utf8.elementsEqual(table.name.utf8) {
        statements.append("DELETE FROM sqlite_sequence WHERE name = \(FuzzSQL.literal(name))")
        statements.append("INSERT INTO sqlite_sequence(name, seq) VALUES (\(FuzzSQL.literal(name)), \(seq))")
      }
      tables.append(Unit(label: "table \(q)", statements: statements))
    }
    // Indexes and views, then triggers, which must not fire while rows go in.
    let entries = image.schemaEntries.filter { $0.type != "trigger" } + image.schemaEntries.filter { $0.type == "trigger" }
    return [Unit(label: "deferred foreign keys", statements: ["PRAGMA defer_foreign_keys = ON"])] + tables + late
      + entries.map { Unit(label: "\($0.type) \(FuzzSQL.quoted($0.name))", statements: [$0.sql]) }
  }

  private static func batches(_ prefix: String, _ tuples: [String]) -> [String] {
    stride(from: 0, to: tuples.count, by: 40).map { prefix + tuples[$0..<min($0 + 40, tuples.count)].joined(separator: ", ") }
  }
}

// MARK: - The runner

/// Counts of what the generator made the store do.
struct FuzzStats {
  var transactions = 0
  var changeSets = 0
  var rolledBack = 0
  var statements = 0
  var failedStatements = 0
  var rowsNamed = 0
  var invalidations = 0
  var tablesChecked = 0
  var unreadableTables = 0
  var kinds: [String: (run: Int, failed: Int)] = [:]

  var summary: String {
    "\(transactions) transactions (\(changeSets) change sets, \(rolledBack) rolled back), \(statements) statements "
      + "(\(failedStatements) failed, caught), \(rowsNamed) rows named, \(invalidations) tables invalidated, "
      + "\(tablesChecked) table checks"
  }

  var details: String {
    "statements by kind (run / failed):\n"
      + kinds.sorted { $0.key < $1.key }.map { "  \($0.key): \($0.value.run) / \($0.value.failed)" }.joined(separator: "\n")
  }

  mutating func count(_ sql: String, failed: Bool) {
    statements += 1
    if failed { failedStatements += 1 }
    let kind = Self.kind(sql)
    kinds[kind, default: (0, 0)].run += 1
    if failed { kinds[kind, default: (0, 0)].failed += 1 }
  }

  /// A label of a statement, for the coverage counts.
  static func kind(_ sql: String) -> String {
    let words = sql.split(separator: " ", maxSplits: 6).map { $0.uppercased() } + ["", "", ""]
    func has(_ text: String) -> Bool { sql.range(of: text, options: .caseInsensitive) != nil }
    switch words.first ?? "" {
    case "CREATE":
      if has("VIRTUAL TABLE") { return "create virtual " + (has("rtree") ? "rtree" : has("fts4") ? "fts4" : has("content=''") || has("content=\"\"") ? "fts contentless" : has("content='") ? "fts external" : "fts5") }
      if has(" AS SELECT") && words[1] == "TABLE" { return "create table as select" }
      if words[1] == "TABLE" { return has("WITHOUT ROWID") ? "create table without rowid" : has("INTEGER PRIMARY KEY,") || has("INTEGER PRIMARY KEY AUTO") || has("INTEGER PRIMARY KEY ON") ? "create table integer primary key" : "create table rowid" }
      if words[1] == "TRIGGER" { return has("INSTEAD OF") ? "create trigger instead of" : "create trigger" }
      return "create " + words[1].lowercased()
    case "ALTER":
      return has(" RENAME TO ") ? "alter rename table" : has(" RENAME COLUMN ") ? "alter rename column"
        : has(" ADD COLUMN ") ? "alter add column" : "alter drop column"
    case "INSERT", "REPLACE":
      if has(" VALUES('delete") || has(" VALUES('rebuild") || has(" VALUES('optimize") || has(" VALUES('delete-all") {
        return "fts command"
      }
      if has(" ON CONFLICT") { return "upsert" }
      if has("WITH RECURSIVE") { return "insert bulk" }
      let verb = words[0] == "REPLACE" ? "replace" : words[1] == "OR" ? "insert or " + words[2].lowercased() : "insert"
      return verb + (has(" SELECT ") ? " select" : "")
    case "UPDATE":
      if has(" FROM ") { return "update from" }
      return words[1] == "OR" ? "update or " + words[2].lowercased() : "update"
    case "ROLLBACK": return "rollback to"
    default: return words.prefix(2).joined(separator: " ").lowercased()
    }
  }
}

/// Runs seeds of random transactions against fresh stores and checks each
/// change set against the ground truth.
struct CaptureFuzzer {
  var stats = FuzzStats()
  /// A report per failing transaction (capped; see failureCount).
  var failures: [String] = []
  var failureCount = 0
  let log: (String) -> Void
  var options = FuzzOptions()

  init(log: @escaping (String) -> Void) { self.log = log }

  static func environment(_ name: String) -> String? {
    ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
  }

  /// The store options a seed runs with: some seeds get a small row budget,
  /// so that tables past it are invalidated instead of listed.
  static func storeOptions(seed: UInt64) -> StoreOptions {
    var options = StoreOptions()
    if seed % 4 == 3 { options.rowBudget = Int(seed % 37) + 8 }
    return options
  }

  mutating func run(seed: UInt64, transactions: Int, deadline: Date?) throws {
    let folder = try TemporaryFolder("fuzz\(seed)")
    let storeOptions = Self.storeOptions(seed: seed)
    let group = try GroupFolder(path: folder.child("group"), options: storeOptions)
    defer { group.store.close() }
    var generator = CaptureFuzzGenerator(seed: seed, options: options)
    for index in 1...transactions {
      if let deadline, Date() >= deadline { break }
      let count = generator.random.weighted([
        (index == 1 ? 100 : 25, generator.random.int(index == 1 ? 6...10 : 1...1)), (35, generator.random.int(2...4)),
        (28, generator.random.int(5...8)), (12, generator.random.int(9...16)),
      ])
      let result = try Self.runTransaction(group.store, count: count, generator: &generator, stats: &stats)
      guard !result.problems.isEmpty else { continue }
      failureCount += 1
      let report = Self.report(
        seed: seed, index: index, storeOptions: storeOptions, result: result, options: options)
      log(report)
      if failures.count < 50 { failures.append(report) }
    }
  }

  struct TransactionResult {
    var before: StoreImage
    var executed: [(sql: String, error: String?)]
    var rolledBack: Bool
    var problems: [FuzzProblem]
  }

  /// Runs one transaction of `count` random statements (each alone, its
  /// errors caught) and checks its change set.
  static func runTransaction(
    _ store: Store, count: Int, generator: inout CaptureFuzzGenerator, stats: inout FuzzStats
  ) throws -> TransactionResult {
    var before: StoreImage?
    var executed: [(sql: String, error: String?)] = []
    var outcome: Result<ChangeSet?, Error>
    var generatorCopy = generator
    var localStats = stats
    do {
      let (_, changeSet) = try store.writeAndReturnChangeSet { db in
        before = try StoreImage.read(db)
        generatorCopy.beginTransaction()
        var schema = try FuzzSchema.read(db)
        var version = try Int64.fetchOne(db, sql: "PRAGMA schema_version")
        func run(_ sql: String) throws {
          var failed = false
          do { try db.execute(sql: sql) } catch {
            failed = true
            executed.append((sql, (error as? DatabaseError)?.message ?? "\(error)"))
          }
          if !failed { executed.append((sql, nil)) }
          localStats.count(sql, failed: failed)
          guard db.isInsideTransaction else { throw FuzzAbort.transactionEnded }
          let now = try Int64.fetchOne(db, sql: "PRAGMA schema_version")
          if now != version || sql.uppercased().hasPrefix("ROLLBACK") {
            version = now
            schema = try FuzzSchema.read(db)
          }
        }
        for _ in 0..<count {
          for sql in generatorCopy.next(schema) { try run(sql) }
        }
        for sql in generatorCopy.endTransaction() { try run(sql) }
        if generatorCopy.wantsRollback() {
          executed.append(("-- the transaction's closure throws: ROLLBACK", nil))
          throw FuzzAbort.rollback
        }
      }
      outcome = .success(changeSet)
    } catch {
      outcome = .failure(error)
    }
    generator = generatorCopy
    stats = localStats
    stats.transactions += 1
    guard let before else { throw FuzzAbort.unreadable("the write did not start: \(outcome)") }
    let after = try store.read { try StoreImage.read($0) }
    var problems: [FuzzProblem]
    switch outcome {
    case .success(let changeSet):
      problems = FuzzOracle.check(before: before, after: after, changeSet: changeSet)
      if let changeSet {
        stats.changeSets += 1
        stats.rowsNamed += changeSet.rowCount
        stats.invalidations += changeSet.invalidatedTableNames.count
      }
      stats.tablesChecked += Set(before.tables.keys).union(after.tables.keys).count
      stats.unreadableTables += after.tables.values.filter { $0.unreadable != nil }.count
    case .failure(let error as FuzzAbort):
      stats.rolledBack += 1
      problems = after.sameContent(as: before)
        ? [] : [FuzzProblem(kind: .rollbackChangedStore, table: [], detail: "(\(error))")]
    case .failure(let error):
      problems = [FuzzProblem(kind: .writeFailed, table: [], detail: "\(error)")]
    }
    return TransactionResult(before: before, executed: executed, rolledBack: false, problems: problems)
  }

  // MARK: Reports

  static func report(
    seed: UInt64, index: Int, storeOptions: StoreOptions, result: TransactionResult, options: FuzzOptions
  ) -> String {
    let transaction = result.executed.map(\.sql)
    let units = FuzzDump.units(result.before)
    var lines = [
      "capture differential: seed \(seed), transaction \(index) (row budget \(storeOptions.rowBudget)); replay: GROUPSYNC_FUZZ_SEED=\(seed) make fuzz-capture",
      "violations:",
    ]
    lines += result.problems.prefix(12).map { "  - \($0)" }
    if result.problems.count > 12 { lines.append("  ... \(result.problems.count - 12) more") }
    lines.append("the transaction as run (one store.writeAndReturnChangeSet, each statement alone, errors caught):")
    lines += result.executed.map { "  \($0.sql);" + ($0.error.map { "   -- failed: \($0)" } ?? "") }
    let minimal = minimize(units: units, transaction: transaction, storeOptions: storeOptions, problems: result.problems)
    if let minimal {
      lines.append("minimal reproducer (replayed on a fresh store: the setup in one write, then the transaction):")
      lines.append("  -- setup")
      lines += minimal.setup.map { "  \($0);" }
      lines.append("  -- transaction")
      lines += minimal.transaction.map { "  \($0);" }
      lines.append("  -- got:")
      lines += minimal.problems.prefix(6).map { "  --   \($0)" }
    } else {
      lines.append("(the setup dump did not reproduce it on a fresh store; schema before the transaction:)")
      lines += units.flatMap(\.statements).filter { $0.hasPrefix("CREATE") }.map { "  \($0);" }
    }
    let text = lines.joined(separator: "\n")
    let out = environment("GROUPSYNC_FUZZ_OUT") ?? (NSTemporaryDirectory() + "groupsync-fuzz")
    try? FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
    let path = out + "/seed-\(seed)-tx-\(index).txt"
    let full = text + "\n\nfull setup before the transaction:\n" + units.flatMap(\.statements).map { $0 + ";" }.joined(separator: "\n") + "\n"
    if FileManager.default.createFile(atPath: path, contents: Data(full.utf8)) {
      return text + "\n(full setup in \(path))"
    }
    return text
  }

  struct Reproduction {
    var setup: [String]
    var transaction: [String]
    var problems: [FuzzProblem]
  }

  /// Replays `transaction` on a fresh store built from `units`; nil if the
  /// store could not be built.
  static func replay(units: [FuzzDump.Unit], transaction: [String], storeOptions: StoreOptions) -> [FuzzProblem]? {
    do {
      let folder = try TemporaryFolder("replay")
      let group = try GroupFolder(path: folder.child("group"), options: storeOptions)
      defer { group.store.close() }
      try group.store.write { db in
        for sql in units.flatMap(\.statements) { try? db.execute(sql: sql) }
      }
      var before: StoreImage?
      var rollback = false
      let outcome: Result<ChangeSet?, Error>
      do {
        outcome = .success(
          try group.store.writeAndReturnChangeSet { db in
            before = try StoreImage.read(db)
            for sql in transaction {
              if sql.hasPrefix("-- the transaction's closure throws") { rollback = true; continue }
              try? db.execute(sql: sql)
              guard db.isInsideTransaction else { throw FuzzAbort.transactionEnded }
            }
            if rollback { throw FuzzAbort.rollback }
          }.changeSet)
      } catch {
        outcome = .failure(error)
      }
      guard let before else { return nil }
      let after = try group.store.read { try StoreImage.read($0) }
      switch outcome {
      case .success(let changeSet): return FuzzOracle.check(before: before, after: after, changeSet: changeSet)
      case .failure(is FuzzAbort):
        return after.sameContent(as: before) ? [] : [FuzzProblem(kind: .rollbackChangedStore, table: [], detail: "")]
      case .failure(let error): return [FuzzProblem(kind: .writeFailed, table: [], detail: "\(error)")]
      }
    } catch {
      return nil
    }
  }

  /// The smallest setup and transaction found, by leaving out one unit or
  /// statement at a time, that still fail the same way.
  static func minimize(
    units: [FuzzDump.Unit], transaction: [String], storeOptions: StoreOptions, problems: [FuzzProblem]
  ) -> Reproduction? {
    let target = problems[0]
    func same(_ found: [FuzzProblem]?) -> [FuzzProblem]? {
      guard let found, found.contains(where: { $0.kind == target.kind && $0.table == target.table }) else { return nil }
      return found
    }
    guard var last = same(replay(units: units, transaction: transaction, storeOptions: storeOptions)) else { return nil }
    var statements = transaction
    var setup = units
    var budget = 160
    var index = statements.count - 1
    while index >= 0 && budget > 0 {
      var candidate = statements
      candidate.remove(at: index)
      budget -= 1
      if let found = same(replay(units: setup, transaction: candidate, storeOptions: storeOptions)) {
        statements = candidate
        last = found
      }
      index -= 1
    }
    index = setup.count - 1
    while index >= 0 && budget > 0 {
      var candidate = setup
      candidate.remove(at: index)
      budget -= 1
      if let found = same(replay(units: candidate, transaction: statements, storeOptions: storeOptions)) {
        setup = candidate
        last = found
      }
      index -= 1
    }
    return Reproduction(setup: setup.flatMap(\.statements), transaction: statements, problems: last)
  }
}
