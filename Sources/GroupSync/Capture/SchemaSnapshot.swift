import GRDB

/// The store's schema at one schema version, as the capture needs it: which
/// tables have rowids, which are virtual and which shadow tables carry a
/// virtual table's rowids, and the raw entries of `sqlite_schema` to tell
/// what a transaction changed in it.
struct SchemaSnapshot {
  enum TableKind: Equatable {
    case rowID
    case withoutRowID
    case virtual
    /// A shadow table of a virtual table (FTS, R*Tree), with its owner.
    case shadow(owner: TableName?)
    case view
  }

  /// What names an entry of `sqlite_schema`: its type and its name. A
  /// trigger may share its name with a table, an index or a view (they
  /// live in different namespaces), so the name alone names nothing.
  struct EntryKey: Hashable {
    let type: String
    let name: TableName
  }

  /// One row of `sqlite_schema`.
  typealias Entry = StoreSchema.Entry

  let version: Int64
  let kinds: [TableName: TableKind]
  let entries: [EntryKey: Entry]
  /// For each virtual table whose rows can be named: the shadow tables
  /// whose rowids are the virtual table's (FTS `_content` and `_docsize`,
  /// each where it exists; R*Tree `_rowid`). A write to any of them changes
  /// what the virtual table shows for that rowid.
  let rowIDShadows: [TableName: Set<TableName>]
  /// External-content full-text tables (`content='name'`), by name.
  let externalContents: [TableName: ExternalContent]

  /// Where an external-content full-text table reads its rows: a reader of
  /// it sees its content table's rows, so a change to those rows is a
  /// change of its rows too, whether or not the triggers that keep its
  /// index in step ran (a REPLACE deletes rows without firing them unless
  /// `recursive_triggers` is on).
  struct ExternalContent: Equatable {
    let content: TableName
    /// Whether its rowids are the content table's rowids (`content_rowid`
    /// unset, or naming the rowid or the INTEGER PRIMARY KEY).
    let sharesRowIDs: Bool
  }

  static func read(_ db: Database) throws -> SchemaSnapshot {
    let version = try StoreSchema.version(db)
    var entries: [EntryKey: Entry] = [:]
    var virtualModules: [TableName: String] = [:]
    for entry in try StoreSchema.entries(db) {
      let name = TableName(entry.name)
      entries[EntryKey(type: entry.type, name: name)] = entry
      if let sql = entry.sql, entry.type == "table", let module = Self.virtualModule(sql) {
        virtualModules[name] = module
      }
    }
    var kinds: [TableName: TableKind] = [:]
    var shadows: [TableName] = []
    for table in try StoreSchema.tables(db) {
      let name = TableName(table.name)
      switch table.type {
      case "virtual": kinds[name] = .virtual
      case "shadow": shadows.append(name)
      case "view": kinds[name] = .view
      default: kinds[name] = table.isWithoutRowID ? .withoutRowID : .rowID
      }
    }
    // A shadow table is named after its virtual table and a suffix: the
    // longest virtual table name that prefixes it owns it.
    let virtualTables = kinds.compactMap { $0.value == .virtual ? $0.key : nil }
    for shadow in shadows {
      let owner = virtualTables.filter { shadow.name.utf8.starts(with: ($0.name + "_").utf8) }
        .max { $0.name.utf8.count < $1.name.utf8.count }
      kinds[shadow] = .shadow(owner: owner)
    }
    var rowIDShadows: [TableName: Set<TableName>] = [:]
    for (table, module) in virtualModules {
      let candidates: [String] = switch module {
      case "fts5", "fts4", "fts3": ["_docsize", "_content"]
      case "rtree", "rtree_i32": ["_rowid"]
      default: []
      }
      let shadows = candidates.map { TableName(table.name + $0) }.filter { kinds[$0] == .shadow(owner: table) }
      if !shadows.isEmpty { rowIDShadows[table] = Set(shadows) }
    }
    var externalContents: [TableName: ExternalContent] = [:]
    for (table, module) in virtualModules where ["fts5", "fts4", "fts3"].contains(module) {
      let options = contentOptions(entries[EntryKey(type: "table", name: table)]?.sql ?? "")
      guard let content = options.content else { continue }
      // content='' is contentless, except that FTS3/4 then read a table
      // named "" when one exists.
      if content.isEmpty && (module == "fts5" || kinds[TableName("")] == nil) { continue }
      // SQLite finds the content table ignoring ASCII case.
      let name = kinds.keys.first { $0 == TableName(content) }
        ?? kinds.keys.first { asciiLowercased($0.name) == asciiLowercased(content) } ?? TableName(content)
      let rowIDColumn = module == "fts5" ? options.contentRowID ?? "rowid" : "rowid"
      let readsByRowID = kinds[name] == .rowID || kinds[name] == .virtual
      let sharesRowIDs = try readsByRowID && isRowID(rowIDColumn, of: name, db)
      externalContents[table] = ExternalContent(content: name, sharesRowIDs: sharesRowIDs)
    }
    return SchemaSnapshot(
      version: version, kinds: kinds, entries: entries, rowIDShadows: rowIDShadows, externalContents: externalContents)
  }

  /// The `content` and `content_rowid` options of `CREATE VIRTUAL TABLE ...
  /// USING fts5(...)`, unquoted.
  static func contentOptions(_ sql: String) -> (content: String?, contentRowID: String?) {
    let scalars = Array(sql.unicodeScalars)
    guard let open = scalars.firstIndex(of: "("), let close = scalars.lastIndex(of: ")"), open < close else {
      return (nil, nil)
    }
    // Split the arguments at commas outside quotes.
    var arguments: [[Unicode.Scalar]] = [[]]
    var quote: Unicode.Scalar?
    for scalar in scalars[(open + 1)..<close] {
      if let q = quote {
        if scalar == q { quote = nil }
      } else if scalar == "'" || scalar == "\"" || scalar == "`" {
        quote = scalar
      } else if scalar == "[" {
        quote = "]"
      } else if scalar == "," {
        arguments.append([])
        continue
      }
      arguments[arguments.count - 1].append(scalar)
    }
    var content: String?
    var contentRowID: String?
    for argument in arguments {
      guard let equals = argument.firstIndex(of: "=") else { continue }
      let key = asciiLowercased(String(String.UnicodeScalarView(argument[..<equals])).trimmingCharacters(in: .whitespaces))
      let value = unquoted(Array(argument[(equals + 1)...]))
      if key == "content" { content = value } else if key == "content_rowid" { contentRowID = value }
    }
    return (content, contentRowID)
  }

  /// An option value without its quotes ('', "", ``, []), quotes inside
  /// undoubled.
  private static func unquoted(_ value: [Unicode.Scalar]) -> String {
    var scalars = value[...]
    while let first = scalars.first, first.properties.isWhitespace { scalars.removeFirst() }
    while let last = scalars.last, last.properties.isWhitespace { scalars.removeLast() }
    guard let first = scalars.first, scalars.count >= 2 else { return String(String.UnicodeScalarView(scalars)) }
    let close: Unicode.Scalar? = switch first {
    case "'", "\"", "`": first
    case "[": "]"
    default: nil
    }
    guard let close, scalars.last == close else { return String(String.UnicodeScalarView(scalars)) }
    var out = String.UnicodeScalarView()
    var pendingQuote = false
    for scalar in scalars.dropFirst().dropLast() {
      if scalar == close && close != "]" && !pendingQuote {
        pendingQuote = true
        continue
      }
      pendingQuote = false
      out.append(scalar)
    }
    return String(out)
  }

  /// Whether `column` of the rowid table `table` names its rowid: an
  /// unshadowed `rowid`, `_rowid_` or `oid`, or its INTEGER PRIMARY KEY.
  private static func isRowID(_ column: String, of table: TableName, _ db: Database) throws -> Bool {
    let wanted = asciiLowercased(column)
    let columns = try StoreSchema.columns(of: table.name, db)
    guard columns.contains(where: { asciiLowercased($0.name) == wanted }) else {
      return ["rowid", "_rowid_", "oid"].contains(wanted)
    }
    let keys = columns.filter { $0.primaryKeyIndex > 0 }
    guard keys.count == 1, asciiLowercased(keys[0].name) == wanted, asciiLowercased(keys[0].type) == "integer" else {
      return false
    }
    // INTEGER PRIMARY KEY DESC is not the rowid: it has an index of its own.
    let keyIndexes = try Int.fetchOne(
      db, sql: "SELECT count(*) FROM pragma_index_list(?, 'main') WHERE origin = 'pk'", arguments: [table.name])
    return keyIndexes == 0
  }

  /// SQLite folds identifiers in ASCII only.
  static func asciiLowercased(_ name: String) -> String { SQLIdentifier.asciiLowercased(name) }

  /// The module of `CREATE VIRTUAL TABLE name USING module(...)`, lowercased.
  private static func virtualModule(_ sql: String) -> String? {
    let words = sql.split(whereSeparator: { $0.isWhitespace || $0 == "(" })
    guard words.count > 2, words[0].lowercased() == "create", words[1].lowercased() == "virtual",
      let using = words.firstIndex(where: { $0.lowercased() == "using" }), using + 1 < words.count
    else { return nil }
    return words[using + 1].lowercased()
  }

  /// The tables whose shape or existence differ between `old` and this
  /// snapshot, and among them those that did not exist in `old` (created,
  /// or renamed to that name: their rows may have come without a hook);
  /// nil when something changed that the entries do not show (a table
  /// dropped and created again the same way), which only "every table"
  /// answers safely.
  func changedTables(since old: SchemaSnapshot) -> (changed: Set<TableName>, created: Set<TableName>)? {
    var changed = Set<TableName>()
    var created = Set<TableName>()
    var otherDifferences = 0
    for key in Set(entries.keys).union(old.entries.keys) where entries[key] != old.entries[key] {
      if key.type == "table" {
        changed.insert(key.name)
        if old.entries[key] == nil { created.insert(key.name) }
      } else {
        otherDifferences += 1
      }
    }
    // Each schema statement bumps the version at least once; more bumps
    // than visible differences mean a change undid itself in shape only.
    if version - old.version > Int64(changed.count + otherDifferences) && changed.isEmpty { return nil }
    return (changed, created)
  }

  /// Every table a reader can query: rowid, WITHOUT ROWID and virtual ones.
  var readableTables: [TableName] {
    kinds.compactMap { name, kind in
      switch kind {
      case .rowID, .withoutRowID, .virtual: name
      case .shadow, .view: nil
      }
    }
  }
}
