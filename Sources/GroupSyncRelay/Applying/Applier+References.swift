// References between rows across hosts: global IDs translated to this
// host's keys, children that wait for a parent, and rows that follow a
// parent deleted elsewhere.
import Foundation
import GRDB
import GroupSync

/// How the applier keeps every reference pointing at the same row as on
/// the host that wrote it (see ``RowReference``).
extension Applier {
  /// The state of one local transaction of the applier.
  final class Pass {
    let graph: ReferenceGraph
    let pending: ReplicaContext.Unshipped
    /// Rows changed here because a row they point at was deleted, in the
    /// entry being applied (reported unless the entry names them too).
    var followers:
      [(table: String, gid: String?, rowID: Int64, columns: [String], values: [RowValue]?, reference: RowReference)] =
        []
    /// Rows being deleted (a cycle of references ends there).
    var deleting: Set<String> = []
    /// Whether the entry being applied is this host's own: a row of it
    /// that follows a deleted row was reported when that deletion was
    /// applied here (or made here).
    var ownEntry = false
    /// Whether any row may be held (most stores never hold one: no
    /// statement is spent on it then).
    var mayHold: Bool
    private var shapes: [String: TableShape?] = [:]

    init(_ context: ReplicaContext, _ db: Database) throws {
      graph = try context.referenceGraph(db)
      pending = try context.unshipped(db)
      mayHold = try HeldRows.count(db) > 0
    }

    /// Forgets what waited for the row `gid` up to `position`.
    func release(_ db: Database, table: String, gid: String, through position: Int64) throws {
      if mayHold { try HeldRows.release(db, table: table, gid: gid, through: position) }
    }

    /// The local table `name`, or nil when it is none the relay can map.
    func shape(_ name: String, _ db: Database) throws -> TableShape? {
      if let known = shapes[name] { return known }
      let shape = (try? TableShape.read(db, table: name, store: "")) ?? nil
      shapes[name] = shape
      return shape
    }
  }

  /// An image's values with each reference made this host's rowid.
  enum Translated {
    /// `followed`: a reference named a deleted row and was set NULL (or
    /// to its default), as its ON DELETE says.
    case values([RowValue], followed: (RowReference, parent: String)?)
    /// A reference names a row this host does not have (yet).
    case held(reason: String, cause: RelayMetrics.HeldCause)
    /// A reference names a row deleted here (or in the log before), and
    /// its ON DELETE deletes this row too.
    case orphaned(RowReference, parent: String)
  }

  func translate(_ shipped: [RowValue], columns: [String], table: String, pass: Pass, _ db: Database) throws
    -> Translated
  {
    var values = shipped
    var followed: (RowReference, parent: String)?
    for reference in pass.graph.references(from: table) {
      guard let index = columns.firstIndex(where: { $0.lowercased() == reference.column.lowercased() }) else {
        continue
      }
      switch values[index] {
      case .reference(let gid):
        let parent = try GlobalIDTable.resolve(db, table: reference.parent, gid: gid)
        if let rowID = parent?.rowID, try pass.shape(reference.parent, db)?.values(db, rowID: rowID) != nil {
          values[index] = .integer(rowID)
          continue
        }
        guard parent != nil else {
          return .held(
            reason: "\(table).\(reference.column) points at row \(gid) of \(reference.parent), "
              + "which this host does not have yet",
            cause: .missingRow)
        }
        // Deleted here (its deletion may not have shipped yet) or in the log.
        switch reference.onDelete {
        case .cascade: return .orphaned(reference, parent: gid)
        case .setNull: values[index] = .null
        case .setDefault: values[index] = try Self.defaultValue(of: reference, db)
        }
        followed = (reference, gid)
      case .integer(let number):
        // From a host that does not count the column as a reference: the
        // number is a rowid there and may be another row's here.
        return .held(
          reason: "\(table).\(reference.column) holds the number \(number) from a host that does not translate "
            + "it as a reference to \(reference.parent): give every host the same references",
          cause: .untranslatedReference)
      default:
        continue
      }
    }
    return .values(values, followed: followed)
  }

  /// A reference column's declared default, when it is a number or NULL.
  private static func defaultValue(of reference: RowReference, _ db: Database) throws -> RowValue {
    let expression = try SchemaDrift.defaultExpression(db, table: reference.table, column: reference.column)
    return Int64(expression).map(RowValue.integer) ?? .null
  }

  /// Deletes row `rowID` of `shape`, and first what points at it, as its
  /// references' ON DELETE say (`RESTRICT` and `NO ACTION` as `CASCADE`:
  /// the deletion happened on a host that could not see these rows, and it
  /// stands everywhere). Done here rather than left to SQLite so that each
  /// row that follows keeps its global ID's record right (a tombstone, so
  /// that its rowid is never shipped as another row) and is reported.
  func deleteRow(_ shape: TableShape, rowID: Int64, position: Int64, pass: Pass, _ db: Database) throws {
    let key = "\(shape.name)/\(rowID)"
    guard pass.deleting.insert(key).inserted else { return }
    defer { pass.deleting.remove(key) }
    for reference in pass.graph.references(to: shape.name) {
      guard let child = try pass.shape(reference.table, db) else { continue }
      let column = reference.column.quotedDatabaseIdentifier
      let children = try Int64.fetchAll(
        db.cachedStatement(sql: "SELECT rowid FROM \(child.quotedName) WHERE \(column) = ?"), arguments: [rowID])
      for childRowID in children where !pass.deleting.contains("\(child.name)/\(childRowID)") {
        let entry = try GlobalIDTable.entry(db, table: child.name, rowID: childRowID)
        let values = try child.values(db, rowID: childRowID)
        switch reference.onDelete {
        case .cascade:
          try deleteRow(child, rowID: childRowID, position: position, pass: pass, db)
          if let entry {
            try GlobalIDTable.set(.init(gid: entry.gid, rowID: nil, position: position), db, table: child.name)
          }
        case .setNull, .setDefault:
          let value = reference.onDelete == .setNull ? RowValue.null : try Self.defaultValue(of: reference, db)
          try db.cachedStatement(sql: "UPDATE \(child.quotedName) SET \(column) = ? WHERE rowid = ?")
            .execute(arguments: [value.databaseValue, childRowID])
        }
        pass.followers.append((child.name, entry?.gid, childRowID, child.columns, values, reference))
      }
    }
    try shape.delete(db, rowID: rowID)
  }

  /// Applies the held rows whose references resolve now, oldest first,
  /// until none does; returns how many rows changed.
  func applyHeldRows(pass: Pass, _ db: Database, _ shapes: inout [String: TableShape?]) throws -> Int {
    guard pass.mayHold else { return 0 }
    var changed = 0
    var progress = true
    while progress {
      progress = false
      for held in try HeldRows.all(db) {
        let outcome = try applyImage(
          held.image, table: held.table, columns: held.columns, position: held.position, pass: pass, db, &shapes)
        if outcome != .held { progress = true }
        if outcome == .changed { changed += 1 }
      }
    }
    return changed
  }

  /// Reports the rows that followed a deleted row in `entry` and that the
  /// entry does not name: its origin did not have them (a child added on
  /// another host while this one deleted the parent).
  func reportFollowers(of entry: LogEntry, position: Int64, pass: Pass) {
    defer { pass.followers.removeAll() }
    guard !pass.followers.isEmpty else { return }
    var named: Set<String> = []
    for table in entry.tables { for row in table.rows { named.insert(table.name + "/" + row.gid) } }
    for follower in pass.followers where !named.contains(follower.table + "/" + (follower.gid ?? "")) {
      report(
        parentDeleted: follower.reference, parent: nil, table: follower.table, gid: follower.gid,
        rowID: follower.rowID, columns: follower.columns, values: follower.values, position: position)
    }
  }

  /// Reports a row whose referenced row was deleted on another host: the
  /// deletion won, and the row followed it.
  /// (Not for this host's own entries: see ``Pass/ownEntry``.)
  func report(
    parentDeleted reference: RowReference, parent: String?, table: String, gid: String?, rowID: Int64? = nil,
    columns: [String], values: [RowValue]?, position: Int64
  ) {
    // A row of this host not shipped yet has no global ID: its rowid tells.
    let record = ConflictRecord(
      store: context.storeName, table: table, gid: gid ?? "unshipped rowid \(rowID ?? 0)", sequence: position,
      columns: columns,
      winnerHost: "", winnerValues: nil, loserHost: "", loserValues: values, rule: .parentDeleted(reference.onDelete),
      winnerRow: parent, loserRow: gid)
    context.tell(record)
  }
}
