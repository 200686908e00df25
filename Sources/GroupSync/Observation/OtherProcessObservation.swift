import GRDB
import Logging

extension GroupFolder {
  /// Makes GRDB observations fire when other processes commit: every
  /// `ValueObservation` and `DatabaseRegionObservation` started in
  /// `writer` is told of the tables each of their change sets touched.
  ///
  /// GRDB's observation stops at the process boundary; this listens to
  /// the group and calls GRDB's `notifyChanges(in:)` for the changed and
  /// invalidated tables of each change set, inside a deferred transaction
  /// (which does not wait for another process's write lock). A reset
  /// notifies the whole database. Commits of this process through the
  /// store's own pool are seen by GRDB directly and not notified twice.
  /// For example:
  ///
  /// ```swift
  /// let relay = try group.observeOtherProcesses()
  /// let cancellable = ValueObservation
  ///   .tracking { db in try Note.fetchAll(db) }
  ///   .start(in: group.store.pool, onError: { _ in }, onChange: { notes in show(notes) })
  /// ```
  ///
  /// - Parameters:
  ///   - store: the store whose change sets are relayed (`main` by
  ///     default); a read-only store, which no process writes, is refused.
  ///   - writer: the GRDB database whose observations fire; the store's
  ///     own pool by default.
  /// - Returns: the running relay; it stops when cancelled or released.
  public func observeOtherProcesses(
    store: String = "main", in writer: (any DatabaseWriter)? = nil
  ) throws -> OtherProcessObservation {
    let relayed = try self.store(named: store)
    guard !relayed.isReadOnly else { throw GroupSyncError.readOnlyStore(store) }
    return try OtherProcessObservation(group: self, store: relayed, writer: writer)
  }
}

/// Relays other processes' change sets to the GRDB observations of one
/// database (see ``GroupFolder/observeOtherProcesses(store:in:)``).
public final class OtherProcessObservation: Sendable {
  private let listener: Listener
  private let task: Task<Void, Never>

  init(group: GroupFolder, store: Store, writer: (any DatabaseWriter)?) throws {
    let writer = writer ?? store.pool
    // The store's pool already saw this process's commits.
    let skipsOwnCommits = writer === store.pool
    listener = try group.listen()
    task = listener.start { event in
      switch event {
      case .changes(let changeSet):
        guard changeSet.storeID == store.storeID else { return }  // another store's
        if skipsOwnCommits && changeSet.writerProcessID == System.processID { return }
        await Self.notify(writer, store: store, tables: (Array(changeSet.tables.keys) + changeSet.invalidatedTableNames).map(\.name))
      case .reset(let reset):
        if reset.concerns(store.storeID) { await Self.notify(writer, store: store, tables: nil) }
      }
    }
  }

  deinit { cancel() }

  /// Stops relaying.
  public func cancel() {
    task.cancel()
    listener.close()
  }

  /// Notifies `tables` (all of them when nil) in a deferred transaction:
  /// GRDB's observers act on the commit of a transaction that notified.
  private static func notify(_ writer: any DatabaseWriter, store: Store, tables: [String]?) async {
    do {
      try await writer.writeWithoutTransaction { db in
        let notify = {
          try db.inTransaction(.deferred) {
            guard let tables else {
              try db.notifyChanges(in: .fullDatabase)
              return .commit
            }
            for table in tables {
              // A table this connection does not know (yet): notify everything.
              do {
                try db.notifyChanges(in: Table(table))
              } catch {
                try db.notifyChanges(in: .fullDatabase)
                break
              }
            }
            return .commit
          }
        }
        // On the store's own writer these are not its writes.
        if writer === store.pool { try store.relayingOtherProcesses(notify) } else { try notify() }
      }
    } catch {
      Logger.groupSync.error("cannot notify GRDB observers of other processes' changes: \(error)")
    }
  }
}
