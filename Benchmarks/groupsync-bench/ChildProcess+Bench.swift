import Foundation
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

/// The benchmark's line protocol over a child of `groupsync-bench`:
/// commands on its stdin, one JSON object per line back on its stdout.
extension ChildProcess {
  /// Reads one line and decodes it.
  func read<T: Decodable>(_ type: T.Type, timeout: Double) throws -> T {
    let line = try readLine(timeout: timeout)
    do {
      return try JSONDecoder().decode(T.self, from: Data(line.utf8))
    } catch {
      throw BenchError("\(name) sent an unreadable line (\(error)): \(line.prefix(300))")
    }
  }

  func suspend() { signal(SIGSTOP) }
  func resume() { signal(SIGCONT) }

  /// Asks the child to quit, waits up to `timeout` seconds, then signals it.
  func quit(timeout: Double = 10) {
    guard isRunning else { return }
    resume()
    send("quit")
    _ = finish(timeout: timeout)
  }
}
