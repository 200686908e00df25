// Publishing committed change sets, in commit order, outside the write lock.
import Logging
import Synchronization

/// A change set as it committed: what the recorder hands the publisher.
struct CommittedChangeSet: Sendable {
  let changeSet: ChangeSet
  /// Its encoding, as the history holds it and listeners' inboxes get it.
  let encoded: [UInt8]
  /// The author its history row records (nil: none).
  let author: String?
  /// Whether the `Store.write` that made it waits for its outcome
  /// (``CommitPublisher/publish(through:)`` with its sequence); a
  /// migration's change set has no such writer.
  let awaitedByWriter: Bool
}

/// Publishes committed change sets in commit order, outside the write lock.
///
/// GRDB tells the commit recorder of each commit on the writer's queue,
/// in commit order; the recorder queues the change set here. The writing
/// thread publishes once its transaction is over and the writer connection
/// is free for the next one, so reads and other writes never wait for
/// fan-out. Whoever publishes first publishes everything queued, in order,
/// so commit order holds across the process's threads.
final class CommitPublisher: Sendable {
  typealias Deliver = @Sendable (CommittedChangeSet) -> [PublishFailure]
  private let deliver: Deliver
  private let metrics: StoreMetrics?

  /// A change set and what publishing it came to.
  typealias Outcome = (changeSet: ChangeSet, failures: [PublishFailure])

  private struct Queue {
    var waiting: [CommittedChangeSet] = []
    /// An empty buffer with room, swapped in for `waiting` when a batch
    /// is taken: the next commit's append allocates nothing.
    var spare: [CommittedChangeSet] = []
    /// Published change sets whose writer has not picked them up yet.
    var published: [Int64: Outcome] = [:]
  }
  private let queue = Locked(Queue())
  /// Held while delivering, so that deliveries never overlap or reorder.
  private let delivering = Locked(())

  init(deliver: @escaping Deliver, metrics: StoreMetrics? = nil) {
    self.deliver = deliver
    self.metrics = metrics
  }

  /// Queues a committed change set.
  func enqueue(_ committed: CommittedChangeSet) {
    queue.withLock { $0.waiting.append(committed) }
  }

  /// Publishes everything queued, and returns the outcome for `sequence`
  /// once it is published.
  @discardableResult
  func publish(through sequence: Int64?) -> Outcome? {
    delivering.withLock { _ in
      // Taken, not copied: the queue's buffer is not duplicated per commit.
      var batch: [CommittedChangeSet] = []
      queue.withLock {
        swap(&batch, &$0.waiting)
        swap(&$0.waiting, &$0.spare)
      }
      defer {
        batch.removeAll(keepingCapacity: true)
        queue.withLock { if $0.spare.capacity < batch.capacity { swap(&batch, &$0.spare) } }
      }
      if !batch.isEmpty { Failpoint.stop(if: Failpoint.stopAfterCommit) }
      var own: Outcome?
      for committed in batch {
        let changeSet = committed.changeSet
        // No clock read when no metrics are kept.
        let start = metrics == nil ? nil : ContinuousClock.now
        let failures = deliver(committed)
        if let metrics, let start {
          metrics.published(changeSet, failures: failures.count, duration: ContinuousClock.now - start)
        }
        if !failures.isEmpty {
          Logger.groupSync.error(
            "change set \(changeSet.sequence) committed but not delivered to every listener (they read it from the history): \(failures)")
        }
        if committed.awaitedByWriter {
          // The caller's own, the common case, goes back without the table.
          if changeSet.sequence == sequence {
            own = (changeSet, failures)
          } else {
            queue.withLock { $0.published[changeSet.sequence] = (changeSet, failures) }
          }
        }
      }
      guard let sequence else { return nil }
      if let own { return own }
      return queue.withLock { $0.published.removeValue(forKey: sequence) }
    }
  }
}
