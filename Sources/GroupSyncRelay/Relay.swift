import Foundation
import GRDB
import GroupSync
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
/// growing delay while the host goes on working locally. For example:
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
  private let handler: (@Sendable (RelayEvent) -> Void)?

  private let lock = NSLock()
  private var stopping = false
  private var thread: Thread?
  private var finished = false
  private let finishedCondition = NSCondition()
  private var current: RelayStatus

  // The relay thread's own.
  private var group: GroupFolder?
  private var contexts: [ReplicaContext] = []
  private var connection: PostgresConnection?
  private var needsRecovery = true
  private let wake: WakePipe
  private var doorbell: Listener?
  private var fileLock: RelayLock?
  private var lastStatusWrite = ContinuousClock.now - .seconds(10)
  private var shipmentsLeftBeforeKill: Int?

  /// Makes a relay; ``start()`` starts it.
  ///
  /// - Parameter onEvent: called on the relay's thread for each event, as
  ///   well as ``events`` receiving it.
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
    self.configuration = configuration
    handler = onEvent
    wake = try WakePipe()
    (events, continuation) = AsyncStream.makeStream(of: RelayEvent.self, bufferingPolicy: .bufferingNewest(10_000))
    current = RelayStatus(
      host: configuration.host, group: configuration.group, processID: getpid(), isConnected: false, isLive: true,
      lastError: nil, updatedAtNanoseconds: 0, stores: [])
    if let text = ProcessInfo.processInfo.environment["GROUPSYNC_RELAY_FAILPOINT"],
      text.hasPrefix("kill-after-ship-commit:"), let count = Int(text.dropFirst("kill-after-ship-commit:".count))
    {
      shipmentsLeftBeforeKill = count
    }
  }

  deinit {
    stop()
    continuation.finish()
  }

  /// Opens the group folder and its stores, takes the host's lock file,
  /// and starts the relay's thread. The relay then connects (and keeps
  /// trying while the server cannot be reached).
  ///
  /// - Throws: ``RelayError/relayAlreadyRunning(host:group:where:)`` when
  ///   a live relay of this host runs on the folder; GroupSync's errors
  ///   for the folder and its stores.
  public func start() throws {
    let configuration = self.configuration
    var options = StoreOptions()
    let author = "groupsync-relay@" + configuration.host
    options.author = author
    // The folder first: a path that is no group folder says so.
    let group = try GroupFolder(path: configuration.folder, create: false, options: options)
    do {
      fileLock = try RelayStatusFile.lock(group: configuration.folder, host: configuration.host)
    } catch GroupSyncError.listenerNameInUse {
      throw RelayError.relayAlreadyRunning(
        host: configuration.host, group: configuration.group, where: "relays/\(configuration.host).lock is held")
    }
    self.group = group
    let emit: @Sendable (RelayEvent) -> Void = { [continuation, handler] event in
      continuation.yield(event)
      handler?(event)
    }
    contexts = try configuration.stores.map { name in
      let store = name == "main" ? group.store : try group.store(named: name)
      return try ReplicaContext(
        store: store, storeName: name, group: configuration.group, host: configuration.host,
        policy: configuration.policy, author: author, retention: configuration.retention, emit: emit)
    }
    // Local commits ring the doorbell, straight from the watcher thread
    // that saw them; the change sets themselves are read from the history.
    let listener = try group.listen()
    doorbell = listener
    let wake = self.wake
    listener.startOnWatcherThread { _ in wake.ring() }
    refreshStatus(force: true)
    let thread = Thread { [self] in run() }
    thread.name = "groupsync-relay"
    lock.withLock { self.thread = thread }
    thread.start()
  }

  /// Stops the relay and waits for its thread: what it was doing finishes
  /// or rolls back, its connection closes (the server frees its lock), its
  /// status file says it is stopped. Safe to call more than once.
  public func stop() {
    let started = lock.withLock { () -> Bool in
      stopping = true
      return thread != nil
    }
    guard started else { return }
    ringWake()
    finishedCondition.lock()
    while !finished { finishedCondition.wait() }
    finishedCondition.unlock()
  }

  /// The relay's state as of its last pass.
  public func status() -> RelayStatus { lock.withLock { current } }

  // MARK: The relay's thread

  private var isStopping: Bool { lock.withLock { stopping } }

  private func run() {
    var delay = Duration.milliseconds(50)
    var lastError: String?
    while !isStopping {
      if connection == nil {
        do {
          try connect()
          delay = .milliseconds(50)
          lastError = nil
          emit(.connected(host: configuration.host))
        } catch {
          connection = nil
          let text = "\(error)"
          if text != lastError { emit(.disconnected(reason: text)) }
          lastError = text
          setError(text)
          refreshStatus(force: true)
          waitForWake(delay)
          delay = min(delay * 2, configuration.maximumReconnectDelay)
          continue
        }
      }
      do {
        try pass()
        if lastError != nil { setError(nil) }
        lastError = nil
      } catch {
        let text = "\(error)"
        let repeated = text == lastError
        if !repeated { emit(.error(text)) }
        lastError = text
        setError(text)
        needsRecovery = true
        if !(connection?.isConnected ?? false) || !Self.isLocal(error) {
          // The connection broke (or is in doubt): drop it and reconnect.
          connection = nil
          setConnected(false)
          if !repeated { emit(.disconnected(reason: text)) }
          refreshStatus(force: true)
          waitForWake(delay)
          delay = min(delay * 2, configuration.maximumReconnectDelay)
          continue
        }
      }
      refreshStatus(force: false)
      waitForWake(configuration.pollInterval)
    }
    shutDown()
  }

  /// Errors that leave the connection sound.
  private static func isLocal(_ error: any Error) -> Bool {
    switch error {
    case RelayError.schemaMismatch, RelayError.unsupportedTable: true
    default: false
    }
  }

  private func connect() throws {
    let connection = try PostgresConnection(conninfo: configuration.conninfo)
    // libpq prints NOTICEs ("relation already exists, skipping") on stderr.
    try connection.execute("SET client_min_messages = warning")
    try LogSchema.setUp(connection)
    try LogSchema.lockHost(connection, group: configuration.group, host: configuration.host)
    try connection.execute("LISTEN \(LogSchema.channel)")
    self.connection = connection
    needsRecovery = true
    setConnected(true)
  }

  /// One pass: recover if needed, ship everything pending, apply
  /// everything the log holds.
  private func pass() throws {
    guard let connection else { throw RelayError.disconnected(reason: "no connection") }
    if needsRecovery {
      for context in contexts { try recover(context, connection) }
      needsRecovery = false
    }
    for context in contexts {
      while try Shipper(context: context).ship(connection) {
        if var left = shipmentsLeftBeforeKill {
          left -= 1
          shipmentsLeftBeforeKill = left
          if left <= 0 { raise(SIGKILL) }
        }
        if isStopping { return }
      }
    }
    // A store whose entry is refused (schema) does not hold up the others;
    // the first such error is reported once they are done.
    var refused: (any Error)?
    for context in contexts {
      do {
        while try Applier(context: context).apply(connection) {
          if isStopping { return }
        }
      } catch where Self.isLocal(error) {
        refused = refused ?? error
      }
    }
    if let refused { throw refused }
  }

  /// After a (re)connect: PostgreSQL may hold shipments whose local
  /// bookkeeping a killed relay never wrote. Their rows take their
  /// positions here and the shipped place moves to the log's.
  private func recover(_ context: ReplicaContext, _ connection: PostgresConnection) throws {
    let keys: [String?] = [context.group, context.storeName, context.host]
    try connection.execute(
      "INSERT INTO gs_host(grp, store, host) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", keys)
    try connection.execute(
      "INSERT INTO gs_clock(grp, store) VALUES ($1, $2) ON CONFLICT DO NOTHING", [context.group, context.storeName])
    let rows = try connection.execute(
      "SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3", keys)
    guard let shipped = rows.first.flatMap({ $0[0] }).flatMap({ Int64($0) }), shipped > context.place.shipped else {
      return
    }
    let own = try connection.execute(
      """
      SELECT seq, body FROM gs_change WHERE grp = $1 AND store = $2 AND origin_host = $3 AND origin_seq > $4
      ORDER BY seq
      """, keys + [String(context.place.shipped)])
    let entries = try own.compactMap { row -> (Int64, LogEntry)? in
      guard let position = row[0].flatMap({ Int64($0) }), let body = row[1] else { return nil }
      return (position, try LogEntry.decode(body, store: context.storeName, sequence: position))
    }
    try context.store.write { db in
      for (position, entry) in entries { try Shipper.recordWinners(entry, position: position, db) }
      var place = try RowIdentityMap.place(db, group: context.group, host: context.host)
      place.shipped = max(place.shipped, shipped)
      try RowIdentityMap.setPlace(place, db, group: context.group, host: context.host)
    }
    context.place.shipped = shipped
  }

  /// Waits for a local commit, a notification or `timeout`.
  private func waitForWake(_ timeout: Duration) {
    var fds = [pollfd(fd: wake.readEnd, events: Int16(POLLIN), revents: 0)]
    if let connection, connection.isConnected, connection.socket >= 0 {
      fds.append(pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0))
    }
    let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
    let ready = poll(&fds, nfds_t(fds.count), max(milliseconds, 1))
    guard ready > 0 else { return }
    if fds[0].revents != 0 { wake.drain() }
    if fds.count > 1, fds[1].revents != 0, let connection {
      do {
        _ = try connection.notifications()
      } catch {
        emit(.disconnected(reason: "\(error)"))
        self.connection = nil
        setConnected(false)
      }
    }
  }

  private func ringWake() { wake.ring() }

  private func shutDown() {
    doorbell?.close()
    connection = nil
    setConnected(false)
    refreshStatus(force: true)
    contexts = []
    group = nil
    wake.close()
    fileLock?.release()
    finishedCondition.lock()
    finished = true
    finishedCondition.broadcast()
    finishedCondition.unlock()
  }

  private func emit(_ event: RelayEvent) {
    continuation.yield(event)
    handler?(event)
  }

  private func setError(_ text: String?) { lock.withLock { current.lastError = text } }

  private func setConnected(_ connected: Bool) { lock.withLock { current.isConnected = connected } }

  /// Updates ``status()`` and `relays/HOST.json` (at most every 200 ms
  /// unless forced).
  private func refreshStatus(force: Bool) {
    let now = ContinuousClock.now
    guard force || now - lastStatusWrite >= .milliseconds(200) else { return }
    lastStatusWrite = now
    var stores: [RelayStatus.StoreStatus] = []
    for context in contexts {
      let local = (try? context.store.read { db -> (Int64, Int64) in
        let sequence = try context.store.currentSequence(in: db)
        let unshipped = try Int64.fetchOne(
          db, sql: "SELECT count(*) FROM groupsync_history WHERE seq > ? AND author IS NOT ?",
          arguments: [context.place.shipped, context.author]) ?? 0
        return (sequence, unshipped)
      }) ?? (0, 0)
      var lagSeconds = 0.0
      if context.logHead > context.place.applied, let connection, connection.isConnected {
        let rows = try? connection.execute(
          """
          SELECT extract(epoch from clock_timestamp() - committed_at) FROM gs_change
          WHERE grp = $1 AND store = $2 AND seq > $3 ORDER BY seq LIMIT 1
          """, [context.group, context.storeName, String(context.place.applied)])
        lagSeconds = rows?.first.flatMap { $0[0] }.flatMap { Double($0) } ?? 0
      }
      stores.append(
        .init(
          name: context.storeName, localSequence: local.0, shipped: context.place.shipped, unshipped: local.1,
          logHead: context.logHead, applied: context.place.applied,
          lagChangeSets: max(0, context.logHead - context.place.applied), lagSeconds: lagSeconds,
          conflicts: context.conflicts))
    }
    let status = lock.withLock { () -> RelayStatus in
      current.stores = stores
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
