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
/// process's writers lives in `shared` (a Mutex); the rest is touched only
/// by the one consuming task, which `consuming` enforces.
public final class Listener: @unchecked Sendable {
  /// The listener's name: its folder under `listeners/`.
  public let name: String
  /// The sequence number of the main store the listener starts after: the
  /// store's when it started, or, for a durable listener, the last one it
  /// acknowledged.
  public var startSequence: Int64 { streams[0].startSequence }
  /// Whether the listener keeps its place while its process is not running.
  public let isDurable: Bool
  /// How the listener behaves (grace period, rescan interval, bounds).
  public let options: ListenerOptions

  let group: GroupLayout
  private let directory: StoreDirectory
  private let root: SafeDirectory
  private let removeFolderOnClose: Bool
  private let lock: ListenerLock
  private let metrics: ListenerMetrics

  /// What the watcher thread and in-process writers hand over.
  private struct Shared {
    var hintedSequences: [(store: String, sequence: Int64)] = []
    var rescanRequested = true
    var storeCheckRequested = false
    /// Change sets this process committed, by store and sequence.
    var inProcess: [String: [Int64: ChangeSet]] = [:]
    var inProcessCount = 0
    var inProcessRows = 0
    var inProcessOverflowed = false
    /// Unsafe, not checked: it is taken out under the mutex before it is
    /// resumed, so exactly once, and a checked one costs an allocation per
    /// wait on the delivery path.
    var waiter: UnsafeContinuation<Void, Never>?
    var signaled = false
    var closed = false
    var watch: FolderWatcher.Watch?
    /// The handler of ``Listener/startOnWatcherThread(_:)``: the consumer
    /// runs on the watcher thread, and signals from elsewhere wake it.
    var direct: (@Sendable (ListenerEvent) -> Void)?
  }
  private let shared = Locked(Shared())
  private static let maximumHints = 4096
  private let consuming = Atomic<Bool>(false)
  /// The main store's next sequence, readable from the watcher thread, so
  /// that our own removals of delivered files wake nobody.
  private let deliveredThrough = Atomic<Int64>(0)

  // Consumer-only state.
  /// One stream per store of the group: the main store first.
  private var streams: [StoreStream]
  /// The stream to try first next time, so that no store starves another.
  private var nextStream = 0
  /// Stores whose file could not be opened (logged once; tried again on
  /// each rescan tick).
  private var unopenable = Set<String>()
  /// Swapped with `Shared.hintedSequences` so that neither is copied.
  private var spareHints: [(store: String, sequence: Int64)] = []
  private var folders: Folders
  /// One reset per act of bad input in the inbox, shared with the streams.
  private let hostileActs: HostileActs

  /// The listener's folders, reopened when something replaced them.
  private struct Folders {
    var listeners: SafeDirectory
    var folder: SafeDirectory
    var inbox: SafeDirectory
  }

  init(directory: StoreDirectory, name: String, options: ListenerOptions, ephemeral: Bool, durable: Bool) throws {
    self.directory = directory
    self.isDurable = durable
    guard GroupLayout.isValidListenerName(name) else { throw GroupSyncError.invalidListenerName(name) }
    self.name = name
    group = directory.layout
    root = directory.root
    self.options = options
    hostileActs = HostileActs(quiet: max(options.rescanInterval * 2, .seconds(1)))
    self.removeFolderOnClose = ephemeral || options.removeFolderOnClose
    metrics = ListenerMetrics(listener: ephemeral ? GroupSyncMetrics.ephemeralListener : name, factory: options.metricsFactory)
    let listeners = try Self.ownedFolder(GroupLayout.listenersFolder, in: root, listener: name)
    let folder = try Self.ownedFolder(name, in: listeners, listener: name)
    // The inbox exists before the lock is held: a writer that sees the
    // lock held always finds the inbox to deliver into.
    let inbox = try Self.ownedFolder(GroupLayout.inboxFolder, in: folder, listener: name)
    lock = try ListenerLock(in: folder, name: name)
    folders = Folders(listeners: listeners, folder: folder, inbox: inbox)
    streams = []
    // Order matters: lock, then empty the inbox, then read the sequences.
    // A writer that saw us dead committed before the lock, so before the
    // sequence is read; anything it linked meanwhile is at or below it.
    do {
      try inbox.clear()
      folderSnapshot.withLock { [folders] in $0 = folders }
      // Registered in-process before the sequences are read: this
      // process's commits after it come in memory, never through the inbox.
      LocalListeners.shared.add(self, group: group.root)
      for entry in try directory.entries() {
        do {
          streams.append(try makeStream(directory.store(named: entry.name), fromStart: false))
        } catch where entry.name != GroupLayout.mainStoreName {
          // A planted or broken file must not stop delivery of the others.
          Logger.groupSync.error("listener '\(name)': cannot open store '\(entry.name)': \(error)")
          unopenable.insert(entry.name)
        }
      }
      deliveredThrough.store(streams[0].nextSequence, ordering: .relaxed)
      let watch = try watchInbox(inbox)
      shared.withLock { $0.watch = watch }
    } catch {
      LocalListeners.shared.remove(self, group: group.root)
      lock.release()
      throw error
    }
  }

  private func makeStream(_ store: Store, fromStart: Bool) throws -> StoreStream {
    let cursor: DurableCursor?
    if !isDurable {
      cursor = nil
    } else if options.acknowledgement == .inStore && !store.isReadOnly {
      cursor = try DurableCursor(store: store, name: name)
    } else {
      cursor = try DurableCursor(file: folders.folder, store: store.name)
    }
    return try StoreStream(
      store: store, listener: name, options: options, cursor: cursor, hostileActs: hostileActs, fromStart: fromStart)
  }

  deinit { close() }

  /// Acknowledges `changeSet` and everything before it: a durable listener
  /// resumes after it. With ``Acknowledgement/automatic`` this happens when
  /// the next event is asked for.
  public func acknowledge(_ changeSet: ChangeSet) throws {
    guard let cursor = stream(of: changeSet)?.cursor, case .file = cursor.storage else {
      throw GroupSyncError.invalidListenerName("'\(name)' is not a durable listener with a cursor file")
    }
    try cursor.write(changeSet.sequence)
  }

  /// Acknowledges `changeSet` inside `db`'s transaction (a `store.write`
  /// of the change set's store), for ``Acknowledgement/inStore``: the
  /// place commits, or rolls back, with the consumer's own changes.
  public func acknowledge(_ changeSet: ChangeSet, in db: Database) throws {
    guard let cursor = stream(of: changeSet)?.cursor, case .store = cursor.storage else {
      throw GroupSyncError.invalidListenerName("'\(name)' is not a durable listener that keeps its place in the store")
    }
    try DurableCursor.write(changeSet.sequence, name: name, db)
  }

  private func stream(of changeSet: ChangeSet) -> StoreStream? {
    streams.first { $0.storeID == changeSet.storeID }
  }

  /// The folder `name` of `parent`, created if missing; an entry there
  /// that is not a folder of the group (a symlink, a file, a FIFO, another
  /// device) is removed itself, never followed, and the folder made anew.
  private static func ownedFolder(_ name: String, in parent: SafeDirectory, listener: String) throws -> SafeDirectory {
    do {
      return try parent.child(name, create: true)
    } catch GroupSyncError.unsafeEntry(let path, let reason) {
      Logger.groupSync.error("listener '\(listener)': refused '\(path)' (\(reason)); replacing it")
      parent.remove(name)
      return try parent.child(name, create: true)
    }
  }

  /// Watches the inbox through the descriptor the listener holds, so that
  /// the watch is on that very folder, whatever its path became.
  /// Only arrivals wake the watcher: the listener's own removals and a
  /// writer's links into other inboxes (link-count changes) do not.
  private func watchInbox(_ inbox: SafeDirectory) throws -> FolderWatcher.Watch {
    try FolderWatcher.shared.watch(
      inbox, rescanMilliseconds: UInt64(options.rescanInterval.milliseconds), arrivalsOnly: true
    ) { [weak self] event in self?.handle(event) }
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
    let watch = shared.withLock { shared -> FolderWatcher.Watch? in
      shared.direct = handler
      return shared.watch
    }
    watch?.wake()
  }

  /// Stops listening: releases the lock, empties the inbox, and wakes the
  /// consumer, whose iteration ends. Safe to call from any thread, any
  /// number of times.
  public func close() {
    let (waiter, watch, first): (UnsafeContinuation<Void, Never>?, FolderWatcher.Watch?, Bool) = shared.withLock {
      shared in
      guard !shared.closed else { return (nil, nil, false) }
      shared.closed = true
      defer {
        shared.waiter = nil
        shared.watch = nil
        shared.direct = nil  // the handler may hold the listener
      }
      return (shared.waiter, shared.watch, true)
    }
    guard first else {
      // Another thread is closing (a signal handler's, say): return once
      // its clean-up is done, so that a process may exit right after.
      let deadline = ContinuousClock.now + .seconds(5)
      while !closeFinished.withLock({ $0 }) && ContinuousClock.now < deadline { usleep(1_000) }
      return
    }
    defer { closeFinished.withLock { $0 = true } }
    watch?.cancel()
    LocalListeners.shared.remove(self, group: group.root)
    let folders = folderSnapshot.withLock { $0 }
    if let folders {
      try? folders.inbox.clear()
      if removeFolderOnClose && folders.folder.isStill(name, in: folders.listeners) {
        // Gone from its name at once: a writer that saw the lock held
        // finds no folder, not one whose inbox is already removed.
        folders.listeners.removeAtOnce(name)
      }
    }
    lock.release()  // writers stop delivering; the name is free again
    replacementLocks.withLock { $0.forEach { $0.release() } }
    waiter?.resume()
  }

  /// Whether the first close() has finished its clean-up.
  private let closeFinished = Locked(false)

  /// The folders as close() may use them from any thread.
  private let folderSnapshot = Locked<Folders?>(nil)

  /// Whether ``close()`` was called (by anyone, from any thread).
  public var isClosed: Bool { shared.withLock { $0.closed } }

  // MARK: Hand-over from the watcher and from writers of this process

  private func handle(_ event: FolderWatcher.Event) {
    switch event {
    case .entry(let fileName):
      let parsed = GroupLayout.storeAndSequence(inFileNameBuffer: fileName)
      // A file already read (found by a listing before its event came): no wake-up.
      if let parsed, parsed.store == GroupLayout.mainStoreName,
        parsed.sequence < deliveredThrough.load(ordering: .relaxed)
      {
        return
      }
      signal(onWatcherThread: true) { shared in
        // Hints pile up only while nobody consumes; past a bound a rescan
        // tells the same.
        if let parsed, shared.hintedSequences.count < Self.maximumHints {
          shared.hintedSequences.append(parsed)
        } else {
          shared.rescanRequested = true
        }
      }
    case .rescan:
      signal(onWatcherThread: true) { $0.rescanRequested = true }
    case .tick:
      signal(onWatcherThread: true) { $0.storeCheckRequested = true }
    case .wake:
      signal(onWatcherThread: true)
    case .failed(let status):
      Logger.groupSync.error("watching inbox of '\(name)' failed: uv error \(status)")
      signal(onWatcherThread: true) { $0.rescanRequested = true }
    }
  }

  /// A change set of `store` committed by this process, handed over in
  /// memory. Past the backlog bounds, they are dropped and the listener
  /// resets.
  func receiveInProcess(_ changeSet: ChangeSet, store: String) {
    signal { shared in
      guard !shared.inProcessOverflowed else { return }
      shared.inProcess[store, default: [:]][changeSet.sequence] = changeSet
      shared.inProcessCount += 1
      shared.inProcessRows += changeSet.rowCount + 1
      if shared.inProcessCount > options.maximumInProcessBacklog || shared.inProcessRows > options.maximumInProcessRows {
        shared.inProcess = [:]
        shared.inProcessCount = 0
        shared.inProcessRows = 0
        shared.inProcessOverflowed = true
      }
    }
  }

  /// Hands `update` to the consumer and wakes it: resumes the waiting
  /// task, or, for a consumer on the watcher thread, runs it (from the
  /// watcher thread itself) or wakes that thread (from anywhere else).
  private func signal(onWatcherThread: Bool = false, _ update: (inout Shared) -> Void = { _ in }) {
    enum Wake {
      case none
      case resume(UnsafeContinuation<Void, Never>)
      case watcherThread(FolderWatcher.Watch?)
      case drainHere
    }
    let wake: Wake = shared.withLock {
      update(&$0)
      if $0.direct != nil { return onWatcherThread ? .drainHere : .watcherThread($0.watch) }
      guard let waiter = $0.waiter else {
        $0.signaled = true
        return .none
      }
      $0.waiter = nil
      return .resume(waiter)
    }
    switch wake {
    case .none: break
    case .resume(let waiter): waiter.resume()
    case .watcherThread(let watch): watch?.wake()
    case .drainHere: drainOnWatcherThread()
    }
  }

  private func waitForSignal() async {
    await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        let resumeNow = shared.withLock {
          if $0.signaled || $0.closed || Task.isCancelled {
            $0.signaled = false
            return true
          }
          $0.waiter = continuation
          return false
        }
        if resumeNow { continuation.resume() }
      }
    } onCancel: {
      signal()
    }
  }

  // MARK: Delivery

  /// What the watcher thread and writers handed over since the last look.
  private struct HandOver {
    var hints: [(store: String, sequence: Int64)]
    var rescan: Bool
    var storeCheck: Bool
    var overflowed: Bool
    var closed: Bool
  }

  /// Takes what was handed over; the hints array is swapped out, not
  /// copied (give it back with `recycle`).
  private func takeHandOver() -> HandOver {
    var hints: [(store: String, sequence: Int64)] = []
    swap(&hints, &spareHints)
    return shared.withLock { shared in
      defer {
        shared.rescanRequested = false
        shared.storeCheckRequested = false
        shared.inProcessOverflowed = false
      }
      swap(&hints, &shared.hintedSequences)
      shared.signaled = false
      return HandOver(
        hints: hints, rescan: shared.rescanRequested, storeCheck: shared.storeCheckRequested,
        overflowed: shared.inProcessOverflowed, closed: shared.closed)
    }
  }

  /// Keeps the hints' storage for the next hand-over.
  private func recycle(_ handOver: HandOver) {
    var hints = handOver.hints
    hints.removeAll(keepingCapacity: true)
    spareHints = hints
  }

  /// This process's change set that `stream` delivers next, taken out of
  /// the hand-over; those it no longer needs are dropped.
  private func takeInProcess(for stream: StoreStream) -> ChangeSet? {
    let next = stream.nextSequence
    return shared.withLock { shared in
      guard shared.inProcess[stream.store]?.isEmpty == false else { return nil }
      // In place (no copy of the dictionary): what was committed before we
      // started, or is covered by a reset, is dropped; the next one taken.
      func take(_ waiting: inout [Int64: ChangeSet]) -> (taken: ChangeSet?, gone: [ChangeSet]) {
        var gone: [ChangeSet] = []
        if waiting.count > 1 || waiting.keys.first != next {
          for sequence in Array(waiting.keys) where sequence < next { gone.append(waiting.removeValue(forKey: sequence)!) }
        }
        let taken = waiting.removeValue(forKey: next)
        return (taken, gone + (taken.map { [$0] } ?? []))
      }
      let (taken, gone) = take(&shared.inProcess[stream.store]!)
      shared.inProcessCount -= gone.count
      shared.inProcessRows -= gone.reduce(0) { $0 + $1.rowCount + 1 }
      return taken
    }
  }

  private func hasLaterInProcess(for stream: StoreStream) -> Bool {
    shared.withLock { $0.inProcess[stream.store]?.keys.contains { $0 > stream.nextSequence } ?? false }
  }

  /// The next event, or nil once closed or cancelled.
  func nextEvent() async -> ListenerEvent? {
    precondition(!consuming.exchange(true, ordering: .acquiring), Self.consumedTwice)
    defer { consuming.store(false, ordering: .releasing) }
    while !Task.isCancelled {
      switch takeReadyEvent() {
      case .event(let event): return event
      case .closed: return nil
      case .waiting: await waitForSignal()
      }
    }
    return nil
  }

  private static let consumedTwice =
    "a Listener's events are consumed from two places at once (two tasks, or events and startOnWatcherThread)"

  /// What the consumer does next.
  private enum Step {
    case event(ListenerEvent)
    case closed
    /// Nothing is ready: wait for the next signal.
    case waiting
  }

  /// The next event if one is ready; runs on the one consumer (the
  /// iterating task, or the watcher thread for ``startOnWatcherThread(_:)``).
  private func takeReadyEvent() -> Step {
    let handOver = takeHandOver()
    defer { recycle(handOver) }
    if handOver.closed { return .closed }
    for stream in streams { stream.acknowledgeAutomatically() }
    for stream in streams {
      if let expired = stream.takeExpiry() { return .event(delivered(.reset(expired), by: stream)) }
    }
    for stream in streams {
      if let event = stream.replay(inbox: folders.inbox) { return .event(delivered(event, by: stream)) }
    }
    if handOver.overflowed {
      return .event(.reset(resetAll("this process committed faster than the listener consumed (in-process backlog over its bounds)")))
    }
    for hint in handOver.hints { self.stream(named: hint.store)?.track(hint.sequence) }
    if handOver.rescan, let reset = checkFolders() { return .event(.reset(reset)) }
    if handOver.rescan || handOver.storeCheck { discoverStores() }
    // A window ran dry while more waits beyond it: list the inbox again.
    if handOver.rescan || streams.contains(where: \.needsRefill), let reset = scanInbox() { return .event(.reset(reset)) }
    if handOver.rescan || handOver.storeCheck {
      for stream in streams {
        if let reason = stream.checkStore(folder: folders.folder) {
          return .event(delivered(.reset(stream.reset(reason, inbox: folders.inbox)), by: stream))
        }
      }
    }
    if handOver.rescan { metrics.sample(streams, inProcess: shared.withLock { $0.inProcess.mapValues(\.count) }) }
    if let event = nextReady() { return .event(event) }
    for stream in streams {
      let event = stream.checkGap(
        inbox: folders.inbox, laterInProcess: hasLaterInProcess(for: stream), wake: wakeAfterGrace)
      if case .changes = event { metrics.gapRepaired(stream) }
      if let event { return .event(delivered(event, by: stream)) }
    }
    return .waiting
  }

  /// Delivers every ready event to the direct handler, on the watcher
  /// thread, until none is ready.
  private func drainOnWatcherThread() {
    guard let handler = shared.withLock({ $0.direct }) else { return }
    while case .event(let event) = takeReadyEvent() { handler(event) }
  }

  /// The next change set some store has ready (from this process, or in
  /// the inbox), trying the stores in turn so that none starves another.
  private func nextReady() -> ListenerEvent? {
    for offset in 0..<streams.count {
      let stream = streams[(nextStream + offset) % streams.count]
      if let changeSet = takeInProcess(for: stream) {
        nextStream = (nextStream + offset + 1) % streams.count
        return delivered(.changes(stream.accept(changeSet)), by: stream)
      }
      guard stream.nextIsInInbox else { continue }
      switch stream.readNextInboxFile(folders.inbox) {
      case .success(let changeSet):
        nextStream = (nextStream + offset + 1) % streams.count
        return delivered(.changes(stream.accept(changeSet)), by: stream)
      case .failure(let reason):
        guard hostileActs.continues() else {
          return delivered(.reset(stream.reset(reason, inbox: folders.inbox)), by: stream)
        }
        // The act was answered already: the file is gone, the change set
        // is read from the history (the truth) without another reset.
        Logger.groupSync.warning("listener '\(name)': \(reason); removed (bad input again)")
        if let event = stream.readFromHistory(inbox: folders.inbox) { return delivered(event, by: stream) }
        continue
      case nil: continue  // gone meanwhile; rescan decides
      }
    }
    return nil
  }

  /// Notes where `stream` is after an event, for the watcher thread.
  private func delivered(_ event: ListenerEvent, by stream: StoreStream) -> ListenerEvent {
    if stream === streams[0] { deliveredThrough.store(stream.nextSequence, ordering: .relaxed) }
    metrics.delivered(event, by: stream)
    return event
  }

  /// A missing change set's grace period started: look once more now, and
  /// wake up when it ends.
  private func wakeAfterGrace(_ grace: Duration) {
    shared.withLock {
      $0.rescanRequested = true
      $0.signaled = true
    }
    Task { [weak self] in
      try? await Task.sleep(for: grace)
      self?.signal()
    }
  }

  private func stream(named store: String) -> StoreStream? {
    streams.first { $0.store == store }
  }

  /// Resets every store: the inbox as a whole cannot be trusted.
  private func resetAll(_ reason: String) -> Reset {
    Logger.groupSync.error("listener '\(name)': \(reason); resetting every store")
    try? folders.inbox.forEachEntry { folders.inbox.remove($0) }
    for stream in streams { _ = stream.reset(reason, inbox: nil, logged: true) }
    deliveredThrough.store(streams[0].nextSequence, ordering: .relaxed)
    shared.withLock { shared in
      for stream in streams {
        shared.inProcess[stream.store] = shared.inProcess[stream.store]?.filter { $0.key >= stream.nextSequence }
      }
      shared.inProcessCount = shared.inProcess.values.reduce(0) { $0 + $1.count }
      shared.inProcessRows = shared.inProcess.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.rowCount + 1 } }
    }
    let reset = Reset(reason: reason, sequence: streams[0].nextSequence - 1)
    metrics.resetAll(reset, streams: streams)
    return reset
  }

  /// On each rescan tick: a store created since the listener started gets
  /// a stream (from its first change set on).
  private func discoverStores() {
    guard let entries = try? directory.entries(), entries.count != streams.count
      || zip(entries, streams).contains(where: { $0.name != $1.store })
    else { return }
    for entry in entries where stream(named: entry.name) == nil {
      do {
        let store = try directory.store(named: entry.name)
        // A store that could not be opened at start existed then.
        streams.append(try makeStream(store, fromStart: !unopenable.contains(entry.name)))
        unopenable.remove(entry.name)
        Logger.groupSync.info("listener '\(name)': now listening to store '\(entry.name)'")
      } catch {
        if unopenable.insert(entry.name).inserted {
          Logger.groupSync.error("listener '\(name)': cannot open store '\(entry.name)': \(error)")
        }
      }
    }
  }

  /// On each rescan tick: are `listeners/`, the listener's folder and its
  /// inbox still the folders it holds? If anything replaced or removed
  /// them, make them anew, watch the new inbox, and reset once.
  private func checkFolders() -> Reset? {
    let intact = folders.listeners.isStill(GroupLayout.listenersFolder, in: root)
      && folders.folder.isStill(name, in: folders.listeners)
      && folders.inbox.isStill(GroupLayout.inboxFolder, in: folders.folder)
    guard !intact else { return nil }
    do {
      let listeners = try Self.ownedFolder(GroupLayout.listenersFolder, in: root, listener: name)
      let folder = try Self.ownedFolder(name, in: listeners, listener: name)
      // Writers find the lock through the folder: a new folder needs it
      // too, taken once its inbox exists.
      let inbox = try Self.ownedFolder(GroupLayout.inboxFolder, in: folder, listener: name)
      let lock = folder.identity == folders.folder.identity ? nil : try ListenerLock(in: folder, name: name)
      let watch = try watchInbox(inbox)
      // Under the same mutex as close(): a listener closed meanwhile must
      // not keep a watch or a lock it would never release.
      let (old, closed) = shared.withLock { shared -> (FolderWatcher.Watch?, Bool) in
        if shared.closed { return (nil, true) }
        defer { shared.watch = watch }
        if let lock { replacementLocks.withLock { $0.append(lock) } }
        return (shared.watch, false)
      }
      if closed {
        watch.cancel()
        lock?.release()
        return nil
      }
      old?.cancel()
      folders = Folders(listeners: listeners, folder: folder, inbox: inbox)
      folderSnapshot.withLock { $0 = folders }
    } catch {
      return resetAll("its folders were replaced and cannot be made again: \(error)")
    }
    return resetAll("its inbox or folder was removed or replaced; made anew")
  }

  /// Locks taken on folders made anew, held for the listener's life.
  private let replacementLocks = Locked<[ListenerLock]>([])

  /// Lists the inbox, streaming, with bounded work. Foreign entries are
  /// removed and cause one reset, as does an overflowing inbox (cleared).
  private func scanInbox() -> Reset? {
    var foreign: [String] = []
    var foreignCount = 0
    var waitingCount = 0
    for stream in streams { stream.forgetInbox() }  // the listing is the authority; events are hints
    let inbox = folders.inbox
    let started = ContinuousClock.now
    var rediscovered = false
    do {
      try inbox.forEachEntry { fileName in
        guard let (store, sequence) = GroupLayout.storeAndSequence(inFileNameBuffer: fileName) else {
          foreignCount += 1
          if foreign.count < 5 { foreign.append(SafeDirectory.printable(fileName)) }
          inbox.remove(fileName)
          return
        }
        var stream = self.stream(named: store)
        if stream == nil && !rediscovered {
          // A store made after the listener started, maybe: look once.
          rediscovered = true
          discoverStores()
          stream = self.stream(named: store)
        }
        guard let stream else {
          foreignCount += 1
          if foreign.count < 5 { foreign.append(SafeDirectory.printable(fileName) + " (no such store)") }
          inbox.remove(fileName)
          return
        }
        if sequence < stream.nextSequence {
          inbox.remove(fileName)  // already delivered or covered by a reset
        } else {
          waitingCount += 1
          stream.track(sequence)
        }
      }
    } catch {
      return resetAll("cannot list inbox: \(error)")
    }
    if waitingCount > options.maximumBacklog {
      let reason = "inbox overflowed: \(waitingCount) change sets waiting (maximum \(options.maximumBacklog))"
      guard hostileActs.continues(lookStarted: started) else { return resetAll(reason) }
      // Cleared without another reset: what was committed is read from the
      // history as the gaps it leaves come up.
      Logger.groupSync.warning("listener '\(name)': \(reason); cleared (bad input again)")
      try? inbox.forEachEntry { inbox.remove($0) }
      for stream in streams { stream.forgetInbox() }
    }
    if foreignCount > 0 {
      let more = foreignCount > foreign.count ? " and \(foreignCount - foreign.count) more" : ""
      let reason = "foreign entries in inbox, removed: \(foreign.sorted().joined(separator: ", "))\(more)"
      guard hostileActs.continues(lookStarted: started) else { return resetAll(reason) }
      Logger.groupSync.warning("listener '\(name)': \(reason) (bad input again)")
    }
    return nil
  }

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
