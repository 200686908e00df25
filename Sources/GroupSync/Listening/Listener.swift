import CGroupSync
import Foundation
import Logging
import Synchronization

/// Receives the change sets of every other process writing to a group's
/// store, in sequence order, each exactly once.
///
/// A listener owns an inbox folder: it locks it for its whole life, empties
/// it on start (the store already holds every earlier change), watches it,
/// and removes each file once delivered. For example:
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
  /// The sequence number the store was at when the listener started.
  public private(set) var startSequence: Int64 = 0
  public let options: ListenerOptions

  let group: GroupLayout
  private let storeID: UUID
  private let lock: ListenerLock
  private let inboxPath: String
  private let removeFolderOnClose: Bool
  private var watch: FolderWatcher.Watch?

  /// What the watcher thread and in-process writers hand over.
  private struct Shared {
    var hintedSequences: [Int64] = []
    var rescanRequested = true
    var inProcess: [Int64: ChangeSet] = [:]
    var waiter: CheckedContinuation<Void, Never>?
    var signaled = false
    var closed = false
  }
  private let shared = Mutex(Shared())
  private static let maximumHints = 4096
  private let consuming = Atomic<Bool>(false)
  /// `nextSequence`, readable from the watcher thread.
  private let deliveredThrough = Atomic<Int64>(0)

  // Consumer-only state.
  private var nextSequence: Int64 = 0
  /// Change sets in the inbox, within `window` of `nextSequence`; later
  /// ones are only noted, so memory stays bounded whatever the backlog.
  private var inboxSequences = Set<Int64>()
  private var moreBeyondWindow = false
  private static let window: Int64 = 4096
  private var gapDeadline: ContinuousClock.Instant?
  private let reader: StoreReader

  init(group: GroupLayout, name: String, storeID: UUID, options: ListenerOptions, ephemeral: Bool) throws {
    guard GroupLayout.isValidListenerName(name) else { throw GroupSyncError.invalidListenerName(name) }
    self.name = name
    self.group = group
    self.storeID = storeID
    self.options = options
    self.removeFolderOnClose = ephemeral || options.removeFolderOnClose
    inboxPath = group.inbox(name)
    try System.makeDirectory(group.listenerFolder(name))
    try System.makeDirectory(inboxPath)
    lock = try ListenerLock(path: group.lockFile(name), name: name)
    // Order matters: lock, then empty the inbox, then read the sequence.
    // A writer that saw us dead committed before the lock, so before the
    // sequence is read; anything it linked meanwhile is at or below it.
    try Self.clear(inboxPath)
    reader = try StoreReader(path: group.store)
    // Registered in-process before the sequence is read: this process's
    // commits after it come in memory, never through the inbox.
    LocalListeners.shared.add(self, group: group.root)
    do {
      startSequence = try reader.sequence()
      nextSequence = startSequence + 1
      deliveredThrough.store(nextSequence, ordering: .relaxed)
      watch = try FolderWatcher.shared.watch(
        inboxPath, rescanMilliseconds: UInt64(options.rescanInterval.milliseconds)
      ) { [weak self] event in self?.handle(event) }
    } catch {
      LocalListeners.shared.remove(self, group: group.root)
      throw error
    }
  }

  deinit { close() }

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
  /// consumer, whose iteration ends.
  public func close() {
    let waiter: CheckedContinuation<Void, Never>? = shared.withLock { shared in
      guard !shared.closed else { return nil }
      shared.closed = true
      defer { shared.waiter = nil }
      return shared.waiter
    }
    guard watch != nil else { return }
    watch?.cancel()
    watch = nil
    LocalListeners.shared.remove(self, group: group.root)
    try? Self.clear(inboxPath)
    if removeFolderOnClose {
      try? FileManager.default.removeItem(atPath: group.listenerFolder(name))
    }
    lock.release()  // writers stop delivering; the name is free again
    waiter?.resume()
  }

  public var isClosed: Bool { shared.withLock { $0.closed } }

  // MARK: Hand-over from the watcher and from writers of this process

  private func handle(_ event: FolderWatcher.Event) {
    switch event {
    case .entry(let fileName):
      let sequence = GroupLayout.sequence(inFileName: Substring(fileName))
      // Our own removals of delivered files come back as events: no wake-up.
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
    case .failed(let status):
      Logger.groupSync.error("watching inbox of '\(name)' failed: uv error \(status)")
      signal { $0.rescanRequested = true }
    }
  }

  func receiveInProcess(_ changeSet: ChangeSet) {
    signal { $0.inProcess[changeSet.sequence] = changeSet }
  }

  private func signal(_ update: (inout Shared) -> Void = { _ in }) {
    let waiter: CheckedContinuation<Void, Never>? = shared.withLock {
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
      await withCheckedContinuation { continuation in
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
      let (hints, rescan, inProcess, closed) = shared.withLock {
        shared -> ([Int64], Bool, ChangeSet?, Bool) in
        defer {
          shared.hintedSequences.removeAll(keepingCapacity: true)
          shared.rescanRequested = false
        }
        shared.signaled = false
        let inProcess = shared.inProcess.removeValue(forKey: nextSequence)
        if !shared.inProcess.isEmpty {  // committed before we started, or covered by a reset
          shared.inProcess = shared.inProcess.filter { $0.key > nextSequence }
        }
        return (shared.hintedSequences, shared.rescanRequested, inProcess, shared.closed)
      }
      if closed { return nil }
      for sequence in hints { track(sequence) }
      // The window ran dry while more waits beyond it: list the inbox again.
      let refill = inboxSequences.isEmpty && moreBeyondWindow && inProcess == nil
      if rescan || refill, let reset = scanInbox() { return .reset(reset) }
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
      if let reset = checkGap() { return .reset(reset) }
      await waitForSignal()
    }
  }

  private func accept(_ changeSet: ChangeSet) -> ChangeSet {
    nextSequence = changeSet.sequence + 1
    deliveredThrough.store(nextSequence, ordering: .relaxed)
    gapDeadline = nil
    return changeSet
  }

  /// A later change set is waiting for a missing one: wait for the grace
  /// period, then give up with a reset.
  private func checkGap() -> Reset? {
    let waiting = inboxSequences.contains { $0 > nextSequence } || moreBeyondWindow
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
    return reset("change set \(nextSequence) did not arrive within \(options.gracePeriod)")
  }

  /// Logs why, skips to the store's current sequence and drops everything
  /// up to it.
  private func reset(_ reason: String) -> Reset {
    Logger.groupSync.error("listener '\(name)': \(reason); resetting")
    // List before reading the sequence: a file appears only after its
    // commit, so every file listed now is at or below the sequence read
    // next (covered by the reset), or forged; all of them go.
    var listed: [String] = []
    try? System.forEachDirectoryEntry(inboxPath) { name, _ in
      if GroupLayout.sequence(inFileName: Substring(name)) != nil { listed.append(name) }
    }
    let sequence = (try? reader.sequence()) ?? nextSequence
    nextSequence = max(nextSequence, sequence + 1)
    deliveredThrough.store(nextSequence, ordering: .relaxed)
    gapDeadline = nil
    for fileName in listed { removeEntry(fileName) }
    inboxSequences.removeAll()
    moreBeyondWindow = false
    shared.withLock { shared in
      shared.inProcess = shared.inProcess.filter { $0.key >= nextSequence }
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

  /// Lists the inbox, streaming. Foreign entries are removed and cause a
  /// reset, as does an overflowing inbox.
  private func scanInbox() -> Reset? {
    var foreign: [String] = []
    var waitingCount = 0
    inboxSequences.removeAll()  // the listing is the authority; events are hints
    moreBeyondWindow = false
    do {
      try System.forEachDirectoryEntry(inboxPath) { fileName, _ in
        guard let sequence = GroupLayout.sequence(inFileName: Substring(fileName)) else {
          if foreign.count < 5 { foreign.append(fileName) }
          removeEntry(fileName)
          return
        }
        if sequence < nextSequence {
          removeEntry(fileName)  // already delivered or covered by a reset
        } else {
          waitingCount += 1
          track(sequence)
        }
      }
    } catch {
      return reset("cannot list inbox: \(error)")
    }
    if !foreign.isEmpty {
      return reset("foreign entries in inbox, removed: \(foreign.sorted().joined(separator: ", "))")
    }
    if waitingCount > options.maximumBacklog {
      return reset("inbox overflowed: \(waitingCount) change sets waiting (maximum \(options.maximumBacklog))")
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
    let path = inboxPath + "/" + fileName
    inboxSequences.remove(sequence)
    defer { removeEntry(fileName) }
    // O_NOFOLLOW: a symlink fails with ELOOP; O_NONBLOCK: a FIFO does not
    // block the open; fstat then rejects anything but a regular file.
    let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else {
      if errno == ENOENT { return nil }
      return .failure("cannot open \(fileName): \(String(cString: strerror(errno)))")
    }
    defer { System.close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { return .failure("cannot stat \(fileName)") }
    guard info.st_mode & S_IFMT == S_IFREG else { return .failure("\(fileName) is not a regular file") }
    guard info.st_size <= options.maximumFileSize else {
      return .failure("\(fileName) is \(info.st_size) bytes, over the \(options.maximumFileSize)-byte maximum")
    }
    let changeSet: ChangeSet
    do {
      let bytes = try System.readAll(fd, size: Int(info.st_size), path: path)
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

  private func removeEntry(_ fileName: String) {
    let path = inboxPath + "/" + fileName
    if unlink(path) != 0 && errno != ENOENT {
      try? FileManager.default.removeItem(atPath: path)  // a directory
    }
  }

  static func clear(_ folder: String) throws {
    for fileName in try System.listDirectory(folder) {
      let path = folder + "/" + fileName
      if unlink(path) != 0 && errno != ENOENT { try FileManager.default.removeItem(atPath: path) }
    }
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
