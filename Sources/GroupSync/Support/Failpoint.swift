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
enum Failpoint {
  static let stopAfterCommit = value == "stop-after-commit"

  private static let value: String? = getenv("GROUPSYNC_FAILPOINT").map { String(cString: $0) }

  /// Stops the process here if the failpoint is on.
  static func stopIfAsked() {
    if stopAfterCommit { raise(SIGSTOP) }
  }
}
