import GRDB
import GroupSync
import ServiceLifecycle

/// The GRDB relay (`GroupFolder.observeOtherProcesses(store:in:)`) as a
/// swift-service-lifecycle `Service`: while it runs, the `ValueObservation`s
/// and `DatabaseRegionObservation`s of a database fire when other processes
/// commit.
///
/// On graceful shutdown the relay stops and its listener closes (its lock
/// released, its folder removed). For example:
///
/// ```swift
/// let relay = ObservationRelayService(group: group)
/// let services = ServiceGroup(services: [relay, server], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await services.run()
/// ```
///
/// GRDB calls a `ValueObservation`'s `onChange` on the main queue unless
/// told otherwise: a program without a main run loop starts it with
/// `scheduling: .async(onQueue:)`, or runs `dispatchMain()`.
public struct ObservationRelayService: Service {
  private let group: GroupFolder
  private let store: String
  private let writer: (any DatabaseWriter)?

  /// Makes a service that relays when it runs.
  ///
  /// - Parameters:
  ///   - group: the group folder.
  ///   - store: the store whose change sets are relayed.
  ///   - writer: the GRDB database whose observations fire; the store's
  ///     own pool by default.
  public init(group: GroupFolder, store: String = "main", in writer: (any DatabaseWriter)? = nil) {
    self.group = group
    self.store = store
    self.writer = writer
  }

  /// Relays until graceful shutdown or cancellation.
  ///
  /// - Throws: what `GroupFolder.observeOtherProcesses(store:in:)` throws.
  public func run() async throws {
    let relay = try group.observeOtherProcesses(store: store, in: writer)
    defer { relay.cancel() }
    // Returns on graceful shutdown; throws on cancellation, which stops
    // the relay just the same.
    try? await gracefulShutdown()
  }
}
