// The hosts phase with the server's fsync on: turned on and off on the
// running server (psql), and the disk's own time for one synced write
// (pg_test_fsync), so that the difference can be read against it.
import Foundation
import GroupSyncProcess

extension BenchRunner {
  /// Turns the server's `fsync` on or off (ALTER SYSTEM, reloaded), and
  /// waits until a new session sees it.
  func setServerFsync(_ conninfo: String, on: Bool) throws {
    let value = on ? "on" : "off"
    _ = try psql(conninfo, "ALTER SYSTEM SET fsync = \(value)")
    _ = try psql(conninfo, "SELECT pg_reload_conf()")
    try waitUntil("the server's fsync \(value)", timeout: 10) { (try? psql(conninfo, "SHOW fsync")) == value }
  }

  /// The first column of `sql`'s answer, through psql.
  func psql(_ conninfo: String, _ sql: String) throws -> String {
    let run = try ChildProcess.run("/usr/bin/psql", ["-d", conninfo, "-X", "-A", "-t", "-c", sql], timeout: 60)
    guard run.succeeded else { throw BenchError("psql \(sql): \(run.stderr.suffix(300))") }
    return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  /// pg_test_fsync's time of one 8 kB write synced with the server's
  /// `wal_sync_method`, on the disk of the benchmark's folder: (method, µs).
  func syncTime() -> (String, Double)? {
    guard let conninfo = options.postgresConninfo, let method = try? psql(conninfo, "SHOW wal_sync_method"),
      let bin = try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql").sorted().last
    else { return nil }
    let file = options.workFolder + "/pg_test_fsync.out"
    defer { try? FileManager.default.removeItem(atPath: file) }
    guard let run = try? ChildProcess.run("/usr/lib/postgresql/\(bin)/bin/pg_test_fsync", ["-s", "1", "-f", file], timeout: 120),
      run.succeeded
    else { return nil }
    // "        fdatasync      1234.567 ops/sec     810 usecs/op", in the
    // section of one 8kB write.
    let lines = run.stdout.split(separator: "\n")
    guard let section = lines.firstIndex(where: { $0.contains("one 8kB write") }) else { return nil }
    for line in lines[section...] {
      let fields = line.split(separator: " ")
      if fields.first.map(String.init) == method, let index = fields.firstIndex(of: "usecs/op"), index > 0,
        let micros = Double(fields[index - 1])
      {
        return (method, micros)
      }
    }
    return nil
  }
}
