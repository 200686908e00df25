// After this host's own migration: its new columns recorded and filled
// in, and the rows held for tables it has now applied.
import Foundation
import GRDB
import GroupSync

extension Applier {
  /// After this host's schema changed (its own migration): records its
  /// columns, fills in the values kept for columns it has now, and applies
  /// the rows held for tables it has now. Runs before anything ships, so a
  /// table the migration made the relay ship whole ships the filled-in
  /// values, never the new columns' defaults over them. ``Relay`` runs it
  /// once per pass, before shipping.
  func reconcileSchema() throws {
    let context = self.context
    let version = try context.store.read { db in try StoreSchema.version(db) }
    guard version != context.schemaVersion else { return }
    try context.write { db in
      try context.refreshSchemaCache(db)
      try SchemaDrift.recordColumns(db)
      let pass = try Pass(context, db)
      for kept in try SchemaDrift.takeArrived(db) {
        // Not over a value this host wrote itself since (the migration that
        // added the column made the whole table count as changed, so the
        // column's value tells: still its default, or not).
        guard let mapping = try GlobalIDTable.entry(db, table: kept.table, gid: kept.gid), let rowID = mapping.rowID,
          !(pass.pending.rows[kept.table]?.contains(rowID) ?? false)
        else { continue }
        var value = kept.value
        if case .reference(let gid) = value {
          let reference = pass.graph.references(from: kept.table).first {
            $0.column.lowercased() == kept.column.lowercased()
          }
          let parent = try reference.flatMap { try GlobalIDTable.entry(db, table: $0.parent, gid: gid)?.rowID }
          value = parent.map(RowValue.integer) ?? .null
        }
        let column = kept.column.quotedDatabaseIdentifier
        let fallback = try SchemaDrift.defaultExpression(db, table: kept.table, column: kept.column)
        try db.execute(
          sql: "UPDATE main.\(kept.table.quotedDatabaseIdentifier) SET \(column) = ? "
            + "WHERE rowid = ? AND \(column) IS (\(fallback))",
          arguments: [value.databaseValue, rowID])
      }
      var shapes: [String: TableShape?] = [:]
      _ = try applyHeldRows(pass: pass, db, &shapes)
    }
    context.schemaVersion = version
  }
}
