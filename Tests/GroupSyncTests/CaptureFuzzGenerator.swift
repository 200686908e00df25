import Foundation
import GRDB

// The random SQL of the capture's differential test (CaptureDifferentialTests):
// a seeded random source, the live schema the generator reads from the
// writer connection before each statement, and the statements themselves.
// Everything is deterministic for a seed: the generator only looks at the
// store, which the same statements put in the same state.

/// xoshiro256**, seeded through splitmix64: the same numbers for a seed on
/// every platform and Swift version.
struct FuzzRandom: RandomNumberGenerator {
  private var s0, s1, s2, s3: UInt64

  init(seed: UInt64) {
    var x = seed
    func splitmix() -> UInt64 {
      x &+= 0x9E37_79B9_7F4A_7C15
      var z = x
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
    (s0, s1, s2, s3) = (splitmix(), splitmix(), splitmix(), splitmix())
  }

  mutating func next() -> UInt64 {
    let result = ((s1 &* 5) << 7 | (s1 &* 5) >> 57) &* 9
    let t = s1 << 17
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = s3 << 45 | s3 >> 19
    return result
  }

  /// A number in `range`, without modulo bias.
  mutating func int(_ range: ClosedRange<Int>) -> Int {
    let span = UInt64(range.upperBound - range.lowerBound) + 1
    let limit = UInt64.max - UInt64.max % span
    var value = next()
    while value >= limit { value = next() }
    return range.lowerBound + Int(value % span)
  }

  /// True with probability `percent` / 100.
  mutating func chance(_ percent: Int) -> Bool { int(0...99) < percent }

  mutating func pick<T>(_ items: [T]) -> T { items[int(0...(items.count - 1))] }

  /// One of `items`, each as likely as its weight.
  mutating func weighted<T>(_ items: [(Int, T)]) -> T {
    let total = items.reduce(0) { $0 + max($1.0, 0) }
    var roll = int(0...(total - 1))
    for (weight, item) in items where weight > 0 {
      if roll < weight { return item }
      roll -= weight
    }
    return items.last!.1
  }

  /// Up to `count` distinct elements of `items`, in a random order.
  mutating func sample<T>(_ items: [T], _ count: Int) -> [T] {
    var pool = items
    var out: [T] = []
    while out.count < count && !pool.isEmpty { out.append(pool.remove(at: int(0...(pool.count - 1)))) }
    return out
  }
}

/// SQL spelling helpers, built on Unicode scalars so that no Foundation
/// string operation can normalize a name on the way.
enum FuzzSQL {
  static func quoted(_ identifier: String) -> String { escape(identifier, "\"") }
  static func literal(_ text: String) -> String { escape(text, "'") }

  private static func escape(_ text: String, _ quote: Unicode.Scalar) -> String {
    var scalars = String.UnicodeScalarView()
    scalars.append(quote)
    for scalar in text.unicodeScalars {
      scalars.append(scalar)
      if scalar == quote { scalars.append(quote) }
    }
    scalars.append(quote)
    return String(scalars)
  }

  /// ASCII case-insensitive equality, SQLite's for identifiers.
  static func sameIdentifier(_ a: String, _ b: String) -> Bool {
    let x = Array(a.utf8), y = Array(b.utf8)
    guard x.count == y.count else { return false }
    return zip(x, y).allSatisfy { lower($0) == lower($1) }
  }

  private static func lower(_ byte: UInt8) -> UInt8 { (65...90).contains(byte) ? byte + 32 : byte }
}

/// What the generator knows of one table, view or virtual table, read from
/// the store.
struct FuzzTable {
  enum Kind: Equatable {
    case rowID
    case withoutRowID
    case fts(module: String, content: FTSContent)
    case rtree
    case view
  }

  enum FTSContent: Equatable {
    case normal
    case contentless
    case external(String)
  }

  struct Column {
    let name: String
    let type: String
    let notNull: Bool
    let primaryKey: Int
    let generated: Bool
  }

  let name: String
  let kind: Kind
  /// Visible columns, generated ones included.
  let columns: [Column]
  /// The INTEGER PRIMARY KEY (rowid alias) column.
  let integerPrimaryKey: String?
  /// Column sets with a UNIQUE or PRIMARY KEY constraint (no expression,
  /// not partial): UPSERT targets and foreign-key parents.
  let uniqueKeys: [[String]]
  let rowCount: Int

  var isVirtual: Bool {
    switch kind {
    case .fts, .rtree: true
    default: false
    }
  }
  var hasRowID: Bool { kind != .withoutRowID && kind != .view }
  var writableColumns: [Column] { columns.filter { !$0.generated } }
  var q: String { FuzzSQL.quoted(name) }

  /// A spelling of the rowid that no column shadows, if any.
  var rowIDAlias: String? {
    guard hasRowID else { return nil }
    if isVirtual { return "rowid" }
    return ["_rowid_", "rowid", "oid"].first { alias in !columns.contains { FuzzSQL.sameIdentifier($0.name, alias) } }
  }
}

/// The store's user schema, as the generator needs it.
struct FuzzSchema {
  var tables: [FuzzTable] = []
  var triggers: [String] = []
  var indexes: [String] = []
  /// The triggers that keep external-content full-text indexes in step.
  var syncTriggers: [String] = []
  /// Every name in `sqlite_schema`, shadow tables included.
  var allNames: [String] = []

  var baseTables: [FuzzTable] { tables.filter { $0.kind == .rowID || $0.kind == .withoutRowID } }
  var views: [FuzzTable] { tables.filter { $0.kind == .view } }

  func isTaken(_ name: String) -> Bool { allNames.contains { FuzzSQL.sameIdentifier($0, name) } }

  /// Whether an external-content full-text table reads its rows from `name`.
  func isContentTable(_ name: String) -> Bool {
    tables.contains { table in
      guard case .fts(_, .external(let content)) = table.kind else { return false }
      return FuzzSQL.sameIdentifier(content, name)
    }
  }

  static func isInternal(_ name: String) -> Bool {
    let lower = name.lowercased()
    return lower.hasPrefix("sqlite_") || lower.hasPrefix("groupsync_") || lower.hasPrefix("grdb_")
  }

  static func read(_ db: Database) throws -> FuzzSchema {
    var schema = FuzzSchema()
    var sqlByName: [[UInt8]: String] = [:]
    for row in try Row.fetchAll(db, sql: "SELECT type, name, sql FROM main.sqlite_schema ORDER BY rowid") {
      let type: String = row[0]
      let name: String = row[1]
      guard !isInternal(name) else { continue }
      schema.allNames.append(name)
      if let sql = row[2] as String? { sqlByName[Array(name.utf8)] = sql }
      switch type {
      case "trigger": schema.triggers.append(name)
      case "index": if row[2] as String? != nil { schema.indexes.append(name) }
      default: break
      }
    }
    for row in try Row.fetchAll(db, sql: "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main'") {
      let name: String = row[0]
      let type: String = row[1]
      guard !isInternal(name), type != "shadow" else { continue }
      let kind: FuzzTable.Kind
      switch type {
      case "view": kind = .view
      case "virtual":
        guard let sql = sqlByName[Array(name.utf8)], let virtual = virtualKind(sql) else { continue }
        kind = virtual
      default: kind = (row[2] as Int64) != 0 ? .withoutRowID : .rowID
      }
      // A view over a dropped table, or an index over a renamed content
      // table, cannot be described: the generator leaves it alone.
      guard let table = try? describe(db, name: name, kind: kind) else { continue }
      schema.tables.append(table)
    }
    // The triggers that keep external-content indexes in step are not
    // dropped unless the indexes may go out of step (see FuzzOptions).
    let syncTriggers = Set(schema.tables.flatMap { table -> [[UInt8]] in
      guard case .fts(_, .external) = table.kind else { return [] }
      return ["ai", "ad", "au"].map { Array("\(table.name)_\($0)".utf8) }
    })
    schema.syncTriggers = schema.triggers.filter { syncTriggers.contains(Array($0.utf8)) }
    return schema
  }

  private static func describe(_ db: Database, name: String, kind: FuzzTable.Kind) throws -> FuzzTable {
    var columns: [FuzzTable.Column] = []
    for column in try Row.fetchAll(
      db, sql: "SELECT name, type, \"notnull\", pk, hidden FROM pragma_table_xinfo(?, 'main')", arguments: [name])
    {
      let hidden: Int = column[4]
      if hidden == 1 { continue }  // a virtual table's hidden column
      columns.append(
        .init(name: column[0], type: (column[1] as String).uppercased(), notNull: column[2], primaryKey: column[3],
          generated: hidden >= 2))
    }
    var uniqueKeys: [[String]] = []
    var hasPrimaryKeyIndex = false
    if kind == .rowID || kind == .withoutRowID {
      for index in try Row.fetchAll(
        db, sql: "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?, 'main')", arguments: [name])
      {
        if (index[2] as String) == "pk" { hasPrimaryKeyIndex = true }
        guard (index[1] as Int) == 1, (index[3] as Int) == 0 else { continue }
        let names = try Row.fetchAll(
          db, sql: "SELECT name FROM pragma_index_info(?, 'main') ORDER BY seqno", arguments: [index[0] as String]
        ).map { $0[0] as String? }
        if names.allSatisfy({ $0 != nil }) { uniqueKeys.append(names.map { $0! }) }
      }
    }
    let primaryKey = columns.filter { $0.primaryKey > 0 }
    var integerPrimaryKey: String?
    if kind == .rowID, primaryKey.count == 1, primaryKey[0].type == "INTEGER", !hasPrimaryKeyIndex {
      integerPrimaryKey = primaryKey[0].name
      uniqueKeys.append([primaryKey[0].name])
    }
    let rowCount = kind == .view ? 0 : try Int.fetchOne(db.makeStatement(sql: "SELECT count(*) FROM \(FuzzSQL.quoted(name))")) ?? 0
    return FuzzTable(
      name: name, kind: kind, columns: columns, integerPrimaryKey: integerPrimaryKey, uniqueKeys: uniqueKeys,
      rowCount: rowCount)
  }

  /// Which virtual table `sql` creates, for the modules the generator uses.
  static func virtualKind(_ sql: String) -> FuzzTable.Kind? {
    let lower = sql.lowercased()
    if lower.contains("using rtree") { return .rtree }
    for module in ["fts5", "fts4", "fts3"] where lower.contains("using \(module)") {
      if lower.contains("content=''") || lower.contains("content=\"\"") { return .fts(module: module, content: .contentless) }
      if let range = sql.range(of: "content='") {
        var name = String.UnicodeScalarView()
        var scalars = sql[range.upperBound...].unicodeScalars.makeIterator()
        while let scalar = scalars.next() {
          if scalar == "'" {
            guard let following = scalars.next(), following == "'" else { break }
          }
          name.append(scalar)
        }
        return .fts(module: module, content: .external(String(name)))
      }
      return .fts(module: module, content: .normal)
    }
    return nil
  }
}

/// Options of a generator, fixed for one seed.
struct FuzzOptions: Sendable {
  /// Gives the transaction-ending statements (`INSERT OR ROLLBACK`, a
  /// trigger's `RAISE(ROLLBACK)`) and whole-transaction rollbacks a chance.
  var transactionKillers = true
  /// Tables named `"café"` (NFC) and `"cafe\u{301}"` (NFD) side by side:
  /// two tables to SQLite. Turn off only if the model compares names as
  /// Swift strings again (they would collapse into one, a known failure).
  var distinctNormalizationForms = true
  /// Writes an external-content full-text table directly ('delete-all',
  /// 'delete' with made-up values, inserts), which puts its index out of
  /// step with its content table: its rows as read (from the content table)
  /// then change with no write that names them. FTS5 calls such an index
  /// corrupt, but a reader still sees the content table's rows through it.
  var desynchronizedExternalContent = true
}

/// Makes random statements against the live schema of the store.
struct CaptureFuzzGenerator {
  var random: FuzzRandom
  let options: FuzzOptions
  /// Open savepoints, innermost last.
  private(set) var savepoints: [String] = []
  private var nameCounter = 0

  init(seed: UInt64, options: FuzzOptions) {
    random = FuzzRandom(seed: seed)
    self.options = options
  }

  // MARK: Names

  /// Table names: plain, and every kind SQLite accepts that a URI or a
  /// string comparison could get wrong.
  var tableNamePool: [String] {
    var names = [
      "t1", "t2", "t3", "t4", "items", "Parent", "kid", "", "a b", "q\"uote", "it's", "café", "日本", "🙂", "per%cent/x?y#z",
      "select", "T1", "x_data", "tab\tname", "Ünï", "q\"e\u{301}",
    ]
    if options.distinctNormalizationForms { names.append("cafe\u{301}") }
    return names
  }

  static let virtualNamePool = ["f1", "f2", "fts", "r1", "geo", "", "f é", "q\"v"]
  static let columnNamePool = ["a", "b", "c", "v", "w x", "é", "e\u{301}", "Q\"c", "num"]

  mutating func freshTableName(_ schema: FuzzSchema, pool: [String]) -> String {
    let free = pool.filter { !schema.isTaken($0) }
    if let name = free.isEmpty ? nil : random.pick(free) { return name }
    nameCounter += 1
    return "n\(nameCounter)_\(random.int(0...999))"
  }

  // MARK: Values

  mutating func value(for column: FuzzTable.Column?) -> String {
    let type = column?.type ?? ""
    let roll = random.int(0...99)
    if roll < 6 { return "NULL" }
    if type.contains("INT") || roll < 50 { return String(random.weighted([(8, random.int(0...12)), (1, random.int(-3...100))])) }
    switch random.int(0...9) {
    case 0: return random.pick(["1.5", "-0.25", "2.0", "1e10", "0.0"])
    case 1: return random.pick(["X'00ff'", "X''", "X'61'"])
    case 2: return random.pick(["9223372036854775807", "-9223372036854775808"])
    case 3: return FuzzSQL.literal(random.pick(["é", "e\u{301}", "''q", "x y"]))
    default: return FuzzSQL.literal(random.pick(["a", "b", "c", "x", "A", "bad", "zz"]))
    }
  }

  mutating func expression(_ table: FuzzTable, for column: FuzzTable.Column) -> String {
    let other = random.pick(table.columns)
    return random.weighted([
      (5, value(for: column)),
      (2, "\(FuzzSQL.quoted(other.name)) || 'x'"),
      (2, "coalesce(\(FuzzSQL.quoted(other.name)), 0) + 1"),
      (1, FuzzSQL.quoted(column.name)),
      (1, "NULL"),
    ])
  }

  mutating func condition(_ table: FuzzTable, prefix: String = "") -> String {
    let rowID = table.rowIDAlias
    var options: [(Int, String)] = [(1, "1")]
    if let rowID {
      let r = random.int(0...12)
      options += [
        (4, "\(prefix)\(rowID) = \(r)"), (2, "\(prefix)\(rowID) > \(r)"), (2, "\(prefix)\(rowID) % 3 = \(random.int(0...2))"),
        (1, "\(prefix)\(rowID) IN (\(r), \(r + 1), \(random.int(0...30)))"),
      ]
    }
    if case .fts = table.kind {
      options.append((2, "\(table.q) MATCH \(FuzzSQL.literal(random.pick(["a", "b", "x", "zz"])))"))
    } else if let column = table.columns.isEmpty ? nil : random.pick(table.columns) {
      let c = prefix + FuzzSQL.quoted(column.name)
      options += [
        (3, "\(c) = \(value(for: column))"), (2, "\(c) IS NULL"), (2, "\(c) < \(random.int(0...10))"),
        (1, "\(c) IN (SELECT \(c) FROM \(table.q) LIMIT 2)"),
      ]
    }
    return random.weighted(options)
  }

  // MARK: Transactions

  mutating func beginTransaction() { savepoints = [] }

  /// What closes the transaction's open savepoints, or nothing (COMMIT
  /// commits them).
  mutating func endTransaction() -> [String] {
    guard let first = savepoints.first, random.chance(60) else { return [] }
    savepoints = []
    return ["RELEASE \(first)"]
  }

  /// Whether the transaction ends with an error thrown by its closure.
  mutating func wantsRollback() -> Bool { options.transactionKillers && random.chance(2) }

  /// The next statements to run, each alone, in order.
  mutating func next(_ schema: FuzzSchema) -> [String] {
    let tables = schema.tables.filter { $0.kind != .view }
    let kind = random.weighted([
      (tables.count < 2 ? 40 : (tables.count > 9 ? 1 : 6), "create"),
      (tables.isEmpty ? 0 : (tables.count > 7 ? 6 : 3), "drop"),
      (tables.isEmpty ? 0 : 5, "alter"),
      (tables.isEmpty ? 0 : (schema.triggers.count < 6 ? 4 : 1), "trigger"),
      (schema.triggers.isEmpty ? 0 : (schema.triggers.count > 5 ? 4 : 1), "dropTrigger"),
      (tables.isEmpty ? 0 : 2, "index"),
      (tables.isEmpty ? 0 : 1, "view"),
      (schema.views.isEmpty ? 0 : (schema.views.count > 2 ? 3 : 1), "dropView"),
      (16, "savepoint"),
      (tables.isEmpty ? 0 : 75, "dml"),
    ])
    switch kind {
    case "create": return create(schema)
    case "drop":
      // With indexes kept in step, a content table stays: a table made
      // later under its name would have no triggers feeding the index.
      let droppable = options.desynchronizedExternalContent
        ? tables : tables.filter { !schema.isContentTable($0.name) }
      guard !droppable.isEmpty else { return [] }
      let table = random.pick(droppable)
      return [random.weighted([(5, "DROP TABLE \(table.q)"), (1, "DROP TABLE IF EXISTS \(table.q)")])]
    case "alter": return alter(random.pick(tables), schema)
    case "trigger": return [trigger(on: random.pick(tables), schema)]
    case "dropTrigger":
      let droppable = options.desynchronizedExternalContent
        ? schema.triggers : schema.triggers.filter { !schema.syncTriggers.contains($0) }
      return droppable.isEmpty ? [] : ["DROP TRIGGER \(FuzzSQL.quoted(random.pick(droppable)))"]
    case "index": return index(random.pick(tables), schema)
    case "view": return view(random.pick(tables), schema)
    // Views and triggers over dropped tables make SQLite refuse every later
    // ALTER TABLE: they are dropped now and then.
    case "dropView": return ["DROP VIEW \(random.pick(schema.views).q)"]
    case "savepoint": return [savepoint()]
    default:
      let views = schema.views
      if !views.isEmpty && random.chance(8) { return [dml(random.pick(views), schema)] }
      // Keep tables small: a large table is mostly shrunk.
      let table = random.pick(tables)
      if table.rowCount > 300 && random.chance(70) { return ["DELETE FROM \(table.q) WHERE \(condition(table))"] }
      return [dml(table, schema)]
    }
  }

  mutating func savepoint() -> String {
    let action = savepoints.isEmpty ? 0 : random.weighted([(4, 0), (3, 1), (3, 2)])
    switch action {
    case 0:
      // Names repeat on purpose: ROLLBACK TO and RELEASE take the innermost.
      let name = random.pick(["s1", "s2", "s3", "S1"])
      savepoints.append(name)
      return "SAVEPOINT \(name)"
    case 1:
      let index = random.int(0...(savepoints.count - 1))
      let name = savepoints[index]
      let innermost = savepoints.lastIndex { FuzzSQL.sameIdentifier($0, name) }!
      savepoints.removeSubrange((innermost + 1)...)
      return random.chance(50) ? "ROLLBACK TO \(name)" : "ROLLBACK TRANSACTION TO SAVEPOINT \(name)"
    default:
      let index = random.int(0...(savepoints.count - 1))
      let name = savepoints[index]
      let innermost = savepoints.lastIndex { FuzzSQL.sameIdentifier($0, name) }!
      savepoints.removeSubrange(innermost...)
      return random.chance(70) ? "RELEASE \(name)" : "RELEASE SAVEPOINT \(name)"
    }
  }

  // MARK: Schema changes

  mutating func columnType(strict: Bool) -> String {
    strict
      ? random.pick(["INTEGER", "INT", "TEXT", "REAL", "BLOB", "ANY"])
      : random.pick(["", "", "INTEGER", "TEXT", "REAL", "BLOB", "NUMERIC", "VARCHAR(3)"])
  }

  mutating func columnNames(_ count: Int, allowRowIDNames: Bool) -> [String] {
    var pool = Self.columnNamePool
    if allowRowIDNames && random.chance(15) { pool.append(random.pick(["rowid", "oid"])) }
    var names: [String] = []
    for name in random.sample(pool, pool.count) where names.count < count {
      if !names.contains(where: { FuzzSQL.sameIdentifier($0, name) }) { names.append(name) }
    }
    return names
  }

  mutating func columnConstraints(_ name: String, type: String) -> String {
    var parts: [String] = []
    if random.chance(10) { parts.append("NOT NULL"); if random.chance(60) { parts.append("DEFAULT \(random.int(0...3))") } }
    if random.chance(12) { parts.append("UNIQUE") }
    if random.chance(8) { parts.append("CHECK (\(FuzzSQL.quoted(name)) IS NOT 13 AND \(FuzzSQL.quoted(name)) IS NOT 'bad')") }
    if random.chance(8) && parts.allSatisfy({ !$0.hasPrefix("DEFAULT") }) { parts.append("DEFAULT \(random.pick(["0", "'d'", "NULL"]))") }
    if random.chance(6) && (type.isEmpty || type == "TEXT") { parts.append("COLLATE NOCASE") }
    return parts.joined(separator: " ")
  }

  /// A foreign key to a random parent with a unique key, or nil.
  mutating func foreignKey(_ schema: FuzzSchema) -> String? {
    let parents = schema.baseTables.filter { !$0.uniqueKeys.filter { $0.count == 1 }.isEmpty }
    guard !parents.isEmpty else { return nil }
    let parent = random.pick(parents)
    let key = random.pick(parent.uniqueKeys.filter { $0.count == 1 })[0]
    let onDelete = random.pick(["CASCADE", "CASCADE", "SET NULL", "SET DEFAULT", "RESTRICT", "NO ACTION"])
    let onUpdate = random.pick(["CASCADE", "SET NULL", "NO ACTION"])
    return "REFERENCES \(parent.q)(\(FuzzSQL.quoted(key))) ON DELETE \(onDelete) ON UPDATE \(onUpdate)"
  }

  mutating func create(_ schema: FuzzSchema) -> [String] {
    // No full-text table is made inside a savepoint: SQLite 3.40.1 fails
    // the COMMIT ("SQL logic error") after `SAVEPOINT s; CREATE VIRTUAL TABLE
    // f USING fts5(x); INSERT INTO f VALUES ('a'); ROLLBACK TO s` (FTS3/4
    // too), with or without GroupSync.
    let fts = savepoints.isEmpty ? 1 : 0
    let kind = random.weighted([
      (5, "ipk"), (4, "rowid"), (3, "withoutRowID"), (2 * fts, "fts"), (fts, "external"), (2, "rtree"), (1, "ctas"),
    ])
    switch kind {
    case "fts": return [createFTS(schema)]
    case "external": return createExternalFTS(schema)
    case "rtree": return [createRTree(schema)]
    case "ctas":
      let sources = schema.tables.filter { $0.kind != .view }
      guard !sources.isEmpty else { return [] }
      let source = random.pick(sources)
      let name = freshTableName(schema, pool: tableNamePool)
      let suffix = random.chance(50) ? "" : " WHERE \(condition(source))"
      return ["CREATE TABLE \(FuzzSQL.quoted(name)) AS SELECT * FROM \(source.q)\(suffix)"]
    default: break
    }
    let name = freshTableName(schema, pool: tableNamePool)
    let strict = random.chance(15)
    var definitions: [String] = []
    var names = columnNames(random.int(1...4), allowRowIDNames: kind == "rowid")
    var tableConstraints: [String] = []
    switch kind {
    case "ipk":
      let pk = random.pick(["id", "Id", "ïd"])
      names.removeAll { FuzzSQL.sameIdentifier($0, pk) }
      definitions.append(
        "\(FuzzSQL.quoted(pk)) INTEGER PRIMARY KEY\(random.chance(20) ? " AUTOINCREMENT" : "")"
          + (random.chance(10) ? " ON CONFLICT REPLACE" : ""))
    case "rowid":
      // Primary keys that are not rowid aliases.
      switch random.int(0...4) {
      case 0: definitions.append("k TEXT PRIMARY KEY"); names.removeAll { $0 == "k" }
      case 1: definitions.append("id INTEGER PRIMARY KEY DESC")
      case 2: definitions.append("id INT PRIMARY KEY")
      default: break
      }
    default:
      let composite = random.chance(30) && names.count >= 2
      if composite {
        tableConstraints.append("PRIMARY KEY (\(FuzzSQL.quoted(names[0])), \(FuzzSQL.quoted(names[1])))")
      } else {
        definitions.append("k \(strict ? "TEXT" : random.pick(["TEXT", "INTEGER", ""])) PRIMARY KEY")
        names.removeAll { $0 == "k" }
      }
    }
    for column in names {
      let type = columnType(strict: strict)
      definitions.append(
        ([FuzzSQL.quoted(column), type, columnConstraints(column, type: type)].filter { !$0.isEmpty })
          .joined(separator: " "))
    }
    if random.chance(30), let reference = foreignKey(schema) {
      definitions.append("ref \(strict ? "ANY" : "") \(reference)")
    }
    if random.chance(10), let first = names.first {
      definitions.append(
        "g \(strict ? "TEXT" : "") AS (\(FuzzSQL.quoted(first)) || '!') \(random.pick(["VIRTUAL", "STORED"]))")
    }
    var options: [String] = []
    if kind == "withoutRowID" { options.append("WITHOUT ROWID") }
    if strict { options.append("STRICT") }
    let body = (definitions + tableConstraints).joined(separator: ", ")
    return ["CREATE TABLE \(FuzzSQL.quoted(name))(\(body))\(options.isEmpty ? "" : " " + options.joined(separator: ", "))"]
  }

  mutating func createFTS(_ schema: FuzzSchema) -> String {
    let name = freshTableName(schema, pool: Self.virtualNamePool.filter { !$0.hasPrefix("r") && $0 != "geo" })
    let columns = random.sample(["a", "b", "c", "body"], random.int(1...3))
    let module = random.weighted([(4, "fts5"), (1, "fts4")])
    var arguments = columns
    switch random.int(0...5) {
    case 0: arguments.append(module == "fts5" ? "content=''" : "content=\"\"")
    case 1 where module == "fts5": arguments += ["content=''", "columnsize=0"]
    case 2 where module == "fts5": arguments.append("prefix='1 2'")
    default: break
    }
    return "CREATE VIRTUAL TABLE \(FuzzSQL.quoted(name)) USING \(module)(\(arguments.joined(separator: ", ")))"
  }

  /// An external-content full-text table over a rowid table, kept in sync by
  /// the three triggers the SQLite documentation gives.
  mutating func createExternalFTS(_ schema: FuzzSchema) -> [String] {
    let sources = schema.tables.filter { table in
      table.kind == .rowID && table.columns.contains { $0.name.allSatisfy { $0.isASCII && $0.isLetter } && !$0.generated }
    }
    guard !sources.isEmpty else { return [createFTS(schema)] }
    let source = random.pick(sources)
    let columns = source.columns.filter { $0.name.allSatisfy { $0.isASCII && $0.isLetter } && !$0.generated }.map(\.name)
      .filter { !["rowid", "oid", "rank"].contains($0.lowercased()) }
    guard !columns.isEmpty else { return [createFTS(schema)] }
    let name = freshTableName(schema, pool: ["fx", "ext", "ext é"])
    let key = source.integerPrimaryKey.map { ", content_rowid=\(FuzzSQL.literal($0))" } ?? ""
    let q = FuzzSQL.quoted(name)
    let list = columns.map(FuzzSQL.quoted).joined(separator: ", ")
    let newValues = columns.map { "new.\(FuzzSQL.quoted($0))" }.joined(separator: ", ")
    let oldValues = columns.map { "old.\(FuzzSQL.quoted($0))" }.joined(separator: ", ")
    let trigger = { (suffix: String) in FuzzSQL.quoted("\(name)_\(suffix)") }
    return ["ai", "ad", "au"].map { "DROP TRIGGER IF EXISTS \(trigger($0))" } + [
      "CREATE VIRTUAL TABLE \(q) USING fts5(\(list), content=\(FuzzSQL.literal(source.name))\(key))",
      "INSERT INTO \(q)(\(q)) VALUES('rebuild')",
      "CREATE TRIGGER \(trigger("ai")) AFTER INSERT ON \(source.q) BEGIN INSERT INTO \(q)(rowid, \(list)) VALUES (new.rowid, \(newValues)); END",
      "CREATE TRIGGER \(trigger("ad")) AFTER DELETE ON \(source.q) BEGIN INSERT INTO \(q)(\(q), rowid, \(list)) VALUES ('delete', old.rowid, \(oldValues)); END",
      "CREATE TRIGGER \(trigger("au")) AFTER UPDATE ON \(source.q) BEGIN INSERT INTO \(q)(\(q), rowid, \(list)) VALUES ('delete', old.rowid, \(oldValues)); INSERT INTO \(q)(rowid, \(list)) VALUES (new.rowid, \(newValues)); END",
    ]
  }

  mutating func createRTree(_ schema: FuzzSchema) -> String {
    let name = freshTableName(schema, pool: ["r1", "geo", "r é", ""])
    let module = random.weighted([(3, "rtree"), (1, "rtree_i32")])
    var columns = ["id", "x0", "x1"]
    if random.chance(50) { columns += ["y0", "y1"] }
    if random.chance(30) { columns.append("+label") }
    return "CREATE VIRTUAL TABLE \(FuzzSQL.quoted(name)) USING \(module)(\(columns.joined(separator: ", ")))"
  }

  mutating func alter(_ table: FuzzTable, _ schema: FuzzSchema) -> [String] {
    let column = table.columns.isEmpty ? nil : random.pick(table.columns)
    // Content tables and their indexes keep their names (see "drop").
    var externalContent = schema.isContentTable(table.name)
    if case .fts(_, .external) = table.kind { externalContent = true }
    let renames = externalContent && !options.desynchronizedExternalContent ? 0 : 3
    switch random.weighted([(renames, 0), (3, 1), (2, 2), (2, 3)]) {
    case 0:
      return ["ALTER TABLE \(table.q) RENAME TO \(FuzzSQL.quoted(freshTableName(schema, pool: tableNamePool + Self.virtualNamePool)))"]
    case 1:
      let name = random.pick(["w", "added", "é2", "z z"])
      var definition = "\(FuzzSQL.quoted(name)) \(random.pick(["", "INTEGER", "TEXT"]))"
      switch random.int(0...4) {
      case 0: definition += " DEFAULT \(random.pick(["7", "'seven'", "NULL"]))"
      case 1: definition += " NOT NULL DEFAULT 0"
      case 2: if let reference = foreignKey(schema) { definition += " \(reference)" }
      case 3: definition += " AS (\(column.map { FuzzSQL.quoted($0.name) } ?? "1") || '') VIRTUAL"
      default: break
      }
      return ["ALTER TABLE \(table.q) ADD COLUMN \(definition)"]
    case 2:
      guard let column else { return [] }
      let name = random.pick(["renamed", "v2", "ï", "rowid"])
      return ["ALTER TABLE \(table.q) RENAME COLUMN \(FuzzSQL.quoted(column.name)) TO \(FuzzSQL.quoted(name))"]
    default:
      guard let column else { return [] }
      return ["ALTER TABLE \(table.q) DROP COLUMN \(FuzzSQL.quoted(column.name))"]
    }
  }

  mutating func index(_ table: FuzzTable, _ schema: FuzzSchema) -> [String] {
    if !schema.indexes.isEmpty && random.chance(40) { return ["DROP INDEX \(FuzzSQL.quoted(random.pick(schema.indexes)))"] }
    guard !table.isVirtual, let column = table.columns.isEmpty ? nil : random.pick(table.columns) else { return [] }
    nameCounter += 1
    let unique = random.chance(40) ? "UNIQUE " : ""
    let partial = random.chance(20) ? " WHERE \(FuzzSQL.quoted(column.name)) IS NOT NULL" : ""
    // Now and then named like a trigger (another namespace).
    let namesakes = schema.triggers.filter { trigger in
      !(schema.tables.map(\.name) + schema.indexes).contains { FuzzSQL.sameIdentifier($0, trigger) }
    }
    let name = !namesakes.isEmpty && random.chance(25) ? random.pick(namesakes) : "ix\(nameCounter) é"
    return [
      "CREATE \(unique)INDEX \(FuzzSQL.quoted(name)) ON \(table.q)(\(FuzzSQL.quoted(column.name)))\(partial)"
    ]
  }

  /// A view over a table and INSTEAD OF triggers that write through it.
  mutating func view(_ table: FuzzTable, _ schema: FuzzSchema) -> [String] {
    guard table.kind == .rowID, let rowID = table.rowIDAlias, !table.writableColumns.isEmpty else { return [] }
    nameCounter += 1
    let name = "v\(nameCounter)"
    let q = FuzzSQL.quoted(name)
    let column = random.pick(table.writableColumns)
    let c = FuzzSQL.quoted(column.name)
    return [
      "CREATE VIEW \(q) AS SELECT \(rowID) AS rid, \(c) AS val FROM \(table.q)",
      "CREATE TRIGGER \(FuzzSQL.quoted(name + "_i")) INSTEAD OF INSERT ON \(q) BEGIN INSERT INTO \(table.q)(\(rowID), \(c)) VALUES (new.rid, new.val); END",
      "CREATE TRIGGER \(FuzzSQL.quoted(name + "_u")) INSTEAD OF UPDATE ON \(q) BEGIN UPDATE \(table.q) SET \(c) = new.val WHERE \(rowID) = old.rid; END",
      "CREATE TRIGGER \(FuzzSQL.quoted(name + "_d")) INSTEAD OF DELETE ON \(q) BEGIN DELETE FROM \(table.q) WHERE \(rowID) = old.rid; END",
    ]
  }

  /// A trigger on `table` that writes another table (or fails).
  mutating func trigger(on table: FuzzTable, _ schema: FuzzSchema) -> String {
    nameCounter += 1
    // Triggers live in a namespace of their own: now and then one takes
    // the name of a table, a view or an index (which must not hide it).
    let namesakes = (schema.tables.map(\.name) + schema.indexes).filter { name in
      !schema.triggers.contains { FuzzSQL.sameIdentifier($0, name) }
    }
    let name = FuzzSQL.quoted(
      !namesakes.isEmpty && random.chance(25)
        ? random.pick(namesakes) : random.pick(["tr", "trïg", "t r"]) + "\(nameCounter)")
    let event = random.weighted([(3, "INSERT"), (3, "UPDATE"), (3, "DELETE")])
    let timing = random.pick(["BEFORE", "AFTER", "AFTER"])
    let ref = event == "DELETE" ? "old" : "new"
    let refs: [String] =
      table.columns.map { "\(ref).\(FuzzSQL.quoted($0.name))" } + (table.rowIDAlias.map { ["\(ref).\($0)"] } ?? [])
    func refValue(_ generator: inout CaptureFuzzGenerator, _ column: FuzzTable.Column?) -> String {
      refs.isEmpty || generator.random.chance(30) ? generator.value(for: column) : generator.random.pick(refs)
    }
    let others = schema.tables.filter { other in
      if case .fts(_, .external) = other.kind, !options.desynchronizedExternalContent { return false }
      return other.kind != .view && !(other.name.utf8.elementsEqual(table.name.utf8) && random.chance(80))
    }
    var body: [String] = []
    for _ in 0..<random.int(1...2) {
      guard let other = others.isEmpty ? nil : random.pick(others), !other.writableColumns.isEmpty else { break }
      let columns = random.sample(other.writableColumns, random.int(1...other.writableColumns.count))
      switch random.weighted([(4, 0), (2, 1), (2, 2), (1, 3), (1, 4)]) {
      case 0:
        let verb = random.pick(["INSERT", "INSERT OR IGNORE", "INSERT OR REPLACE", "REPLACE"])
        let values = columns.map { refValue(&self, $0) }
        body.append(
          "\(verb) INTO \(other.q)(\(columns.map { FuzzSQL.quoted($0.name) }.joined(separator: ", "))) VALUES (\(values.joined(separator: ", ")))")
      case 1:
        let column = columns[0]
        body.append("UPDATE \(other.q) SET \(FuzzSQL.quoted(column.name)) = \(refValue(&self, column)) WHERE \(condition(other))")
      case 2:
        body.append("DELETE FROM \(other.q) WHERE \(condition(other))")
      case 3:
        let kind = options.transactionKillers && random.chance(10) ? "ROLLBACK" : (timing == "BEFORE" && random.chance(50) ? "IGNORE" : "ABORT")
        let message = kind == "IGNORE" ? "" : ", 'refused by trigger'"
        body.append("SELECT RAISE(\(kind)\(message)) WHERE \(refs.isEmpty ? "1" : "\(random.pick(refs)) IS NULL")")
      default:
        body.append("SELECT RAISE(FAIL, 'fail by trigger') WHERE \(refs.isEmpty ? "0" : "\(random.pick(refs)) = 13")")
      }
    }
    if body.isEmpty { body.append("SELECT 1") }
    let when = random.chance(25) && !refs.isEmpty ? " WHEN \(random.pick(refs)) IS NOT NULL" : ""
    let of = event == "UPDATE" && random.chance(30) && !table.columns.isEmpty ? " OF \(FuzzSQL.quoted(random.pick(table.columns).name))" : ""
    return "CREATE TRIGGER \(name) \(timing) \(event)\(of) ON \(table.q)\(when) BEGIN \(body.joined(separator: "; ")); END"
  }

  // MARK: Row changes

  mutating func dml(_ table: FuzzTable, _ schema: FuzzSchema) -> String {
    switch table.kind {
    case .fts(_, .external) where !options.desynchronizedExternalContent:
      return ["INSERT INTO \(table.q)(\(table.q)) VALUES('optimize')", "INSERT INTO \(table.q)(\(table.q)) VALUES('rebuild')"][random.int(0...1)]
    case .fts(_, let content): return ftsDML(table, content)
    case .rtree: return rtreeDML(table)
    default: break
    }
    let columns = table.writableColumns
    if columns.isEmpty { return "DELETE FROM \(table.q) WHERE \(condition(table))" }
    let kind = random.weighted([
      (6, "insert"), (3, "upsert"), (2, "replace"), (1, "insertSelect"), (1, "bulk"), (6, "update"), (1, "updateFrom"),
      (1, "rowidChange"), (4, "delete"), (1, "deleteAll"), (1, "fail"), (1, "returning"),
    ])
    let q = table.q
    switch kind {
    case "insert", "upsert", "replace", "fail", "returning":
      var targets = random.sample(columns, random.int(1...columns.count))
      var rowID: String?
      if let alias = table.rowIDAlias, table.kind != .view, table.integerPrimaryKey == nil, random.chance(40) {
        rowID = alias
      }
      if let ipk = table.integerPrimaryKey, !targets.contains(where: { $0.name == ipk }), random.chance(60) {
        targets.insert(columns.first { $0.name == ipk }!, at: 0)
      }
      let rows = random.weighted([(6, 1), (3, 2), (1, 4)]) + (kind == "fail" ? 2 : 0)
      var tuples: [String] = []
      for _ in 0..<rows {
        var values = targets.map { value(for: $0) }
        if rowID != nil { values.insert(String(random.int(1...30)), at: 0) }
        tuples.append("(\(values.joined(separator: ", ")))")
      }
      let names = (rowID.map { [$0] } ?? []) + targets.map { FuzzSQL.quoted($0.name) }
      let verb: String = switch kind {
      case "replace": random.pick(["REPLACE", "INSERT OR REPLACE"])
      case "fail": random.pick(["INSERT OR FAIL", "INSERT OR ABORT", "INSERT OR IGNORE"])
      default:
        options.transactionKillers && random.chance(1) ? "INSERT OR ROLLBACK" : random.pick(["INSERT", "INSERT", "INSERT OR IGNORE"])
      }
      var sql = "\(verb) INTO \(q)(\(names.joined(separator: ", "))) VALUES \(tuples.joined(separator: ", "))"
      if kind == "upsert" && table.kind != .view {
        sql += upsertClause(table)
      }
      if kind == "returning" { sql += " RETURNING *" }
      return sql
    case "insertSelect":
      let sources = schema.tables.filter { $0.kind != .view && !$0.columns.isEmpty }
      let source = random.pick(sources)
      let targets = random.sample(columns, random.int(1...columns.count))
      let expressions = targets.map { _ in random.chance(70) ? FuzzSQL.quoted(random.pick(source.columns).name) : value(for: nil) }
      return "INSERT OR IGNORE INTO \(q)(\(targets.map { FuzzSQL.quoted($0.name) }.joined(separator: ", "))) SELECT \(expressions.joined(separator: ", ")) FROM \(source.q) WHERE \(condition(source)) LIMIT \(random.int(1...8))"
    case "bulk":
      let count = random.weighted([(5, random.int(10...60)), (1, random.int(100...400))])
      let targets = random.sample(columns, random.int(1...columns.count))
      let expressions = targets.map { column in
        random.pick(["x", "x % 7", "'row ' || x", "x * 1.5", "NULL", value(for: column)])
      }
      var names = targets.map { FuzzSQL.quoted($0.name) }
      var selected = expressions
      if let alias = table.rowIDAlias, table.integerPrimaryKey == nil, random.chance(50) {
        names.insert(alias, at: 0)
        selected.insert("x + \(random.int(0...40))", at: 0)
      }
      let verb = random.pick(["INSERT OR IGNORE", "INSERT OR REPLACE", "INSERT"])
      return "\(verb) INTO \(q)(\(names.joined(separator: ", "))) SELECT \(selected.joined(separator: ", ")) FROM (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < \(count)) SELECT x FROM r)"
    case "update":
      let targets = random.sample(columns, random.int(1...min(2, columns.count)))
      let sets = targets.map { "\(FuzzSQL.quoted($0.name)) = \(expression(table, for: $0))" }
      let verb = random.weighted([(6, "UPDATE"), (2, "UPDATE OR REPLACE"), (1, "UPDATE OR IGNORE"), (1, "UPDATE OR FAIL")])
      let limit = random.chance(10) && table.kind != .view ? " LIMIT \(random.int(1...3))" : ""
      return "\(verb) \(q) SET \(sets.joined(separator: ", ")) WHERE \(condition(table))\(limit)"
    case "updateFrom":
      let sources = schema.tables.filter { $0.kind != .view && !$0.columns.isEmpty }
      let source = random.pick(sources)
      let target = random.pick(columns)
      let from = FuzzSQL.quoted(random.pick(source.columns).name)
      let join = table.rowIDAlias.flatMap { a in source.rowIDAlias.map { "\(q).\(a) = src.\($0)" } } ?? "1"
      return "UPDATE \(q) SET \(FuzzSQL.quoted(target.name)) = src.\(from) FROM \(source.q) AS src WHERE \(join)"
    case "rowidChange":
      guard let alias = table.integerPrimaryKey.map(FuzzSQL.quoted) ?? table.rowIDAlias, table.kind != .view else {
        return "DELETE FROM \(q) WHERE \(condition(table))"
      }
      let verb = random.pick(["UPDATE", "UPDATE OR REPLACE", "UPDATE OR IGNORE"])
      return "\(verb) \(q) SET \(alias) = \(alias) + \(random.pick(["1", "100", "-1", "3"])) WHERE \(condition(table))"
    case "deleteAll":
      return "DELETE FROM \(q)"
    default:
      let limit = random.chance(10) && table.kind != .view ? " LIMIT \(random.int(1...3))" : ""
      return "DELETE FROM \(q) WHERE \(condition(table))\(limit)"
    }
  }

  mutating func upsertClause(_ table: FuzzTable) -> String {
    guard !table.uniqueKeys.isEmpty else { return " ON CONFLICT DO NOTHING" }
    var clauses: [String] = []
    // Distinct targets: SQLite 3.40.1 overwrites a row and corrupts an index
    // on `ON CONFLICT(k) DO NOTHING ON CONFLICT(k) DO NOTHING ON CONFLICT DO
    // NOTHING` with a rowid conflict (an SQLite bug, not one of GroupSync).
    for key in random.sample(table.uniqueKeys, random.weighted([(4, 1), (1, 2)])) {
      let target = "(\(key.map(FuzzSQL.quoted).joined(separator: ", ")))"
      let updatable = table.writableColumns.filter { column in !key.contains { $0 == column.name } }
      if updatable.isEmpty || random.chance(25) {
        clauses.append(" ON CONFLICT\(target) DO NOTHING")
      } else {
        let column = random.pick(updatable)
        let c = FuzzSQL.quoted(column.name)
        let value = random.pick(["excluded.\(c)", "coalesce(\(c), 0) + 1", self.value(for: column)])
        let whereClause = random.chance(20) ? " WHERE excluded.\(c) IS NOT NULL" : ""
        clauses.append(" ON CONFLICT\(target) DO UPDATE SET \(c) = \(value)\(whereClause)")
      }
    }
    if random.chance(20) { clauses.append(" ON CONFLICT DO NOTHING") }
    return clauses.joined()
  }

  mutating func ftsDML(_ table: FuzzTable, _ content: FuzzTable.FTSContent) -> String {
    let q = table.q
    let columns = table.columns
    let words = ["a", "b", "x", "zz", "a b", "hello world", "x x b"]
    let text = { (g: inout CaptureFuzzGenerator) in FuzzSQL.literal(g.random.pick(words)) }
    let names = columns.map { FuzzSQL.quoted($0.name) }.joined(separator: ", ")
    switch random.weighted([(5, 0), (3, 1), (3, 2), (1, 3), (1, 4), (content == .normal ? 3 : 0, 5)]) {
    case 0:
      let rowID = random.chance(60) ? "\(random.int(1...30))" : "NULL"
      let values = columns.map { _ in text(&self) }.joined(separator: ", ")
      let verb = random.pick(["INSERT", "INSERT", "INSERT OR REPLACE"])
      return "\(verb) INTO \(q)(rowid, \(names)) VALUES (\(rowID), \(values))"
    case 1:
      guard let column = columns.first else { return "DELETE FROM \(q) WHERE rowid = 1" }
      return "UPDATE \(q) SET \(FuzzSQL.quoted(column.name)) = \(text(&self)) WHERE \(condition(table))"
    case 2:
      return "DELETE FROM \(q) WHERE \(condition(table))"
    case 3:
      let module = if case .fts(let module, _) = table.kind { module } else { "fts5" }
      let command = module == "fts5" ? random.pick(["delete-all", "rebuild", "optimize"]) : random.pick(["rebuild", "optimize"])
      return "INSERT INTO \(q)(\(q)) VALUES('\(command)')"
    case 5:
      // Straight into the shadow tables that hold the documents: what the
      // full-text table shows changes with them.
      let module = if case .fts(let module, _) = table.kind { module } else { "fts5" }
      let id = module == "fts5" ? "id" : "docid"
      let first = module == "fts5" ? "c0" : "c0" + (columns.first?.name ?? "")
      let shadow = FuzzSQL.quoted(table.name + "_content")
      let row = random.int(1...30)
      switch random.int(0...3) {
      case 0: return "DELETE FROM \(shadow) WHERE \(id) = \(row)"
      case 1: return "UPDATE \(shadow) SET \(FuzzSQL.quoted(first)) = \(text(&self)) WHERE \(id) = \(row)"
      case 2: return "INSERT OR REPLACE INTO \(shadow)(\(id), \(FuzzSQL.quoted(first))) VALUES (\(row), \(text(&self)))"
      default: return "DELETE FROM \(FuzzSQL.quoted(table.name + "_docsize")) WHERE \(id) = \(row)"
      }
    default:
      // The 'delete' command of contentless and external-content tables.
      let values = columns.map { _ in text(&self) }.joined(separator: ", ")
      return "INSERT INTO \(q)(\(q), rowid, \(names)) VALUES('delete', \(random.int(1...30)), \(values))"
    }
  }

  mutating func rtreeDML(_ table: FuzzTable) -> String {
    let q = table.q
    let coordinates = table.columns.dropFirst().filter { !$0.name.hasPrefix("+") }
    func box(_ g: inout CaptureFuzzGenerator) -> [String] {
      var values: [String] = []
      for (index, column) in coordinates.enumerated() {
        if column.name == "label" { values.append(g.value(for: nil)); continue }
        let low = g.random.int(0...20)
        values.append(index % 2 == 0 ? "\(low)" : "\(low + g.random.int(0...5))")
        if g.random.chance(3) { values[values.count - 1] = "\(low - 50)" }  // min > max: a constraint error
      }
      return values
    }
    switch random.weighted([(5, 0), (3, 1), (2, 2)]) {
    case 0:
      let id = random.chance(70) ? "\(random.int(1...30))" : "NULL"
      let verb = random.pick(["INSERT", "INSERT OR REPLACE", "INSERT OR IGNORE"])
      return "\(verb) INTO \(q) VALUES (\(([id] + box(&self)).joined(separator: ", ")))"
    case 1:
      guard let column = coordinates.first else { return "DELETE FROM \(q) WHERE rowid = 1" }
      let target = random.chance(20) ? FuzzSQL.quoted(table.columns[0].name) : FuzzSQL.quoted(column.name)
      return "UPDATE \(q) SET \(target) = \(target) + \(random.int(-2...2)) WHERE \(condition(table))"
    default:
      return "DELETE FROM \(q) WHERE \(condition(table))"
    }
  }
}
