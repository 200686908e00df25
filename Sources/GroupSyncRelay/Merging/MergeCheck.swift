// Whether a merged row keeps its table's NOT NULL and CHECK constraints,
// tried in a scratch in-memory copy of the table.
import Foundation
import GRDB
import GroupSync

/// Whether a row merged from two writes is one the table accepts: its
/// NOT NULL and CHECK constraints hold for the row alone (a CHECK across
/// columns may refuse what each write made on its own). The row is
/// inserted into an empty copy of the table, in a scratch database in
/// memory, made from the table's own `CREATE TABLE`; unique keys, foreign
/// keys and triggers, which depend on other rows, are the applier's.
enum MergeCheck {
  /// SQLite's message when the table refuses `values` (of `columns`, as
  /// shipped), else nil. A table whose definition the scratch database
  /// cannot make (a collation or function of the program's own) is not
  /// checked: its hosts' appliers meet any refusal.
  static func refusal(_ values: [RowValue], columns: [String], table: String, context: ReplicaContext) throws
    -> String?
  {
    let (definition, local) = try context.store.read { db -> (String?, [RowValue]) in
      let sql = try String.fetchOne(
        db, sql: "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ? COLLATE NOCASE", arguments: [table])
      // A reference is stored as the rowid of the row it points at here.
      let local = try zip(columns, values).map { column, value -> RowValue in
        guard case .reference(let gid) = value else { return value }
        let parent = try context.referenceGraph(db).references(from: table)
          .first { $0.column.lowercased() == column.lowercased() }?.parent
        let rowID = try parent.flatMap { try GlobalIDTable.resolve(db, table: $0, gid: gid)?.rowID }
        return rowID.map(RowValue.integer) ?? .null
      }
      return (sql, local)
    }
    guard let definition else { return nil }
    let scratch = try DatabaseQueue()
    return try scratch.write { db -> String? in
      do {
        try db.execute(sql: definition)
      } catch {
        return nil
      }
      let list = columns.map(\.quotedDatabaseIdentifier).joined(separator: ", ")
      let marks = Array(repeating: "?", count: columns.count).joined(separator: ", ")
      do {
        try db.execute(
          sql: "INSERT INTO \(table.quotedDatabaseIdentifier) (\(list)) VALUES (\(marks))",
          arguments: StatementArguments(local.map(\.databaseValue)))
        return nil
      } catch let error as DatabaseError
        where error.resultCode == .SQLITE_CONSTRAINT
        && error.extendedResultCode != .SQLITE_CONSTRAINT_FOREIGNKEY
      {
        return error.message ?? "\(error)"
      }
    }
  }
}
