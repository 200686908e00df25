import Foundation
import GroupSyncTestSupport
import GroupSyncProcess
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// A throw-away PostgreSQL server from Debian's packages: a cluster copied
/// from the process's ``ClusterTemplate`` into a temporary folder,
/// listening only on a unix socket in that folder (`listen_addresses=''`),
/// run as the user `postgres` (the server refuses root), fsync off.
/// ``with(_:)`` always stops it and removes the folder, also when the test
/// fails; a watchdog process does the same if the test process itself is
/// killed.
///
/// With ``Options`` it also listens on TCP, on 127.0.0.1 only (a free
/// port), asking a password there and optionally TLS; the unix socket
/// stays open without a password for the test's own checks.
final class PostgresServer: @unchecked Sendable {
  /// How the server listens beside its unix socket.
  struct Options: Sendable {
    /// The password of the user `postgres`, asked (scram-sha-256) of
    /// every TCP connection; nil: TCP connections are trusted.
    var password: String?
    /// Listen on 127.0.0.1 too, on a free port (``port``).
    var tcp = false
    /// The server's certificate and key (PEM files, copied into the
    /// server's folder): TCP connections must then use TLS.
    var tls: (certificate: String, key: String)?

    init(password: String? = nil, tcp: Bool = false, tls: (certificate: String, key: String)? = nil) {
      self.password = password
      self.tcp = tcp || tls != nil
      self.tls = tls
    }
  }

  let folder: String
  /// The unix socket's port, and the TCP port when ``Options/tcp``.
  private(set) var port: Int
  let options: Options
  private let bin: String

  var conninfo: String { "host=\(folder) port=\(port) user=postgres dbname=postgres connect_timeout=5" }

  /// What relays started by ``GroupHost/init(_:root:server:schema:)``
  /// connect with: ``conninfo``, or under `GROUPSYNC_TEST_TRANSPORT=poll`
  /// a ``PgBouncer`` in transaction mode in front of the server.
  private(set) var relayConninfo: String?

  /// The transport the tests' relays use: `GROUPSYNC_TEST_TRANSPORT`
  /// (`make test` runs the relay's delivery, catch-up, conflict, failover
  /// and network suites once more with `poll`), else notify.
  static let testTransport = ProcessInfo.processInfo.environment["GROUPSYNC_TEST_TRANSPORT"] ?? "notify"

  /// Runs `body` with a fresh server, stopped whatever happens.
  static func with<T>(_ body: (PostgresServer) async throws -> T) async throws -> T {
    try await with(options: Options(), body)
  }

  /// Runs `body` with a fresh server listening as `options` say, stopped
  /// whatever happens.
  static func with<T>(options: Options, _ body: (PostgresServer) async throws -> T) async throws -> T {
    // Made, started and stopped on a thread of its own: the cooperative
    // pool's few threads stay free for the tests running beside this one.
    let server = try await Executables.onThread { try PostgresServer(options: options) }
    do {
      try await Executables.onThread { try server.start() }
      let result =
        if testTransport == "poll" {
          try await PgBouncer.with(server) { bouncer in
            server.relayConninfo = bouncer.conninfo
            return try await body(server)
          }
        } else {
          try await body(server)
        }
      try await Executables.onThread { server.destroy() }
      return result
    } catch {
      _ = try? await Executables.onThread { server.destroy() }
      throw error
    }
  }

  private init(options: Options) throws {
    self.options = options
    port = options.tcp ? try Self.freePort() : 5432
    bin = try Self.binFolder()
    folder = ScratchFolder.unique("gs-pg")
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    if getuid() == 0 { try Self.run("/bin/chown", ["postgres", folder]) }
    try ClusterTemplate.copy(to: "\(folder)/data")
    if options.tcp { try configureTCP() }
  }

  /// Starts the server and waits until it accepts connections. A TCP port
  /// is free when picked but may be taken before the server binds it (by
  /// another test's server, or a connection's own end): the server then
  /// starts again on another, up to three times. A failure says what the
  /// server's log says.
  func start() throws {
    for attempt in 1... {
      do {
        try startOnce()
        break
      } catch {
        let log = (try? String(contentsOfFile: "\(folder)/server.log", encoding: .utf8)) ?? ""
        if options.tcp, attempt < 3, log.contains("could not bind") || log.contains("already in use") {
          port = try Self.freePort()
          continue
        }
        throw RelayTestFailure("\(error)\nserver.log: \(log.suffix(2000))")
      }
    }
    try startWatchdog()
    if let password = options.password {
      // Stored as a scram-sha-256 verifier (the server's default).
      _ = try query("ALTER ROLE postgres PASSWORD '\(password.replacingOccurrences(of: "'", with: "''"))'")
    }
  }

  private func startOnce() throws {
    // TCP on 127.0.0.1 alone: never another address of the machine.
    let addresses = options.tcp ? "127.0.0.1" : "''"
    var settings = "-c listen_addresses=\(addresses) -k \(folder) -p \(port) -c fsync=off -c max_connections=60"
    if options.tls != nil {
      settings += " -c ssl=on -c ssl_cert_file=\(folder)/server.crt -c ssl_key_file=\(folder)/server.key"
    }
    try asPostgres(
      "\(bin)/pg_ctl",
      ["-D", "\(folder)/data", "-l", "\(folder)/server.log", "-w", "-t", "60", "-o", settings, "start"])
  }

  /// Who may connect over TCP (pg_hba.conf), and the TLS files, which the
  /// server reads only if they are the user postgres's alone.
  private func configureTCP() throws {
    let method = options.password == nil ? "trust" : "scram-sha-256"
    var rules = "local all all trust\n"
    if options.tls != nil {
      rules += "hostssl all all 127.0.0.1/32 \(method)\nhostnossl all all 127.0.0.1/32 reject\n"
    } else {
      rules += "host all all 127.0.0.1/32 \(method)\n"
    }
    try rules.write(toFile: "\(folder)/data/pg_hba.conf", atomically: false, encoding: .utf8)
    guard let tls = options.tls else { return }
    for (source, name) in [(tls.certificate, "server.crt"), (tls.key, "server.key")] {
      let path = "\(folder)/\(name)"
      try FileManager.default.copyItem(atPath: source, toPath: path)
      guard chmod(path, 0o600) == 0 else { throw RelayTestFailure("chmod \(path): errno \(errno)") }
      if getuid() == 0 { try Self.run("/bin/chown", ["postgres", path]) }
    }
  }

  /// A TCP port on 127.0.0.1 that nothing listens on (the kernel's pick;
  /// free again once the probe socket closes).
  private static func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw RelayTestFailure("socket: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
        bind(fd, address, length) == 0 && getsockname(fd, address, &length) == 0
      }
    }
    guard bound else { throw RelayTestFailure("bind 127.0.0.1:0: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
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
