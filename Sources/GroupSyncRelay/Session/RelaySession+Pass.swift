// One pass of the relay: recover if needed, ship what is pending, apply
// what the log holds; and what the server tells of the group on the way
// (its format, the members' merge rules).
import Foundation
import GroupSync

extension RelaySession {
  /// How a pass ended.
  enum PassOutcome {
    /// It did all it could.
    case done
    /// It stopped short: the next pass recovers first.
    case recover(RecoveryReason)
  }

  /// One pass: recover if needed, ship everything pending (when a local
  /// commit may have happened), apply everything the log holds. A store
  /// that holds (an entry in a format this relay does not read) does
  /// neither.
  func pass() throws -> PassOutcome {
    guard let log else { throw RelayError.disconnected(reason: "no connection") }
    trace?.passBegan = RelayTrace.now()
    let local = localCommits.take() || needsRecovery
    if needsRecovery {
      for context in contexts where context.formatHold == nil {
        try holding(context, log) { try recover(context, log) }
      }
      needsRecovery = false
    }
    if ContinuousClock.now - lastFormatCheck >= Self.formatCheckInterval {
      // A member retired or gone past the window lets the group move up.
      try log.advanceFormat(
        group: configuration.group, host: configuration.host, rules: configuration.merge.fingerprint)
      lastFormatCheck = .now
      takeDifferingRules(log)
      // An older member came or went: listen on the legacy channel or not.
      try listen(log)
    }
    try renewLeaseIfDue(log)
    // A store whose log diverged re-synchronises before anything ships, so
    // that shipments carry positions the log holds.
    for context in contexts where context.divergence != nil && context.formatHold == nil {
      try holding(context, log) { try Applier(context: context).apply(log) }
    }
    if local {
      // (A migration here is reconciled with as each store ships.)
      if let stopped = try counting(\.shipping, log, { try shipAll(log) }) { return stopped }
    }
    takeGroupFormat(log)
    // The shipments' own notifications came with their answers.
    takeNotifications(log)
    return try counting(\.applying, log) { try applyAll(log) }
  }

  /// Runs `body`, a store's shipping: a shipment the server refused
  /// (``RelayError/shipmentRefused(store:reason:)``) stops the store's
  /// shipping for ``shipmentRetryDelay``, told once per reason, instead of
  /// failing the pass: the store goes on applying, and the other stores
  /// ship. A shipment that goes through again clears it.
  private func refusing(_ context: ReplicaContext, _ log: SharedLog, _ body: () throws -> Void) throws {
    do {
      try holding(context, log, body)
      if context.shippingRefused != nil {
        context.shippingRefused = nil
        logger.info("store '\(context.storeName)' ships again")
        reporter.show(error: nil)
        refreshStatus(force: true)
      }
    } catch let error as RelayError {
      guard case .shipmentRefused = error else { throw error }
      let text = error.description
      if context.shippingRefused?.reason != text {
        logger.error("\(text)")
        emit(.error(text))
      }
      context.shippingRefused = (.now + Self.shipmentRetryDelay, text)
      reporter.show(error: text)
      refreshStatus(force: true)
    }
  }

  /// How long a store whose shipment the server refused waits before it
  /// ships again (a limit raised meanwhile, say).
  static let shipmentRetryDelay: Duration = .seconds(5)

  /// Runs `body` for `context`; an entry or image in a format this relay
  /// does not read puts the store on hold instead of failing the pass.
  private func holding(_ context: ReplicaContext, _ log: SharedLog, _ body: () throws -> Void) throws {
    do {
      try body()
    } catch RelayError.unreadableFormat(let store, let position, let format) {
      context.formatHold = (position, format)
      context.metrics.formatHeld.record(format.rawValue)
      let text = RelayError.unreadableFormat(store: store, position: position, format: format).description
      logger.error("\(text)")
      emit(.formatHeld(store: store, position: position, format: format.rawValue, readers: format.readers))
      try log.recordHold(context.replica, at: position)
    }
  }

  /// Renews the host's lease (the poll transport) once a third of it went
  /// by: at every pass, and between the batches of a long catch-up.
  func renewLeaseIfDue(_ log: SharedLog) throws {
    guard log.leaseHolder != nil, ContinuousClock.now - leaseRenewed >= configuration.leaseDuration / 3 else { return }
    try log.renewLease(
      group: configuration.group, host: configuration.host, holder: leaseHolder,
      duration: configuration.leaseDuration)
    leaseRenewed = .now
  }

  /// Takes the group's format the server last told: the stores write the
  /// newest this relay writes up to it, and a change is told.
  func takeGroupFormat(_ log: SharedLog) {
    let group = log.groupFormat
    guard group != knownGroupFormat else { return }
    knownGroupFormat = group
    let writing = configuration.version.writes(groupFormat: group)
    for context in contexts { context.writeFormat = writing }
    logger.info("the group's log is in \(group); this relay writes \(writing)")
    emit(.format(group: group.rawValue, writing: writing.rawValue))
    reporter.show(groupFormat: group, writing: writing)
  }

  /// Takes which members announce other merge rules: while any does, this
  /// relay ships nothing (see ``RelayEvent/mergeRules(ours:differing:)``).
  func takeDifferingRules(_ log: SharedLog) {
    let differing = log.differingRules
    guard differing != differingRules else { return }
    differingRules = differing
    let ours = configuration.merge.fingerprint
    if differing.isEmpty {
      logger.info("the group's members agree on the merge rules again: shipping resumes")
    } else {
      let others = differing.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: " | ")
      logger.error(
        "other members announce other merge rules (\(others)) than this relay's (\(ours)): nothing ships until they agree")
    }
    emit(.mergeRules(ours: ours, differing: differing))
    reporter.show(differingRules: differing)
    refreshStatus(force: true)
  }

  /// Ships what every store has pending; nil when it is all shipped (or
  /// held while the members' merge rules differ).
  private func shipAll(_ log: SharedLog) throws -> PassOutcome? {
    guard differingRules.isEmpty else { return nil }
    for context in contexts where context.formatHold == nil {
      if let refused = context.shippingRefused, ContinuousClock.now < refused.until { continue }
      var outcome: PassOutcome?
      try refusing(context, log) {
        shipping: while true {
          waitForBatchWindow()
          switch try Shipper(context: context).ship(log) {
          case .nothing: break shipping
          case .shipped:
            lastShipment = .now
            context.shippedEntries += 1
            takeGroupFormat(log)
            if isStopping {
              outcome = .done
              break shipping
            }
            // Commits made while this one shipped rang meanwhile: they ship
            // next, after the window. None rang: nothing to look for (a
            // commit that rings later starts a pass of its own).
            guard localCommits.take() else { break shipping }
          case .recover(let reason):
            outcome = .recover(reason)
            break shipping
          }
        }
      }
      if let outcome { return outcome }
    }
    return nil
  }

  /// Waits out what is left of ``RelayConfiguration/batchWindow`` since
  /// the last shipment: what commits meanwhile ships with the next.
  private func waitForBatchWindow() {
    guard let lastShipment else { return }
    let left = configuration.batchWindow - (ContinuousClock.now - lastShipment)
    if left > .zero { Thread.sleep(forTimeInterval: left.inSeconds) }
  }

  /// Applies what the log holds for every store, and sends this host's
  /// applied places if they waited long enough for a round trip to ride.
  private func applyAll(_ log: SharedLog) throws -> PassOutcome {
    // A store whose entry is refused (schema) does not hold up the others;
    // the first such error is reported once they are done.
    var refused: (any Error)?
    for context in contexts where context.formatHold == nil {
      do {
        var stopped = false
        try holding(context, log) {
          while try Applier(context: context).apply(log) {
            if isStopping || context.placesInDoubt {
              stopped = isStopping
              return
            }
            try renewLeaseIfDue(log)
          }
        }
        if stopped { return .done }
        if context.placesInDoubt {
          context.placesInDoubt = false
          return .recover(.logDiverged(store: context.storeName, reason: context.divergence ?? "the log diverged"))
        }
      } catch where Self.isLocal(error) {
        refused = refused ?? error
      }
    }
    if let refused { throw refused }
    try log.flushDeferred(olderThan: Self.bookkeepingDelay)
    return .done
  }

  /// Errors an entry meets on this host's store: the connection is sound,
  /// and the other stores go on.
  private static func isLocal(_ error: any Error) -> Bool {
    switch error {
    case RelayError.schemaMismatch, RelayError.unsupportedTable: true
    default: false
    }
  }

  /// Runs `body`, adding the round trips it made to the count at `key`.
  private func counting<T>(
    _ key: WritableKeyPath<RelayStatusReporter.RoundTrips, Int64>, _ log: SharedLog, _ body: () throws -> T
  ) rethrows -> T {
    let before = log.roundTrips
    defer { roundTrips[keyPath: key] += log.roundTrips - before }
    return try body()
  }
}
