import Foundation
import GRDB
import GroupSync

/// Applies the log to the local store, in the log's order, through
/// `Store.write`: listeners, contexts and observations of this host see
/// ordinary change sets. The applied position commits in the same local
/// transaction as the rows, so a relay killed at any instant neither loses
/// nor repeats an entry.
///
/// Per row, an entry at position p is applied unless
/// - the row holds an image of position p or later here (this host's own
///   later write, already in the log), or
/// - the row changed here and is not shipped yet: that write goes to the
///   log later, and the arbiter settles it (it wins under
///   last-writer-wins; under first-writer-wins the winner's values come
///   back in its own entry).
/// Every host thus ends with the image the log's order says.
struct Applier {
  let context: ReplicaContext
  /// Entries applied per local transaction at most.
  static let batchSize = 256
  /// How long one local transaction goes on taking entries: the store's
  /// other writers wait for its lock, with a busy timeout (10 s by
  /// default) that a batch of a slow machine could outlast.
  static let transactionBudget: Duration = .milliseconds(250)
  /// The pause after a transaction cut short by the budget, before the
  /// next: long enough for a writer that waits for the lock to take it,
  /// whoever opened it (SQLite's own busy timeout tries every 100 ms).
  static let pauseAfterCut: Duration = .milliseconds(100)

  /// An entry to apply: its position, origin and body decoded.
  private typealias Pending = (position: Int64, origin: String, originSequence: Int64, entry: LogEntry)

  /// Applies what the log holds past the applied place; returns whether
  /// anything was applied.
  ///
  /// The entries right after the place come from the notifications that
  /// carried them (``SharedLog/Hint``) when they did: no round trip.
  /// Otherwise the log is read from the place, when a notification told
  /// of an entry past it or ``ReplicaContext/mustReadLog`` asks (after a
  /// connect, and on the relay's timer).
  @discardableResult
  func apply(_ log: SharedLog) throws -> Bool {
    let context = self.context
    if let reason = context.divergence {
      try resync(log, reason: reason, diverged: true)
      return true
    }
    if let reason = context.resyncReason {
      context.resyncReason = nil
      try resync(log, reason: reason)
      return true
    }
    let entries: [Pending]
    if let carried = try carriedEntries() {
      entries = carried
    } else if context.mustReadLog || context.logHead > context.place.current.applied {
      guard let read = try readEntries(log) else { return true }
      entries = read
    } else {
      return false
    }
    if entries.isEmpty { return false }
    return try apply(entries, log)
  }

  /// The entries the notifications carried from the applied place on, in
  /// order (nil when none follows the place).
  private func carriedEntries() throws -> [Pending]? {
    let context = self.context
    let applied = context.place.current.applied
    context.carried = context.carried.filter { $0.key > applied }
    var entries: [Pending] = []
    while entries.count < Self.batchSize, let stored = context.carried.removeValue(forKey: applied + 1 + Int64(entries.count)) {
      guard let body = stored.body, let entry = try decode(body, position: stored.position, after: entries.count)
      else { break }
      entries.append((stored.position, stored.origin.host, stored.origin.sequence, entry))
    }
    return entries.isEmpty ? nil : entries
  }

  /// The entry at `position`, decoded; nil when it is in a format this
  /// relay does not read and `count` entries come before it in the batch:
  /// they apply, and the next batch starts with it.
  ///
  /// - Throws: ``RelayError/unreadableFormat(store:position:format:)`` when
  ///   it is the first of its batch: the store holds there.
  private func decode(_ body: String, position: Int64, after count: Int) throws -> LogEntry? {
    do {
      return try LogEntry.decode(body, store: context.storeName, sequence: position, formats: context.version.reads)
    } catch RelayError.unreadableFormat where count > 0 {
      return nil
    }
  }

  /// Reads the entries from the applied place on, and checks that the log
  /// still holds what this host applied; nil when it re-synchronised
  /// instead.
  private func readEntries(_ log: SharedLog) throws -> [Pending]? {
    let context = self.context
    let applied = context.place.current.applied
    // One snapshot: the clock row, and the entries from the applied place
    // on. The applied entry itself comes too, to check that the log still
    // holds the entry this host applied there.
    guard
      let window = try log.window(
        context.replica, from: max(applied, 1), limit: Self.batchSize + 1, bodiesAfter: applied)
    else { return [] }
    let head = window.head, purged = window.purged
    context.logHead = head
    var entries: [Pending] = []
    var atPlace: EntryOrigin?
    var expected = applied + 1
    for stored in window.entries {
      if stored.position == applied {
        // Its body stays on the server: only its origin is checked.
        atPlace = stored.origin
        continue
      }
      guard stored.position == expected, let body = stored.body,
        let entry = try decode(body, position: stored.position, after: entries.count)
      else { break }
      entries.append((stored.position, stored.origin.host, stored.origin.sequence, entry))
      expected += 1
    }
    if let reason = Self.divergence(place: context.place.current, head: head, purged: purged, entryAtPlace: atPlace) {
      try resync(log, reason: reason, diverged: true)
      return nil
    }
    if applied < purged {
      try resync(log, reason: "this host's place \(applied) was purged (log kept from \(purged + 1))")
      return nil
    }
    if entries.isEmpty {
      // Positions are gapless and this is one snapshot: past the place,
      // the log must hold the next entry.
      if head > applied {
        throw RelayError.invalidEntry(
          store: context.storeName, sequence: expected, reason: "entry \(expected) is missing from the log")
      }
      context.mustReadLog = false
      return []
    }
    // The log was read up to its head as of this snapshot.
    if entries.last?.position == head { context.mustReadLog = false }
    return entries
  }

  /// Applies `entries`, the next ones after the applied place, in one
  /// local transaction, or the first of them that fit in
  /// ``transactionBudget``: the rest are read again for the next one.
  private func apply(_ entries: [Pending], _ log: SharedLog) throws -> Bool {
    let context = self.context
    guard let final = entries.last else { return false }
    let start = ContinuousClock.now
    // The log reaches at least this far, whether or not the entries apply.
    context.logHead = max(context.logHead, final.position)
    var rowCount = 0
    context.failpoints.waitAtApplyGate(stop: context.stop)
    var taken = 0
    let (_, changeSet) = try context.writeAndReturnChangeSet { db in
      // Another process may have changed the schema since GRDB cached it.
      try context.refreshSchemaCache(db)
      let pass = try Pass(context, db)
      let changesBefore = db.totalChangesCount
      var notesAdded = false
      var shapes: [String: TableShape?] = [:]
      let began = ContinuousClock.now
      taken = 0
      for (position, origin, _, entry) in entries {
        if taken > 0 && ContinuousClock.now - began > Self.transactionBudget { break }
        taken += 1
        if try applyNotes(entry.notes ?? [], own: origin == context.host, db) { notesAdded = true }
        pass.ownEntry = origin == context.host
        for table in entry.tables {
          for row in table.rows {
            let outcome = try applyImage(
              row, table: table.name, columns: row.assignments(table.columns).columns, position: position, pass: pass,
              db, &shapes)
            if outcome == .changed { rowCount += 1 }
          }
        }
        pass.ownEntry = false
        reportFollowers(of: entry, position: position, pass: pass)
      }
      // A child that came before its parent (in the same entry, or in an
      // earlier one); a newer image of a held row has replaced it already.
      rowCount += try applyHeldRows(pass: pass, db, &shapes)
      // Entries that changed nothing here (this host's own, mostly) leave
      // the stored place behind, and the transaction commits nothing: a
      // relay restarted there reads them again and skips them again.
      guard db.totalChangesCount != changesBefore || notesAdded else { return }
      let last = entries[taken - 1]
      try context.place.change(db) { place in
        place.applied = last.position
        place.appliedOrigin = EntryOrigin(host: last.origin, sequence: last.originSequence)
      }
    }
    let applied = entries[..<taken]
    let last = entries[taken - 1]
    context.emit(
      .applied(
        store: context.storeName, position: last.position, entries: applied.count, rows: rowCount,
        localSequence: changeSet?.sequence))
    context.countApplied(applied.count)
    ReplicaMetrics.record(context.metrics.applyDuration, since: start)
    for (_, origin, _, entry) in applied where origin != context.host {
      for conflict in entry.conflicts { context.tell(conflict) }
    }
    log.recordApplied(context.replica, through: last.position)
    if taken < entries.count {
      // The entries left over are read again (the log's head is past the
      // place); the pause lets the store's other writers in first.
      context.mustReadLog = true
      Thread.sleep(forTimeInterval: Self.pauseAfterCut.inSeconds)
    }
    return true
  }

  /// Why the log no longer holds the entry this host applied last, given
  /// the log's head, its purge horizon and the origin of the entry now at
  /// the applied place (nil: none); nil when it does, or when that entry
  /// was purged and nothing can be told.
  static func divergence(place: ReplicaPlace.Place, head: Int64, purged: Int64, entryAtPlace: EntryOrigin?)
    -> String?
  {
    let applied = place.applied
    guard applied > 0 else { return nil }
    if applied > head {
      return "the log ends at \(head), below this host's place \(applied): entries it applied were lost "
        + "(a failover to a standby that had not received them, or a restored backup)"
    }
    guard applied > purged else { return nil }
    guard let entryAtPlace else {
      return "the log no longer holds entry \(applied), which this host applied: the log lost entries (a failover)"
    }
    if let known = place.appliedOrigin, known != entryAtPlace {
      return "the log's entry \(applied) is no longer the one this host applied (\(known.host) #\(known.sequence), "
        + "now \(entryAtPlace.host) #\(entryAtPlace.sequence)): the log lost entries (a failover)"
    }
    return nil
  }

  /// Group-defaults changes are applied from every entry, this host's own
  /// too, so that every host ends with the value last in the log's order
  /// (a change that does not change the value here tells nobody);
  /// notifications are re-posted from the other hosts' entries only.
  /// Returns whether it added a note (which must commit with the place).
  private func applyNotes(_ notes: [ShippedNote], own: Bool, _ db: Database) throws -> Bool {
    var added = false
    for note in notes {
      if note.name.hasPrefix("defaults/"),
        let change = try? JSONDecoder().decode(DefaultsChange.self, from: note.payload)
      {
        try context.store.applyDefaultsChange(change, in: db)
      } else if !own && note.name.hasPrefix("notify/") {
        try context.store.addNote(ChangeSetNote(name: note.name, payload: [UInt8](note.payload)), in: db)
        added = true
      }
    }
    return added
  }

  /// The local table `name` (nil: this host has no such table), read once
  /// per transaction.
  func localShape(_ name: String, _ db: Database, _ shapes: inout [String: TableShape?]) throws -> TableShape? {
    if let shape = shapes[name] { return shape }
    let shape = try TableShape.read(db, table: name, store: context.storeName)
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
  private func insert(_ shape: TableShape, columns: [String], values: [RowValue], _ db: Database) throws -> Int64 {
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
    let base = try image.values.map { shipped -> GlobalIDTable.StoredBase in
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
  private func holdChanges(
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
  private func write(
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
          winnerHost: "", winnerValues: nil, loserHost: "", loserValues: nil, rule: "unique-key")
        if holderPosition < position {
          record.winnerHost = "gid \(holderEntry?.gid ?? "?")"
          record.winnerValues = holderValues
          record.loserHost = "gid \(image.gid)"
          record.loserValues = image.values
          context.tell(record)
          if target == nil, let holderEntry {
            try GlobalIDTable.set(
              .init(gid: image.gid, rowID: nil, position: position, aliasOf: holderEntry.gid), db, table: shape.name)
          }
          return .unchanged
        }
        record.winnerHost = "gid \(image.gid)"
        record.winnerValues = image.values
        record.loserHost = "gid \(holderEntry?.gid ?? "unshipped rowid \(holder)")"
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
    throw RelayError.invalidEntry(
      store: context.storeName, sequence: position, reason: "row \(image.gid) of \(shape.name) keeps hitting unique keys")
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

  /// Re-synchronises the store from the rows' current images (`gs_row`),
  /// read in one snapshot with the log's position, when this host's place
  /// is no longer in the log. Rows changed here and not shipped yet are
  /// kept; they ship afterwards.
  ///
  /// `diverged`: the log lost entries this host applied or shipped (a
  /// failover to a standby that had not received them). The positions this
  /// host recorded may then name entries the log no longer holds (or holds
  /// other entries at), so none is trusted: every row takes the log's
  /// current image and position; a row the log does not know and this host
  /// did not change is deleted (it came from a lost entry: its origin ships
  /// it again); a row changed here keeps its values and ships as made on
  /// the log's current image.
  func resync(_ log: SharedLog, reason: String, diverged: Bool = false) throws {
    let context = self.context
    let snapshot = try log.snapshot(context.replica)
    let head = snapshot.head, headOrigin = snapshot.headOrigin
    var rowCount = 0
    try context.write { db in
      try context.refreshSchemaCache(db)
      let pass = try Pass(context, db)
      let pending = pass.pending
      if diverged {
        try GlobalIDTable.forgetPositions(db)
        try restoreDeletionsToShip(pending: pending, db)
      }
      var shapes: [String: TableShape?] = [:]
      var known: [String: Set<String>] = [:]
      for row in snapshot.rows {
        let table = row.table, gid = row.gid, position = row.position
        known[table, default: []].insert(gid)
        let columns = try JSONDecoder().decode([String].self, from: Data(row.columns.utf8))
        let values = try row.data.map {
          try StoredImage.decode($0, formats: context.version.reads, store: context.storeName, position: position)
        }
        let image = RowImage(gid: gid, rowID: nil, base: 0, values: values, lost: nil)
        let outcome = try applyImage(image, table: table, columns: columns, position: position, pass: pass, db, &shapes)
        if outcome == .changed {
          rowCount += 1
        } else if outcome == .unchanged, diverged, let mapping = try GlobalIDTable.entry(db, table: table, gid: gid), mapping.position == 0,
          pending.holds(mapping, table: table)
        {
          // Held: this host's change ships as made on the current image.
          try GlobalIDTable.raisePosition(db, table: table, gid: gid, to: position, deleted: false)
        }
      }
      rowCount += try applyHeldRows(pass: pass, db, &shapes)
      if diverged { rowCount += try removeRowsOfLostEntries(known: known, pass: pass, db) }
      try context.place.change(db) { place in
        place.applied = head
        place.appliedOrigin = headOrigin
      }
    }
    context.logHead = max(context.logHead, head)
    context.divergence = nil
    context.emit(.resync(store: context.storeName, position: head, rows: rowCount, reason: reason))
  }

  /// After a divergence: a row this host deleted and whose deletion
  /// shipped in an entry the log lost is a tombstone here, which the
  /// shipper (naming rows by rowid) cannot find: its global ID takes its
  /// former rowid again, so the deletion ships again (unless another row
  /// holds that rowid by now).
  private func restoreDeletionsToShip(pending: ReplicaContext.Unshipped, _ db: Database) throws {
    for (table, rowIDs) in pending.rows {
      guard let shape = (try? TableShape.read(db, table: table, store: context.storeName)) ?? nil else { continue }
      for rowID in rowIDs.sorted() where try shape.values(db, rowID: rowID) == nil {
        guard try GlobalIDTable.entry(db, table: table, rowID: rowID) == nil,
          let tombstone = try GlobalIDTable.tombstone(db, table: table, formerRowID: rowID)
        else { continue }
        try GlobalIDTable.set(.init(gid: tombstone.gid, rowID: rowID, position: 0), db, table: table)
      }
    }
  }

  /// After a divergence: deletes the rows the log does not know (mapped
  /// here, so they came through the log or were shipped from here) that
  /// this host did not change since its shipped place; their global IDs
  /// become tombstones of no position, so their origin can ship them again.
  private func removeRowsOfLostEntries(known: [String: Set<String>], pass: Pass, _ db: Database) throws -> Int {
    var removed = 0
    for table in try TableShape.userTables(db) {
      guard let shape = (try? TableShape.read(db, table: table, store: context.storeName)) ?? nil else { continue }
      for (rowID, entry) in try GlobalIDTable.liveEntries(db, table: table)
      where !(known[table]?.contains(entry.gid) ?? false) && !pass.pending.isDirty(table: table, rowID: rowID) {
        if try shape.values(db, rowID: rowID) != nil {
          try deleteRow(shape, rowID: rowID, position: 0, pass: pass, db)
          removed += 1
        }
        try GlobalIDTable.set(.init(gid: entry.gid, rowID: nil, position: 0), db, table: table)
      }
    }
    return removed
  }
}
