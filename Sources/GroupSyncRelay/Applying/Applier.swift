// Applying the shared log to the local store: entries read (carried by
// notifications, or from the log) and applied in order, one transaction
// at a time, with the applied place in the same transaction.
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
      // Not found by a recovery: the places are read back first.
      context.divergence = reason
      context.placesInDoubt = true
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
    let decoded = context.trace == nil ? 0 : RelayTrace.now()
    // The log reaches at least this far, whether or not the entries apply.
    context.logHead = max(context.logHead, final.position)
    var rowCount = 0
    context.failpoints.waitAtApplyGate(stop: context.stop)
    var taken = 0
    let (stored, changeSet) = try context.writeAndReturnChangeSet { db -> Bool in
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
      guard db.totalChangesCount != changesBefore || notesAdded else { return false }
      let last = entries[taken - 1]
      try context.place.change(db) { place in
        place.applied = last.position
        place.appliedOrigin = EntryOrigin(host: last.origin, sequence: last.originSequence)
      }
      return true
    }
    let applied = entries[..<taken]
    let last = entries[taken - 1]
    if let trace = context.trace {
      trace.record(
        RelayTrace.Apply(
          store: context.storeName, first: entries[0].position, last: last.position, notified: trace.notifiedAt,
          passBegan: trace.passBegan, decoded: decoded, applied: RelayTrace.now()))
    }
    if !stored {
      context.place.pass { place in
        place.applied = last.position
        place.appliedOrigin = EntryOrigin(host: last.origin, sequence: last.originSequence)
      }
    }
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
}
