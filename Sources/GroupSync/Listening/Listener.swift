// The listener: its inbox, its stores' sequencers, and its life (open,
// acknowledge, consume, close).
import CGroupSync
import Foundation
import GRDB
import Logging
import Synchronization

/// Receives the change sets of every process writing to a group's stores,
/// each store's in its sequence order, each exactly once.
///
/// A listener owns an inbox folder: it locks it for its whole life, empties
/// it on start (the stores already hold every earlier change), watches it,
/// and removes each file once delivered. A change set that does not arrive
/// (its writer died after COMMIT, its file was lost) is read from its
/// store's history; what the history cannot answer becomes a ``Reset`` of
/// that store. A read-only store replaced as a whole is a reset of that
/// store too. For example:
///
/// ```swift
/// let listener = try group.listen(as: "ui")
/// for await event in listener.events {
///   switch event {
///   case .changes(let changeSet): cache.merge(changeSet)      // changeSet.storeID says which store
///   case .reset(let reset): cache.reload(store: reset.store)  // nil: every store
///   }
/// }
/// ```
///
/// Consume ``events`` from one task at a time, or use ``start(_:)``.
///
/// `@unchecked Sendable`: state shared with the watcher thread and the
/// process's writers lives in `mailbox` (under a mutex); the rest is
/// touched only by the one consumer, which `consuming` enforces.
public final class Listener: InProcessInbox, @unchecked Sendable {
  /// The listener's name: its folder under `listeners/`.
  public let name: String
  /// The sequence number of the main store the listener starts after: the
  /// store's when it started, or, for a durable listener, the last one it
  /// acknowledged.
  public var startSequence: Int64 { sequencers[0].startSequence }
  /// Whether the listener keeps its place while its process is not running.
  public let isDurable: Bool
  /// How the listener behaves (grace period, rescan interval, bounds).
  public let options: ListenerOptions

  let directory: StoreDirectory
  let metrics: ListenerMetrics
  /// Its inbox: folders, lock, watch, registration; shared with the
  /// sequencers, which read and remove the files in it.
  let inbox: OwnedInbox

  /// What the watcher thread and in-process writers hand the consumer.
  let mailbox: ListenerMailbox
  static let maximumHints = 4096
  let consuming = Atomic<Bool>(false)
  /// The main store's next sequence, readable from the watcher thread, so
  /// that our own removals of delivered files wake nobody.
  let mainStoreNextSequence = Atomic<Int64>(0)

  // Consumer-only state.
  /// One sequencer per store of the group: the main store first.
  var sequencers: [StoreSequencer]
  /// The sequencer to try first next time, so that no store starves another.
  var nextSequencer = 0
  /// Stores whose file could not be opened (logged once; tried again on
  /// each rescan tick).
  var unopenable = Set<String>()
  /// An empty buffer with room, swapped with the mailbox's hinted
  /// sequences when they are taken, so that neither is copied.
  var emptyHintBuffer: [(store: String, sequence: Int64)] = []
  /// One reset per act of bad input in the inbox, shared with the sequencers.
  let hostileActs: HostileActs

  init(directory: StoreDirectory, name: String, options: ListenerOptions, ephemeral: Bool, durable: Bool) throws {
    self.directory = directory
    self.isDurable = durable
    guard GroupLayout.isValidListenerName(name) else { throw GroupSyncError.invalidListenerName(name) }
    self.name = name
    self.options = options
    hostileActs = HostileActs(quiet: max(options.rescanInterval * 2, .seconds(1)))
    metrics = ListenerMetrics(listener: ephemeral ? GroupSyncMetrics.ephemeralListener : name, factory: options.metricsFactory)
    // Order matters: lock, then empty the inbox, then read the sequences.
    // A writer that saw us dead committed before the lock, so before the
    // sequence is read; anything it linked meanwhile is at or below it.
    inbox = try OwnedInbox(
      root: directory.root, group: directory.layout.root, name: name,
      rescanMilliseconds: UInt64(options.rescanInterval.milliseconds),
      removeFolderOnClose: ephemeral || options.removeFolderOnClose)
    mailbox = ListenerMailbox(inbox: inbox)
    sequencers = []
    do {
      // Registered in-process before the sequences are read: this
      // process's commits after it come in memory, never through the inbox.
      inbox.register(self)
      for entry in try directory.entries() {
        do {
          sequencers.append(try makeSequencer(directory.store(named: entry.name), fromStart: false))
        } catch where entry.name != GroupLayout.mainStoreName {
          // A planted or broken file must not stop delivery of the others.
          Logger.groupSync.error("listener '\(name)': cannot open store '\(entry.name)': \(error)")
          unopenable.insert(entry.name)
        }
      }
      mainStoreNextSequence.store(sequencers[0].nextSequence, ordering: .relaxed)
      // Only arrivals wake the watcher: the listener's own removals and a
      // writer's links into other inboxes do not.
      try inbox.watch { [weak self] event in self?.handle(event) }
    } catch {
      inbox.close()
      throw error
    }
  }

  func makeSequencer(_ store: Store, fromStart: Bool) throws -> StoreSequencer {
    let cursor: DurableCursor?
    if !isDurable {
      cursor = nil
    } else if options.acknowledgement == .inStore && !store.isReadOnly {
      cursor = try DurableCursor(store: store, name: name)
    } else {
      cursor = try DurableCursor(file: inbox.ownerFolder, store: store.name)
    }
    return try StoreSequencer(
      store: store, listener: name, options: options, cursor: cursor, inbox: inbox, hostileActs: hostileActs,
      fromStart: fromStart)
  }

  deinit { close() }

  /// Acknowledges `changeSet` and everything before it: a durable listener
  /// resumes after it. With ``Acknowledgement/automatic`` this happens when
  /// the next event is asked for.
  public func acknowledge(_ changeSet: ChangeSet) throws {
    guard let cursor = sequencer(of: changeSet)?.cursor else { throw GroupSyncError.listenerNotDurable(name) }
    guard case .file = cursor.storage else {
      throw GroupSyncError.acknowledgementOfOtherKind(listener: name, placeKeptInStore: true)
    }
    try cursor.write(changeSet.sequence)
  }

  /// Acknowledges `changeSet` inside `db`'s transaction (a `store.write`
  /// of the change set's store), for ``Acknowledgement/inStore``: the
  /// place commits, or rolls back, with the consumer's own changes.
  public func acknowledge(_ changeSet: ChangeSet, in db: Database) throws {
    guard let cursor = sequencer(of: changeSet)?.cursor else { throw GroupSyncError.listenerNotDurable(name) }
    guard case .store = cursor.storage else {
      throw GroupSyncError.acknowledgementOfOtherKind(listener: name, placeKeptInStore: false)
    }
    try DurableCursor.write(changeSet.sequence, name: name, db)
  }

  func sequencer(of changeSet: ChangeSet) -> StoreSequencer? {
    sequencers.first { $0.storeID == changeSet.storeID }
  }

  /// The delivered events, in order. Iterate from one task at a time;
  /// iteration ends when the listener closes or the task is cancelled.
  public var events: Events { Events(listener: self) }

  /// Delivers every event to `handler`, in order, on a task of its own.
  /// Cancel the returned task, or close the listener, to stop.
  @discardableResult
  public func start(_ handler: @escaping @Sendable (ListenerEvent) async -> Void) -> Task<Void, Never> {
    Task {
      for await event in self.events { await handler(event) }
    }
  }

  /// Delivers every event to `handler` on the process's watcher thread,
  /// the moment it is read: one wake-up per change set, the fastest way to
  /// receive them. For example:
  ///
  /// ```swift
  /// let listener = try group.listen(as: "indexer")
  /// listener.startOnWatcherThread { event in
  ///   if case .changes(let changeSet) = event { index.enqueue(changeSet) }
  /// }
  /// ```
  ///
  /// The watcher thread reads, decodes and removes each inbox file and
  /// calls `handler` right there, instead of waking a task to do it (what
  /// ``events`` and ``start(_:)`` do: a second thread woken per change
  /// set). Events come in the same order, exactly once, with the same
  /// automatic acknowledgement (when `handler` returns). The thread is
  /// shared by every listener of the process: keep `handler` short and
  /// never wait in it for another listener's events; hand longer work to
  /// a queue or task of your own. Call it once, instead of iterating
  /// ``events``; ``close()`` stops it, also from inside `handler`.
  public func startOnWatcherThread(_ handler: @escaping @Sendable (ListenerEvent) -> Void) {
    precondition(!consuming.exchange(true, ordering: .acquiring), Self.consumedTwice)
    // The first look (what is waiting already) happens on the watcher
    // thread too: the consumer's state is never touched from two threads.
    mailbox.withContents { $0.direct = handler }
    inbox.wake()
  }

  /// Stops listening: releases the lock, empties the inbox, and wakes the
  /// consumer, whose iteration ends. Safe to call from any thread, any
  /// number of times.
  public func close() {
    let (waiter, first): (UnsafeContinuation<Void, Never>?, Bool) =
      mailbox.withContents { contents in
        guard !contents.closed else { return (nil, false) }
        contents.closed = true
        defer {
          contents.waiter = nil
          contents.direct = nil  // the handler may hold the listener
        }
        return (contents.waiter, true)
      }
    guard first else {
      // Another thread is closing (a signal handler's, say): return once
      // its clean-up is done, so that a process may exit right after (on
      // a loaded machine that can take seconds). A call from inside that
      // clean-up, on its own thread, returns at once.
      let me = pthread_self()
      while !closing.withLock({ $0.finished || $0.thread.map { pthread_equal($0, me) != 0 } ?? false }) {
        usleep(1_000)
      }
      return
    }
    closing.withLock { $0.thread = pthread_self() }
    defer { closing.withLock { $0.finished = true } }
    inbox.close()  // writers stop delivering; the name is free again
    waiter?.resume()
  }

  /// The thread of the first close(), and whether its clean-up is done.
  private let closing = Locked<(thread: pthread_t?, finished: Bool)>((nil, false))

  /// Whether ``close()`` was called (by anyone, from any thread).
  public var isClosed: Bool { mailbox.withContents { $0.closed } }

  /// The listener's events as an `AsyncSequence`.
  public struct Events: AsyncSequence, Sendable {
    let listener: Listener

    /// An iterator over the listener's events; one at a time per listener.
    public func makeAsyncIterator() -> Iterator { Iterator(listener: listener) }

    /// Waits for the listener's next event.
    public struct Iterator: AsyncIteratorProtocol {
      let listener: Listener
      /// The next event, or nil once the listener closed or the task was
      /// cancelled.
      public mutating func next() async -> ListenerEvent? { await listener.nextEvent() }
    }
  }
}

extension Duration {
  var milliseconds: Int64 {
    let (seconds, attoseconds) = components
    return seconds * 1000 + attoseconds / 1_000_000_000_000_000
  }
}
