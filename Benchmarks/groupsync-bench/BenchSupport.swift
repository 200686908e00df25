import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Clocks, statistics and /proc readers shared by the benchmark's
/// orchestrator (`groupsync-bench`) and its child processes.
enum BenchClock {
  /// CLOCK_REALTIME in nanoseconds: the clock `ChangeSet.committedAtNanoseconds`
  /// uses, comparable across processes.
  @inline(__always)
  static func realtime() -> Int64 { read(CLOCK_REALTIME) }

  /// CLOCK_MONOTONIC in nanoseconds, for durations inside one process.
  @inline(__always)
  static func monotonic() -> Int64 { read(CLOCK_MONOTONIC) }

  @inline(__always)
  private static func read(_ clock: clockid_t) -> Int64 {
    var now = timespec()
    clock_gettime(clock, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
  }

  /// Sleeps until CLOCK_MONOTONIC reaches `deadline` (ns), without drift.
  static func sleep(untilMonotonic deadline: Int64) {
    var target = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &target, nil) == EINTR {}
  }

  static func sleep(milliseconds: Int) {
    sleep(untilMonotonic: monotonic() + Int64(milliseconds) * 1_000_000)
  }
}

/// Median, p99 and max of a set of samples, in microseconds.
struct BenchStats: Codable, Sendable {
  var n: Int
  var p50: Double
  var p99: Double
  var max: Double
  var mean: Double

  /// From samples in nanoseconds.
  init(nanoseconds samples: [Int64]) {
    self.init(micros: samples.map { Double($0) / 1000 })
  }

  init(micros samples: [Double]) {
    let sorted = samples.sorted()
    n = sorted.count
    p50 = Self.quantile(sorted, 0.5)
    p99 = Self.quantile(sorted, 0.99)
    max = sorted.last ?? .nan
    mean = sorted.isEmpty ? .nan : sorted.reduce(0, +) / Double(sorted.count)
  }

  /// Nearest-rank quantile of sorted samples.
  static func quantile(_ sorted: [Double], _ q: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    let rank = Int((q * Double(sorted.count)).rounded(.up))
    return sorted[Swift.max(0, Swift.min(sorted.count - 1, rank - 1))]
  }

  /// "p50 / p99 / max" in µs.
  var text: String { "\(BenchFormat.us(p50)) / \(BenchFormat.us(p99)) / \(BenchFormat.us(max))" }
}

enum BenchFormat {
  /// Microseconds, compactly: 12.3, 456, 9999, then 12.3ms.
  static func us(_ value: Double) -> String {
    if value.isNaN { return "-" }
    if value >= 10_000 { return String(format: "%.1fms", value / 1000) }
    if value >= 100 { return String(format: "%.0f", value) }
    return String(format: "%.1f", value)
  }

  static func ratio(_ value: Double) -> String {
    value.isFinite ? String(format: "%.2fx", value) : "-"
  }

  static func percent(_ value: Double) -> String {
    value.isFinite ? String(format: "%+.1f%%", value * 100) : "-"
  }

  static func count(_ value: Double) -> String {
    if !value.isFinite { return "-" }
    if value >= 1_000_000 { return String(format: "%.2fM", value / 1_000_000) }
    if value >= 10_000 { return String(format: "%.1fk", value / 1000) }
    return String(format: "%.0f", value)
  }

  static func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
  }

  static func padLeft(_ text: String, _ width: Int) -> String {
    text.count >= width ? " " + text : String(repeating: " ", count: width - text.count) + text
  }
}

/// This process's CPU time (user + system, every thread, including those
/// that exited) in nanoseconds, from getrusage(RUSAGE_SELF). The kernel
/// keeps the total to the nanosecond (only its split into user and system
/// is sampled), so it shows costs far below one clock tick.
func benchOwnCPUNanoseconds() -> Int64 {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  func ns(_ t: timeval) -> Int64 { Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_usec) * 1000 }
  return ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// A child's answer to `rusage`.
struct BenchCPU: Codable {
  var cpuNs: Int64
}

/// What /proc says about a process.
enum BenchProc {
  /// utime + stime from /proc/PID/stat, in clock ticks (1/100 s here).
  static func cpuTicks(pid: Int32) -> Int64? {
    guard let text = read("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // After the command: state is field 3; utime and stime are fields 14 and 15.
    guard fields.count > 13, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return nil }
    return user + system
  }

  /// CPU time of every live thread of the process, ns: the first field of
  /// each /proc/PID/task/TID/schedstat (the scheduler's exact runtime, not
  /// 10 ms ticks; threads that exited are not counted).
  static func cpuNanoseconds(pid: Int32) -> Int64? {
    guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return nil }
    return tasks.reduce(Int64(0)) { total, task in
      total + (read("/proc/\(pid)/task/\(task)/schedstat")?.split(separator: " ").first.flatMap { Int64($0) } ?? 0)
    }
  }

  /// Whether the process is stopped (SIGSTOP is asynchronous: state T).
  static func isStopped(pid: Int32) -> Bool {
    guard let text = read("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return false }
    return text[text.index(close, offsetBy: 2)...].first == "T"
  }

  /// A "kB" line of /proc/PID/status, e.g. VmHWM or VmRSS.
  static func statusKilobytes(pid: Int32, _ key: String) -> Int64? {
    guard let text = read("/proc/\(pid)/status") else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
      let parts = line.split(separator: " ", omittingEmptySubsequences: true)
      if parts.count >= 2 { return Int64(parts[1]) }
    }
    return nil
  }

  static func read(_ path: String) -> String? {
    guard let data = FileManager.default.contents(atPath: path) else { return nil }
    return String(decoding: data, as: UTF8.self)
  }
}

/// Progress slots in a shared file: each listener child stores the last
/// sequence it delivered in its slot, so that the writer can see backlog
/// without a system call. Aligned 8-byte stores and loads are atomic on
/// the 64-bit machines Swift runs on.
final class BenchProgress: @unchecked Sendable {
  static let slots = 512
  private let base: UnsafeMutableRawPointer

  init(path: String, create: Bool) throws {
    let size = Self.slots * 8
    let fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0o644)
    guard fd >= 0 else { throw BenchError("cannot open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    if create { guard ftruncate(fd, off_t(size)) == 0 else { throw BenchError("cannot size \(path)") } }
    guard let pointer = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), pointer != MAP_FAILED else {
      throw BenchError("cannot map \(path)")
    }
    base = pointer
  }

  @inline(__always)
  func store(_ slot: Int, _ value: Int64) {
    base.storeBytes(of: value, toByteOffset: slot * 8, as: Int64.self)
  }

  /// The pointer escapes into mmap'd memory the compiler cannot see into,
  /// and every waiting loop calls out (usleep) between loads, so each load
  /// reads memory afresh.
  @inline(__always)
  func load(_ slot: Int) -> Int64 {
    base.load(fromByteOffset: slot * 8, as: Int64.self)
  }
}

struct BenchError: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// One JSON line on stdout, flushed at once (children talk to the
/// orchestrator through it).
func benchEmit<T: Encodable>(_ value: T) {
  let encoder = JSONEncoder()
  encoder.outputFormatting = [.sortedKeys]
  var data = (try? encoder.encode(value)) ?? Data("{}".utf8)
  data.append(UInt8(ascii: "\n"))
  FileHandle.standardOutput.write(data)
}

/// Reads stdin line by line on a thread of its own and hands each line to
/// `handle`; calls `handle(nil)` at end of input.
func benchStartControlThread(_ handle: @escaping @Sendable (String?) -> Void) {
  let thread = Thread {
    while let line = readLine() { handle(line) }
    handle(nil)
  }
  thread.stackSize = 1 << 20
  thread.start()
}
