// The process's one libuv watcher thread and the watches it runs.
import CGroupSync
import Logging
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
  enum Event {
    /// The entry's name as the kernel gave it, valid during the call only
    /// (no String is made for each event).
    case entry(UnsafeBufferPointer<UInt8>)
    case rescan
    /// The rescan timer fired on a folder that has not changed.
    case tick
    /// ``Watch/wake()`` asked for a call on the watcher thread.
    case wake
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

  /// Watches the folder `directory` holds, whatever its path becomes; the
  /// watcher looks at its entries through the descriptor (no path walk
  /// per event), which must stay open until the watch is cancelled.
  /// `handler` runs on the watcher thread and must be quick. With
  /// `arrivalsOnly`, only entries that appear are reported (removals and
  /// changes of entries wake nobody). Events of the short time before this
  /// returns may be missed: rescan once after it returns.
  ///
  /// - Throws: ``GroupSyncError/system(_:)`` naming the libuv call that
  ///   failed (`uv_fs_event_start`, which adds the inotify watch, say) and
  ///   its error; or `gs_watcher_add` when the watcher itself refused.
  func watch(
    _ directory: SafeDirectory, rescanMilliseconds: UInt64, arrivalsOnly: Bool = false, handler: @escaping Handler
  ) throws -> Watch {
    try watch(
      descriptor: directory.descriptor.rawValue, path: directory.path, rescanMilliseconds: rescanMilliseconds,
      arrivalsOnly: arrivalsOnly, handler: handler)
  }

  /// ``watch(_:rescanMilliseconds:arrivalsOnly:handler:)`` of the folder
  /// open as `descriptor`, which `path` names in errors.
  func watch(
    descriptor: Int32, path: String, rescanMilliseconds: UInt64, arrivalsOnly: Bool = false,
    handler: @escaping Handler
  ) throws -> Watch {
    var watchID: UInt64 = 0
    var failure = gs_uv_failure()
    let flags = arrivalsOnly ? UInt32(GS_WATCH_ARRIVALS) : 0
    let code = gs_watcher_add(handle!, descriptor, rescanMilliseconds, flags, &watchID, &failure)
    guard code == GS_OK else {
      if code == GS_EUV, let call = failure.call {
        // libuv's codes are negated errnos on Linux.
        throw GroupSyncError.system(call: String(cString: call), path: path, errno: -failure.code)
      }
      let errno: Int32 = switch Int(code) {
      case GS_ENOMEM: ENOMEM
      case GS_ECLOSED: ESHUTDOWN
      default: EINVAL
      }
      throw GroupSyncError.system(call: "gs_watcher_add", path: path, errno: errno)
    }
    handlers.withLock { $0[watchID] = handler }
    return Watch(watcher: self, id: watchID)
  }

  fileprivate func wake(_ id: UInt64) {
    let code = gs_watcher_wake(handle!, id)
    // Only memory or libuv itself failing stops a wake-up; the rescan
    // timer still calls the watch.
    if code != GS_OK { Logger.groupSync.error("cannot wake watch \(id): \(String(cString: gs_strerror(code)))") }
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
    } else if events & Int32(GS_EVENT_WAKE) != 0 {
      handler(.wake)
    } else if let name {
      let bytes = UnsafeRawPointer(name).assumingMemoryBound(to: UInt8.self)
      handler(.entry(UnsafeBufferPointer(start: bytes, count: strlen(name))))
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

    /// Has the handler called once with ``Event/wake`` on the watcher
    /// thread, soon; returns at once. Wake-ups not yet delivered coalesce.
    func wake() {
      if !stopped.load(ordering: .acquiring) { watcher.wake(id) }
    }

    func cancel() {
      if !stopped.exchange(true, ordering: .acquiringAndReleasing) { watcher.stop(id) }
    }

    deinit { cancel() }
  }
}
