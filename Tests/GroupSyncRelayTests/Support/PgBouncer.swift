import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A throw-away PgBouncer (Debian's, 1.18) in transaction pooling mode in
/// front of a ``PostgresServer``: a unix socket in a folder of its own
/// only, every client logged in as the server's user `postgres`
/// (`auth_type = any`), at most `poolSize` server connections. Run as the
/// user `postgres` (PgBouncer refuses root). ``with(_:poolSize:maxClients:_:)``
/// always stops it and removes its folder; a watchdog does the same if the
/// test process is killed.
final class PgBouncer: @unchecked Sendable {
  let folder: String
  static let port = 6432

  /// What a relay connects with.
  var conninfo: String { "host=\(folder) port=\(Self.port) user=postgres dbname=postgres connect_timeout=5" }

  /// Runs `body` with a PgBouncer in front of `server`, stopped whatever
  /// happens.
  static func with<T>(
    _ server: PostgresServer, poolSize: Int = 4, maxClients: Int = 200, _ body: (PgBouncer) async throws -> T
  ) async throws -> T {
    try await with(host: server.folder, port: server.port, poolSize: poolSize, maxClients: maxClients, body)
  }

  /// Runs `body` with a PgBouncer in front of the server on the socket
  /// folder `host` and `port`, stopped whatever happens.
  static func with<T>(
    host: String, port: Int, poolSize: Int = 4, maxClients: Int = 200, _ body: (PgBouncer) async throws -> T
  ) async throws -> T {
    let bouncer = try await Executables.onThread {
      try PgBouncer(host: host, port: port, poolSize: poolSize, maxClients: maxClients)
    }
    do {
      let result = try await body(bouncer)
      try await Executables.onThread { bouncer.destroy() }
      return result
    } catch {
      _ = try? await Executables.onThread { bouncer.destroy() }
      throw error
    }
  }

  private let poolSize: Int
  private let maxClients: Int
  private let process: ChildProcess

  private init(host: String, port: Int, poolSize: Int, maxClients: Int) throws {
    self.poolSize = poolSize
    self.maxClients = maxClients
    guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/pgbouncer") else {
      throw RelayTestFailure("no /usr/sbin/pgbouncer (make test installs pgbouncer)")
    }
    folder = ScratchFolder.unique("gs-pgb")
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    if getuid() == 0 { try PostgresServer.run("/bin/chown", ["postgres", folder]) }
    try Self.writeConfiguration(folder: folder, host: host, port: port, poolSize: poolSize, maxClients: maxClients)
    // In the foreground, so that its own word says when it listens.
    let configuration = "\(folder)/pgbouncer.ini"
    let (program, arguments) =
      getuid() == 0
      ? ("/usr/sbin/runuser", ["-u", "postgres", "--", "/usr/sbin/pgbouncer", configuration])
      : ("/usr/sbin/pgbouncer", [configuration])
    process = try ChildProcess(executable: program, arguments: arguments, name: "pgbouncer")
    let watchdog = """
      while [ -d /proc/\(getpid()) ] && [ -f \(folder)/pgbouncer.ini ]; do sleep 1; done
      [ -f \(folder)/pgbouncer.ini ] || exit 0
      kill -9 $(cat \(folder)/pgbouncer.pid) 2>/dev/null
      rm -rf \(folder)
      """
    try PostgresServer.startWatchdog(watchdog, asPostgres: true)
    do {
      try process.waitForStderr(containing: "listening on unix:", timeout: 30)
    } catch {
      throw RelayTestFailure("PgBouncer did not start: \(error)")
    }
  }

  /// Points the pooler at another server (a failover, which the clients
  /// do not see: their connections to the pooler stay) and reloads it.
  func retarget(host: String, port: Int) throws {
    try Self.writeConfiguration(folder: folder, host: host, port: port, poolSize: poolSize, maxClients: maxClients)
    guard let pid else { throw RelayTestFailure("PgBouncer has no pid file") }
    kill(pid, SIGHUP)
  }

  // idle_transaction_timeout: what the relay's session setting does
  // without a pooler (a host cut off mid-shipment holds no row long).
  private static func writeConfiguration(
    folder: String, host: String, port: Int, poolSize: Int, maxClients: Int
  ) throws {
    let configuration = """
      [databases]
      postgres = host=\(host) port=\(port) dbname=postgres user=postgres
      [pgbouncer]
      listen_addr =
      listen_port = \(Self.port)
      unix_socket_dir = \(folder)
      auth_type = any
      pool_mode = transaction
      default_pool_size = \(poolSize)
      max_client_conn = \(maxClients)
      idle_transaction_timeout = 10
      ignore_startup_parameters = extra_float_digits,options
      logfile = \(folder)/pgbouncer.log
      pidfile = \(folder)/pgbouncer.pid
      """
    try configuration.write(toFile: "\(folder)/pgbouncer.ini", atomically: true, encoding: .utf8)
  }

  private var pid: Int32? {
    (try? String(contentsOfFile: "\(folder)/pgbouncer.pid", encoding: .utf8))
      .flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
  }

  private func destroy() {
    if let pid { kill(pid, SIGKILL) }
    _ = process.finish(timeout: 10)
    try? FileManager.default.removeItem(atPath: folder)
  }
}
