import Foundation
import GroupSyncTestSupport
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

/// A throw-away PostgreSQL primary with a streaming standby, for tests of
/// a relay that loses its server and goes on against the promoted standby.
///
/// Both run on this machine from Debian's packages, as the user `postgres`,
/// in one temporary folder: the primary copied from the ``ClusterTemplate`` into `primary/` on
/// port 5432, the standby copied from it by `pg_basebackup -R -X stream` in
/// `standby/` on port 5433, both listening only on unix sockets in the
/// folder (`listen_addresses=''`), fsync off. A test kills the primary and
/// promotes the standby, after ``waitUntilStandbyCaughtUp(timeout:)`` for a
/// failover that loses nothing, or after ``stopStandby()`` and more commits
/// for one that loses what the standby never received. ``with(_:)`` always
/// stops both and removes the folder, also when the test fails; a watchdog
/// process does the same if the test process itself is killed.
///
/// SQL goes through `psql`, not `PostgresConnection`, so that the pair does
/// not depend on the relay's own client.
///
/// `@unchecked Sendable`: every field is a constant.
final class StandbyPair: @unchecked Sendable {
  /// One of the two servers.
  enum Server: Sendable, CustomStringConvertible {
    case primary, standby

    var port: Int { self == .primary ? 5432 : 5433 }
    var description: String { self == .primary ? "primary" : "standby" }
  }

  /// The folder holding both data directories, their logs and their sockets.
  let folder: String
  private let bin: String

  /// What the relay is given: both servers, libpq taking the first that
  /// accepts writes, so the primary before a failover and the promoted
  /// standby after it (a standby still in recovery is refused).
  var conninfo: String {
    "host=\(folder),\(folder) port=\(Server.primary.port),\(Server.standby.port) user=postgres dbname=postgres "
      + "target_session_attrs=read-write connect_timeout=5"
  }

  /// The primary alone, whatever it is doing.
  var primaryConninfo: String { conninfo(.primary) }
  /// The standby alone, in recovery or promoted.
  var standbyConninfo: String { conninfo(.standby) }

  /// One server alone.
  func conninfo(_ server: Server) -> String {
    "host=\(folder) port=\(server.port) user=postgres dbname=postgres connect_timeout=5"
  }

  /// Runs `body` with a fresh primary and its standby streaming from it,
  /// both stopped and removed whatever happens.
  static func with<T>(_ body: (StandbyPair) async throws -> T) async throws -> T {
    let pair = try StandbyPair()
    do {
      try await Executables.onThread { try pair.start() }
      let result = try await body(pair)
      try await Executables.onThread { pair.destroy() }
      return result
    } catch {
      _ = try? await Executables.onThread { pair.destroy() }
      throw error
    }
  }

  /// Finds the newest server and makes the folder, owned by `postgres` (the
  /// server refuses root), and nothing else: ``start()`` does the rest under
  /// ``with(_:)``, which removes the folder if any of it fails.
  private init() throws {
    bin = try PostgresServer.binFolder()
    folder = ScratchFolder.unique("gs-pgha")
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
  }

  /// Makes and starts the primary, copies it into the standby and starts
  /// that; the watchdog comes first, so a test process killed half way
  /// leaves nothing behind either.
  private func start() throws {
    if getuid() == 0 { try Self.run("/bin/chown", ["postgres", folder]) }
    try startWatchdog()
    // `-A trust` also trusts local replication connections (pg_hba.conf's
    // `local replication all trust`), and wal_level=replica and
    // max_wal_senders=10 are the defaults: the base backup and the
    // streaming need nothing more.
    try ClusterTemplate.copy(to: directory(.primary))
    try startServer(.primary)
    // -R writes primary_conninfo (host=<folder> port=5432) and
    // standby.signal; -c fast, or it waits for a spread checkpoint.
    try asPostgres(
      "\(bin)/pg_basebackup",
      ["-D", directory(.standby), "-R", "-X", "stream", "-c", "fast", "--no-sync",
       "-h", folder, "-p", "\(Server.primary.port)", "-U", "postgres"])
    try startServer(.standby)
  }

  private func directory(_ server: Server) -> String { "\(folder)/\(server)" }

  /// Starts `server` and waits until it accepts connections (a standby:
  /// read-only ones, once it has replayed up to a consistent state).
  private func startServer(_ server: Server) throws {
    // The same settings on both: a standby refuses to run with fewer
    // connections than its primary. wal_keep_size lets a standby stopped
    // for a while catch up again without a replication slot.
    try asPostgres(
      "\(bin)/pg_ctl",
      ["-D", directory(server), "-l", "\(folder)/\(server).log", "-w", "-t", "60", "-o",
       "-c listen_addresses='' -k \(folder) -p \(server.port) -c fsync=off -c max_connections=60 "
         + "-c wal_keep_size=128MB",
       "start"])
  }

  /// A shell that outlives a killed test process: once that process is
  /// gone (and the folder is still there), it stops both servers and
  /// removes the folder. It ends on its own when the folder goes.
  private func startWatchdog() throws {
    let script = """
      while [ -d /proc/\(getpid()) ] && [ -d \(folder) ]; do sleep 1; done
      [ -d \(folder) ] || exit 0
      \(bin)/pg_ctl -D \(directory(.standby)) -m immediate -w stop >/dev/null 2>&1
      \(bin)/pg_ctl -D \(directory(.primary)) -m immediate -w stop >/dev/null 2>&1
      rm -rf \(folder)
      """
    try PostgresServer.startWatchdog(script, asPostgres: true)
  }

  private func destroy() {
    for server in [Server.standby, .primary] {
      _ = try? asPostgres("\(bin)/pg_ctl", ["-D", directory(server), "-m", "immediate", "-w", "stop"])
    }
    try? FileManager.default.removeItem(atPath: folder)
  }

  /// The rows `sql` returns on `server`, each a list of its values as text
  /// (NULL as ""); no rows for a statement that returns none.
  ///
  /// - Throws: ``RelayTestFailure`` with psql's message when the server is
  ///   not there or the statement fails.
  func query(_ sql: String, on server: Server) throws -> [[String]] {
    try query(sql, conninfo: conninfo(server))
  }

  /// The rows `sql` returns on whichever server `conninfo` reaches: with
  /// ``conninfo`` (`SHOW port`), which of the two a client of the relay's
  /// would be talking to.
  func query(_ sql: String, conninfo: String) throws -> [[String]] {
    // Rows end with a NUL and values are split by the unit separator, so
    // values may hold newlines and `|`; psql prints no end for no rows.
    let output = try Self.run(
      "\(bin)/psql",
      ["-X", "-A", "-t", "-q", "-0", "-F", "\u{1F}", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql],
      timeout: 60)
    return output.split(separator: "\0", omittingEmptySubsequences: false).dropLast()
      .map { $0.split(separator: "\u{1F}", omittingEmptySubsequences: false).map(String.init) }
  }

  /// Waits until the standby has replayed everything the primary wrote by
  /// the time of the call, so that a failover now loses nothing.
  ///
  /// - Throws: ``RelayTestFailure`` when it has not within `timeout` seconds.
  func waitUntilStandbyCaughtUp(timeout: Double = 30) async throws {
    guard let lsn = try query("SELECT pg_current_wal_lsn()", on: .primary).first?.first else {
      throw RelayTestFailure("no WAL position from the primary")
    }
    let deadline = Date().addingTimeInterval(timeout)
    var last = ""
    while true {
      do {
        let rows = try query("SELECT pg_last_wal_replay_lsn(), pg_last_wal_replay_lsn() >= '\(lsn)'", on: .standby)
        if rows.first?.last == "t" { return }
        last = "replayed up to \(rows.first?.first ?? "?")"
      } catch {
        // A standby still starting up refuses connections for a moment.
        last = "\(error)"
      }
      if Date() >= deadline {
        throw RelayTestFailure("the standby did not reach the primary's \(lsn) within \(timeout) s: \(last)")
      }
      try await Task.sleep(for: .milliseconds(20))
    }
  }

  /// Stops the standby cleanly (`-m fast`), so that what the primary
  /// commits from now on never reaches it.
  func stopStandby() throws {
    try asPostgres("\(bin)/pg_ctl", ["-D", directory(.standby), "-m", "fast", "-w", "stop"])
  }

  /// Starts the standby again, still in recovery: it streams from the
  /// primary if that is up, or waits for it (retrying every 5 s) if not.
  func startStandby() throws {
    try startServer(.standby)
  }

  /// Makes the primary vanish at once, as a crash would: `-m immediate`
  /// ends every backend without a checkpoint or a last word to the
  /// standby, and removes its socket, so clients fail at once (SIGKILL of
  /// the postmaster alone would leave its backends and socket behind).
  func killPrimary() throws {
    try asPostgres("\(bin)/pg_ctl", ["-D", directory(.primary), "-m", "immediate", "-w", "stop"])
  }

  /// Promotes the standby and waits until it takes writes: `pg_ctl
  /// promote -w` waits for the end of recovery in its control file, then
  /// `pg_is_in_recovery()` must say so too.
  ///
  /// - Throws: ``RelayTestFailure`` when it is still in recovery after
  ///   `timeout` seconds.
  func promoteStandby(timeout: Double = 30) async throws {
    try asPostgres(
      "\(bin)/pg_ctl", ["-D", directory(.standby), "-w", "-t", "\(Int(timeout.rounded(.up)))", "promote"])
    let deadline = Date().addingTimeInterval(timeout)
    while try query("SELECT pg_is_in_recovery()", on: .standby).first?.first != "f" {
      if Date() >= deadline {
        throw RelayTestFailure("the standby was still in recovery \(timeout) s after its promotion")
      }
      try await Task.sleep(for: .milliseconds(20))
    }
  }

  @discardableResult
  private func asPostgres(_ program: String, _ arguments: [String]) throws -> String {
    if getuid() == 0 { return try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments) }
    return try Self.run(program, arguments)
  }

  @discardableResult
  private static func run(_ program: String, _ arguments: [String], timeout: Double = 90) throws -> String {
    let child = try ChildProcess(executable: program, arguments: arguments)
    let result = child.finish(timeout: timeout)
    guard result.succeeded else {
      throw RelayTestFailure(
        "\(program) \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
    }
    return result.stdout
  }
}
