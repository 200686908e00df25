import CoreMetrics
import Foundation
import GRDB
import GroupSync
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The bridge of one group folder to the other hosts of its group, through
/// a PostgreSQL database they share: it ships this host's commits to the
/// log there, and applies the others' through `Store.write`.
///
/// The relay runs on a thread of its own, with one libpq connection. It
/// wakes on local commits (a GroupSync listener), on NOTIFY from other
/// hosts' relays, and on a timer; NOTIFY is only a hint, the log is always
/// read from the applied place. A lost connection is retried with a
/// growing delay while the host goes on working locally. Every wait on the
/// server is bounded (``RelayConfiguration/timeouts``): a dead link is
/// noticed within seconds, and ``stop()`` returns at once in every state.
/// For example:
///
/// ```swift
/// var configuration = RelayConfiguration(
///   folder: "/srv/app/group", conninfo: "host=db.example dbname=app", host: "web-1")
/// configuration.policy = .lastWriterWins
/// let relay = try Relay(configuration)
/// try relay.start()
/// for await event in relay.events {
///   if case .conflict(let record) = event { print(record) }
/// }
/// ```
///
/// `@unchecked Sendable`: the fields the thread and callers share are
/// guarded by `lock`; the rest is used on the relay's thread only.
public final class Relay: @unchecked Sendable {
  public let configuration: RelayConfiguration
  /// What the relay did, in order (the newest 10,000 kept if nobody reads).
  public let events: AsyncStream<RelayEvent>
  private let continuation: AsyncStream<RelayEvent>.Continuation
  /// Delivers an event to ``events`` and to the `onEvent` handler: the
  /// relay's and its stores' one way to tell what they did.
  private let emit: @Sendable (RelayEvent) -> Void

  private let lock = NSLock()
  private var stopping = false
  private var thread: Thread?
  private var finished = false
  private let finishedCondition = NSCondition()
  private var current: RelayStatus
  private var failed: RelayError?

  // The relay thread's own.
  private var group: GroupFolder?
  private var contexts: [ReplicaContext] = []
  private var log: SharedLog?
  private var needsRecovery = true
  /// Set by the doorbell (a local commit), by the timer and whenever a
  /// pass did not finish: the next pass reconciles the schema and ships.
  /// A pass woken only by a notification just applies.
  private let localCommits = LocalCommitFlag()
  private let wake: WakePipe
  /// Rung once by ``stop()`` and never drained: every wait on the server
  /// gives up when it rings.
  private let stopSignal: WakePipe
  private let failpoints = RelayFailpoints()
  private let logger = Logger(label: "groupsync.relay")
  private var doorbell: Doorbell?
  private var fileLock: RelayLock?
  private var lastStatusWrite = ContinuousClock.now - .seconds(10)
  /// Round trips of earlier sessions, and of shipping and applying.
  private var roundTripsBefore: Int64 = 0
  private var shippingRoundTrips: Int64 = 0
  private var applyingRoundTrips: Int64 = 0
  /// How long this host's applied place may wait to ride on another round
  /// trip before it is sent on its own.
  private static let bookkeepingDelay = Duration.milliseconds(200)
  /// The relay's own metrics (see ``RelayMetrics``; its stores' are in
  /// their contexts), and whether it had a connection before (the next
  /// one is a reconnect).
  private let reconnects: Counter
  private let connectedGauge: Gauge
  private var hasConnected = false

  /// Makes a relay; ``start(in:)`` starts it.
  ///
  /// - Parameters:
  ///   - configuration: the folder, the server and the names; checked
  ///     here (names, timeouts, references, the conninfo's syntax).
  ///   - onEvent: called on the relay's thread for each event, as well as
  ///     ``events`` receiving it.
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming what is wrong.
  public init(_ configuration: RelayConfiguration, onEvent: (@Sendable (RelayEvent) -> Void)? = nil) throws {
    guard RelayStatusFile.isValidHostName(configuration.host) else {
      throw RelayError.invalidConfiguration(
        "host name '\(configuration.host)': use 1-64 letters, digits, '-', '_' or '.'")
    }
    guard !configuration.group.isEmpty, configuration.group.utf8.count <= 200 else {
      throw RelayError.invalidConfiguration("group name '\(configuration.group)': 1-200 bytes")
    }
    guard !configuration.stores.isEmpty else { throw RelayError.invalidConfiguration("no store to replicate") }
    if let retention = configuration.retention, retention < 1 {
      throw RelayError.invalidConfiguration("retention \(retention): keep at least 1 entry")
    }
    try configuration.timeouts.validate()
    var declared: Set<String> = []
    for reference in configuration.references {
      guard declared.insert("\(reference.table).\(reference.column)".lowercased()).inserted else {
        throw RelayError.invalidConfiguration("reference \(reference.table).\(reference.column) is declared twice")
      }
    }
    try PostgresConnection.validate(conninfo: configuration.conninfo)
    self.configuration = configuration
    wake = try WakePipe()
    stopSignal = try WakePipe()
    let (events, continuation) = AsyncStream.makeStream(of: RelayEvent.self, bufferingPolicy: .bufferingNewest(10_000))
    self.events = events
    self.continuation = continuation
    emit = { event in
      continuation.yield(event)
      onEvent?(event)
    }
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
  }

  deinit {
    stop()
    continuation.finish()
  }

  /// Opens the group folder and its stores (or uses `group`, the
  /// process's own `GroupFolder` of the same folder), takes the host's
  /// lock file, and starts the relay's thread. The relay then connects (and
  /// keeps trying while the server cannot be reached). Its local writes
  /// carry the author `groupsync-relay@HOST`, whatever the folder's store
  /// options say.
  ///
  /// - Throws: ``RelayError/relayAlreadyRunning(host:group:where:)`` when
  ///   a live relay of this host runs on the folder,
  ///   ``RelayError/invalidConfiguration(_:)`` when `group` is another
  ///   folder than the configuration's; GroupSync's errors for the folder
  ///   and its stores.
  public func start(in group: GroupFolder? = nil) throws {
    let configuration = self.configuration
    let author = "groupsync-relay@" + configuration.host
    // The folder first: a path that is no group folder says so.
    let group = try group ?? GroupFolder(path: configuration.folder, create: false)
    guard Self.isSameFolder(group.path, configuration.folder) else {
      throw RelayError.invalidConfiguration(
        "the group folder '\(group.path)' is not the configuration's folder '\(configuration.folder)'")
    }
    do {
      fileLock = try RelayStatusFile.lock(group: configuration.folder, host: configuration.host)
    } catch GroupSyncError.relayLockHeld {
      throw RelayError.relayAlreadyRunning(
        host: configuration.host, group: configuration.group, where: "relays/\(configuration.host).lock is held")
    }
    self.group = group
    contexts = try configuration.stores.map { name in
      let store = name == "main" ? group.store : try group.store(named: name)
      return try ReplicaContext(
        store: store, storeName: name, group: configuration.group, host: configuration.host,
        merge: configuration.merge, version: configuration.version, author: author, retention: configuration.retention,
        references: configuration.references, stop: stopSignal,
        failpoints: failpoints, metricsFactory: configuration.metricsFactory, emit: emit)
    }
    for context in contexts { try tellIdentities(context) }
    // Local commits ring the doorbell, straight from the watcher thread
    // that saw them, undecoded; the change sets are read from the history.
    let wake = self.wake
    let localCommits = self.localCommits
    // The relay's own commits (applied entries, its bookkeeping) do not
    // wake it: they came from the log, and nothing of them ships.
    doorbell = try group.doorbell(ignoringAuthor: author) {
      localCommits.raise()
      wake.ring()
    }
    refreshStatus(force: true)
    let thread = Thread { [self] in run() }
    thread.name = "groupsync-relay"
    lock.withLock { self.thread = thread }
    thread.start()
  }

  /// Whether two paths name the same folder (the same device and inode).
  private static func isSameFolder(_ a: String, _ b: String) -> Bool {
    var first = stat(), second = stat()
    guard stat(a, &first) == 0, stat(b, &second) == 0 else { return false }
    return first.st_dev == second.st_dev && first.st_ino == second.st_ino
  }

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

  /// Stops the relay and waits for its thread, which abandons whatever it
  /// waits for on the server at once (a transaction it had open rolls back
  /// on the server), closes its connection (the server frees its lock) and
  /// marks its status file stopped. Safe to call more than once.
  public func stop() {
    let started = lock.withLock { () -> Bool in
      stopping = true
      return thread != nil
    }
    guard started else { return }
    stopSignal.ring()
    ringWake()
    finishedCondition.lock()
    while !finished { finishedCondition.wait() }
    finishedCondition.unlock()
  }

  /// The relay's state as of its last pass.
  public func status() -> RelayStatus { lock.withLock { current } }

  /// Why the relay gave up on its own (nil while it runs, or when it was
  /// stopped): an error only an administrator can cure, such as
  /// ``RelayError/missingPrivileges(role:missing:)``; ``RelayEvent/failed(reason:)``
  /// told it.
  public var failure: RelayError? { lock.withLock { failed } }

  // MARK: The relay's thread

  private var isStopping: Bool { lock.withLock { stopping } }

  private func run() {
    var backoff = ReconnectBackoff(maximum: configuration.maximumReconnectDelay)
    var lastError: String?
    while !isStopping {
      if log == nil {
        do {
          try connect()
          if hasConnected { reconnects.increment() }
          hasConnected = true
          backoff.reset()
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
          let text = "\(error)"
          if text != lastError {
            logger.warning("not connected to PostgreSQL: \(text)")
            emit(.disconnected(reason: text))
          }
          lastError = text
          setError(text)
          refreshStatus(force: true)
          waitForWake(backoff.next())
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
        setError(failure.text)
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
        if lastError != nil { setError(nil) }
        lastError = nil
      }
      refreshStatus(force: false)
      if failure != nil { localCommits.raise() }
      if waitForWake(configuration.pollInterval) {
        // Quiet for a whole interval: look at the log itself, in case a
        // commit went by without a notification this session saw, and at
        // the store, in case one went by without ringing.
        for context in contexts { context.mustReadLog = true }
        localCommits.raise()
      }
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
    setError(text)
    emit(.failed(reason: text))
  }

  /// Errors an entry meets on this host's store: the connection is sound,
  /// and the other stores go on.
  private static func isLocal(_ error: any Error) -> Bool {
    switch error {
    case RelayError.schemaMismatch, RelayError.unsupportedTable: true
    default: false
    }
  }

  private func connect() throws {
    let log = SharedLog(
      try PostgresConnection(
        conninfo: configuration.conninfo, timeouts: configuration.timeouts,
        applicationName: "groupsync-relay \(configuration.host)", stop: stopSignal))
    try log.configureSession(timeouts: configuration.timeouts)
    try log.prepareAccess(group: configuration.group, host: configuration.host)
    try log.lockHost(group: configuration.group, host: configuration.host)
    try log.listen()
    try log.announce(
      group: configuration.group, host: configuration.host, version: configuration.version,
      rules: configuration.merge.fingerprint)
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
    setConnected(true)
  }

  /// How a pass ended.
  private enum PassOutcome {
    /// It did all it could.
    case done
    /// It stopped short: the next pass recovers first.
    case recover(RecoveryReason)
  }

  /// One pass: recover if needed, ship everything pending (when a local
  /// commit may have happened), apply everything the log holds. A store
  /// that holds (an entry in a format this relay does not read) does
  /// neither.
  private func pass() throws -> PassOutcome {
    guard let log else { throw RelayError.disconnected(reason: "no connection") }
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
    }
    // A store whose log diverged re-synchronises before anything ships, so
    // that shipments carry positions the log holds.
    for context in contexts where context.divergence != nil && context.formatHold == nil {
      try holding(context, log) { try Applier(context: context).apply(log) }
    }
    if local {
      // After a migration here: its new columns filled in before anything ships.
      for context in contexts where context.formatHold == nil { try Applier(context: context).reconcileSchema() }
      if let stopped = try counting(\.shippingRoundTrips, log, { try shipAll(log) }) { return stopped }
    }
    takeGroupFormat(log)
    // The shipments' own notifications came with their answers.
    takeNotifications(log)
    return try counting(\.applyingRoundTrips, log) { try applyAll(log) }
  }

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

  /// How often the relay asks the server whether the group's format can
  /// move up (besides when it connects, and the answer of every shipment).
  private static let formatCheckInterval = Duration.seconds(10)
  private var lastFormatCheck = ContinuousClock.now
  /// The group's format as last told (``RelayEvent/format(group:writing:)``).
  private var knownGroupFormat: LogFormat?

  /// Takes the group's format the server last told: the stores write the
  /// newest this relay writes up to it, and a change is told.
  private func takeGroupFormat(_ log: SharedLog) {
    let group = log.groupFormat
    guard group != knownGroupFormat else { return }
    knownGroupFormat = group
    let writing = configuration.version.writes(groupFormat: group)
    for context in contexts { context.writeFormat = writing }
    logger.info("the group's log is in \(group); this relay writes \(writing)")
    emit(.format(group: group.rawValue, writing: writing.rawValue))
    lock.withLock {
      current.groupFormat = group.rawValue
      current.writeFormat = writing.rawValue
    }
  }

  /// The members whose merge rules differ from this relay's, as last told.
  private var differingRules: [String: String] = [:]

  /// Takes which members announce other merge rules: while any does, this
  /// relay ships nothing (see ``RelayEvent/mergeRules(ours:differing:)``).
  private func takeDifferingRules(_ log: SharedLog) {
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
    lock.withLock { current.differingMergeRules = differing.isEmpty ? nil : differing }
    refreshStatus(force: true)
  }

  /// Ships what every store has pending; nil when it is all shipped (or
  /// held while the members' merge rules differ).
  private func shipAll(_ log: SharedLog) throws -> PassOutcome? {
    guard differingRules.isEmpty else { return nil }
    for context in contexts where context.formatHold == nil {
      var outcome: PassOutcome?
      try holding(context, log) {
        shipping: while true {
          switch try Shipper(context: context).ship(log) {
          case .nothing: break shipping
          case .shipped:
            context.shippedEntries += 1
            failpoints.shipmentCommitted()
            takeGroupFormat(log)
            if isStopping {
              outcome = .done
              break shipping
            }
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
            if isStopping {
              stopped = true
              return
            }
          }
        }
        if stopped { return .done }
      } catch where Self.isLocal(error) {
        refused = refused ?? error
      }
    }
    if let refused { throw refused }
    try log.flushDeferred(olderThan: Self.bookkeepingDelay)
    return .done
  }

  /// Runs `body`, adding the round trips it made to the counter at `key`.
  private func counting<T>(
    _ key: ReferenceWritableKeyPath<Relay, Int64>, _ log: SharedLog, _ body: () throws -> T
  ) rethrows -> T {
    let before = log.roundTrips
    defer { self[keyPath: key] += log.roundTrips - before }
    return try body()
  }

  /// After a (re)connect, this host's shipped place on the server and
  /// here are compared:
  /// - the server's is ahead: a relay killed after COMMIT never wrote its
  ///   own bookkeeping. Those shipments' rows take their positions here
  ///   and the shipped place moves to the server's.
  /// - the server's is behind: the log lost shipments the server had
  ///   acknowledged (a failover to a standby that had not received them,
  ///   or a restored backup). The shipped place moves back to the
  ///   server's, so that those change sets ship again from this store, and
  ///   the next pass re-synchronises as after a divergence.
  private func recover(_ context: ReplicaContext, _ log: SharedLog) throws {
    let enrollment = try log.enroll(context.replica, place: context.place.applied)
    if let clock = enrollment.clock {
      context.divergence = Applier.divergence(
        place: context.place, head: clock.head, purged: clock.purged, entryAtPlace: clock.entryAtPlace)
    }
    let shipped = enrollment.shipped
    if shipped < context.place.lastShipment {
      let lost = context.place.lastShipment
      try context.write { db in
        var place = try RowIdentityMap.place(db, group: context.group, host: context.host)
        place.shipped = shipped
        place.lastShipment = shipped
        try RowIdentityMap.setPlace(place, db, group: context.group, host: context.host)
      }
      context.place.shipped = shipped
      context.place.lastShipment = shipped
      context.divergence = context.divergence ??
        "the log lost this host's shipments of local sequences \(shipped + 1)...\(lost) "
        + "(a failover to a standby that had not received them, or a restored backup); they ship again"
      logger.warning("store '\(context.storeName)': \(context.divergence ?? "")")
      return
    }
    guard shipped > context.place.lastShipment else { return }
    let entries = try log.ownEntries(context.replica, after: context.place.lastShipment).map { own in
      (own.position,
       try LogEntry.decode(own.body, store: context.storeName, sequence: own.position, formats: context.version.reads))
    }
    try context.write { db in
      for (position, entry) in entries { try Shipper.recordWinners(entry, position: position, db) }
      var place = try RowIdentityMap.place(db, group: context.group, host: context.host)
      place.shipped = max(place.shipped, shipped)
      place.lastShipment = shipped
      try RowIdentityMap.setPlace(place, db, group: context.group, host: context.host)
    }
    context.place.shipped = max(context.place.shipped, shipped)
    context.place.lastShipment = shipped
  }

  /// Waits for a local commit, a notification or `timeout` (shorter when
  /// this host's bookkeeping is due to be sent); returns true when nothing
  /// came. A notification libpq already read (while a statement ran)
  /// counts at once: the socket will not show it again.
  @discardableResult
  private func waitForWake(_ timeout: Duration) -> Bool {
    if let log, log.isConnected, takeNotifications(log) { return false }
    var timeout = timeout
    if let log, let since = log.oldestDeferred {
      timeout = min(timeout, max(.milliseconds(1), since + Self.bookkeepingDelay - .now))
    }
    var fds = [pollfd(fd: wake.readEnd, events: Int16(POLLIN), revents: 0)]
    if let log, log.isConnected, log.socket >= 0 {
      fds.append(pollfd(fd: log.socket, events: Int16(POLLIN), revents: 0))
    }
    let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
    let ready = poll(&fds, nfds_t(fds.count), max(milliseconds, 1))
    guard ready > 0 else { return log?.oldestDeferred == nil }
    if fds[0].revents != 0 { wake.drain() }
    if fds.count > 1, fds[1].revents != 0, let log { takeNotifications(log) }
    return false
  }

  /// Reads the notifications received and hands each store what they
  /// tell about it; returns whether there were any.
  @discardableResult
  private func takeNotifications(_ log: SharedLog) -> Bool {
    let received: [(channel: String, payload: String)]
    do {
      received = try log.notifications()
    } catch {
      dropSession("\(error)", tell: true)
      return false
    }
    for notification in received where notification.channel == SharedLog.channel {
      for context in contexts {
        if let hint = SharedLog.Hint.parse(notification.payload, for: context.replica) { context.take(hint) }
      }
    }
    return !received.isEmpty
  }

  /// Drops the session (the server rolls back what it held and frees
  /// the host's lock) and tells why, unless it just did.
  private func dropSession(_ reason: String, tell: Bool) {
    roundTripsBefore += log?.roundTrips ?? 0
    log = nil
    setConnected(false)
    needsRecovery = true
    guard tell else { return }
    logger.warning("lost the connection to PostgreSQL: \(reason)")
    emit(.disconnected(reason: reason))
  }

  private func ringWake() { wake.ring() }

  private func shutDown() {
    doorbell?.close()
    if let log, log.isConnected { try? log.flushDeferred() }
    log = nil
    setConnected(false)
    refreshStatus(force: true)
    contexts = []
    group = nil
    wake.close()
    stopSignal.close()
    fileLock?.release()
    finishedCondition.lock()
    finished = true
    finishedCondition.broadcast()
    finishedCondition.unlock()
  }

  private func setError(_ text: String?) { lock.withLock { current.lastError = text } }

  private func setConnected(_ connected: Bool) {
    lock.withLock { current.isConnected = connected }
    connectedGauge.record(connected ? 1 : 0)
  }

  /// Updates ``status()`` and `relays/HOST.json` (at most every 200 ms
  /// unless forced).
  private func refreshStatus(force: Bool) {
    let now = ContinuousClock.now
    guard force || now - lastStatusWrite >= .milliseconds(200) else { return }
    lastStatusWrite = now
    var stores: [RelayStatus.StoreStatus] = []
    for context in contexts {
      let read = try? context.store.read { db -> (Int64, Int64, [RelayMetrics.HeldCause: Int64]) in
        let sequence = try context.store.currentSequence(in: db)
        let unshipped = try context.store.changeSetCount(
          after: context.place.shipped, notWrittenBy: context.author, in: db)
        return (sequence, unshipped, try HeldRows.counts(db))
      }
      let local = read ?? (0, 0, [:])
      var lagSeconds = 0.0
      if context.logHead > context.place.applied, let log, log.isConnected {
        lagSeconds = (try? log.lagSeconds(context.replica, after: context.place.applied)) ?? 0
      }
      stores.append(
        .init(
          name: context.storeName, localSequence: local.0, shipped: context.place.shipped, unshipped: local.1,
          logHead: context.logHead, applied: context.place.applied,
          lagChangeSets: max(0, context.logHead - context.place.applied), lagSeconds: lagSeconds,
          conflicts: context.conflicts, heldRows: local.2.values.reduce(0, +),
          heldAt: context.formatHold?.position, heldFormat: context.formatHold?.format.rawValue))
      context.metrics.lagEntries.record(max(0, context.logHead - context.place.applied))
      context.metrics.lagSeconds.record(lagSeconds)
      // (A store that could not be read keeps the counts it last showed.)
      if let read { context.metrics.held(read.2) }
    }
    let roundTrips = roundTripsBefore + (log?.roundTrips ?? 0)
    let (shipping, applying) = (shippingRoundTrips, applyingRoundTrips)
    let shipped = contexts.reduce(0) { $0 + $1.shippedEntries }
    let applied = contexts.reduce(0) { $0 + $1.appliedEntries }
    let status = lock.withLock { () -> RelayStatus in
      current.stores = stores
      current.roundTrips = roundTrips
      current.shippingRoundTrips = shipping
      current.applyingRoundTrips = applying
      current.shippedEntries = shipped
      current.appliedEntries = applied
      current.updatedAtNanoseconds = Int64(Date().timeIntervalSince1970 * 1e9)
      current.isLive = !finishedSoon
      return current
    }
    do {
      try RelayStatusFile.write(status, group: configuration.folder)
    } catch {
      emit(.error("writing the status file: \(error)"))
    }
  }

  private var finishedSoon: Bool { stopping }
}
