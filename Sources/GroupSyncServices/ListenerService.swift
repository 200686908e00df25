import GroupSync
import ServiceLifecycle

/// A listener as a swift-service-lifecycle `Service`: it listens to the
/// group for as long as it runs, hands each event to a handler, and stops
/// cleanly on graceful shutdown.
///
/// On graceful shutdown (SIGTERM through a `ServiceGroup`, say), the event
/// being handled is finished, no other is started, and the listener
/// closes: its lock is released and its inbox emptied. A durable listener
/// keeps its place: with `Acknowledgement.automatic`, the last change
/// set handled is acknowledged first, so that it is not delivered again on
/// the next start. For example:
///
/// ```swift
/// let group = try GroupFolder(path: "/srv/app/group")
/// let indexer = ListenerService(group: group, name: "indexer", durable: true) { event, _ in
///   if case .changes(let changeSet) = event { try await index(changeSet) }
/// }
/// let services = ServiceGroup(services: [indexer], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await services.run()
/// ```
///
/// A handler that throws stops the service with that error (and, by
/// default, its `ServiceGroup`); a durable listener resumes after the last
/// change set handled without error.
public struct ListenerService: Service {
  /// Handles one event; the listener is there for explicit
  /// acknowledgements.
  public typealias Handler = @Sendable (ListenerEvent, Listener) async throws -> Void

  private let group: GroupFolder
  private let name: String?
  private let durable: Bool
  private let options: ListenerOptions
  private let handler: Handler

  /// Makes a service that listens when it runs.
  ///
  /// - Parameters:
  ///   - group: the group folder.
  ///   - name: the listener's name; nil for a unique name whose folder is
  ///     removed on close.
  ///   - durable: keep the listener's place while the service is not
  ///     running (see `GroupFolder.listen(as:durable:options:)`).
  ///   - options: the listener's options.
  ///   - handler: called for each event, in order, one at a time.
  public init(
    group: GroupFolder, name: String? = nil, durable: Bool = false, options: ListenerOptions = ListenerOptions(),
    handler: @escaping Handler
  ) {
    self.group = group
    self.name = name
    self.durable = durable
    self.options = options
    self.handler = handler
  }

  /// Listens and handles events until graceful shutdown or cancellation.
  ///
  /// - Throws: what `GroupFolder.listen(as:durable:options:)` throws
  ///   (`GroupSyncError.listenerNameInUse(_:)` among others), and what
  ///   the handler throws.
  public func run() async throws {
    let listener = try group.listen(as: name, durable: durable, options: options)
    defer { listener.close() }
    // The last change set handled, per store, for a durable listener
    // whose place moves on automatically.
    var handled: [ChangeSet] = []
    let acknowledgesOnExit = durable && options.acknowledgement == .automatic
    defer {
      for changeSet in handled { try? listener.acknowledge(changeSet) }
    }
    // Only the wait for the next event is cancelled on graceful shutdown,
    // never the handler.
    while let event = await cancelWhenGracefulShutdown({ await Self.next(of: listener) }) {
      try await handler(event, listener)
      if acknowledgesOnExit, case .changes(let changeSet) = event {
        if let index = handled.firstIndex(where: { $0.storeID == changeSet.storeID }) {
          handled[index] = changeSet
        } else {
          handled.append(changeSet)
        }
      }
    }
  }

  private static func next(of listener: Listener) async -> ListenerEvent? {
    var iterator = listener.events.makeAsyncIterator()
    return await iterator.next()
  }
}
