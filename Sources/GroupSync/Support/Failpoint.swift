#if canImport(Glibc)
import Glibc
#endif

/// Faults a crash test can ask a process for, through the environment
/// variable `GROUPSYNC_FAILPOINT`, read once (as etcd and FoundationDB
/// expose theirs). Unset, each check is one load of a constant.
///
/// - `stop-after-commit`: the process stops itself (SIGSTOP) after each
///   COMMIT, before publishing the change set: the state a writer
///   SIGKILLed right after COMMIT leaves behind, at an instant the test
///   chooses (it kills the stopped process).
/// - `stop-before-commit`: the process stops itself just before COMMIT,
///   with its transaction's pages maybe already in the WAL (a big one
///   spills): the state of a writer SIGKILLed inside its transaction.
/// - `stop-after-judging-forged-files`: a listener stops itself once,
///   after it judged forged change sets beyond its store's sequence and
///   before it removes them: a listener a busy machine kept from running
///   there, while junk goes on arriving.
enum Failpoint {
  static let stopAfterCommit = value == "stop-after-commit"
  static let stopBeforeCommit = value == "stop-before-commit"
  static let stopAfterJudgingForgedFiles = value == "stop-after-judging-forged-files"

  private static let value: String? = getenv("GROUPSYNC_FAILPOINT").map { String(cString: $0) }

  /// Stops the process here if `failpoint` is on.
  static func stop(if failpoint: Bool) {
    if failpoint { raise(SIGSTOP) }
  }

  private static let stoppedOnce = Locked(false)

  /// Stops the process here if `failpoint` is on, the first time only.
  static func stopOnce(if failpoint: Bool) {
    guard failpoint, stoppedOnce.withLock({ stopped in defer { stopped = true }; return !stopped }) else { return }
    raise(SIGSTOP)
  }
}
