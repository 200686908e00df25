// What a relay shows of itself: its status (``Relay/status()`` and
// `relays/HOST.json`), its connection gauges, and the errors it shows.
import CoreMetrics
import Foundation
import GroupSync
#if canImport(Glibc)
import Glibc
#endif

/// Keeps a relay's ``RelayStatus``: the session tells it what changed,
/// callers of ``Relay/status()`` read it from any thread, and it writes the
/// status file at most every 200 ms unless asked to at once.
///
/// `@unchecked Sendable`: `current` is guarded by `lock`; `lastWrite` is
/// the relay thread's own.
final class RelayStatusReporter: @unchecked Sendable {
  /// Round trips to the server: of sessions before this one, and of
  /// shipping and applying across all of them.
  struct RoundTrips {
    var ofEarlierSessions: Int64 = 0
    var shipping: Int64 = 0
    var applying: Int64 = 0
  }

  private let folder: String
  private let emit: @Sendable (RelayEvent) -> Void
  private let lock = NSLock()
  private var current: RelayStatus
  private var lastWrite = ContinuousClock.now - .seconds(10)
  /// The relay's own metrics (see ``RelayMetrics``; its stores' are in
  /// their contexts), and whether it had a connection before (the next
  /// one is a reconnect).
  private let reconnects: Counter
  private let connectedGauge: Gauge
  private var hasConnected = false

  init(configuration: RelayConfiguration, emit: @escaping @Sendable (RelayEvent) -> Void) {
    folder = configuration.folder
    self.emit = emit
    let dimensions = [("group", configuration.group), ("host", configuration.host)]
    let factory = configuration.metricsFactory ?? MetricsSystem.factory
    reconnects = Counter(label: RelayMetrics.reconnects, dimensions: dimensions, factory: factory)
    connectedGauge = Gauge(label: RelayMetrics.connected, dimensions: dimensions, factory: factory)
    connectedGauge.record(0)
    current = RelayStatus(
      host: configuration.host, group: configuration.group, processID: getpid(), isConnected: false, isLive: true,
      lastError: nil, updatedAtNanoseconds: 0, stores: [])
    current.relayVersion = configuration.version.name
    current.formatsRead = configuration.version.reads.map(\.rawValue)
    current.mergeRules = configuration.merge.fingerprint
    current.transport = configuration.transport.rawValue
    if configuration.transport == .poll { current.pollIntervalSeconds = configuration.pollInterval.inSeconds }
  }

  var status: RelayStatus { lock.withLock { current } }

  /// The error the status shows (nil: none since the last good pass).
  func show(error text: String?) { lock.withLock { current.lastError = text } }

  /// A session connected (counting a reconnect after the first).
  func connected() {
    if hasConnected { reconnects.increment() }
    hasConnected = true
    setConnected(true)
  }

  func disconnected() { setConnected(false) }

  private func setConnected(_ connected: Bool) {
    lock.withLock { current.isConnected = connected }
    connectedGauge.record(connected ? 1 : 0)
  }

  /// The group's format, and the one this relay writes.
  func show(groupFormat: LogFormat, writing: LogFormat) {
    lock.withLock {
      current.groupFormat = groupFormat.rawValue
      current.writeFormat = writing.rawValue
    }
  }

  /// The other members' merge rules that differ from this relay's, by host.
  func show(differingRules: [String: String]) {
    lock.withLock { current.differingMergeRules = differingRules.isEmpty ? nil : differingRules }
  }

  /// Updates the status from the stores' places and counts and writes
  /// `relays/HOST.json` (at most every 200 ms unless `force`).
  func refresh(
    force: Bool, contexts: [ReplicaContext], log: SharedLog?, roundTrips: RoundTrips, isLive: Bool
  ) {
    let now = ContinuousClock.now
    guard force || now - lastWrite >= .milliseconds(200) else { return }
    lastWrite = now
    let stores = contexts.map { storeStatus($0, log: log) }
    let status = lock.withLock { () -> RelayStatus in
      current.stores = stores
      current.roundTrips = roundTrips.ofEarlierSessions + (log?.roundTrips ?? 0)
      current.shippingRoundTrips = roundTrips.shipping
      current.applyingRoundTrips = roundTrips.applying
      current.shippedEntries = contexts.reduce(0) { $0 + $1.shippedEntries }
      current.appliedEntries = contexts.reduce(0) { $0 + $1.appliedEntries }
      current.updatedAtNanoseconds = Int64(Date().timeIntervalSince1970 * 1e9)
      current.isLive = isLive
      return current
    }
    do {
      try RelayStatusFile.write(status, group: folder)
    } catch {
      emit(.error("writing the status file: \(error)"))
    }
  }

  /// One store's status, and its lag and held-rows gauges.
  private func storeStatus(_ context: ReplicaContext, log: SharedLog?) -> RelayStatus.StoreStatus {
    let place = context.place.current
    let read = try? context.store.read { db -> (Int64, Int64, [RelayMetrics.HeldCause: Int64]) in
      let sequence = try context.store.currentSequence(in: db)
      let unshipped = try context.store.changeSetCount(after: place.shipped, notWrittenBy: context.author, in: db)
      return (sequence, unshipped, try HeldRows.counts(db))
    }
    let local = read ?? (0, 0, [:])
    var lagSeconds = 0.0
    if context.logHead > place.applied, let log, log.isConnected {
      lagSeconds = (try? log.lagSeconds(context.replica, after: place.applied)) ?? 0
    }
    context.metrics.lagEntries.record(max(0, context.logHead - place.applied))
    context.metrics.lagSeconds.record(lagSeconds)
    // (A store that could not be read keeps the counts it last showed.)
    if let read { context.metrics.held(read.2) }
    return .init(
      name: context.storeName, localSequence: local.0, shipped: place.shipped, unshipped: local.1,
      logHead: context.logHead, applied: place.applied,
      lagChangeSets: max(0, context.logHead - place.applied), lagSeconds: lagSeconds,
      conflicts: context.conflicts, heldRows: local.2.values.reduce(0, +),
      heldAt: context.formatHold?.position, heldFormat: context.formatHold?.format.rawValue)
  }
}
