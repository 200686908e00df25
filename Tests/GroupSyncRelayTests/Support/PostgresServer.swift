import Foundation
import GroupSyncProcess
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// A throw-away PostgreSQL server from Debian's packages: a cluster made
/// by `initdb` in a temporary folder, listening only on a unix socket in
/// that folder (`listen_addresses=''`), run as the user `postgres` (the
/// server refuses root), fsync off. ``with(_:)`` always stops it and
/// removes the folder, also when the test fails; a watchdog process does
/// the same if the test process itself is killed.
final class PostgresServer: @unchecked Sendable {
  let folder: String
  let port = 5432
  private let bin: String

  var conninfo: String { "host=\(folder) port=\(port) user=postgres dbname=postgres connect_timeout=5" }

  /// Runs `body` with a fresh server, stopped whatever happens.
  static func with<T>(_ body: (PostgresServer) async throws -> T) async throws -> T {
    let server = try PostgresServer()
    do {
      try server.start()
      let result = try await body(server)
      server.destroy()
      return result
    } catch {
      server.destroy()
      throw error
    }
  }

  private init() throws {
    bin = try Self.binFolder()
    folder = "/tmp/gs-pg-\(UUID().uuidString.prefix(8))"
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    if getuid() == 0 { try Self.run("/bin/chown", ["postgres", folder]) }
    try asPostgres("\(bin)/initdb", ["-D", "\(folder)/data", "-A", "trust", "-U", "postgres", "--no-sync"])
  }

  /// Starts the server and waits until it accepts connections.
  func start() throws {
    try asPostgres(
      "\(bin)/pg_ctl",
      ["-D", "\(folder)/data", "-l", "\(folder)/server.log", "-w", "-t", "60", "-o",
       "-c listen_addresses='' -k \(folder) -p \(port) -c fsync=off -c max_connections=60", "start"])
    try startWatchdog()
  }

  /// A shell that outlives a killed test process: once that process is
  /// gone (and the folder is still there), it stops the server and
  /// removes the folder. It ends on its own when the folder goes.
  private func startWatchdog() throws {
    let script = """
      while [ -d /proc/\(getpid()) ] && [ -d \(folder)/data ]; do sleep 1; done
      [ -d \(folder)/data ] || exit 0
      \(bin)/pg_ctl -D \(folder)/data -m immediate -w stop >/dev/null 2>&1
      rm -rf \(folder)
      """
    try Self.startWatchdog(script, asPostgres: true)
  }

  /// The newest server's programs (Debian's /usr/lib/postgresql/N/bin).
  static func binFolder() throws -> String {
    let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
    guard let version = versions.sorted(by: { $0.compare($1, options: .numeric) == .orderedAscending }).last,
      FileManager.default.isExecutableFile(atPath: "/usr/lib/postgresql/\(version)/bin/pg_basebackup")
    else {
      throw RelayTestFailure("no PostgreSQL server under /usr/lib/postgresql (make test installs postgresql)")
    }
    return "/usr/lib/postgresql/\(version)/bin"
  }

  /// Starts `script` in a shell of its own that outlives a killed test
  /// process (as the user postgres when `asPostgres` and root), its
  /// output discarded.
  static func startWatchdog(_ script: String, asPostgres: Bool) throws {
    let watchdog = Process()
    if asPostgres && getuid() == 0 {
      watchdog.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
      watchdog.arguments = ["-u", "postgres", "--", "/bin/sh", "-c", script]
    } else {
      watchdog.executableURL = URL(fileURLWithPath: "/bin/sh")
      watchdog.arguments = ["-c", script]
    }
    watchdog.standardInput = FileHandle.nullDevice
    watchdog.standardOutput = FileHandle.nullDevice
    watchdog.standardError = FileHandle.nullDevice
    try watchdog.run()
  }

  /// Stops the server at once, as a crash would (`-m immediate`).
  func crash() throws {
    try asPostgres("\(bin)/pg_ctl", ["-D", "\(folder)/data", "-m", "immediate", "-w", "stop"])
  }

  private func destroy() {
    _ = try? asPostgres("\(bin)/pg_ctl", ["-D", "\(folder)/data", "-m", "immediate", "-w", "stop"])
    try? FileManager.default.removeItem(atPath: folder)
  }

  /// A connection of the test's own (for checks on the log tables).
  func connect() throws -> PostgresConnection { try PostgresConnection(conninfo: conninfo) }

  /// One query's rows.
  func query(_ sql: String, _ parameters: [String?] = []) throws -> [[String?]] {
    try connect().execute(sql, parameters)
  }

  @discardableResult
  private func asPostgres(_ program: String, _ arguments: [String]) throws -> String {
    if getuid() == 0 { return try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments) }
    return try Self.run(program, arguments)
  }

  @discardableResult
  static func run(_ program: String, _ arguments: [String]) throws -> String {
    let child = try ChildProcess(executable: program, arguments: arguments)
    let result = child.finish(timeout: 90)
    guard result.succeeded else {
      throw RelayTestFailure("\(program) \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
    }
    return result.stdout
  }
}

struct RelayTestFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}
