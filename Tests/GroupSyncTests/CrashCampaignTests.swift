import Foundation
import GRDB
@testable import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Writers SIGKILLed right after COMMIT (before they publish), at random
/// inside transactions, many times a second; listeners killed and started
/// again: every listener still ends equal to the store, in order, exactly
/// once, without a reset, within the grace period and a rescan tick of the
/// last commit.
@Suite(.serialized, .timed)
struct CrashCampaignTests {
  static let schema = "CREATE TABLE items(id INTEGER PRIMARY KEY, w TEXT NOT NULL);"
  static let insert = "INSERT INTO items(w) VALUES ('x')"

  /// A writer that stops itself after its COMMIT, before publishing.
  static func startStoppingWriter(_ directory: String) throws -> ChildProcess {
    var environment = ProcessInfo.processInfo.environment
    environment["GROUPSYNC_FAILPOINT"] = "stop-after-commit"
    return try ChildProcess(
      executable: CLI.executable, arguments: ["exec", directory, insert], environment: environment, name: "stopping writer")
  }

  /// Whether `pid` is stopped (state T in /proc/PID/stat).
  static func isStopped(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")")
    else { return false }
    return stat[stat.index(close, offsetBy: 2)...].first == "T"
  }

  static func storeSequence(_ directory: String) throws -> Int64 {
    var configuration = Configuration()
    configuration.readonly = true
    let queue = try DatabaseQueue(path: directory + "/store.sqlite", configuration: configuration)
    return try queue.read { try History.lastSequence($0) }
  }

  static func printed(_ child: ChildProcess) throws -> [[String: Any]] { try ProcessHarness.printedLines(child) }

  static func sequences(_ objects: [[String: Any]]) -> [Int64] {
    objects.compactMap { ($0["seq"] as? NSNumber)?.int64Value }
  }

  @Test func changeSetsOfWritersKilledAfterCommitAreReadFromTheHistoryInOneGracePeriod() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let base = try Self.storeSequence(directory)
    // Long enough to keep "one period" and "one period per gap" far apart
    // on a busy machine (a run beside another one spread the twelve over
    // seconds).
    let grace = Duration.seconds(4)
    let watch = try await ProcessHarness.startWatch(
      [directory, "--name", "l", "--json", "--grace-ms", String(grace.milliseconds)])
    defer { watch.signal(SIGKILL) }

    // Twelve writers commit and stop before publishing; then all die.
    let killed = 12
    var writers: [ChildProcess] = []
    for _ in 0..<killed { writers.append(try Self.startStoppingWriter(directory)) }
    let started = writers
    try await waitUntil("every writer stopped after its COMMIT", timeout: .seconds(60)) {
      started.allSatisfy { Self.isStopped($0.pid) }
    }
    #expect(try Self.storeSequence(directory) == base + Int64(killed))
    for writer in writers { writer.signal(SIGKILL) }
    // One more commit, published: the twelve before it are gaps.
    let published = try await ProcessHarness.exec(directory, [Self.insert])
    #expect(published.map(\.seq) == [base + Int64(killed) + 1])

    let expected = Array((base + 1)...(base + Int64(killed) + 1))
    // stdout and stderr are two pipes: wait for both.
    try await waitUntil("the listener got and logged every change set", timeout: .seconds(120)) {
      (try? Self.sequences(Self.printed(watch)).count) ?? 0 >= expected.count
        && watch.stderr.components(separatedBy: "read from the history").count > killed
    }
    let objects = try Self.printed(watch)
    #expect(objects.filter { $0["reset"] != nil }.isEmpty, "\(objects)")
    #expect(Self.sequences(objects) == expected)
    // One grace period from their commits, not twelve in a row: the
    // listener's log says when it read each one from the history (to the
    // second). A grace period per gap would spread them over 11 periods.
    let repairs = watch.stderr.split(separator: "\n").filter { $0.contains("read from the history") }
    #expect(repairs.count == killed, "\(watch.stderr)")
    let times = repairs.compactMap { Self.logTime($0) }
    try #require(times.count == repairs.count, "log lines without a time: \(repairs)")
    let spread = Duration.seconds(times.max()! - times.min()!)
    #expect(spread <= grace * (killed - 1) / 3, "\(killed) gaps read from the history over \(spread)")
  }

  /// The time of a swift-log line (`2026-11-25T20:19:54+0000 info ...`),
  /// in seconds since 1970.
  static func logTime(_ line: Substring) -> Int? {
    guard let stamp = line.split(separator: " ").first else { return nil }
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    return formatter.date(from: String(stamp)).map { Int($0.timeIntervalSince1970) }
  }

  /// Two writers flat out, SIGKILLed at random and started again, writers
  /// stopped after COMMIT and killed several times a second, two listeners
  /// that run throughout and two durable ones killed and started again.
  @Test func aCrashCampaignEndsWithEveryListenerEqualToTheStore() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    let graceMs = 500
    var steady: [ChildProcess] = []
    for name in ["steady1", "steady2"] {
      steady.append(try await ProcessHarness.startWatch([directory, "--name", name, "--json", "--grace-ms", String(graceMs)]))
    }
    let start = try Self.storeSequence(directory)
    // Each durable listener's runs, oldest first.
    var durable: [[ChildProcess]] = []
    for name in ["durable1", "durable2"] {
      durable.append([
        try await ProcessHarness.startWatch([directory, "--name", name, "--durable", "--json", "--grace-ms", String(graceMs)])
      ])
    }
    var everyChild: [ChildProcess] { steady + durable.flatMap { $0 } }
    defer { for child in everyChild { child.signal(SIGKILL) } }

    var random = SystemRandomNumberGenerator()
    // The campaign is counted in events, not in time (a busy machine or a
    // sanitizer build starts processes slowly, and a writer killed early
    // commits little): on until 20 writers were killed after COMMIT, 10
    // at random, durable listeners restarted 3 times and 200 change sets
    // committed. The cap only ends a campaign that would never get there.
    let cap = ContinuousClock.now + .seconds(300)
    let enoughCommits: Int64 = 200
    var writers = (0..<2).map { _ in try? CLI.start(["exec", directory, "--repeat", "1000000", Self.insert]) }
    var stopping: [ChildProcess] = []
    var killedWriters = 0, killedAfterCommit = 0, restartedListeners = 0
    func moreToDo() throws -> Bool {
      let committed = try Self.storeSequence(directory) - start
      return killedAfterCommit < 20 || killedWriters < 10 || restartedListeners < 3 || committed < enoughCommits
    }
    while try ContinuousClock.now < cap && moreToDo() {
      try await Task.sleep(for: .milliseconds(Int.random(in: 20...120, using: &random)))
      // A flat-out writer dies mid-transaction, or between two.
      let w = Int.random(in: 0...1, using: &random)
      if Bool.random(using: &random) {
        writers[w]?.signal(SIGKILL)
        _ = writers[w]?.finish(timeout: 5)
        killedWriters += 1
        writers[w] = try CLI.start(["exec", directory, "--repeat", "1000000", Self.insert])
      }
      // Writers stopped after COMMIT are killed, and new ones started.
      for writer in stopping where Self.isStopped(writer.pid) {
        writer.signal(SIGKILL)
        killedAfterCommit += 1
      }
      stopping = stopping.filter(\.isRunning)
      stopping.append(try Self.startStoppingWriter(directory))
      // Now and then a durable listener dies and starts again.
      if Int.random(in: 0..<6, using: &random) == 0 {
        let d = Int.random(in: 0...1, using: &random)
        durable[d].last!.signal(SIGKILL)
        _ = durable[d].last!.finish(timeout: 5)
        durable[d].append(
          try await ProcessHarness.startWatch([
            directory, "--name", "durable\(d + 1)", "--durable", "--json", "--grace-ms", String(graceMs),
          ]))
        restartedListeners += 1
      }
    }
    // Nobody writes from here on.
    for writer in writers { writer?.signal(SIGKILL) }
    let last = stopping
    try await waitUntil("the last stopping writers stopped or ended", timeout: .seconds(30)) {
      last.allSatisfy { !$0.isRunning || Self.isStopped($0.pid) }
    }
    for writer in stopping {
      if writer.isRunning { killedAfterCommit += 1 }
      writer.signal(SIGKILL)
    }
    for writer in writers { _ = writer?.finish(timeout: 5) }
    let lastCommit = ContinuousClock.now
    let final = try Self.storeSequence(directory)
    #expect(final >= start + enoughCommits, "the campaign committed \(final - start) change sets")
    #expect(
      killedAfterCommit >= 20 && killedWriters >= 10 && restartedListeners >= 3,
      "\(killedAfterCommit) killed after COMMIT, \(killedWriters) at random, \(restartedListeners) listener restarts")

    // Every listener catches up within the grace period and a rescan tick
    // of the last commit, plus the time it takes to replay its backlog:
    // that part is the machine's work, measured at the end of the test.
    let deadline = Duration.milliseconds(graceMs) + .seconds(1)
    let listeners = steady + durable.map { $0.last! }
    let behind = try listeners.map { final - (Self.sequences(try Self.printed($0)).last ?? start) }.max() ?? 0
    let caughtUp: Void? = try? await waitUntil("every listener at \(final)", timeout: .seconds(120)) {
      listeners.allSatisfy { (try? Self.sequences(Self.printed($0)).last) == final }
    }
    let took = ContinuousClock.now - lastCommit
    for (index, listener) in listeners.enumerated() {
      let last = try Self.sequences(Self.printed(listener)).last
      #expect(last == final, "listener \(index) at \(last.map(String.init) ?? "nothing") of \(final) after \(took): \(listener.stderr.suffix(3000))")
    }
    #expect(caughtUp != nil, "not caught up in \(took)")

    // The steady listeners: every change set once, in order, no reset.
    for listener in steady {
      let objects = try Self.printed(listener)
      #expect(objects.filter { $0["reset"] != nil }.isEmpty, "reset: \(objects.filter { $0["reset"] != nil })")
      let sequences = Self.sequences(objects)
      let firstWrong = zip(sequences, (start + 1)...final).first { $0 != $1 }
      #expect(sequences.count == Int(final - start) && firstWrong == nil,
        "\(sequences.count) change sets of \(final - start); first out of place: \(String(describing: firstWrong))")
    }
    // The durable ones: each run in order, and each resuming at or before
    // where the last one stopped (a change set handled but not yet
    // acknowledged when the process died comes again): nothing skipped.
    for runs in durable {
      var reached = start
      for run in runs {
        let objects = try Self.printed(run)
        #expect(objects.filter { $0["reset"] != nil }.isEmpty, "reset: \(objects.filter { $0["reset"] != nil })")
        let sequences = Self.sequences(objects)
        guard let first = sequences.first else { continue }
        #expect(first <= reached + 1, "a run resumed at \(first) after \(reached)")
        #expect(sequences.last == first + Int64(sequences.count) - 1 && sequences == sequences.sorted(), "a run out of order")
        reached = max(reached, sequences.last!)
      }
      #expect(reached == final)
    }

    // The baseline: the same listeners, stopped while a writer commits as
    // many change sets as they were behind, replay that backlog, which
    // holds no gap. Catching up after the campaign may take the grace
    // period and a tick more than that, and four times it for the noise
    // (the machine's load changes between the two measures).
    for listener in listeners { listener.signal(SIGSTOP) }
    _ = try await ProcessHarness.exec(directory, repeat: Int(max(behind, 1)), [Self.insert])
    let resumed = ContinuousClock.now
    for listener in listeners { listener.signal(SIGCONT) }
    let replayedTo = final + max(behind, 1)
    try await waitUntil("every listener at \(replayedTo)", timeout: .seconds(120)) {
      listeners.allSatisfy { (try? Self.sequences(Self.printed($0)).last) == replayedTo }
    }
    let replay = ContinuousClock.now - resumed
    #expect(
      took <= deadline + replay * 4,
      "caught up \(took) after the last commit; \(behind) change sets without a gap took \(replay)")
  }
}
