// Writing one row image into its table, and the local row that holds a
// unique key the image collides with.
import Foundation
import GRDB
import GroupSync

extension Applier {
  /// Writes an image's values into row `target` (nil: a new row). When
  /// they hit a unique key another row of this host holds, the row earlier
  /// in the log keeps the key, on every host alike, and the two rows
  /// become one: rows that point at the one that gives way point at the
  /// other from then on (rows with the same key are the same row: a
  /// default folder every host made at first start, say).
  /// - The holder is earlier: the image is not applied; a new row's global
  ///   ID becomes an alias of the holder's, so references to it resolve to
  ///   the holder.
  /// - The image is earlier (the holder is later in the log, or not shipped
  ///   yet): a new row takes the holder's row over (its rowid, so what
  ///   points at it here points at the winner), and the holder's global ID
  ///   becomes an alias of the image's. An update of a row every host
  ///   knows deletes the holder here instead (what points at it follows
  ///   it), and that deletion ships if the holder changed here.
  /// Either way a conflict is reported, with both rows' values.
  func write(
    _ image: RowImage, values: [RowValue], columns: [String], into target: Int64?, shape: TableShape,
    position: Int64, base: GlobalIDTable.StoredBase?, pass: Pass, _ db: Database
  ) throws -> Outcome {
    var target = target
    for _ in 0..<8 {
      do {
        let rowID: Int64
        if let target {
          try shape.update(db, rowID: target, columns: columns, values: values)
          rowID = target
        } else {
          rowID = try insert(shape, columns: columns, values: values, db)
        }
        try GlobalIDTable.set(
          .init(gid: image.gid, rowID: rowID, position: position, base: base), db, table: shape.name)
        return .changed
      } catch let error as DatabaseError
        where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE
        || error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY
      {
        guard let holder = try uniqueKeyHolder(error, values: values, shape: shape, db), holder != target else {
          throw error
        }
        let holderEntry = try GlobalIDTable.entry(db, table: shape.name, rowID: holder)
        let holderValues = try shape.values(db, rowID: holder)
        let holderPosition = holderEntry.map { $0.position > 0 ? $0.position : Int64.max } ?? Int64.max
        var record = ConflictRecord(
          store: context.storeName, table: shape.name, gid: image.gid, sequence: position, columns: shape.columns,
          winnerHost: "", winnerValues: nil, loserHost: "", loserValues: nil, rule: .uniqueKey)
        if holderPosition < position {
          record.winnerRow = holderEntry?.gid
          record.winnerValues = holderValues
          record.loserRow = image.gid
          record.loserValues = image.values
          context.tell(record)
          if target == nil, let holderEntry {
            try GlobalIDTable.set(
              .init(gid: image.gid, rowID: nil, position: position, aliasOf: holderEntry.gid), db, table: shape.name)
          }
          return .unchanged
        }
        record.winnerRow = image.gid
        record.winnerValues = image.values
        record.loserRow = holderEntry?.gid
        record.loserValues = holderValues
        context.tell(record)
        guard target == nil else {
          // Two rows every host knows: the holder gives way here, and its
          // deletion ships if it changed here since (the other hosts delete
          // it then, and what points at it follows it there as here).
          try deleteRow(shape, rowID: holder, position: position, pass: pass, db)
          if let holderEntry, holderEntry.position > 0, !pass.pending.isDirty(table: shape.name, rowID: holder) {
            try GlobalIDTable.set(.init(gid: holderEntry.gid, rowID: nil, position: position), db, table: shape.name)
          }
          continue
        }
        // A new row takes the holder's over: the holder was made here and
        // not shipped (no other host knows it), or it is later in the log,
        // where every other host makes it an alias of this one.
        if let holderEntry {
          try GlobalIDTable.set(
            .init(gid: holderEntry.gid, rowID: nil, position: max(holderEntry.position, position), aliasOf: image.gid),
            db, table: shape.name)
        }
        target = holder
      }
    }
    throw RelayError.uniqueKeysKeepColliding(
      store: context.storeName, table: shape.name, gid: image.gid, position: position)
  }

  /// The local row holding the unique key `error` names, found by the
  /// columns SQLite lists ("UNIQUE constraint failed: t.a, t.b").
  private func uniqueKeyHolder(_ error: DatabaseError, values: [RowValue], shape: TableShape, _ db: Database) throws
    -> Int64?
  {
    guard let message = error.message, let range = message.range(of: "constraint failed: ") else { return nil }
    let names = message[range.upperBound...].split(separator: ",").map {
      String($0.trimmingCharacters(in: .whitespaces).split(separator: ".").last ?? "")
    }
    guard !names.isEmpty else { return nil }
    var conditions: [String] = []
    var arguments: [DatabaseValue] = []
    for name in names {
      guard let index = shape.columns.firstIndex(where: { $0.lowercased() == name.lowercased() }) else { return nil }
      conditions.append("\(name.quotedDatabaseIdentifier) IS ?")
      arguments.append(values[index].databaseValue)
    }
    return try Int64.fetchOne(
      db, sql: "SELECT rowid FROM \(shape.quotedName) WHERE \(conditions.joined(separator: " AND ")) LIMIT 1",
      arguments: StatementArguments(arguments))
  }
}
