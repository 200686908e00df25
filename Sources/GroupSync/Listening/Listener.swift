import CGroupSync
import Foundation
import GRDB
import Logging
import Synchronization

/// Receives the change sets of every process writing to a group's store,
/// in sequence order, each exactly once.
///
/// A listener owns an inbox folder: it locks it for its whole life, empties
/// it on start (the store already holds every earlier change), watches it,
/// and removes each file once delivered. A change set that does not arrive
/// (its writer died after COMMIT, its file was lost) is read from the
/// store's history; what the history cannot answer becomes a ``Reset``.
/// For example:
///
/// ```swift
/// let listener = try group.listen(as: "ui")
/// for await event in listener.events {
///   switch event {
///   case .changes(let changeSet): cache.merge(changeSet)
///   case .reset: cache.reloadAll()
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
  /// The sequence number the listener starts after: the store's when it
  /// started, or, for a durable listener, the last one it acknowledged.
  public private(set) var startSequence: Int64 = 0
  /// Whether the listener keeps its place while its process is not running.
  public let isDurable: Bool
  public let options: ListenerOptions

  let group: GroupLayout
  private let storeID: UUID
  private let root: SafeDirectory
  private let removeFolderOnClose: Bool
  private let lock: ListenerLock
  private let reader: StoreReader
  private let store: Store
  private let cursor: DurableCursor?

  /// What the watcher thread and in-process writers hand over.
  private struct Shared {
    var hintedSequences: [Int64] = []
    var rescanRequested = true
    var storeCheckRequested = false
    var inProcess: [Int64: ChangeSet] = [:]
    var inProcessRows = 0
    var inProcessOverflowed = false
    /// Unsafe, not checked: it is taken out under the mutex before it is
    /// resumed, so exactly once, and a checked one costs an allocation per
    /// wait on the delivery path.
    var waiter: UnsafeContinuation<Void, Never>?
    var signaled = false
    var closed = false
    var watch: FolderWatcher.Watch?
  }
  private let shared = Locked(Shared())
  private static let maximumHints = 4096
  private let consuming = Atomic<Bool>(false)
  /// `nextSequence`, readable from the watcher thread.
  private let deliveredThrough = Atomic<Int64>(0)

  // Consumer-only state.
  private var nextSequence: Int64 = 0
  /// Swapped with `Shared.hintedSequences` so that neither is copied.
  private var spareHints: [Int64] = []
  private var folders: Folders
  /// Change sets in the inbox, within `window` of `nextSequence`; later
  /// ones are only noted, so memory stays bounded whatever the backlog.
  private var inboxSequences = Set<Int64>()
  private var moreBeyondWindow = false
  private static let window: Int64 = 4096
  private var gapDeadline: ContinuousClock.Instant?
  /// The store's last sequence as read on the last rescan tick.
  private var storeSequence: Int64 = 0
  /// What the last foreign-writer check saw.
  private var dataVersion: (version: Int64, sequence: Int64)?
  /// Durable only: change sets up to this one are replayed from the
  /// history at once, without waiting for files.
  private var replayThrough: Int64 = 0
  private var replayBuffer: [HistoryEntry] = []
  /// Durable only: the last sequence delivered, and acknowledged.
  private var lastDelivered: Int64 = 0
  private var lastAcknowledged: Int64 = 0
  /// Durable only: the place expired while the process was not running.
  private var expiry: String?

  /// The listener's folders, reopened when something replaced them.
  private struct Folders {
    var listeners: SafeDirectory
    var folder: SafeDirectory
    var inbox: SafeDirectory
  }

  init(
    root: SafeDirectory, group: GroupLayout, name: String, store: Store, options: ListenerOptions, ephemeral: Bool,
    durable: Bool
  ) throws {
    let storeID = store.storeID
    self.store = store
    self.isDurable = durable
    guard GroupLayout.isValidListenerName(name) else { throw GroupSyncError.invalidListenerName(name) }
    self.name = name
    self.group = group
    self.root = root
    self.storeID = storeID
    self.options = options
    self.removeFolderOnClose = ephemeral || options.removeFolderOnClose
    let listeners = try Self.ownedFolder(GroupLayout.listenersFolder, in: root, listener: name)
    let folder = try Self.ownedFolder(name, in: listeners, listener: name)
    lock = try ListenerLock(in: folder, name: name)
    let inbox = try Self.ownedFolder(GroupLayout.inboxFolder, in: folder, listener: name)
    folders = Folders(listeners: listeners, folder: folder, inbox: inbox)
    if durable {
      cursor = try options.acknowledgement == .inStore
        ? DurableCursor(store: store, name: name) : DurableCursor(file: folder)
    } else {
      cursor = nil
    }
    // Order matters: lock, then empty the inbox, then read the sequence.
    // A writer that saw us dead committed before the lock, so before the
    // sequence is read; anything it linked meanwhile is at or below it.
    try inbox.clear()
    reader = try StoreReader(path: group.store)
    folderSnapshot.withLock { [folders] in $0 = folders }
    // Registered in-process before the sequence is read: this process's
    // commits after it come in memory, never through the inbox.
    LocalListeners.shared.add(self, group: group.root)
    do {
      let (version, sequence) = try reader.dataVersionAndSequence()
      startSequence = sequence
      dataVersion = (version, sequence)
      storeSequence = sequence
      if let cursor { try resume(cursor, storeSequence: sequence) }
      nextSequence = startSequence + 1
      lastDelivered = startSequence
      lastAcknowledged = startSequence
      deliveredThrough.store(nextSequence, ordering: .relaxed)
      let watch = try watchInbox(inbox)
      shared.withLock { $0.watch = watch }
    } catch {
      LocalListeners.shared.remove(self, group: group.root)
      lock.release()
      throw error
    }
  }

  deinit { close() }

  /// Finds a durable listener's place: everything after it up to the
  /// store's sequence is replayed from the history; a place the history
  /// no longer reaches is an expired reset.
  private func resume(_ cursor: DurableCursor, storeSequence: Int64) throws {
    let acknowledged: Int64?
    do {
      acknowledged = try cursor.read()
    } catch {
      expiry = "its place cannot be read (\(error))"
      return
    }
    guard let acknowledged else {
      try cursor.write(storeSequence)  // a new durable listener starts here
      return
    }
    let oldest = try reader.oldestHistorySequence() ?? storeSequence + 1
    if acknowledged > storeSequence {
      expiry = "its place \(acknowledged) is ahead of the store (\(storeSequence)): another store?"
    } else if acknowledged + 1 < oldest && acknowledged < storeSequence {
      expiry = "its place \(acknowledged) expired: the history now starts at \(oldest)"
    } else {
      startSequence = acknowledged
      replayThrough = storeSequence
    }
  }

  /// Acknowledges `changeSet` and everything before it: a durable listener
  /// resumes after it. With ``Acknowledgement/automatic`` this happens when
  /// the next event is asked for.
  public func acknowledge(_ changeSet: ChangeSet) throws {
    guard let cursor, case .file = cursor.storage else {
      throw GroupSyncError.invalidListenerName("'\(name)' is not a durable listener with a cursor file")
    }
    try cursor.write(changeSet.sequence)
  }

  /// Acknowledges `changeSet` inside `db`'s transaction (a `store.write`
  /// of the group's store), for ``Acknowledgement/inStore``: the place
  /// commits, or rolls back, with the consumer's own changes.
  public func acknowledge(_ changeSet: ChangeSet, in db: Database) throws {
    guard let cursor, case .store = cursor.storage else {
      throw GroupSyncError.invalidListenerName("'\(name)' is not a durable listener that keeps its place in the store")
    }
    try DurableCursor.write(changeSet.sequence, name: name, db)
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
      "/proc/self/fd/\(inbox.descriptor.rawValue)", rescanMilliseconds: UInt64(options.rescanInterval.milliseconds),
      arrivalsOnly: true
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
        folders.listeners.remove(name)
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

  public var isClosed: Bool { shared.withLock { $0.closed } }

  // MARK: Hand-over from the watcher and from writers of this process

  private func handle(_ event: FolderWatcher.Event) {
    switch event {
    case .entry(let fileName):
      let sequence = GroupLayout.sequence(inFileNameBuffer: fileName)
      // A file already read (found by a listing before its event came): no wake-up.
      if let sequence, sequence < deliveredThrough.load(ordering: .relaxed) { return }
      signal { shared in
        // Hints pile up only while nobody consumes; past a bound a rescan
        // tells the same.
        if let sequence, shared.hintedSequences.count < Self.maximumHints {
          shared.hintedSequences.append(sequence)
        } else {
          shared.rescanRequested = true
        }
      }
    case .rescan:
      signal { $0.rescanRequested = true }
    case .tick:
      signal { $0.storeCheckRequested = true }
    case .failed(let status):
      Logger.groupSync.error("watching inbox of '\(name)' failed: uv error \(status)")
      signal { $0.rescanRequested = true }
    }
  }

  /// A change set committed by this process, handed over in memory. Past
  /// the backlog bounds, they are dropped and the listener resets.
  func receiveInProcess(_ changeSet: ChangeSet) {
    signal { shared in
      guard !shared.inProcessOverflowed else { return }
      shared.inProcess[changeSet.sequence] = changeSet
      shared.inProcessRows += changeSet.rowCount + 1
      if shared.inProcess.count > options.maximumInProcessBacklog || shared.inProcessRows > options.maximumInProcessRows {
        shared.inProcess = [:]
        shared.inProcessRows = 0
        shared.inProcessOverflowed = true
      }
    }
  }

  private func signal(_ update: (inout Shared) -> Void = { _ in }) {
    let waiter: UnsafeContinuation<Void, Never>? = shared.withLock {
      update(&$0)
      guard let waiter = $0.waiter else {
        $0.signaled = true
        return nil
      }
      $0.waiter = nil
      return waiter
    }
    waiter?.resume()
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

  /// The next event, or nil once closed or cancelled.
  func nextEvent() async -> ListenerEvent? {
    precondition(!consuming.exchange(true, ordering: .acquiring), "a Listener's events are consumed from two tasks at once")
    defer { consuming.store(false, ordering: .releasing) }
    while true {
      if Task.isCancelled { return nil }
      var hints: [Int64] = []
      swap(&hints, &spareHints)
      let (rescan, storeCheck, inProcess, overflowed, closed) = shared.withLock {
        shared -> (Bool, Bool, ChangeSet?, Bool, Bool) in
        swap(&hints, &shared.hintedSequences)
        defer {
          shared.rescanRequested = false
          shared.storeCheckRequested = false
          shared.inProcessOverflowed = false
        }
        shared.signaled = false
        let inProcess = shared.inProcess.removeValue(forKey: nextSequence)
        if let inProcess { shared.inProcessRows -= inProcess.rowCount + 1 }
        if !shared.inProcess.isEmpty && shared.inProcess.keys.contains(where: { $0 < nextSequence }) {
          // Committed before we started, or covered by a reset.
          shared.inProcess = shared.inProcess.filter { $0.key > nextSequence }
          shared.inProcessRows = shared.inProcess.values.reduce(0) { $0 + $1.rowCount + 1 }
        }
        return (
          shared.rescanRequested, shared.storeCheckRequested, inProcess, shared.inProcessOverflowed, shared.closed
        )
      }
      defer {
        hints.removeAll(keepingCapacity: true)
        spareHints = hints
      }
      if closed { return nil }
      acknowledgeAutomatically()
      if let reason = expiry {
        expiry = nil
        return .reset(expired(reason))
      }
      if nextSequence <= replayThrough, let event = replay() { return event }
      if overflowed {
        return .reset(reset("this process committed faster than the listener consumed (in-process backlog over its bounds)"))
      }
      for sequence in hints { track(sequence) }
      if rescan, let reset = checkFolders() { return .reset(reset) }
      // The window ran dry while more waits beyond it: list the inbox again.
      let refill = inboxSequences.isEmpty && moreBeyondWindow && inProcess == nil
      if rescan || refill, let reset = scanInbox() { return .reset(reset) }
      if rescan || storeCheck, let reason = checkStore() { return .reset(reset(reason)) }
      if let changeSet = inProcess {
        return .changes(accept(changeSet))
      }
      if inboxSequences.contains(nextSequence) {
        switch readInboxFile(nextSequence) {
        case .success(let changeSet): return .changes(accept(changeSet))
        case .failure(let reason): return .reset(reset(reason))
        case nil: continue  // gone meanwhile; rescan decides
        }
      }
      if let event = checkGap() { return event }
      await waitForSignal()
    }
  }

  /// The previous event was handled: a durable listener's place moves on.
  private func acknowledgeAutomatically() {
    guard let cursor, options.acknowledgement == .automatic, lastDelivered > lastAcknowledged else { return }
    do {
      try cursor.write(lastDelivered)
      lastAcknowledged = lastDelivered
    } catch {
      Logger.groupSync.error("listener '\(name)': cannot record its place: \(error)")
    }
  }

  /// The next change set of a durable listener's catch-up, read from the
  /// history a page at a time.
  private func replay() -> ListenerEvent? {
    if replayBuffer.first?.sequence != nextSequence {
      replayBuffer = (try? reader.historyEntries(after: nextSequence - 1, limit: 256)) ?? []
    }
    guard let entry = replayBuffer.first, entry.sequence == nextSequence else {
      return fromHistory(nextSequence)
    }
    replayBuffer.removeFirst()
    switch entry.changeSet {
    case .success(let changeSet): return .changes(accept(changeSet))
    case .failure(let error): return .reset(reset("change set \(nextSequence) is unreadable in the history: \(error)"))
    }
  }

  private func expired(_ reason: String) -> Reset {
    let reset = reset(reason)
    return Reset(reason: reset.reason, sequence: reset.sequence, isExpired: true)
  }

  private func accept(_ changeSet: ChangeSet) -> ChangeSet {
    lastDelivered = changeSet.sequence
    nextSequence = changeSet.sequence + 1
    deliveredThrough.store(nextSequence, ordering: .relaxed)
    gapDeadline = nil
    return changeSet
  }

  /// A change set is missing while a later one waits, or while the store
  /// is ahead of what was delivered: give it the grace period to arrive,
  /// then read it from the history; what the history cannot give is a
  /// reset.
  private func checkGap() -> ListenerEvent? {
    let waiting = inboxSequences.contains { $0 > nextSequence } || moreBeyondWindow
      || storeSequence >= nextSequence
      || shared.withLock { $0.inProcess.keys.contains { $0 > nextSequence } }
    guard waiting else {
      gapDeadline = nil
      return nil
    }
    let now = ContinuousClock.now
    guard let deadline = gapDeadline else {
      gapDeadline = now + options.gracePeriod
      // The file may have arrived without an event: look once more, and
      // wake up when the grace period ends.
      shared.withLock { $0.rescanRequested = true; $0.signaled = true }
      let grace = options.gracePeriod
      Task { [weak self] in
        try? await Task.sleep(for: grace)
        self?.signal()
      }
      return nil
    }
    guard now >= deadline else { return nil }
    gapDeadline = nil
    return fromHistory(nextSequence)
  }

  /// Change set `sequence`, read from the store's history, or the reset
  /// that says why it cannot be.
  private func fromHistory(_ sequence: Int64) -> ListenerEvent {
    do {
      guard let entry = try reader.historyEntry(sequence) else {
        let oldest = try reader.oldestHistorySequence()
        if let oldest, sequence < oldest {
          return .reset(reset("change set \(sequence) did not arrive and the history no longer holds it (oldest \(oldest))"))
        }
        // Not committed yet after all (the store was read mid-way): wait on.
        storeSequence = try reader.sequence()
        return .reset(reset("change set \(sequence) did not arrive and is not in the history"))
      }
      switch entry.changeSet {
      case .success(let changeSet):
        Logger.groupSync.info("listener '\(name)': change set \(sequence) read from the history")
        return .changes(accept(changeSet))
      case .failure(let error):
        return .reset(reset("change set \(sequence) did not arrive and its history entry is unreadable: \(error)"))
      }
    } catch {
      return .reset(reset("change set \(sequence) did not arrive and the history cannot be read: \(error)"))
    }
  }

  /// Logs why, skips to the store's current sequence and drops everything
  /// up to it.
  private func reset(_ reason: String) -> Reset {
    Logger.groupSync.error("listener '\(name)': \(reason); resetting")
    // List before reading the sequence: a file appears only after its
    // commit, so every file listed now is at or below the sequence read
    // next (covered by the reset), or forged; all of them go.
    try? folders.inbox.forEachEntry { folders.inbox.remove($0) }
    let current = try? reader.dataVersionAndSequence()
    let sequence = current?.1 ?? nextSequence
    nextSequence = max(nextSequence, sequence + 1)
    storeSequence = nextSequence - 1
    lastDelivered = nextSequence - 1
    replayThrough = 0
    replayBuffer = []
    deliveredThrough.store(nextSequence, ordering: .relaxed)
    gapDeadline = nil
    dataVersion = current.map { ($0.0, $0.1) }
    inboxSequences.removeAll()
    moreBeyondWindow = false
    shared.withLock { shared in
      shared.inProcess = shared.inProcess.filter { $0.key >= nextSequence }
      shared.inProcessRows = shared.inProcess.values.reduce(0) { $0 + $1.rowCount + 1 }
    }
    return Reset(reason: reason, sequence: nextSequence - 1)
  }

  /// Notes a change set found in the inbox.
  private func track(_ sequence: Int64) {
    if sequence < nextSequence { return }
    if sequence < nextSequence + Self.window {
      inboxSequences.insert(sequence)
    } else {
      moreBeyondWindow = true
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
      // Writers find the lock through the folder: a new folder needs it too.
      let lock = folder.identity == folders.folder.identity ? nil : try ListenerLock(in: folder, name: name)
      let inbox = try Self.ownedFolder(GroupLayout.inboxFolder, in: folder, listener: name)
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
      return reset("its folders were replaced and cannot be made again: \(error)")
    }
    return reset("its inbox or folder was removed or replaced; made anew")
  }

  /// Locks taken on folders made anew, held for the listener's life.
  private let replacementLocks = Locked<[ListenerLock]>([])

  /// On each rescan tick: how far the store is (a writer may have died
  /// after COMMIT, before its file reached us), and whether a program that
  /// does not use GroupSync committed (`PRAGMA data_version` moved while
  /// the history did not).
  /// Returns why to reset when such a commit was seen.
  private func checkStore() -> String? {
    guard let (version, sequence) = try? reader.dataVersionAndSequence() else { return nil }
    storeSequence = sequence
    defer { dataVersion = (version, sequence) }
    guard let last = dataVersion, version != last.version, sequence == last.sequence else { return nil }
    Logger.groupSync.warning("listener '\(name)': a commit without a change set (foreign writer) seen")
    ForeignCommit.record(in: folders.folder, sequence: sequence)
    return "the store changed without a change set (a program that does not use GroupSync, or VACUUM)"
  }

  /// Lists the inbox, streaming, with bounded work. Foreign entries are
  /// removed and cause one reset, as does an overflowing inbox (cleared).
  private func scanInbox() -> Reset? {
    var foreign: [String] = []
    var foreignCount = 0
    var waitingCount = 0
    inboxSequences.removeAll()  // the listing is the authority; events are hints
    moreBeyondWindow = false
    let inbox = folders.inbox
    do {
      try inbox.forEachEntry { fileName in
        guard let sequence = GroupLayout.sequence(inFileNameBuffer: fileName) else {
          foreignCount += 1
          if foreign.count < 5 { foreign.append(SafeDirectory.printable(fileName)) }
          inbox.remove(fileName)
          return
        }
        if sequence < nextSequence {
          inbox.remove(fileName)  // already delivered or covered by a reset
        } else {
          waitingCount += 1
          track(sequence)
        }
      }
    } catch {
      return reset("cannot list inbox: \(error)")
    }
    if waitingCount > options.maximumBacklog {
      return reset("inbox overflowed: \(waitingCount) change sets waiting (maximum \(options.maximumBacklog))")
    }
    if foreignCount > 0 {
      let more = foreignCount > foreign.count ? " and \(foreignCount - foreign.count) more" : ""
      return reset("foreign entries in inbox, removed: \(foreign.sorted().joined(separator: ", "))\(more)")
    }
    return nil
  }

  private enum ReadResult {
    case success(ChangeSet)
    case failure(String)
  }

  /// Reads, checks and removes one change-set file. nil if it is gone.
  private func readInboxFile(_ sequence: Int64) -> ReadResult? {
    let fileName = GroupLayout.fileName(sequence: sequence)
    let inbox = folders.inbox
    inboxSequences.remove(sequence)
    defer { inbox.remove(fileName) }
    let file: FileDescriptor
    let info: stat
    do {
      // No symlink followed, no FIFO waited on, nothing but a regular file.
      (file, info) = try inbox.openRegularFile(fileName, O_RDONLY)
    } catch GroupSyncError.system(_, _, ENOENT) {
      return nil
    } catch {
      return .failure("cannot open \(fileName): \(error)")
    }
    let changeSet: ChangeSet
    do {
      guard info.st_size <= options.maximumFileSize else {
        return .failure("\(fileName) is \(info.st_size) bytes, over the \(options.maximumFileSize)-byte maximum")
      }
      let bytes = try System.readAll(file.rawValue, size: Int(info.st_size), path: inbox.path + "/" + fileName)
      changeSet = try ChangeSetEncoding.decode(bytes, name: fileName)
    } catch {
      return .failure("\(error)")
    }
    guard changeSet.storeID == storeID else {
      return .failure("\(fileName) is from store \(changeSet.storeID.uuidString), not \(storeID.uuidString)")
    }
    guard changeSet.sequence == sequence else {
      return .failure("\(fileName) holds sequence \(changeSet.sequence)")
    }
    if let unknown = reader.unknownTable(in: changeSet) {
      return .failure("\(fileName) names table '\(unknown)', which the store does not have")
    }
    return .success(changeSet)
  }

  /// The listener's events as an `AsyncSequence`.
  public struct Events: AsyncSequence, Sendable {
    let listener: Listener

    public func makeAsyncIterator() -> Iterator { Iterator(listener: listener) }

    public struct Iterator: AsyncIteratorProtocol {
      let listener: Listener
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
