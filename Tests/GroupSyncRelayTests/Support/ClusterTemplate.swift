import Foundation
import GroupSyncTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// One PostgreSQL data directory made by `initdb` once per test process and
/// copied for every throw-away server (``PostgresServer``, ``StandbyPair``):
/// `initdb` takes a second or more, a copy a tenth of that. WAL segments of
/// 1 MB (not 16) keep the copy small.
///
/// The template lives in `gs-pg-template-PID` in ``ScratchFolder/root`` and is removed when
/// this process exits, or by a watchdog once it is gone (a crash).
enum ClusterTemplate {
  /// Copies the template's data directory to `destination` (which must not
  /// exist), owned by the user postgres like the template. The first call
  /// makes the template; calls from other threads wait for it.
  static func copy(to destination: String) throws {
    let source = try made.get()
    // As root, `cp -a` keeps the owner (postgres); otherwise both are ours.
    try PostgresServer.run("/bin/cp", ["-a", source, destination])
  }

  private static let folder = "\(ScratchFolder.root)/gs-pg-template-\(getpid())"

  private static let made: Result<String, any Error> = Result {
    let bin = try PostgresServer.binFolder()
    let folder = Self.folder
    try? FileManager.default.removeItem(atPath: folder)
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    // Removed at exit too: `make test` ends each phase by killing what its
    // session left running, the watchdog included.
    atexit { try? FileManager.default.removeItem(atPath: ClusterTemplate.folder) }
    try PostgresServer.startWatchdog(
      """
      while [ -d /proc/\(getpid()) ]; do sleep 1; done
      rm -rf \(folder)
      """, asPostgres: false)
    if getuid() == 0 { try PostgresServer.run("/bin/chown", ["postgres", folder]) }
    let data = folder + "/data"
    let initdb = ["\(bin)/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--wal-segsize=1"]
    if getuid() == 0 {
      try PostgresServer.run("/usr/sbin/runuser", ["-u", "postgres", "--"] + initdb)
    } else {
      try PostgresServer.run(initdb[0], Array(initdb.dropFirst()))
    }
    return data
  }
}
