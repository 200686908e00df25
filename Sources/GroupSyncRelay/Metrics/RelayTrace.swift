// The relay's trace: when each step of a shipment and of an apply
// happened, for the benchmark's budget of the path between hosts.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Timestamps (`CLOCK_REALTIME`, nanoseconds, comparable across the
/// processes of one machine) of each step of the relay's shipments and
/// applies, kept in memory and written as JSON lines to
/// ``RelayConfiguration/traceFile`` when the relay stops.
///
/// Off (no file configured), nothing is stamped: each step checks an
/// optional and goes on. On, a step costs a clock read; a record is kept
/// per shipment and per applied batch, at most ``capacity`` (the first
/// ones: a trace is for a benchmark's sample, not a log).
final class RelayTrace: @unchecked Sendable {
  /// One shipment: the doorbell's last ring before its pass, the pass's
  /// start, the plan read, the entry encoded, the server's answer and the
  /// shipment recorded in the store.
  struct Shipment: Codable {
    var kind = "ship"
    var store: String
    /// The local sequence it shipped through, and its log position.
    var through: Int64
    var position: Int64
    var rung: Int64
    var passBegan: Int64
    var planned: Int64
    var encoded: Int64
    var shipped: Int64
    var recorded: Int64
  }

  /// One applied batch: the last notification read before it, the pass's
  /// start, the entries decoded, and the local commit that applied them.
  struct Apply: Codable {
    var kind = "apply"
    var store: String
    /// The positions it applied.
    var first: Int64
    var last: Int64
    var notified: Int64
    var passBegan: Int64
    var decoded: Int64
    var applied: Int64
  }

  static let capacity = 20_000

  let path: String
  private let lock = NSLock()
  private var lines: [Data] = []
  /// Written by the doorbell's thread and the relay's: the last ring, the
  /// last notification read.
  private var lastRung: Int64 = 0
  private var lastNotified: Int64 = 0
  /// The current pass's start, and the current shipment's entry encoded
  /// (the relay's thread only).
  var passBegan: Int64 = 0
  var encoded: Int64 = 0

  /// Makes the trace, writing its file empty at once, so that a path that
  /// cannot be written stops the relay as it starts rather than when it
  /// stops.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming the path.
  init(path: String) throws {
    self.path = path
    do {
      try Data().write(to: URL(fileURLWithPath: path))
    } catch {
      throw RelayError.invalidConfiguration("trace file '\(path)' cannot be written: \(error.localizedDescription)")
    }
  }

  static func now() -> Int64 {
    var time = timespec()
    clock_gettime(CLOCK_REALTIME, &time)
    return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
  }

  func rung() { lock.withLock { lastRung = Self.now() } }
  func notified() { lock.withLock { lastNotified = Self.now() } }
  var rungAt: Int64 { lock.withLock { lastRung } }
  var notifiedAt: Int64 { lock.withLock { lastNotified } }

  func record(_ value: some Encodable) {
    guard let line = try? JSONEncoder().encode(value) else { return }
    lock.withLock { if lines.count < Self.capacity { lines.append(line) } }
  }

  /// Writes the records kept so far (replacing the file).
  func write() throws {
    let body = lock.withLock { lines.reduce(into: Data()) { $0 += $1 + Data("\n".utf8) } }
    try body.write(to: URL(fileURLWithPath: path), options: .atomic)
  }
}
