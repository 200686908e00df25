import CGroupSync
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The process's one libuv watcher thread, shared by every listener.
///
/// `@unchecked Sendable`: the C watcher is thread-safe (commands cross to
/// its loop thread through uv_async_send); the handler table is a Mutex.
final class FolderWatcher: @unchecked Sendable {
  /// What a watch reports: a name in the folder changed, or "rescan".
  enum Event: Sendable {
    case entry(String)
    case rescan
    /// The rescan timer fired on a folder that has not changed.
    case tick
    case failed(Int32)
  }

  typealias Handler = @Sendable (Event) -> Void

  static let shared = FolderWatcher()

  private var handle: OpaquePointer?
  private let handlers = Locked<[UInt64: Handler]>([:])

  private init() {
    let context = Unmanaged.passUnretained(self).toOpaque()
    var handle: OpaquePointer?
    let code = gs_watcher_create(
      { context, watchID, name, events, status in
        let watcher = Unmanaged<FolderWatcher>.fromOpaque(context!).takeUnretainedValue()
        watcher.dispatch(watchID, name, events, status)
      }, context, &handle)
    precondition(code == GS_OK, "cannot start the watcher thread: \(String(cString: gs_strerror(code)))")
    self.handle = handle
  }

  /// Watches `path`; `handler` runs on the watcher thread and must be quick.
  /// Events of the short time before this returns may be missed: rescan
  /// once after it returns.
  func watch(_ path: String, rescanMilliseconds: UInt64, handler: @escaping Handler) throws -> Watch {
    var watchID: UInt64 = 0
    var uvError: Int32 = 0
    let code = gs_watcher_add(handle!, path, rescanMilliseconds, &watchID, &uvError)
    guard code == GS_OK else {
      throw GroupSyncError.system(call: "uv_fs_event_start", path: path, errno: code == GS_EUV ? -uvError : EINVAL)
    }
    handlers.withLock { $0[watchID] = handler }
    return Watch(watcher: self, id: watchID)
  }

  fileprivate func stop(_ id: UInt64) {
    gs_watcher_remove(handle!, id)
    handlers.withLock { $0[id] = nil }
  }

  private func dispatch(_ id: UInt64, _ name: UnsafePointer<CChar>?, _ events: Int32, _ status: Int32) {
    guard let handler = handlers.withLock({ $0[id] }) else { return }
    if events & Int32(GS_EVENT_ERROR) != 0 {
      handler(.failed(status))
    } else if events & Int32(GS_EVENT_TICK) != 0 {
      handler(.tick)
    } else if let name {
      handler(.entry(String(cString: name)))
    } else {
      handler(.rescan)
    }
  }

  /// A running watch; stops when cancelled.
  final class Watch: Sendable {
    private let watcher: FolderWatcher
    private let id: UInt64
    private let stopped = Atomic<Bool>(false)

    fileprivate init(watcher: FolderWatcher, id: UInt64) {
      self.watcher = watcher
      self.id = id
    }

    func cancel() {
      if !stopped.exchange(true, ordering: .acquiringAndReleasing) { watcher.stop(id) }
    }

    deinit { cancel() }
  }
}
