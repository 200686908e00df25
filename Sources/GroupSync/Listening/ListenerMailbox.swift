// The hand-over between a listener's producers (the watcher thread, this
// process's writers) and its one consumer, and how the consumer is woken.
import Foundation

/// What the watcher thread and this process's writers hand a listener's
/// consumer, and how the consumer is woken for it.
///
/// Two ways to post, named for the thread they are called on: ``post(_:)``
/// from anywhere but the watcher thread (writers, timers, cancellation),
/// ``postOnWatcherThread(_:)`` from the watcher thread itself, where a
/// consumer running on that thread is run on the spot instead of woken.
final class ListenerMailbox: Sendable {
  /// What is waiting for the consumer.
  struct Contents {
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
    /// The handler of ``Listener/startOnWatcherThread(_:)``: the consumer
    /// runs on the watcher thread, and posts from elsewhere wake it.
    var direct: (@Sendable (ListenerEvent) -> Void)?
  }

  private let contents = Locked(Contents())
  /// The listener's inbox, whose watch wakes a consumer that runs on the
  /// watcher thread.
  private let inbox: OwnedInbox

  init(inbox: OwnedInbox) { self.inbox = inbox }

  /// Runs `body` on the contents, under the mutex, waking nobody.
  @discardableResult
  func withContents<T>(_ body: (inout Contents) throws -> T) rethrows -> T {
    try contents.withLock(body)
  }

  /// Hands `update` to the consumer and wakes it: resumes the waiting
  /// task, or wakes the watcher thread for a consumer that runs there.
  /// Not for the watcher thread itself (see ``postOnWatcherThread(_:)``).
  func post(_ update: (inout Contents) -> Void = { _ in }) {
    switch deposit(update) {
    case .none, .runHere: break
    case .resume(let waiter): waiter.resume()
    case .watcherThread: inbox.wake()
    }
  }

  /// Hands `update` to the consumer from the watcher thread. Returns true
  /// when the consumer runs on this very thread: the caller runs it now.
  func postOnWatcherThread(_ update: (inout Contents) -> Void = { _ in }) -> Bool {
    switch deposit(update, onWatcherThread: true) {
    case .none, .watcherThread: return false
    case .resume(let waiter):
      waiter.resume()
      return false
    case .runHere: return true
    }
  }

  /// Who to wake once `update` is in.
  private enum Wake {
    case none
    case resume(UnsafeContinuation<Void, Never>)
    case watcherThread
    case runHere
  }

  private func deposit(_ update: (inout Contents) -> Void, onWatcherThread: Bool = false) -> Wake {
    contents.withLock {
      update(&$0)
      if $0.direct != nil { return onWatcherThread ? .runHere : .watcherThread }
      guard let waiter = $0.waiter else {
        $0.signaled = true
        return .none
      }
      $0.waiter = nil
      return .resume(waiter)
    }
  }

  /// Returns at the next post (at once if one came since the last look),
  /// on close, or when the task is cancelled.
  func waitForPost() async {
    await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        let resumeNow = contents.withLock {
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
      post()
    }
  }

  // MARK: The consumer's side

  /// What the watcher thread and writers posted since the consumer last
  /// looked: the inbox files they saw arrive, what they asked it to do,
  /// and what happened meanwhile.
  struct Posted {
    /// Files seen arriving in the inbox, as (store, sequence).
    var hints: [(store: String, sequence: Int64)]
    /// Look at everything again: folders, the inbox's listing, the stores
    /// (a rescan tick on a changed inbox, dropped events, a grace period
    /// that started).
    var rescan: Bool
    /// Check the stores (a rescan tick on an unchanged inbox).
    var storeCheck: Bool
    /// This process's change sets overflowed the in-memory backlog.
    var overflowed: Bool
    var closed: Bool
  }

  /// Takes what was posted. The hints array is swapped with
  /// `emptyHintBuffer`, not copied: give it back with
  /// ``keepHintBuffer(of:as:)``.
  func takePosted(emptyHintBuffer: inout [(store: String, sequence: Int64)]) -> Posted {
    var hints: [(store: String, sequence: Int64)] = []
    swap(&hints, &emptyHintBuffer)
    return contents.withLock { contents in
      defer {
        contents.rescanRequested = false
        contents.storeCheckRequested = false
        contents.inProcessOverflowed = false
      }
      swap(&hints, &contents.hintedSequences)
      contents.signaled = false
      return Posted(
        hints: hints, rescan: contents.rescanRequested, storeCheck: contents.storeCheckRequested,
        overflowed: contents.inProcessOverflowed, closed: contents.closed)
    }
  }

  /// Empties the hints of `posted` and keeps their storage as the
  /// `emptyHintBuffer` of the next ``takePosted(emptyHintBuffer:)``.
  static func keepHintBuffer(of posted: Posted, as emptyHintBuffer: inout [(store: String, sequence: Int64)]) {
    var hints = posted.hints
    hints.removeAll(keepingCapacity: true)
    emptyHintBuffer = hints
  }

  // MARK: Change sets of this process

  /// Adds a change set of `store` committed by this process. Past either
  /// bound, every waiting one is dropped and the overflow noted.
  func receiveInProcess(_ changeSet: ChangeSet, store: String, maximumCount: Int, maximumRows: Int) {
    post { contents in
      guard !contents.inProcessOverflowed else { return }
      contents.inProcess[store, default: [:]][changeSet.sequence] = changeSet
      contents.inProcessCount += 1
      contents.inProcessRows += changeSet.rowCount + 1
      if contents.inProcessCount > maximumCount || contents.inProcessRows > maximumRows {
        contents.inProcess = [:]
        contents.inProcessCount = 0
        contents.inProcessRows = 0
        contents.inProcessOverflowed = true
      }
    }
  }

  /// Takes this process's change set `next` of `store`; those before it
  /// (committed before the listener started, or covered by a reset) are
  /// dropped.
  func takeInProcess(store: String, next: Int64) -> ChangeSet? {
    contents.withLock { contents in
      guard contents.inProcess[store]?.isEmpty == false else { return nil }
      // In place (no copy of the dictionary).
      func take(_ waiting: inout [Int64: ChangeSet]) -> (taken: ChangeSet?, gone: [ChangeSet]) {
        var gone: [ChangeSet] = []
        if waiting.count > 1 || waiting.keys.first != next {
          for sequence in Array(waiting.keys) where sequence < next { gone.append(waiting.removeValue(forKey: sequence)!) }
        }
        let taken = waiting.removeValue(forKey: next)
        return (taken, gone + (taken.map { [$0] } ?? []))
      }
      let (taken, gone) = take(&contents.inProcess[store]!)
      contents.inProcessCount -= gone.count
      contents.inProcessRows -= gone.reduce(0) { $0 + $1.rowCount + 1 }
      return taken
    }
  }

  /// Whether a change set of `store` after `next` waits in memory.
  func hasInProcess(store: String, after next: Int64) -> Bool {
    contents.withLock { $0.inProcess[store]?.keys.contains { $0 > next } ?? false }
  }

  /// Drops the change sets of each store before its next sequence (a
  /// reset covers them).
  func dropInProcess(before next: [(store: String, sequence: Int64)]) {
    contents.withLock { contents in
      for (store, sequence) in next {
        contents.inProcess[store] = contents.inProcess[store]?.filter { $0.key >= sequence }
      }
      contents.inProcessCount = contents.inProcess.values.reduce(0) { $0 + $1.count }
      contents.inProcessRows = contents.inProcess.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.rowCount + 1 } }
    }
  }

  /// How many change sets of this process wait, by store.
  var inProcessCounts: [String: Int] { contents.withLock { $0.inProcess.mapValues(\.count) } }
}
