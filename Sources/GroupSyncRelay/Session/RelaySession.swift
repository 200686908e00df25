// What runs a relay: its thread, the loop and its error policy,
// connecting and dropping the session on the server, and shutting down.
import Foundation
import GroupSync
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// One started relay: its stores' contexts, the host's lock file, the
/// doorbell that local commits ring, and the thread that connects to the
/// shared log and runs passes (`RelaySession+Pass.swift`), waits
/// (`RelaySession+Waiting.swift`) and recovers
/// (`RelaySession+Recovery.swift`) until the relay stops.
///
/// `@unchecked Sendable`: `stopping`, `finished` and `failed` are guarded
/// by `lock` (``Relay`` stops it from any thread); the rest is used on the
/// relay's thread only, after ``start()`` handed it there.
final class RelaySession: @unchecked Sendable {
  let configuration: RelayConfiguration
  let emit: @Sendable (RelayEvent) -> Void
  let reporter: RelayStatusReporter
  let logger = Logger(label: "groupsync.relay")
  let failpoints = RelayFailpoints()

  private let lock = NSLock()
  private var stopping = false
  private var failed: RelayError?
  private var finished = false
  private let finishedCondition = NSCondition()
  private var thread: Thread?

  // The relay thread's own.
  var contexts: [ReplicaContext]
  private var group: GroupFolder?
  var log: SharedLog?
  var needsRecovery = true
  /// Set by the doorbell (a local commit), by the timer and whenever a
  /// pass did not finish: the next pass reconciles the schema and ships.
  /// A pass woken only by a notification just applies.
  let localCommits = LocalCommitFlag()
  let wake: WakePipe
  /// Rung once by ``stopAndWait()`` and never drained: every wait on the
  /// server gives up when it rings.
  let stopSignal: WakePipe
  private var doorbell: Doorbell?
  /// The steps' timestamps, when the configuration asks for a trace.
  let trace: RelayTrace?
  private let fileLock: RelayLock
  var roundTrips = RelayStatusReporter.RoundTrips()
  /// How long this host's applied place may wait to ride on another round
  /// trip before it is sent on its own.
  static let bookkeepingDelay = Duration.milliseconds(200)
  /// How often the relay asks the server whether the group's format can
  /// move up (besides when it connects, and the answer of every shipment).
  static let formatCheckInterval = Duration.seconds(10)
  var lastFormatCheck = ContinuousClock.now
  /// When the last shipment was sent (``RelayConfiguration/batchWindow``).
  var lastShipment: ContinuousClock.Instant?
  /// The group's format as last told (``RelayEvent/format(group:writing:)``).
  var knownGroupFormat: LogFormat?
  /// The members whose merge rules differ from this relay's, as last told.
  var differingRules: [String: String] = [:]
  /// Who holds the host's lease on the server when this relay does (the
  /// poll transport): kept in the folder (``RelayLease``), so that this
  /// folder's next relay takes a lease left by a dead one over at once.
  let leaseHolder: UUID
  /// When the lease was last taken or renewed.
  var leaseRenewed = ContinuousClock.now
  /// When the poll transport reads the log next.
  var nextPoll = ContinuousClock.now
  /// When the store was last looked at without a ring.
  var lastStoreCheck = ContinuousClock.now

  /// Takes the host's lock file of `group`, opens the configuration's
  /// stores there and tells their identities, and hangs the doorbell.
  ///
  /// - Throws: ``RelayError/relayAlreadyRunning(host:group:where:)`` when
  ///   a live relay of this host runs on the folder; GroupSync's errors for
  ///   the folder and its stores.
  init(
    configuration: RelayConfiguration, group: GroupFolder, reporter: RelayStatusReporter,
    emit: @escaping @Sendable (RelayEvent) -> Void
  ) throws {
    self.configuration = configuration
    self.reporter = reporter
    self.emit = emit
    guard let fileLock = try RelayStatusFile.lock(group: configuration.folder, host: configuration.host) else {
      throw RelayError.relayAlreadyRunning(
        host: configuration.host, group: configuration.group, where: "relays/\(configuration.host).lock is held")
    }
    self.fileLock = fileLock
    let trace: RelayTrace?
    do {
      trace = try configuration.traceFile.map(RelayTrace.init(path:))
      leaseHolder = try RelayLease.holder(group: configuration.folder, host: configuration.host)
    } catch {
      fileLock.release()
      throw error
    }
    self.trace = trace
    do {
      wake = try WakePipe()
      stopSignal = try WakePipe()
      let author = "groupsync-relay@" + configuration.host
      let (stopSignal, failpoints) = (self.stopSignal, self.failpoints)
      contexts = try configuration.stores.map { name in
        let store = name == "main" ? group.store : try group.store(named: name)
        return try ReplicaContext(
          store: store, storeName: name, group: configuration.group, host: configuration.host,
          merge: configuration.merge, version: configuration.version, author: author,
          references: configuration.references, stop: stopSignal,
          failpoints: failpoints, metricsFactory: configuration.metricsFactory, emit: emit)
      }
      self.group = group
      for context in contexts {
        context.trace = trace
        try tellIdentities(context)
      }
      // Local commits ring the doorbell, straight from the watcher thread
      // that saw them, undecoded; the change sets are read from the
      // history. The relay's own applied entries do not wake it: they came
      // from the log, and nothing of them ships (its bookkeeping commits
      // no change set at all: its tables are not captured).
      let (wake, localCommits) = (self.wake, self.localCommits)
      doorbell = try group.doorbell(ignoringAuthor: author) {
        trace?.rung()
        localCommits.raise()
        wake.ring()
      }
    } catch {
      fileLock.release()
      throw error
    }
  }

  /// Starts the relay's thread.
  func start() {
    refreshStatus(force: true)
    let thread = Thread { [self] in run() }
    thread.name = "groupsync-relay"
    lock.withLock { self.thread = thread }
    thread.start()
  }

  /// Asks the thread to stop, without waiting.
  func requestStop() {
    lock.withLock { stopping = true }
    stopSignal.ring()
    wake.ring()
  }

  /// Stops the thread and waits until it finished.
  func stopAndWait() {
    requestStop()
    guard lock.withLock({ thread != nil }) else { return }
    finishedCondition.lock()
    while !finished { finishedCondition.wait() }
    finishedCondition.unlock()
  }

  var failure: RelayError? { lock.withLock { failed } }

  var isStopping: Bool { lock.withLock { stopping } }

  /// Tells, per store, whose keys are each host's own and which columns
  /// travel as references to them, and warns of integer columns named
  /// like references that nothing declares (so no one finds out from
  /// corrupted data).
  private func tellIdentities(_ context: ReplicaContext) throws {
    let event = try context.identities()
    guard case .identities(let store, let keys, let references, let suspects) = event else { return }
    let keyList = keys.isEmpty ? "none" : keys.joined(separator: ", ")
    let referenceList = references.isEmpty ? "none" : references.joined(separator: ", ")
    logger.info("store '\(store)': keys local to each host: \(keyList); translated references: \(referenceList)")
    if !suspects.isEmpty {
      let text =
        "store '\(store)': \(suspects.joined(separator: ", ")) look like references but none is declared: "
        + "declare them (REFERENCES, or --reference TABLE.COLUMN=PARENT), or their numbers mean other rows "
        + "on other hosts"
      logger.warning("\(text)")
    }
    emit(event)
    for unknown in context.unknownReferences() {
      let text = "declared reference \(unknown): store '\(store)' has no such table or column (not translated)"
      logger.error("\(text)")
      emit(.error(text))
    }
  }

  // MARK: The relay's thread

  private func run() {
    var backoff = ReconnectBackoff(maximum: configuration.maximumReconnectDelay)
    var refusalBackoff = ReconnectBackoff(
      first: ServerRefusal.minimumBackoff, maximum: ServerRefusal.maximumBackoff, jitter: true)
    var lastError: String?
    while !isStopping {
      if log == nil {
        do {
          try connect()
          backoff.reset()
          refusalBackoff.reset()
          lastError = nil
          logger.info("connected to PostgreSQL as host '\(configuration.host)' of group '\(configuration.group)'")
          emit(.connected(host: configuration.host))
        } catch {
          log = nil
          if isStopping { break }
          if let error = error as? RelayError, error.needsAdministrator {
            giveUp(error)
            break
          }
          let refusal = ServerRefusal(error)
          let text = refusal.map(\.description) ?? "\(error)"
          if text != lastError {
            logger.warning("not connected to PostgreSQL: \(text)")
            emit(.disconnected(reason: text))
          }
          lastError = text
          reporter.show(error: text)
          refreshStatus(force: true)
          waitForWake(refusal == nil ? backoff.next() : refusalBackoff.next())
          continue
        }
      }
      // Why the pass stopped short, and whether the session survives it.
      let failure: (text: String, keepsSession: Bool)?
      do {
        switch try pass() {
        case .done: failure = nil
        case .recover(let reason): failure = ("\(reason)", true)
        }
      } catch {
        // A local error (the store's) says nothing about the link.
        failure = ("\(error)", (error as? RelayError)?.leavesConnectionUsable ?? true)
      }
      if let failure {
        if isStopping { break }
        let repeated = failure.text == lastError
        lastError = failure.text
        reporter.show(error: failure.text)
        needsRecovery = true
        if failure.keepsSession, let log, log.isConnected {
          // The server refused one statement and rolled it back (a lock
          // another host holds), or this host refused an entry or could
          // not write its store, or must read its places back: keep the
          // session, try again on the next pass.
          log.rollBackQuietly()
          if !repeated {
            logger.error("\(failure.text)")
            emit(.error(failure.text))
          }
        } else {
          // The link is dead or in doubt: reconnect.
          dropSession(failure.text, tell: !repeated)
          refreshStatus(force: true)
          waitForWake(backoff.next())
          continue
        }
      } else {
        if lastError != nil { reporter.show(error: nil) }
        lastError = nil
      }
      refreshStatus(force: false)
      if failure != nil { localCommits.raise() }
      waitBetweenPasses()
    }
    shutDown()
  }

  /// Ends the relay's thread on an error only an administrator can cure
  /// (retrying would only repeat it), and says so.
  private func giveUp(_ error: RelayError) {
    let text = "\(error)"
    logger.critical("giving up: \(text)")
    lock.withLock {
      failed = error
      stopping = true
    }
    reporter.show(error: text)
    emit(.failed(reason: text))
  }

  private func connect() throws {
    let (group, host, transport) = (configuration.group, configuration.host, configuration.transport)
    let log = SharedLog(
      try PostgresConnection(
        conninfo: configuration.conninfo, timeouts: configuration.timeouts,
        applicationName: "groupsync-relay \(host)", stop: stopSignal,
        preparesStatements: configuration.preparesStatements && transport == .notify))
    log.sendsWakeUps = !failpoints.sendsNoWakeUps
    log.wakesAlways = transport == .notify
    try log.configureSession(timeouts: configuration.timeouts)
    try log.prepareAccess(group: group, host: host)
    switch transport {
    case .notify: try log.lockHost(group: group, host: host, holder: leaseHolder)
    case .poll:
      try log.takeLease(
        group: group, host: host, holder: leaseHolder, duration: configuration.leaseDuration,
        version: configuration.version)
      leaseRenewed = .now
    }
    try log.announce(
      group: group, host: host, version: configuration.version, rules: configuration.merge.fingerprint,
      transport: transport)
    // After the announcement, which read the group's channel: what was
    // shipped before the listening began is read from the log below.
    try listen(log)
    lastFormatCheck = .now
    // A store that holds keeps its position from being purged, also if the
    // session that recorded it failed right after.
    for context in contexts {
      if let hold = context.formatHold { try log.recordHold(context.replica, at: hold.position) }
    }
    self.log = log
    takeGroupFormat(log)
    takeDifferingRules(log)
    for context in contexts {
      // What notifications of an earlier session carried may have been
      // lost with it (a failover): the log is read again.
      context.carried = [:]
      context.mustReadLog = true
    }
    needsRecovery = true
    reporter.connected()
  }

  /// Drops the session (the server rolls back what it held and frees
  /// the host's lock) and tells why, unless it just did.
  func dropSession(_ reason: String, tell: Bool) {
    roundTrips.ofEarlierSessions += log?.roundTrips ?? 0
    log = nil
    reporter.disconnected()
    needsRecovery = true
    guard tell else { return }
    logger.warning("lost the connection to PostgreSQL: \(reason)")
    emit(.disconnected(reason: reason))
  }

  private func shutDown() {
    doorbell?.close()
    if let log, log.isConnected {
      try? log.flushDeferred()
      if log.leaseHolder != nil {
        try? log.releaseLease(group: configuration.group, host: configuration.host, holder: leaseHolder)
      }
    }
    do {
      try trace?.write()
    } catch {
      logger.error("the trace could not be written to \(trace?.path ?? ""): \(error)")
    }
    log = nil
    reporter.disconnected()
    refreshStatus(force: true)
    contexts = []
    group = nil
    wake.close()
    stopSignal.close()
    fileLock.release()
    finishedCondition.lock()
    finished = true
    finishedCondition.broadcast()
    finishedCondition.unlock()
  }

  func refreshStatus(force: Bool) {
    reporter.refresh(force: force, contexts: contexts, log: log, roundTrips: roundTrips, isLive: !isStopping)
  }
}
