import GroupSync
import ServiceLifecycle

/// A listener merging into a `Context` on the main actor, as a
/// swift-service-lifecycle `Service`: the context's registered objects and
/// results controllers follow what other processes commit for as long as
/// it runs.
///
/// The context stays the program's, on the main actor; the service merges
/// each event there (`Context.merge(_:)`). On graceful
/// shutdown the listener closes: its lock is released, its inbox emptied.
/// For example:
///
/// ```swift
/// @MainActor func runApp(group: GroupFolder) async throws {
///   let context = Context(group, mergePolicy: .mergeByPropertyObjectTrump)
///   let merging = ContextMergeService(group: group, name: "ui", context: context)
///   let services = ServiceGroup(services: [merging], gracefulShutdownSignals: [.sigterm], logger: logger)
///   try await services.run()
/// }
/// ```
public struct ContextMergeService: Service {
  private let listening: ListenerService

  /// Makes a service that merges into `context` when it runs.
  ///
  /// - Parameters:
  ///   - group: the group folder.
  ///   - name: the listener's name; nil for a unique one.
  ///   - options: the listener's options.
  ///   - context: the context to merge into, used on the main actor only.
  ///   - onMerge: called on the main actor after each merge, with what it
  ///     changed in the context.
  @MainActor
  public init(
    group: GroupFolder, name: String? = nil, options: ListenerOptions = ListenerOptions(), context: Context,
    onMerge: (@MainActor (ContextChanges) -> Void)? = nil
  ) {
    let target = MainActorContext(context: context, onMerge: onMerge)
    listening = ListenerService(group: group, name: name, options: options) { event, _ in
      try await target.merge(event)
    }
  }

  /// Merges every event until graceful shutdown or cancellation.
  ///
  /// - Throws: what listening throws, and what a merge throws (GRDB's
  ///   errors, `GroupSyncError`).
  public func run() async throws {
    try await listening.run()
  }
}

/// A context and its callback, reached only on the main actor.
@MainActor
private final class MainActorContext {
  let context: Context
  let onMerge: (@MainActor (ContextChanges) -> Void)?

  init(context: Context, onMerge: (@MainActor (ContextChanges) -> Void)?) {
    self.context = context
    self.onMerge = onMerge
  }

  func merge(_ event: ListenerEvent) throws {
    let changes = try context.merge(event)
    onMerge?(changes)
  }
}
