import CoreMetrics
import Foundation

/// A listener's metrics (see ``GroupSyncMetrics``), per store, made once
/// when the listener first delivers from that store.
///
/// `@unchecked Sendable`: used only by the listener's consuming task, as
/// its ``StoreSequencer``s are.
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

  private func metrics(_ sequencer: StoreSequencer) -> PerStore {
    if let metrics = stores[sequencer.store] { return metrics }
    let metrics = PerStore(listener: listener, store: sequencer.store, factory: factory)
    stores[sequencer.store] = metrics
    return metrics
  }

  /// `event` was delivered from `sequencer`.
  func delivered(_ event: ListenerEvent, by sequencer: StoreSequencer) {
    let metrics = metrics(sequencer)
    switch event {
    case .changes(let changeSet):
      metrics.delivered.increment()
      metrics.lagSequences.record(max(0, sequencer.storeSequence - changeSet.sequence))
      let age = Double(Store.nowNanoseconds() &- changeSet.committedAtNanoseconds) / 1e9
      metrics.lagSeconds.record(max(0, age))
    case .reset(let reset):
      metrics.resets.count(reset)
      metrics.lagSequences.record(0)
      metrics.lagSeconds.record(0)
    }
  }

  /// A reset of every store.
  func resetAll(_ reset: Reset, sequencers: [StoreSequencer]) {
    groupResets.count(reset)
    for sequencer in sequencers {
      metrics(sequencer).lagSequences.record(0)
      metrics(sequencer).backlog.record(0)
    }
  }

  /// A missing change set of `sequencer` was read from the history.
  func gapRepaired(_ sequencer: StoreSequencer) {
    metrics(sequencer).gapRepairs.increment()
  }

  /// On a rescan tick: how far behind each sequencer is, and what waits for
  /// it (`inProcess`: change sets of this process waiting, by store).
  func sample(_ sequencers: [StoreSequencer], inProcess: [String: Int]) {
    for sequencer in sequencers where !sequencer.isReadOnly {
      let metrics = metrics(sequencer)
      metrics.lagSequences.record(max(0, sequencer.storeSequence - (sequencer.nextSequence - 1)))
      metrics.backlog.record(sequencer.inboxSequences.count + (inProcess[sequencer.store] ?? 0))
    }
  }
}
