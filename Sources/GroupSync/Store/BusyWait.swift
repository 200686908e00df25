import Foundation
import GRDB

/// How GroupSync's connections wait for a store's lock: SQLite's own busy
/// timeout sleeps longer and longer between tries, up to 100 ms, so a
/// writer that waits behind a process writing often (a relay applying a
/// backlog, a busy writer) keeps missing the short moments the lock is
/// free, and fails after its timeout though the lock was free many times.
/// GroupSync tries again every millisecond, then every 5 ms, for as long.
enum BusyWait {
  /// A busy callback that gives up after `seconds` of one wait.
  static func callback(seconds: Double) -> Database.BusyCallback {
    // One wait per thread at a time: its start, by thread.
    let starts = Locked<[UInt: ContinuousClock.Instant]>([:])
    let timeout = Duration.milliseconds(Int64(seconds * 1000))
    return { tries in
      let thread = UInt(pthread_self())
      let now = ContinuousClock.now
      let start = starts.withLock { starts in
        if tries == 0 { starts[thread] = now }
        return starts[thread] ?? now
      }
      guard now - start < timeout else {
        starts.withLock { $0[thread] = nil }
        return false
      }
      // 1 ms for the first 50 ms, then 5 ms: short enough to catch the
      // lock free between two transactions of a busy writer, long enough
      // that writers waiting in line cost little CPU.
      usleep(now - start < .milliseconds(50) ? 1_000 : 5_000)
      return true
    }
  }

  /// The busy mode GroupSync gives a configuration that sets none: 10 s.
  static func applyDefault(to configuration: inout Configuration) {
    if case .immediateError = configuration.busyMode { configuration.busyMode = .callback(callback(seconds: 10)) }
  }
}
