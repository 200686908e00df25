import Foundation
import Logging
import Synchronization

/// One listener per group folder, started on first use, that hands the
/// notes of every change set to in-process subscribers (defaults observers,
/// notification streams). The process's own commits reach it in memory.
final class NoteHub: Sendable {
  private let start: @Sendable () throws -> Listener

  private struct State {
    var listener: Listener?
    var task: Task<Void, Never>?
    var subscribers: [UUID: @Sendable (ListenerEvent) -> Void] = [:]
  }
  private let state = Locked(State())

  init(start: @escaping @Sendable () throws -> Listener) {
    self.start = start
  }

  deinit {
    state.withLock { state in
      state.task?.cancel()
      state.listener?.close()
    }
  }

  /// A stream of what `select` picks out of each change set; a reset
  /// yields `onReset` when given.
  func subscribe<Element: Sendable>(
    onReset: Element? = nil, _ select: @escaping @Sendable (ChangeSet) -> [Element]
  ) throws -> AsyncStream<Element> {
    let id = UUID()
    let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .unbounded)
    continuation.onTermination = { [weak self] _ in
      self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
    }
    try state.withLock { state in
      state.subscribers[id] = { event in
        switch event {
        case .changes(let changeSet): for element in select(changeSet) { continuation.yield(element) }
        case .reset: if let onReset { continuation.yield(onReset) }
        }
      }
      if state.listener == nil {
        let listener = try start()
        state.listener = listener
        state.task = listener.start { [weak self] event in self?.dispatch(event) }
      }
    }
    return stream
  }

  private func dispatch(_ event: ListenerEvent) {
    let subscribers = state.withLock { Array($0.subscribers.values) }
    for subscriber in subscribers { subscriber(event) }
  }
}
