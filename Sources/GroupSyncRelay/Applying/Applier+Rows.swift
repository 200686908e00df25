// Applying one row image: the table's shape here, the image applied,
// held for a missing parent, or its changes held for a row not here.
import Foundation
import GRDB
import GroupSync

extension Applier {
  /// The local table `name` (nil: this host has no such table), looked up
  /// once per schema version and kept for the transaction.
  func localShape(_ name: String, _ db: Database, _ shapes: inout [String: TableShape?]) throws -> TableShape? {
    if let shape = shapes[name] { return shape }
    let shape: TableShape?
    switch try context.shape(of: name, version: try StoreSchema.version(db), db) {
    case .table(let found): shape = found
    case .none: shape = nil
    case .withoutRowID: throw TableShape.unsupported(name, store: context.storeName)
    }
    shapes[name] = shape
    return shape
  }

  /// Applies one image of table `name` as the log has it, whatever this
  /// host's version of the schema (a rolling upgrade):
  /// - to a table this host does not have yet, it waits (held), and is
  ///   applied once this host has the table;
  /// - columns this host does not have yet are kept aside (``SchemaDrift``)
  ///   and filled in once it has them; the others are applied now;
  /// - a column of this host's table the image lacks keeps its value (its
  ///   default in a new row);
  /// - a column this host had and no longer has (dropped or renamed here)
  ///   is no additive change: the entry waits, with an error naming it.
  func applyImage(
    _ image: RowImage, table name: String, columns: [String], position: Int64, pass: Pass, _ db: Database,
    _ shapes: inout [String: TableShape?]
  ) throws -> Outcome {
    // SQLite's, GRDB's, GroupSync's and the relay's own tables are never
    // written from the log, whatever an entry says (the server refuses
    // such a shipment of relay 5; one of an older relay ends here).
    guard !TableShape.isInternal(name.lowercased()) else { return .unchanged }
    guard let shape = try localShape(name, db, &shapes) else {
      guard image.values != nil else {
        try pass.release(db, table: name, gid: image.gid, through: position)
        return .unchanged
      }
      if try SchemaDrift.hadTable(db, table: name) {
        throw RelayError.schemaMismatch(
          store: context.storeName, table: name, column: nil,
          reason: "this host's store no longer has the table (dropped or renamed here) and the entry has rows of it; "
            + "the entry waits until the schemas agree")
      }
      if image.isPartial {
        return try holdChanges(
          image, table: name, why: "the table is not here yet", columns: columns, position: position, pass: pass, db)
      }
      let reason = "table \(name) does not exist here yet (added on another host): applied once it does"
      return try hold(
        image, table: name, columns: columns, position: position, reason: reason, cause: .missingTable, pass: pass, db)
    }
    let local = Set(shape.columns.map { $0.lowercased() })
    let unknown = columns.indices.filter { !local.contains(columns[$0].lowercased()) }
    guard !unknown.isEmpty else {
      return try applyRow(image, columns: columns, shape: shape, position: position, pass: pass, db)
    }
    for index in unknown where try SchemaDrift.hadColumn(db, table: name, column: columns[index]) {
      throw RelayError.schemaMismatch(
        store: context.storeName, table: name, column: columns[index],
        reason: "the entry has the column and this host's table no longer has it (dropped or renamed here); "
          + "the entry waits until the schemas agree")
    }
    let kept = columns.indices.filter { local.contains(columns[$0].lowercased()) }
    var known = image
    known.values = image.values.map { values in kept.map { values[$0] } }
    let stale = try (GlobalIDTable.entry(db, table: name, gid: image.gid)?.position ?? 0) >= position
    let outcome = try applyRow(known, columns: kept.map { columns[$0] }, shape: shape, position: position, pass: pass, db)
    if outcome == .held {
      // It waits whole, the columns this host lacks included.
      if image.isPartial {
        try HeldRows.mergeChanges(image, table: name, columns: columns, position: position, db)
      } else {
        try HeldRows.replaceImage(image, table: name, columns: columns, db)
      }
    } else if let values = image.values, !stale {
      try SchemaDrift.keep(
        db, table: name, gid: image.gid, columns: unknown.map { columns[$0] }, values: unknown.map { values[$0] },
        position: position)
    } else if image.values == nil {
      try SchemaDrift.forget(db, table: name, gid: image.gid)
    }
    return outcome
  }

  /// Inserts a row. A column this host's table requires (NOT NULL, no
  /// default) that the image lacks or holds NULL in is a schema
  /// difference, named; the entry waits until the schemas agree.
  func insert(_ shape: TableShape, columns: [String], values: [RowValue], _ db: Database) throws -> Int64 {
    do {
      return try shape.insert(db, columns: columns, values: values)
    } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_NOTNULL {
      let column = error.message?.components(separatedBy: ".").last ?? "?"
      let shipped = columns.contains { $0.lowercased() == column.lowercased() }
      throw RelayError.schemaMismatch(
        store: context.storeName, table: shape.name, column: column,
        reason: shipped
          ? "the entry holds NULL and this host's table requires a value"
          : "this host's table requires the column (NOT NULL, no default) and the entry has not")
    }
  }

  /// Holds `image` until it can be applied; told once per row.
  func hold(
    _ image: RowImage, table: String, columns: [String], position: Int64, reason: String,
    cause: RelayMetrics.HeldCause, pass: Pass, _ db: Database
  ) throws -> Outcome {
    pass.mayHold = true
    let held = HeldRows.Held(
      table: table, image: image, columns: columns, position: position, reason: reason, cause: cause)
    if try HeldRows.hold(held, db) {
      context.emit(.held(store: context.storeName, table: table, gid: image.gid, reason: reason))
    }
    return .held
  }

  /// What applying one row image did here.
  enum Outcome: Equatable {
    case changed, unchanged
    /// Kept in ``HeldRows`` until the row a reference names is here.
    case held
  }

  /// Applies one row image of position `position`.
  func applyRow(
    _ image: RowImage, columns: [String], shape: TableShape, position: Int64, pass: Pass, _ db: Database
  ) throws -> Outcome {
    let table = shape.name
    let mapping = try GlobalIDTable.entry(db, table: table, gid: image.gid)
    if let mapping, mapping.position >= position {
      try pass.release(db, table: table, gid: image.gid, through: position)
      return .unchanged
    }
    // Held while this host's own change to the row waits to ship, where it
    // is settled against this image. A row this host does not have cannot
    // hold such a change (a table shipped whole ships only the rows it
    // has): it is applied now, or it would be lost once the place moves on.
    if pass.pending.holds(mapping, table: table) {
      try pass.release(db, table: table, gid: image.gid, through: position)
      return .unchanged
    }
    // Changed columns only (log format 2): they apply to the row as this
    // host has it, which must be here.
    let localValues = try mapping?.rowID.flatMap { try shape.values(db, rowID: $0, columns: columns) }
    if image.isPartial, image.values != nil, localValues == nil {
      let why = mapping.map { mapping in
        mapping.rowID.map { "its rowid \($0) here is empty" } ?? "it was deleted here (at entry \(mapping.position))"
      } ?? "it never came here"
      return try holdChanges(image, table: table, why: why, columns: columns, position: position, pass: pass, db)
    }
    // The values of the image as the log has them, for the next update's
    // changed columns.
    let base = image.values.map { shipped -> GlobalIDTable.StoredBase in
      guard image.isPartial else { return GlobalIDTable.StoredBase(shipped, columns: columns) }
      var merged = mapping?.base?.values ?? [:]
      for (column, value) in zip(columns, shipped) { merged[column.lowercased()] = value }
      return GlobalIDTable.StoredBase(merged)
    }
    var values = image.values
    if let shipped = values {
      switch try translate(shipped, columns: columns, table: table, pass: pass, db) {
      case .values(let translated, let followed):
        values = translated
        if let (reference, parent) = followed, !pass.ownEntry {
          report(
            parentDeleted: reference, parent: parent, table: table, gid: image.gid, columns: columns,
            values: image.values, position: position)
        }
      case .held(let reason, let cause):
        return try hold(
          image, table: table, columns: columns, position: position, reason: reason, cause: cause, pass: pass, db)
      case .orphaned(let reference, let parent):
        // The row it points at was deleted: the deletion stands, and this
        // row follows it as the reference's ON DELETE says.
        values = nil
        if !pass.ownEntry {
          report(
            parentDeleted: reference, parent: parent, table: table, gid: image.gid, columns: columns,
            values: image.values, position: position)
        }
      }
    }
    try pass.release(db, table: table, gid: image.gid, through: position)
    guard let values else {
      if let rowID = mapping?.rowID, localValues != nil {
        try deleteRow(shape, rowID: rowID, position: position, pass: pass, db)
      }
      try GlobalIDTable.set(.init(gid: image.gid, rowID: nil, position: position), db, table: table)
      return localValues != nil ? .changed : .unchanged
    }
    if let rowID = mapping?.rowID, let localValues {
      try GlobalIDTable.set(.init(gid: image.gid, rowID: rowID, position: position, base: base), db, table: table)
      guard localValues != values else { return .unchanged }
      return try write(
        image, values: values, columns: columns, into: rowID, shape: shape, position: position, base: base, pass: pass,
        db)
    }
    return try write(
      image, values: values, columns: columns, into: nil, shape: shape, position: position, base: base, pass: pass, db)
  }

  /// The changed columns of a row this host does not have: they join the
  /// image held for it (a row waiting for its table or for a row it points
  /// at), or, when none is held, the store re-synchronises from the rows'
  /// current images (the log holds the whole row; a host in step never
  /// gets here).
  func holdChanges(
    _ image: RowImage, table: String, why: String, columns: [String], position: Int64, pass: Pass, _ db: Database
  ) throws -> Outcome {
    if try HeldRows.mergeChanges(image, table: table, columns: columns, position: position, db) {
      pass.mayHold = true
      return .held
    }
    context.resyncReason = context.resyncReason
      ?? "entry \(position) changes columns of row \(image.gid) of \(table), which this host does not have (\(why))"
    return .unchanged
  }
}
