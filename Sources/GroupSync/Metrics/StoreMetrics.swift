import CoreMetrics

/// A writable store's metrics, made once when the store opens (see
/// ``GroupSyncMetrics``).
final class StoreMetrics: Sendable {
  let published: Counter
  let deliveriesFailed: Counter
  let captureRows: Recorder
  let commitDuration: Timer
  let publishDuration: Timer

  init(store: String, factory: (any MetricsFactory)?) {
    let dimensions = [("store", store)]
    let factory = factory ?? MetricsSystem.factory
    published = Counter(label: GroupSyncMetrics.changeSetsPublished, dimensions: dimensions, factory: factory)
    deliveriesFailed = Counter(label: GroupSyncMetrics.deliveriesFailed, dimensions: dimensions, factory: factory)
    captureRows = Recorder(label: GroupSyncMetrics.captureRows, dimensions: dimensions, factory: factory)
    commitDuration = Timer(label: GroupSyncMetrics.commitDuration, dimensions: dimensions, factory: factory)
    publishDuration = Timer(label: GroupSyncMetrics.publishDuration, dimensions: dimensions, factory: factory)
  }

  /// One change set published: `failures` deliveries failed, publishing
  /// took `duration`.
  func published(_ changeSet: ChangeSet, failures: Int, duration: Duration) {
    published.increment()
    if failures > 0 { deliveriesFailed.increment(by: failures) }
    captureRows.record(changeSet.rowCount)
    publishDuration.record(duration: duration)
  }
}

extension Timer {
  /// Records a `Duration`, in nanoseconds.
  func record(duration: Duration) {
    let (seconds, attoseconds) = duration.components
    recordNanoseconds(seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000)
  }
}
