// The notify lock (issue 40, item 2): PreCommit_Notify takes a
// cluster-wide lock that every notifying transaction holds through its
// commit, WAL flush included. pgbench measures what that caps.
import Foundation
import GroupSyncProcess

extension BenchRunner {
  /// One-row INSERTs a second with pgbench (16 clients, `seconds` each),
  /// alone, with pg_notify in the same transaction, and with pg_notify
  /// sent apart (its own transaction, synchronous_commit off); fsync on,
  /// then off.
  func scaleLock(_ conninfo: String, seconds: Int) throws -> [BenchScaleResult.Lock] {
    let pgbench = try pgbenchPath()
    let folder = options.workFolder + "/scale/lock"
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let insert = "INSERT INTO scale_lock(body) VALUES ('x');"
    let scripts = [
      "insert": insert + "\n",
      "insert-notify": "BEGIN;\n\(insert)\nSELECT pg_notify('scale_lock', 'x');\nCOMMIT;\n",
      "insert-then-notify":
        "\(insert)\nBEGIN;\nSET LOCAL synchronous_commit = off;\nSELECT pg_notify('scale_lock', 'x');\nCOMMIT;\n",
    ]
    for (name, text) in scripts {
      try text.write(toFile: folder + "/\(name).sql", atomically: true, encoding: .utf8)
    }
    _ = try psql(conninfo, "DROP TABLE IF EXISTS scale_lock; CREATE TABLE scale_lock(id bigserial PRIMARY KEY, body text NOT NULL)")
    defer { _ = try? psql(conninfo, "DROP TABLE IF EXISTS scale_lock") }
    let clients = 16
    func rate(_ name: String) throws -> Double {
      _ = try psql(conninfo, "TRUNCATE scale_lock")
      let run = try ChildProcess.run(
        pgbench, ["-n", "-c", String(clients), "-j", "2", "-T", String(seconds), "-f", folder + "/\(name).sql", conninfo],
        timeout: Double(seconds) + 60)
      guard run.succeeded else { throw BenchError("pgbench \(name): \(run.stderr.suffix(400))") }
      // "tps = 4654.419954 (without initial connection time)"
      guard let line = run.stdout.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
        let tps = line.split(separator: " ").dropFirst(2).first.flatMap({ Double($0) })
      else { throw BenchError("pgbench \(name) printed no rate: \(run.stdout.suffix(300))") }
      return tps
    }
    var locks: [BenchScaleResult.Lock] = []
    for fsync in [true, false] {
      try setServerFsync(conninfo, on: fsync)
      let (a, b, c) = (try rate("insert"), try rate("insert-notify"), try rate("insert-then-notify"))
      let lock = BenchScaleResult.Lock(
        fsync: fsync, clients: clients, seconds: Double(seconds), insertPerSecond: a, insertNotifyPerSecond: b,
        insertThenNotifyPerSecond: c, holdMicros: 1e6 / b)
      log(String(format: "scale: the notify lock, fsync %@: INSERT %.0f/s, INSERT+NOTIFY %.0f/s (hold %.0f us), "
                   + "INSERT then NOTIFY apart %.0f/s", fsync ? "on" : "off", a, b, lock.holdMicros, c))
      locks.append(lock)
    }
    try setServerFsync(conninfo, on: false)
    return locks
  }

  /// Debian's pgbench, of the newest PostgreSQL installed.
  func pgbenchPath() throws -> String {
    guard let version = try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql").sorted().last,
      FileManager.default.isExecutableFile(atPath: "/usr/lib/postgresql/\(version)/bin/pgbench")
    else { throw BenchError("pgbench is missing (Debian's postgresql package: make deps-postgres)") }
    return "/usr/lib/postgresql/\(version)/bin/pgbench"
  }
}
