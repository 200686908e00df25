// Scheduling: what the watcher thread and this process's writers hand
// over, and which event the one consumer delivers next.
import Foundation
import Logging

extension Listener {
  // MARK: Hand-over from the watcher and from writers of this process

  func handle(_ event: FolderWatcher.Event) {
    switch event {
    case .entry(let fileName):
      let parsed = GroupLayout.storeAndSequence(inFileNameBuffer: fileName)
      // A file already read (found by a listing before its event came): no wake-up.
      if let parsed, parsed.store == GroupLayout.mainStoreName,
        parsed.sequence < mainStoreNextSequence.load(ordering: .relaxed)
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
  func receiveInProcess(_ changeSet: ChangeSet, store: String, author: String?) {
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
    let posted = mailbox.takePosted(emptyHintBuffer: &emptyHintBuffer)
    defer { ListenerMailbox.keepHintBuffer(of: posted, as: &emptyHintBuffer) }
    if posted.closed { return .closed }
    for sequencer in sequencers { sequencer.acknowledgeAutomatically() }
    for sequencer in sequencers {
      if let expired = sequencer.takeExpiry() { return .event(delivered(.reset(expired), by: sequencer)) }
    }
    for sequencer in sequencers {
      if let event = sequencer.replay() { return .event(delivered(event, by: sequencer)) }
    }
    if posted.overflowed {
      return .event(.reset(resetAll(.inProcessBacklogOverflowed)))
    }
    for hint in posted.hints { self.sequencer(named: hint.store)?.track(hint.sequence) }
    if posted.rescan, let reset = checkFolders() { return .event(.reset(reset)) }
    if posted.rescan || posted.storeCheck { discoverStores() }
    // A window ran dry while more waits beyond it: list the inbox again.
    if posted.rescan || sequencers.contains(where: \.needsRefill), let reset = scanInbox() { return .event(.reset(reset)) }
    if posted.rescan || posted.storeCheck {
      for sequencer in sequencers {
        if let reason = sequencer.checkStore() {
          return .event(delivered(.reset(sequencer.reset(reason)), by: sequencer))
        }
      }
    }
    if posted.rescan { metrics.sample(sequencers, inProcess: mailbox.inProcessCounts) }
    if let event = nextReady() { return .event(event) }
    for sequencer in sequencers {
      let laterInProcess = mailbox.hasInProcess(store: sequencer.store, after: sequencer.nextSequence)
      switch sequencer.checkGap(laterInProcess: laterInProcess) {
      case .nothingDue: continue
      case .graceStarted(let grace): wakeAfterGrace(grace)
      case .event(let event):
        if case .changes = event { metrics.gapRepaired(sequencer) }
        return .event(delivered(event, by: sequencer))
      }
    }
    return .waiting
  }

  /// The next change set some store has ready (from this process, or in
  /// the inbox), trying the stores in turn so that none starves another.
  private func nextReady() -> ListenerEvent? {
    for offset in 0..<sequencers.count {
      let sequencer = sequencers[(nextSequencer + offset) % sequencers.count]
      if let changeSet = mailbox.takeInProcess(store: sequencer.store, next: sequencer.nextSequence) {
        nextSequencer = (nextSequencer + offset + 1) % sequencers.count
        return delivered(.changes(sequencer.accept(changeSet)), by: sequencer)
      }
      guard sequencer.nextIsInInbox else { continue }
      switch sequencer.readNextInboxFile() {
      case .success(let changeSet):
        nextSequencer = (nextSequencer + offset + 1) % sequencers.count
        return delivered(.changes(sequencer.accept(changeSet)), by: sequencer)
      case .failure(let reason, let arrived):
        guard hostileActs.continues(arrived: arrived.map { $0...$0 }) else {
          return delivered(.reset(sequencer.reset(reason, badInput: true)), by: sequencer)
        }
        // The act was answered already: the file is gone, the change set
        // is read from the history (the truth) without another reset.
        Logger.groupSync.warning("listener '\(name)': \(reason); removed (bad input again)")
        if let event = sequencer.readFromHistory() { return delivered(event, by: sequencer) }
        continue
      case nil: continue  // gone meanwhile; rescan decides
      }
    }
    return nil
  }

  /// Notes where `sequencer` is after an event, for the watcher thread.
  private func delivered(_ event: ListenerEvent, by sequencer: StoreSequencer) -> ListenerEvent {
    if sequencer === sequencers[0] { mainStoreNextSequence.store(sequencer.nextSequence, ordering: .relaxed) }
    metrics.delivered(event, by: sequencer)
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

  func sequencer(named store: String) -> StoreSequencer? {
    sequencers.first { $0.store == store }
  }
}
