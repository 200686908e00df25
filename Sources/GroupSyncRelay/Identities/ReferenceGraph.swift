// The store's references between tables (its foreign keys and those
// declared to the relay), read once per schema version.
import Foundation
import GRDB

/// Every reference between the replicated tables of one store: the ones
/// the schema declares (`REFERENCES`) and the ones declared to the relay.
/// Read anew in each transaction of the relay: another process may have
/// changed the schema.
struct ReferenceGraph: Sendable {
  /// By the table that holds them.
  private(set) var outgoing: [String: [RowReference]] = [:]
  /// By the table they point at.
  private(set) var incoming: [String: [RowReference]] = [:]
  /// Declared references whose table or column the store lacks (told, and
  /// left out).
  private(set) var unknown: [RowReference] = []
  /// Every column a foreign key starts from, by table (lowercased): those
  /// that point at other columns than a rowid travel as they are.
  private(set) var foreignKeyColumns: [String: Set<String>] = [:]

  var isEmpty: Bool { outgoing.isEmpty }

  func references(from table: String) -> [RowReference] { outgoing[table] ?? [] }
  func references(to table: String) -> [RowReference] { incoming[table] ?? [] }

  static func read(_ db: Database, declared: [RowReference]) throws -> ReferenceGraph {
    var graph = ReferenceGraph()
    var rowIDColumns: [String: String?] = [:]
    let tables = try TableShape.userTables(db)
    let known = Set(tables)
    func rowIDColumn(_ table: String) throws -> String? {
      if let cached = rowIDColumns[table] { return cached }
      let column = known.contains(table) ? try db.primaryKey(table, in: "main").rowIDColumn : nil
      rowIDColumns[table] = column
      return column
    }
    for table in tables {
      // One row per column of each foreign key: (id, seq, table, from, to, on_update, on_delete, match).
      let rows = try Row.fetchAll(db, sql: "PRAGMA main.foreign_key_list(\(table.quotedDatabaseIdentifier))")
      let columnsPerKey = Dictionary(grouping: rows, by: { $0[0] as Int64 }).mapValues(\.count)
      for row in rows {
        graph.foreignKeyColumns[table, default: []].insert((row[3] as String).lowercased())
        let parent: String = row[2]
        guard let parentRowID = try rowIDColumn(parent) else { continue }
        let to: String? = row[4]
        // `REFERENCES folder` with no column names the parent's primary key.
        let pointsAtRowID = to.map { $0.lowercased() == parentRowID.lowercased() } ?? (columnsPerKey[row[0]] == 1)
        guard pointsAtRowID else { continue }
        let action: RowReference.DeleteAction =
          switch (row[6] as String?)?.uppercased() {
          case "SET NULL": .setNull
          case "SET DEFAULT": .setDefault
          default: .cascade
          }
        graph.add(RowReference(table: table, column: row[3], parent: parent, onDelete: action))
      }
    }
    for reference in declared {
      let columns = known.contains(reference.table) ? try db.columns(in: reference.table, in: "main") : []
      guard columns.contains(where: { $0.name.lowercased() == reference.column.lowercased() }),
        known.contains(reference.parent)
      else {
        graph.unknown.append(reference)
        continue
      }
      let already = graph.references(from: reference.table).contains {
        $0.column.lowercased() == reference.column.lowercased()
      }
      if !already { graph.add(reference) }
    }
    return graph
  }

  private mutating func add(_ reference: RowReference) {
    outgoing[reference.table, default: []].append(reference)
    incoming[reference.parent, default: []].append(reference)
  }
}
