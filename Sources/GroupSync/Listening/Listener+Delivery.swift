import Foundation
import Logging

// Scheduling: what the watcher thread and this process's writers hand
// over, and which event the one consumer delivers next.
extension Listener {
  // MARK: Hand-over from the watcher and from writers of this process

  func handle(_ event: FolderWatcher.Event) {
    switch event {
    case .entry(let fileName):
      let parsed = GroupLayout.storeAndSequence(inFileNameBuffer: fileName)
      // A file already read (found by a listing before its event came): no wake-up.
      if let parsed, parsed.store == GroupLayout.mainStoreName,
        parsed.sequence < deliveredThrough.load(ordering: .relaxed)
      {
        return
      }
      postOnWatcherThread { contents in
        // Hints pile up only while nobody consumes; past a bound a rescan
        // tells the same.
        if let parsed, contents.hintedSequences.count < Self.maximumHints {
          contents.hintedSequences.append(parsed)
        } else {
          contents.rescanRequested = true
        }
      }
    case .rescan:
      postOnWatcherThread { $0.rescanRequested = true }
    case .tick:
      postOnWatcherThread { $0.storeCheckRequested = true }
    case .wake:
      postOnWatcherThread()
    case .failed(let status):
      Logger.groupSync.error("watching inbox of '\(name)' failed: uv error \(status)")
      postOnWatcherThread { $0.rescanRequested = true }
    }
  }

  /// A change set of `store` committed by this process, handed over in
  /// memory. Past the backlog bounds, they are dropped and the listener
  /// resets.
  func receiveInProcess(_ changeSet: ChangeSet, store: String) {
    mailbox.receiveInProcess(
      changeSet, store: store, maximumCount: options.maximumInProcessBacklog,
      maximumRows: options.maximumInProcessRows)
  }

  /// Posts from the watcher thread; a consumer that runs on that thread
  /// (``startOnWatcherThread(_:)``) is run now.
  private func postOnWatcherThread(_ update: (inout ListenerMailbox.Contents) -> Void = { _ in }) {
    if mailbox.postOnWatcherThread(update) { drainOnWatcherThread() }
  }

  /// Delivers every ready event to the direct handler, on the watcher
  /// thread, until none is ready.
  private func drainOnWatcherThread() {
    guard let handler = mailbox.withContents({ $0.direct }) else { return }
    while case .event(let event) = takeReadyEvent() { handler(event) }
  }

  // MARK: Delivery

  /// The next event, or nil once closed or cancelled.
  func nextEvent() async -> ListenerEvent? {
    precondition(!consuming.exchange(true, ordering: .acquiring), Self.consumedTwice)
    defer { consuming.store(false, ordering: .releasing) }
    while !Task.isCancelled {
      switch takeReadyEvent() {
      case .event(let event): return event
      case .closed: return nil
      case .waiting: await mailbox.waitForPost()
      }
    }
    return nil
  }

  static let consumedTwice =
    "a Listener's events are consumed from two places at once (two tasks, or events and startOnWatcherThread)"

  /// What the consumer does next.
  private enum Step {
    case event(ListenerEvent)
    case closed
    /// Nothing is ready: wait for the next post.
    case waiting
  }

  /// The next event if one is ready; runs on the one consumer (the
  /// iterating task, or the watcher thread for ``startOnWatcherThread(_:)``).
  private func takeReadyEvent() -> Step {
    let handOver = mailbox.takeHandOver(spare: &spareHints)
    defer { ListenerMailbox.recycle(handOver, into: &spareHints) }
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
    if handOver.rescan { metrics.sample(streams, inProcess: mailbox.inProcessCounts) }
    if let event = nextReady() { return .event(event) }
    for stream in streams {
      let laterInProcess = mailbox.hasInProcess(store: stream.store, after: stream.nextSequence)
      let event = stream.checkGap(inbox: folders.inbox, laterInProcess: laterInProcess, wake: wakeAfterGrace)
      if case .changes = event { metrics.gapRepaired(stream) }
      if let event { return .event(delivered(event, by: stream)) }
    }
    return .waiting
  }

  /// The next change set some store has ready (from this process, or in
  /// the inbox), trying the stores in turn so that none starves another.
  private func nextReady() -> ListenerEvent? {
    for offset in 0..<streams.count {
      let stream = streams[(nextStream + offset) % streams.count]
      if let changeSet = mailbox.takeInProcess(store: stream.store, next: stream.nextSequence) {
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
    mailbox.withContents {
      $0.rescanRequested = true
      $0.signaled = true
    }
    Task { [weak self] in
      try? await Task.sleep(for: grace)
      self?.mailbox.post()
    }
  }

  func stream(named store: String) -> StoreStream? {
    streams.first { $0.store == store }
  }
}
