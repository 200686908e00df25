import ArgumentParser
import Foundation
import GroupSync

/// A listener process of the benchmark: receives through
/// `Listener.startOnWatcherThread` (or, with `--form events`, the public
/// AsyncSequence) and stamps CLOCK_REALTIME the moment the handler is
/// called (`next()` returned) with each change set.
///
/// Protocol: prints `{"ready":true,...}` once listening; then reads
/// commands on stdin: `collect SEQ` waits until SEQ was delivered (or a
/// reset covered it) and prints the samples gathered since the last
/// collect; `quit` closes the listener and exits. It also stores the last
/// delivered sequence in its slot of the progress file.
struct BenchListener: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "listener", abstract: "Child role: a listener that reports delivery times.")

  @Argument(help: "The group folder.")
  var directory: String

  @Option(name: .long, help: "The shared progress file.")
  var progress: String

  @Option(name: .long, help: "This listener's slot in the progress file.")
  var slot: Int

  @Flag(name: .long, help: "Keep no samples (for the memory benchmark).")
  var noSamples = false

  @Option(name: .long, help: "ListenerOptions.rescanInterval in milliseconds (default: the library's).")
  var rescanMs: Int?

  enum Form: String, ExpressibleByArgument {
    case watcherThread = "watcher-thread"
    case events
  }

  @Option(name: .long, help: "watcher-thread (Listener.startOnWatcherThread) or events (the AsyncSequence).")
  var form: Form = .watcherThread

  func run() async throws {
    let group = try GroupFolder(path: directory, create: false)
    var options = ListenerOptions()
    if let rescanMs { options.rescanInterval = .milliseconds(rescanMs) }
    let listener = try group.listen(options: options)
    let progressSlots = try BenchProgress(path: progress, create: false)
    let recorder = BenchRecorder(keepSamples: !noSamples)
    progressSlots.store(slot, listener.startSequence)
    recorder.start(at: listener.startSequence)

    benchStartControlThread { line in
      guard let line, line != "quit" else {
        listener.close()
        Foundation.exit(0)
      }
      let words = line.split(separator: " ")
      if words.first == "collect", words.count == 2, let target = Int64(words[1]) {
        benchEmit(recorder.collect(until: target, timeoutSeconds: 120))
      } else if line == "rusage" {
        benchEmit(BenchCPU(cpuNs: benchOwnCPUNanoseconds()))
      } else {
        benchEmit(BenchListenerReport.failure("unknown command '\(line)'"))
      }
    }
    benchEmit(BenchReady(ready: true, pid: getpid(), startSequence: listener.startSequence))

    let slot = slot
    let receive: @Sendable (ListenerEvent) -> Void = { event in
      let deliveredAt = BenchClock.realtime()
      switch event {
      case .changes(let changeSet):
        recorder.record(
          sequence: changeSet.sequence, committedAt: changeSet.committedAtNanoseconds,
          deliveredAt: deliveredAt, rows: changeSet.rowCount)
        progressSlots.store(slot, changeSet.sequence)
      case .reset(let reset):
        recorder.recordReset(sequence: reset.sequence, reason: reset.reason)
        progressSlots.store(slot, reset.sequence)
      }
    }
    switch form {
    case .events:
      for await event in listener.events { receive(event) }
    case .watcherThread:
      listener.startOnWatcherThread(receive)
      // The control thread ends the process on `quit`.
      while true { try await Task.sleep(for: .seconds(3600)) }
    }
  }
}

struct BenchReady: Codable {
  var ready: Bool
  var pid: Int32
  var startSequence: Int64
}

/// What a listener child reports on `collect`.
struct BenchListenerReport: Codable {
  var sequences: [Int64] = []
  var committedAt: [Int64] = []
  var deliveredAt: [Int64] = []
  var delivered = 0
  var rows = 0
  var resets: [String] = []
  var lastSequence: Int64 = 0
  var timedOut = false
  var error: String?
  /// The listener process's CPU time when it answered (getrusage).
  var cpuNs: Int64 = 0
  /// Filled in by the orchestrator: CPU time since the previous collect.
  var cpuDeltaNs: Int64?

  static func failure(_ message: String) -> Self {
    var report = Self()
    report.error = message
    return report
  }
}

/// Samples gathered by the consuming task, handed to the control thread.
final class BenchRecorder: @unchecked Sendable {
  private let condition = NSCondition()
  private let keepSamples: Bool
  private var report = BenchListenerReport()
  private var waitingFor: Int64 = .max

  init(keepSamples: Bool) {
    self.keepSamples = keepSamples
    if keepSamples {
      report.sequences.reserveCapacity(20_000)
      report.committedAt.reserveCapacity(20_000)
      report.deliveredAt.reserveCapacity(20_000)
    }
  }

  func start(at sequence: Int64) {
    condition.withLock { report.lastSequence = sequence }
  }

  func record(sequence: Int64, committedAt: Int64, deliveredAt: Int64, rows: Int) {
    condition.lock()
    if keepSamples {
      report.sequences.append(sequence)
      report.committedAt.append(committedAt)
      report.deliveredAt.append(deliveredAt)
    }
    report.delivered += 1
    report.rows += rows
    report.lastSequence = sequence
    if sequence >= waitingFor { condition.broadcast() }
    condition.unlock()
  }

  func recordReset(sequence: Int64, reason: String) {
    condition.lock()
    report.resets.append(reason)
    report.lastSequence = max(report.lastSequence, sequence)
    condition.broadcast()
    condition.unlock()
  }

  /// Waits until `target` was delivered, then hands over and clears.
  func collect(until target: Int64, timeoutSeconds: Double) -> BenchListenerReport {
    condition.lock()
    defer { condition.unlock() }
    waitingFor = target
    let deadline = Date().addingTimeInterval(timeoutSeconds)
    var timedOut = false
    while report.lastSequence < target {
      if !condition.wait(until: deadline) {
        timedOut = report.lastSequence < target
        break
      }
    }
    waitingFor = .max
    var result = report
    result.timedOut = timedOut
    result.cpuNs = benchOwnCPUNanoseconds()
    let last = report.lastSequence
    report = BenchListenerReport()
    report.lastSequence = last
    if keepSamples {
      report.sequences.reserveCapacity(result.sequences.count)
      report.committedAt.reserveCapacity(result.sequences.count)
      report.deliveredAt.reserveCapacity(result.sequences.count)
    }
    return result
  }
}
