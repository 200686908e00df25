import Foundation
import Prometheus
#if canImport(Glibc)
import Glibc
#endif

/// The relay process's metrics as a file in Prometheus's text exposition
/// format (`--metrics-file`), for node_exporter's textfile collector:
/// written every `interval` and once more at stop, each time whole into
/// `PATH.tmp` beside it and renamed over `PATH` (mode 0644), so that a
/// reader never sees half a file. (No fsync: after a crash the next write
/// replaces whatever is there.)
///
/// `@unchecked Sendable`: `stopping` is guarded by `condition`; the
/// writes happen on the writer's thread, then once more after it ended.
public final class MetricsFile: @unchecked Sendable {
  /// The file's path.
  public let path: String
  private let temporaryPath: String
  private let registry: PrometheusCollectorRegistry
  private let interval: Duration
  private let condition = NSCondition()
  private var stopping = false
  private var thread: Thread?
  private let done = DispatchSemaphore(value: 0)

  /// A metrics file that cannot be written.
  public struct WriteError: Error, CustomStringConvertible {
    /// The metrics file's path.
    public let path: String
    /// The call that failed, and its `errno`.
    public let call: String
    public let errno: Int32

    public var description: String {
      let folder = (path as NSString).deletingLastPathComponent
      return "cannot write the metrics file '\(path)' (\(call): \(String(cString: strerror(errno)))): "
        + "its folder '\(folder.isEmpty ? "." : folder)' must exist and be writable"
    }
  }

  /// Writes the file once at once, so that a path that cannot be written
  /// fails when the relay starts.
  ///
  /// - Parameters:
  ///   - path: the file; its folder must exist and be writable.
  ///   - interval: the time between two writes once ``start()`` was called.
  ///   - registry: what is written.
  /// - Throws: ``WriteError``, naming the path.
  public init(path: String, interval: Duration, registry: PrometheusCollectorRegistry) throws {
    self.path = path
    temporaryPath = path + ".tmp"
    self.interval = interval
    self.registry = registry
    try write()
  }

  /// Writes the registry's metrics to `PATH.tmp`, then renames it over `PATH`.
  public func write() throws {
    var buffer: [UInt8] = []
    registry.emit(into: &buffer)
    let fd = open(temporaryPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw WriteError(path: path, call: "open \(temporaryPath)", errno: errno) }
    // The umask may have taken bits away: the collector may run as another user.
    var failure: WriteError?
    if fchmod(fd, 0o644) != 0 { failure = WriteError(path: path, call: "fchmod", errno: errno) }
    var written = 0
    while failure == nil, written < buffer.count {
      let count = buffer.withUnsafeBytes { bytes in
        Glibc.write(fd, bytes.baseAddress! + written, bytes.count - written)
      }
      if count < 0 {
        if errno == EINTR { continue }
        failure = WriteError(path: path, call: "write", errno: errno)
      } else {
        written += count
      }
    }
    if Glibc.close(fd) != 0, failure == nil { failure = WriteError(path: path, call: "close", errno: errno) }
    if failure == nil, rename(temporaryPath, path) != 0 {
      failure = WriteError(path: path, call: "rename", errno: errno)
    }
    if let failure {
      unlink(temporaryPath)
      throw failure
    }
  }

  /// Starts writing every `interval` on a thread of its own; a failed
  /// write is told on standard error (once until one succeeds) and tried
  /// again next time.
  public func start() {
    let thread = Thread { [self] in
      var lastError: String?
      while waitForInterval() {
        do {
          try write()
          lastError = nil
        } catch {
          let text = "\(error)"
          if text != lastError { FileHandle.standardError.write(Data("groupsync-relay: \(text)\n".utf8)) }
          lastError = text
        }
      }
      done.signal()
    }
    thread.name = "groupsync-relay-metrics"
    self.thread = thread
    thread.start()
  }

  /// Waits `interval`; false once ``stop()`` was called.
  private func waitForInterval() -> Bool {
    let (seconds, attoseconds) = interval.components
    let deadline = Date(timeIntervalSinceNow: Double(seconds) + Double(attoseconds) / 1e18)
    condition.lock()
    defer { condition.unlock() }
    while !stopping, condition.wait(until: deadline) {}
    return !stopping
  }

  /// Stops the writer's thread, then writes the final figures.
  public func stop() throws {
    condition.lock()
    stopping = true
    condition.broadcast()
    condition.unlock()
    if thread != nil { done.wait() }
    try write()
  }

  /// ``stop()``, telling a failed final write on standard error.
  public func close() {
    do {
      try stop()
    } catch {
      FileHandle.standardError.write(Data("groupsync-relay: \(error)\n".utf8))
    }
  }
}
