import CoreMetrics
import Foundation

/// A listener's metrics (see ``GroupSyncMetrics``), per store, made once
/// when the listener first delivers from that store.
///
/// `@unchecked Sendable`: used only by the listener's consuming task, as
/// its ``StoreStream``s are.
final class ListenerMetrics: @unchecked Sendable {
  private let listener: String
  private let factory: any MetricsFactory
  private var stores: [String: PerStore] = [:]
  /// Resets of the whole group (every store at once).
  private lazy var groupResets = Resets(listener: listener, store: "*", factory: factory)

  /// One store's metrics.
  final class PerStore {
    let delivered: Counter
    let gapRepairs: Counter
    let backlog: Gauge
    let lagSequences: Gauge
    let lagSeconds: Gauge
    let resets: Resets

    init(listener: String, store: String, factory: any MetricsFactory) {
      let dimensions = [("listener", listener), ("store", store)]
      delivered = Counter(label: GroupSyncMetrics.changeSetsDelivered, dimensions: dimensions, factory: factory)
      gapRepairs = Counter(label: GroupSyncMetrics.gapRepairs, dimensions: dimensions, factory: factory)
      backlog = Gauge(label: GroupSyncMetrics.backlog, dimensions: dimensions, factory: factory)
      lagSequences = Gauge(label: GroupSyncMetrics.lagSequences, dimensions: dimensions, factory: factory)
      lagSeconds = Gauge(label: GroupSyncMetrics.lagSeconds, dimensions: dimensions, factory: factory)
      resets = Resets(listener: listener, store: store, factory: factory)
    }
  }

  /// One counter per reset cause, made when first used.
  final class Resets {
    private let dimensions: [(String, String)]
    private let factory: any MetricsFactory
    private var counters: [GroupSyncMetrics.ResetCause: Counter] = [:]

    init(listener: String, store: String, factory: any MetricsFactory) {
      dimensions = [("listener", listener), ("store", store)]
      self.factory = factory
    }

    func count(_ reset: Reset) {
      let cause = GroupSyncMetrics.ResetCause(reset)
      if let counter = counters[cause] { return counter.increment() }
      let counter = Counter(
        label: GroupSyncMetrics.resets, dimensions: dimensions + [("reason", cause.rawValue)], factory: factory)
      counters[cause] = counter
      counter.increment()
    }
  }

  /// - Parameter listener: the `listener` dimension.
  init(listener: String, factory: (any MetricsFactory)?) {
    self.listener = listener
    self.factory = factory ?? MetricsSystem.factory
  }

  private func metrics(_ stream: StoreStream) -> PerStore {
    if let metrics = stores[stream.store] { return metrics }
    let metrics = PerStore(listener: listener, store: stream.store, factory: factory)
    stores[stream.store] = metrics
    return metrics
  }

  /// `event` was delivered from `stream`.
  func delivered(_ event: ListenerEvent, by stream: StoreStream) {
    let metrics = metrics(stream)
    switch event {
    case .changes(let changeSet):
      metrics.delivered.increment()
      metrics.lagSequences.record(max(0, stream.storeSequence - changeSet.sequence))
      let age = Double(Store.nowNanoseconds() &- changeSet.committedAtNanoseconds) / 1e9
      metrics.lagSeconds.record(max(0, age))
    case .reset(let reset):
      metrics.resets.count(reset)
      metrics.lagSequences.record(0)
      metrics.lagSeconds.record(0)
    }
  }

  /// A reset of every store.
  func resetAll(_ reset: Reset, streams: [StoreStream]) {
    groupResets.count(reset)
    for stream in streams {
      metrics(stream).lagSequences.record(0)
      metrics(stream).backlog.record(0)
    }
  }

  /// A missing change set of `stream` was read from the history.
  func gapRepaired(_ stream: StoreStream) {
    metrics(stream).gapRepairs.increment()
  }

  /// On a rescan tick: how far behind each stream is, and what waits for
  /// it (`inProcess`: change sets of this process waiting, by store).
  func sample(_ streams: [StoreStream], inProcess: [String: Int]) {
    for stream in streams where !stream.isReadOnly {
      let metrics = metrics(stream)
      metrics.lagSequences.record(max(0, stream.storeSequence - (stream.nextSequence - 1)))
      metrics.backlog.record(stream.inboxSequences.count + (inProcess[stream.store] ?? 0))
    }
  }
}
