// The relay's public shell: its configuration and the checks on it,
// start, stop, status, events and failure. What runs it is a
// `RelaySession`; what it shows of itself, a `RelayStatusReporter`.
import CoreMetrics
import Foundation
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
/// growing delay while the host goes on working locally. Every wait on the
/// server is bounded (``RelayConfiguration/timeouts``): a dead link is
/// noticed within seconds, and ``stop()`` returns at once in every state.
/// For example:
///
/// ```swift
/// var configuration = RelayConfiguration(
///   folder: "/srv/app/group", conninfo: "host=db.example dbname=app", host: "web-1")
/// configuration.policy = .objectTrump
/// let relay = try Relay(configuration)
/// try relay.start()
/// for await event in relay.events {
///   if case .conflict(let record) = event { print(record) }
/// }
/// ```
///
/// `@unchecked Sendable`: `session` is guarded by `lock`; the reporter and
/// the session guard their own state.
public final class Relay: @unchecked Sendable {
  public let configuration: RelayConfiguration
  /// What the relay did, in order (the newest 10,000 kept if nobody reads).
  public let events: AsyncStream<RelayEvent>
  private let continuation: AsyncStream<RelayEvent>.Continuation
  /// Delivers an event to ``events`` and to the `onEvent` handler: the
  /// relay's and its stores' one way to tell what they did.
  private let emit: @Sendable (RelayEvent) -> Void
  private let reporter: RelayStatusReporter

  private let lock = NSLock()
  private var session: RelaySession?
  /// ``stop()`` was called (before ``start(in:)``, a session started later
  /// stops at once).
  private var stopRequested = false

  /// Makes a relay; ``start(in:)`` starts it.
  ///
  /// - Parameters:
  ///   - configuration: the folder, the server and the names; checked
  ///     here (names, timeouts, references, the conninfo's syntax).
  ///   - onEvent: called on the relay's thread for each event, as well as
  ///     ``events`` receiving it.
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming what is wrong.
  public init(_ configuration: RelayConfiguration, onEvent: (@Sendable (RelayEvent) -> Void)? = nil) throws {
    try Self.validate(configuration)
    self.configuration = configuration
    let (events, continuation) = AsyncStream.makeStream(of: RelayEvent.self, bufferingPolicy: .bufferingNewest(10_000))
    self.events = events
    self.continuation = continuation
    emit = { event in
      continuation.yield(event)
      onEvent?(event)
    }
    reporter = RelayStatusReporter(configuration: configuration, emit: emit)
  }

  private static func validate(_ configuration: RelayConfiguration) throws {
    guard RelayStatusFile.isValidHostName(configuration.host) else {
      throw RelayError.invalidConfiguration(
        "host name '\(configuration.host)': use 1-64 letters, digits, '-', '_' or '.'")
    }
    guard !configuration.group.isEmpty, configuration.group.utf8.count <= 200 else {
      throw RelayError.invalidConfiguration("group name '\(configuration.group)': 1-200 bytes")
    }
    guard !configuration.stores.isEmpty else { throw RelayError.invalidConfiguration("no store to replicate") }
    try configuration.timeouts.validate()
    guard configuration.batchWindow >= .zero, configuration.batchWindow <= .seconds(10) else {
      throw RelayError.invalidConfiguration("batch window \(configuration.batchWindow): from 0 to 10 seconds")
    }
    guard configuration.pollInterval >= .milliseconds(1), configuration.pollInterval <= .seconds(3600) else {
      throw RelayError.invalidConfiguration("poll interval \(configuration.pollInterval): from 0.001 to 3600 seconds")
    }
    // Renewed every third of it, and each renewal may wait for a poll.
    if configuration.transport == .poll,
      configuration.leaseDuration < .seconds(1) || configuration.leaseDuration < configuration.pollInterval * 3
    {
      throw RelayError.invalidConfiguration(
        "lease duration \(configuration.leaseDuration): at least 1 second and 3 poll intervals "
          + "(\(configuration.pollInterval * 3))")
    }
    var declared: Set<String> = []
    for reference in configuration.references {
      guard declared.insert("\(reference.table).\(reference.column)".lowercased()).inserted else {
        throw RelayError.invalidConfiguration("reference \(reference.table).\(reference.column) is declared twice")
      }
    }
    try PostgresConnection.validate(conninfo: configuration.conninfo)
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
    // The folder first: a path that is no group folder says so.
    let group = try group ?? GroupFolder(path: configuration.folder, create: false)
    guard Self.isSameFolder(group.path, configuration.folder) else {
      throw RelayError.invalidConfiguration(
        "the group folder '\(group.path)' is not the configuration's folder '\(configuration.folder)'")
    }
    let session = try RelaySession(configuration: configuration, group: group, reporter: reporter, emit: emit)
    let stopRequested = lock.withLock { () -> Bool in
      self.session = session
      return self.stopRequested
    }
    if stopRequested { session.requestStop() }
    session.start()
  }

  /// Whether two paths name the same folder (the same device and inode).
  private static func isSameFolder(_ a: String, _ b: String) -> Bool {
    var first = stat(), second = stat()
    guard stat(a, &first) == 0, stat(b, &second) == 0 else { return false }
    return first.st_dev == second.st_dev && first.st_ino == second.st_ino
  }

  /// Stops the relay and waits for its thread, which abandons whatever it
  /// waits for on the server at once (a transaction it had open rolls back
  /// on the server), closes its connection (the server frees its lock) and
  /// marks its status file stopped. Safe to call more than once.
  public func stop() {
    let session = lock.withLock { () -> RelaySession? in
      stopRequested = true
      return self.session
    }
    session?.stopAndWait()
  }

  /// The relay's state as of its last pass.
  public func status() -> RelayStatus { reporter.status }

  /// Why the relay gave up on its own (nil while it runs, or when it was
  /// stopped): an error only an administrator can cure, such as
  /// ``RelayError/missingPrivileges(role:missing:)``; ``RelayEvent/failed(reason:)``
  /// told it.
  public var failure: RelayError? { lock.withLock { session }?.failure }
}
