import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Runs each test case in one of a few machine-wide slots, and prints how
/// long the case itself ran, as `test-time SECONDS SUITE/TEST`, for
/// `make test`'s summary (Scripts/test-summary.sh).
///
/// `make test` runs up to six test processes at once (plain, ASan, TSan;
/// the core's and the relay's), each running its tests side by side, and
/// a second run on the same machine adds as many: on two cores that put
/// hundreds of processes on each core, and tests that wait with deadlines
/// for what other processes do failed because the machine was busy. So a
/// case first takes one of `GROUPSYNC_TEST_SLOTS` (4 per core) slots, lock
/// files in `/tmp/groupsync-test-case-slots` shared by every test
/// process of the machine, and its clock starts once it has one. Every
/// suite carries the trait:
///
/// ```swift
/// @Suite(.timed) struct ListenerTests { ... }
/// ```
public struct TimedTrait: SuiteTrait, TestTrait, TestScoping {
  public var isRecursive: Bool { true }

  public func provideScope(
    for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
  ) async throws {
    guard testCase != nil else { return try await function() }
    let slot = try await TestSlot.take()
    defer { slot.release() }
    let start = ContinuousClock.now
    defer {
      let elapsed = ContinuousClock.now - start
      let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
      // The suite's and the test's names, without the module or the source location.
      let name = test.id.nameComponents.joined(separator: "/")
      print("test-time \(String(format: "%.3f", seconds)) \(name)")
    }
    try await function()
  }
}

extension Trait where Self == TimedTrait {
  /// Runs each test case in a machine-wide slot and prints its own running
  /// time (see ``TimedTrait``).
  public static var timed: TimedTrait { TimedTrait() }
}

/// One of the machine's test-case slots, held (an exclusive `flock`) until
/// released. The descriptor is close-on-exec: a process the test starts,
/// which may outlive it, never holds the slot.
struct TestSlot {
  private let descriptor: Int32

  static let count: Int = {
    if let text = ProcessInfo.processInfo.environment["GROUPSYNC_TEST_SLOTS"], let count = Int(text), count > 0 {
      return count
    }
    return 4 * max(1, ProcessInfo.processInfo.activeProcessorCount)
  }()

  static let folder: String = {
    // Not under $TMPDIR, which differs between passes: every test process
    // on the machine must find the same lock files.
    let folder = "/tmp/groupsync-test-case-slots"
    mkdir(folder, 0o777)
    return folder
  }()

  private init(descriptor: Int32) { self.descriptor = descriptor }

  /// Waits for a free slot and takes it. Within this process the cases
  /// queue for as many permits as there are slots (no polling); the few
  /// that hold one then poll the machine's lock files (a blocking `flock`
  /// would hold a thread of the cooperative pool).
  static func take() async throws -> TestSlot {
    await permits.acquire()
    do {
      while true {
        for index in (0..<count).shuffled() {
          let fd = open(folder + "/\(index)", O_CREAT | O_RDWR | O_CLOEXEC, 0o666)
          guard fd >= 0 else { continue }
          if flock(fd, LOCK_EX | LOCK_NB) == 0 { return TestSlot(descriptor: fd) }
          close(fd)
        }
        try await Task.sleep(for: .milliseconds(50))
      }
    } catch {
      Task { await permits.release() }
      throw error
    }
  }

  func release() {
    // Unlocked first: a child another test is starting holds a copy of the
    // descriptor until its exec, and the lock would last as long.
    flock(descriptor, LOCK_UN)
    close(descriptor)
    Task { await Self.permits.release() }
  }

  private static let permits = Permits(count)
}

/// A counting semaphore for async code: `acquire` waits in line.
actor Permits {
  private var free: Int
  private var waiting: [CheckedContinuation<Void, Never>] = []

  init(_ count: Int) { free = count }

  func acquire() async {
    if free > 0 {
      free -= 1
      return
    }
    await withCheckedContinuation { waiting.append($0) }
  }

  func release() {
    if waiting.isEmpty { free += 1 } else { waiting.removeFirst().resume() }
  }
}
