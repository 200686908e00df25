// Runs the phases of `groupsync-bench` in order, in one process (the
// writer), with the children they start; each phase lives in a file of its own.
import CGroupSync
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

/// Runs every phase of `groupsync-bench` in one process (the writer), with
/// listener, poller and floor processes as children.
final class BenchRunner {
  struct Options {
    var quick: Bool
    var workFolder: String
    var floorPath: String
    var valgrindShim: String?
    var callgrind: Bool
    /// Phases to run (nil: all): capture, latency, peers, hosts, fleet, scale, polling, memory,
    /// reads, catch-up, contexts.
    var phases: Set<String>? = nil
    /// Overrides the settings' listener counts.
    var listenerCounts: [Int]? = nil
    /// Overrides the settings' listener form (`watcher-thread`, `events`).
    var listenerForm: String? = nil
    /// The PostgreSQL LISTEN/NOTIFY peer: Benchmarks/pgnotify.c and a
    /// libpq connection string (see Benchmarks/postgres.sh).
    var pgnotify: String? = nil
    var postgresConninfo: String? = nil
    var log: (String) -> Void
  }

  let options: Options
  let settings: BenchSettings
  let executable = ChildProcess.currentExecutable
  var results: BenchResults
  let progress: BenchProgress
  /// Each listener child's CPU time at its last collect.
  var lastListenerCPU: [ObjectIdentifier: Int64] = [:]
  /// Phases that failed; the run goes on and reports them.
  private(set) var failures = 0

  init(options: Options) throws {
    self.options = options
    var settings = options.quick ? BenchSettings.quick : BenchSettings.full
    settings.callgrind = settings.callgrind && options.callgrind
    if let counts = options.listenerCounts { settings.listenerCounts = counts }
    if let form = options.listenerForm { settings.listenerForm = form }
    self.settings = settings
    try FileManager.default.createDirectory(atPath: options.workFolder, withIntermediateDirectories: true)
    progress = try BenchProgress(path: options.workFolder + "/progress", create: true)
    results = BenchResults(
      quick: options.quick, date: Self.isoDate(), machine: Self.machine(workFolder: options.workFolder),
      settings: settings)
  }

  func log(_ line: String) { options.log(line) }

  func run() throws -> BenchResults {
    let start = BenchClock.monotonic()
    guard FileManager.default.isExecutableFile(atPath: options.floorPath) else {
      throw BenchError("the floor program \(options.floorPath) is missing: build it with `make bench` (cc -O2 Benchmarks/floor.c)")
    }
    func selected(_ name: String) -> Bool { options.phases.map { $0.contains(name) } ?? true }
    if selected("capture") {
      try phase("capture overhead") { try captureOverhead() }
      try phase("codec") { try codec() }
      if settings.callgrind { callgrind() } else {
        results.callgrind = BenchCallgrindResult(skipped: options.quick ? "quick run" : "disabled")
      }
    }
    if selected("latency") { try latencyAndFanOut() }
    if selected("peers") { try phase("peers") { try peers() } }
    if selected("hosts") { try phase("hosts") { try hosts() } }
    if selected("fleet") { try phase("fleet") { try fleet() } }
    if selected("scale") { try phase("scale") { try scale() } }
    if selected("polling") { try phase("polling") { try polling() } }
    if selected("memory") { try phase("memory") { try memory() } }
    if selected("reads") { try phase("read latency") { try readLatency() } }
    if selected("catch-up") { try phase("catch-up") { try catchUp() } }
    if selected("contexts") { try phase("contexts") { try contexts() } }
    results.machine.loadAverageEnd = Self.loadAverage()
    results.durationSeconds = Double(BenchClock.monotonic() - start) / 1e9
    results.targets = targets()
    return results
  }

  /// Runs a phase; a failure is logged and noted, and the run goes on.
  func phase(_ name: String, _ body: () throws -> Void) throws {
    do {
      try body()
    } catch {
      log("FAILED: \(name): \(error)")
      results.notes.append("phase '\(name)' failed: \(error)")
      failures += 1
    }
  }

  // MARK: Children

  /// Progress slots 0..<slotBase are unused; listeners take the next ones.
  let slotBase = 1

  func startChild(name: String, _ arguments: [String]) throws -> ChildProcess {
    let child = try ChildProcess(executable: executable, arguments: arguments, name: name)
    let ready = try child.read(BenchReady.self, timeout: 60)
    guard ready.ready else { throw BenchError("\(name) did not start") }
    return child
  }

  func startListeners(_ count: Int, folder: String, extra: [String] = [],
                              extraFor: (Int) -> [String] = { _ in [] }) throws -> [ChildProcess] {
    var children: [ChildProcess] = []
    // Listener slots are reused from phase to phase: reset them first.
    for index in 0..<count { progress.store(slotBase + index, 0) }
    // Start them all, then wait for each to be ready.
    for index in 0..<count {
        children.append(
        try ChildProcess(
          executable: executable,
          arguments: ["listener", folder, "--progress", options.workFolder + "/progress", "--slot",
                      String(slotBase + index), "--form", settings.listenerForm] + extra + extraFor(index),
          name: "listener \(index + 1) of \(count)"))
    }
    for child in children {
      let ready = try child.read(BenchReady.self, timeout: 120)
      guard ready.ready else { throw BenchError("\(child.name) did not start") }
    }
    return children
  }

  func collect(_ listeners: [ChildProcess], until sequence: Int64, timeout: Double = 180) throws
    -> [BenchListenerReport]
  {
    for listener in listeners { listener.send("collect \(sequence)") }
    return try listeners.map { listener in
      var report = try listener.read(BenchListenerReport.self, timeout: timeout)
      if let error = report.error { throw BenchError("\(listener.name): \(error)") }
      let id = ObjectIdentifier(listener)
      if let previous = lastListenerCPU[id] { report.cpuDeltaNs = report.cpuNs - previous }
      lastListenerCPU[id] = report.cpuNs
      if report.timedOut {
        throw BenchError("\(listener.name) did not receive change set \(sequence) (got to \(report.lastSequence)): \(listener.stderr.suffix(1000))")
      }
      return report
    }
  }

  struct FloorResult: Decodable {
    var latencyNs: [Int64] = []
    var publishNs: [Int64] = []
    var watcherCpuNs: Int64 = 0
    var messagesPerWatcher = 0
    var watchers = 0

    mutating func append(_ other: FloorResult) {
      latencyNs += other.latencyNs
      publishNs += other.publishNs
      watcherCpuNs += other.watcherCpuNs
      messagesPerWatcher += other.messagesPerWatcher
      watchers = other.watchers
    }

    /// A watcher's CPU time per message, µs (start-up included, negligible).
    var cpuPerMessage: Double { Double(watcherCpuNs) / Double(max(1, messagesPerWatcher * watchers)) / 1000 }
  }

  /// Runs the floor next to a group folder: its files are created in the
  /// group's own tmp/ (on ext4 the cost of creating a file depends on the
  /// block group of its folder), its watched folders beside the inboxes.
  func runFloor(listeners: Int, commits: Int, intervalUs: Int, mode: String, group: String,
                        stopped: Bool = false) throws -> FloorResult {
    let floor = try ChildProcess.run(
      options.floorPath,
      ["--dir", group + "/floor-\(mode)", "--tmp", group + "/tmp", "--watchers", String(listeners), "--count",
       String(commits), "--interval-us", String(intervalUs), "--mode", mode, "--warmup", "20"]
        + (stopped ? ["--stopped"] : []), timeout: 300)
    guard floor.succeeded else {
      throw BenchError("floor failed (\(floor.timedOut ? "timed out" : "status \(floor.status)")): \(floor.stderr)")
    }
    do {
      return try JSONDecoder().decode(FloorResult.self, from: Data(floor.stdout.utf8))
    } catch {
      throw BenchError("floor printed something unreadable: \(floor.stdout.prefix(200))")
    }
  }
}

/// A value shared between threads under a lock.
final class BenchBox<Value>: @unchecked Sendable {
  private let lock = NSLock()
  private var value: Value
  init(_ value: Value) { self.value = value }
  func withLock<T>(_ body: (inout Value) -> T) -> T { lock.withLock { body(&value) } }
}
