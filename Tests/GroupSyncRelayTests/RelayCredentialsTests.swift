import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// Credentials never on a command line: the relay takes its password from
/// libpq's password file or a connection file only its owner can read,
/// refuses one on the command line, and prints it nowhere.
@Suite(.timed)
struct RelayCredentialsTests {
  // MARK: Connecting with a password

  /// Host a has no --postgres at all (libpq's PG* environment and a
  /// PGPASSFILE), host b a --postgres-file holding the password: a row
  /// crosses, and the password shows in no output of either.
  @Test func passwordFromPasswordFileAndConnectionFile() async throws {
    let password = "Sesame-\(UUID().uuidString.prefix(8))"
    try await PostgresServer.with(options: .init(password: password, tcp: true)) { server in
      let root = try HostsFolder()
      let passwordFile = root.path + "/pgpass"
      try writePrivate("127.0.0.1:\(server.port):*:postgres:\(password)\n", to: passwordFile)
      let connectionFile = root.path + "/b.conninfo"
      try writePrivate(
        """
        # The shared database: PostgreSQL on this machine.
          host=127.0.0.1 port=\(server.port)
        user=postgres dbname=postgres password=\(password)

        """, to: connectionFile)
      let a = try await GroupHost("a", root: root.path, conninfo: "")
      a.postgresArguments = []
      let b = try await GroupHost("b", root: root.path, conninfo: "")
      b.postgresArguments = ["--postgres-file", connectionFile]
      try await a.startRelay(environment: [
        "PGHOST": "127.0.0.1", "PGPORT": String(server.port), "PGUSER": "postgres", "PGDATABASE": "postgres",
        "PGPASSFILE": passwordFile,
      ])
      try await b.startRelay()
      try await a.exec(["INSERT INTO note(title, body) VALUES ('across', 'by password')"])
      try await waitForConvergence([a, b], server: server)
      #expect(try b.rows("SELECT title, body FROM note") == ["across|by password"])
      // Both sessions came over TCP, where the server asks the password.
      let sessions = try server.query(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'groupsync-relay %' AND client_addr IS NOT NULL")
      #expect(sessions.first?[0] == "2")
      try await expectNowhere(password, hosts: [a, b])
      try await a.stopRelay()
      try await b.stopRelay()
      try await expectNowhere(password, hosts: [a, b])
    }
  }

  /// A wrong password (from a PGPASSFILE, and from a connection file as a
  /// URI) is reported as the server's refusal; neither relay connects,
  /// and the wrong password shows nowhere either.
  @Test func wrongPasswordIsReportedAndNotPrinted() async throws {
    let wrong = "Wrong-\(UUID().uuidString.prefix(8))"
    try await PostgresServer.with(options: .init(password: "Right-\(UUID().uuidString.prefix(8))", tcp: true)) {
      server in
      let root = try HostsFolder()
      let passwordFile = root.path + "/pgpass"
      try writePrivate("*:*:*:*:\(wrong)\n", to: passwordFile)
      let connectionFile = root.path + "/b.conninfo"
      try writePrivate("postgresql://postgres:\(wrong)@127.0.0.1:\(server.port)/postgres\n", to: connectionFile)
      let a = try await GroupHost("a", root: root.path, conninfo: "host=127.0.0.1 port=\(server.port) user=postgres")
      let b = try await GroupHost("b", root: root.path, conninfo: "")
      b.postgresArguments = ["--postgres-file", connectionFile]
      try await a.startRelay(environment: ["PGPASSFILE": passwordFile], waitConnected: false)
      try await b.startRelay(waitConnected: false)
      for host in [a, b] {
        // `groupsync status` shows the relay's last error: on a busy
        // machine a later try may end otherwise (no answer in time), so
        // the status is read until it shows the refusal.
        try await waitUntil("relay \(host.name) reports the refused password in its events and status", timeout: .seconds(60)) {
          let status = try Executables.runSync(["status", host.folder])
          return host.eventLines.contains { $0.contains("password authentication failed") }
            && status.contains("last error: ") && status.contains("password authentication failed")
        }
        #expect(!host.eventLines.contains { $0.contains("\"connected\"") })
      }
      try await expectNowhere(wrong, hosts: [a, b])
      try await a.stopRelay()
      try await b.stopRelay()
      try await expectNowhere(wrong, hosts: [a, b])
    }
  }

  // MARK: Refusals (before anything connects)

  @Test func connectionFileOpenToOthersIsRefused() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let file = root.path + "/relay.conninfo"
    try writePrivate(Self.unreachable, to: file)
    for mode: mode_t in [0o644, 0o640, 0o604, 0o620] {
      #expect(chmod(file, mode) == 0)
      let result = try await relay([host.folder, "--postgres-file", file])
      #expect(result.status == 1 && !result.timedOut, "mode \(String(mode, radix: 8))")
      #expect(result.stderr.contains("connection file \(file) has mode 0\(String(mode, radix: 8)), which lets its group"))
      #expect(result.stderr.contains("chmod 600 \(file)"))
    }
  }

  @Test func missingConnectionFileIsRefused() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let file = root.path + "/absent.conninfo"
    let result = try await relay([host.folder, "--postgres-file", file])
    #expect(result.status == 1 && !result.timedOut)
    #expect(result.stderr.contains("connection file \(file): cannot open it (No such file or directory)"))
  }

  @Test func directoryAsConnectionFileIsRefused() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let directory = root.path + "/conninfo.d"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
    #expect(chmod(directory, 0o700) == 0)
    let result = try await relay([host.folder, "--postgres-file", directory])
    #expect(result.status == 1 && !result.timedOut)
    #expect(result.stderr.contains("connection file \(directory): not a regular file (a directory)"))
  }

  @Test func emptyConnectionFileIsRefused() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let file = root.path + "/empty.conninfo"
    try writePrivate("# nothing yet\n\n", to: file)
    let result = try await relay([host.folder, "--postgres-file", file])
    #expect(result.status == 1 && !result.timedOut)
    #expect(result.stderr.contains("connection file \(file) holds no connection string"))
  }

  /// `--postgres` with a password, as a keyword or in a URI (its user
  /// information or its query), through `groupsync-relay` and through
  /// `groupsync relay`: refused as a usage error that says where the
  /// password goes, and does not repeat it.
  @Test func passwordOnCommandLineIsRefused() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let secret = "Sesame-\(UUID().uuidString.prefix(8))"
    let conninfos = [
      "host=/nonexistent-gs-socket port=1 user=app password=\(secret)",
      "host=/nonexistent-gs-socket port=1 user=app password='\(secret) with spaces'",
      "postgresql://app:\(secret)@localhost:1/app",
      "postgres://app@localhost:1/app?password=\(secret)",
    ]
    for conninfo in conninfos {
      for viaGroupsync in [false, true] {
        let result = try await relay([host.folder, "--postgres", conninfo], viaGroupsync: viaGroupsync)
        #expect(result.status == 64 && !result.timedOut, "\(conninfo)")
        #expect(result.stderr.contains("--postgres holds a password"), "\(conninfo)")
        #expect(result.stderr.contains("~/.pgpass") && result.stderr.contains("--postgres-file"))
        #expect(!result.stderr.contains(secret) && !result.stdout.contains(secret))
      }
    }
  }

  /// A connection string libpq cannot parse is refused; libpq's reason,
  /// which quotes the string, does not repeat a password in it.
  @Test func unparsableConnectionStringDoesNotEchoPassword() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let secret = "Sesame-\(UUID().uuidString.prefix(8))"
    for conninfo in ["postgresql://app:\(secret)@[::1/app", "host=db password=\(secret) \(secret)x"] {
      let result = try await relay([host.folder, "--postgres", conninfo])
      #expect(result.status == 64 && !result.timedOut, "\(result.stderr)")
      #expect(result.stderr.contains("the PostgreSQL connection string"))
      #expect(!result.stderr.contains(secret))
    }
    // The same from a connection file, refused when the relay starts.
    let file = root.path + "/relay.conninfo"
    try writePrivate("postgresql://app:\(secret)@[::1/app", to: file)
    let result = try await relay([host.folder, "--postgres-file", file])
    #expect(result.status == 1 && !result.timedOut)
    #expect(result.stderr.contains("the PostgreSQL connection string") && !result.stderr.contains(secret))
  }

  @Test func bothConnectionOptionsAreRefused() async throws {
    let root = try HostsFolder()
    let host = try await GroupHost("a", root: root.path, conninfo: "")
    let file = root.path + "/relay.conninfo"
    try writePrivate(Self.unreachable, to: file)
    let result = try await relay([host.folder, "--postgres", Self.unreachable, "--postgres-file", file])
    #expect(result.status == 64 && !result.timedOut)
    #expect(result.stderr.contains("--postgres and --postgres-file: give one or the other"))
  }

  @Test func redactedConnectionString() throws {
    #expect(
      ConnectionString.redacted("postgresql://app:s3cret@db:5433/app?sslmode=verify-full")
        == "user='app' password='***' dbname='app' host='db' port='5433' sslmode='verify-full'")
    #expect(ConnectionString.redacted("host=db password='it\\'s' user=o\\'k") == "user='o\\'k' password='***' host='db'")
    #expect(ConnectionString.redacted("host=db password") == "(unparsable)")
    #expect(try ConnectionString.holdsPassword("host=db password=x"))
    #expect(try !ConnectionString.holdsPassword("host=db passfile=/run/pgpass"))
    #expect(try !ConnectionString.holdsPassword(""))
  }

  /// A connection file in the library: comment lines skipped, lines
  /// joined, a symbolic link followed to the file it names (whose mode
  /// counts), a FIFO refused without hanging.
  @Test func connectionFileReading() throws {
    let root = try HostsFolder()
    let file = root.path + "/relay.conninfo"
    try writePrivate("  # shared database\n\thost=db port=5433\n# password=old\n dbname=app  \n", to: file)
    #expect(try ConnectionString.read(fromFile: file) == "host=db port=5433 dbname=app")
    let link = root.path + "/link.conninfo"
    try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
    #expect(try ConnectionString.read(fromFile: link) == "host=db port=5433 dbname=app")
    #expect(chmod(file, 0o640) == 0)
    #expect(throws: RelayError.self) { try ConnectionString.read(fromFile: link) }
    let fifo = root.path + "/fifo.conninfo"
    #expect(mkfifo(fifo, 0o600) == 0)
    #expect {
      try ConnectionString.read(fromFile: fifo)
    } throws: { error in
      "\(error)".contains("connection file \(fifo): not a regular file (a FIFO)")
    }
  }

  /// libpq's reason for an unparsable string keeps what it quotes unless
  /// that may be (part of) a password.
  @Test func parseFailuresKeepNoPassword() throws {
    func failure(_ conninfo: String) -> String {
      do {
        _ = try ConnectionString.holdsPassword(conninfo)
        return "parsed"
      } catch {
        return "\(error)"
      }
    }
    // A misspelt keyword before the password is named.
    #expect(failure("hots=db password=hunter2").hasSuffix("invalid connection option \"hots\""))
    for (conninfo, secret) in [
      ("host=db password=hunter2 hunter3", "hunter"),
      ("host=db password=abc def=x", "def"),
      ("host=db PassWord='Sesame7", "Sesame7"),
      ("postgresql://app:s3cret@[::1/app", "s3cret"),
      ("postgresql://app@db/app?pass%77ord=s3cret&x", "s3cret"),
      ("postgresql://app:s3\"cret@[::1/app", "cret"),
    ] {
      let text = failure(conninfo)
      #expect(text.contains("the PostgreSQL connection string: "), "\(conninfo): \(text)")
      #expect(!text.contains(secret), "\(conninfo): \(text)")
    }
  }

  // MARK: Helpers

  /// A connection string no server answers (a socket folder that does
  /// not exist), so a relay that started would go on retrying.
  static let unreachable = "host=/nonexistent-gs-socket port=1 user=app dbname=app connect_timeout=2"

  /// Runs the relay with `arguments` (through `groupsync relay` when
  /// `viaGroupsync`) until it exits; one that does not within 10 s is
  /// stopped and its result says it timed out.
  private func relay(_ arguments: [String], viaGroupsync: Bool = false) async throws -> ChildProcess.Result {
    try await Executables.onThread {
      let child = try viaGroupsync
        ? ChildProcess(executable: Executables.groupsync, arguments: ["relay"] + arguments)
        : ChildProcess(executable: Executables.relay, arguments: arguments)
      return child.finish(timeout: 120)
    }
  }
}

/// Writes `text` to a new file at `path` that only its owner can read
/// (mode 0600, as libpq wants a password file).
func writePrivate(_ text: String, to path: String) throws {
  guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
  else { throw RelayTestFailure("cannot create \(path)") }
}

/// Requires that `secret` appears in nothing the hosts' relays printed
/// (event lines, stderr), in no relay status file of their folders, and
/// in no output of `groupsync status` (text and JSON).
func expectNowhere(_ secret: String, hosts: [GroupHost]) async throws {
  for host in hosts {
    #expect(!host.eventLines.isEmpty, "relay \(host.name) printed no event")
    for line in host.eventLines { #expect(!line.contains(secret), "event of \(host.name): \(line)") }
    #expect(!host.errorOutput.contains(secret), "stderr of \(host.name)")
    let relays = host.folder + "/relays"
    let names = try FileManager.default.contentsOfDirectory(atPath: relays).filter { $0.hasSuffix(".json") }
    #expect(!names.isEmpty, "no status file under \(relays)")
    for name in names {
      let text = try String(contentsOfFile: relays + "/" + name, encoding: .utf8)
      #expect(!text.contains(secret), "status file \(relays)/\(name)")
    }
    let text = try await Executables.groupsync(["status", host.folder])
    #expect(text.contains("relay     \(host.name) (group app)"), "groupsync status shows no relay: \(text)")
    #expect(!text.contains(secret), "groupsync status: \(text)")
    let json = try await Executables.groupsync(["status", host.folder, "--json"])
    #expect(json.contains("\"relays\""), "groupsync status --json shows no relay: \(json)")
    #expect(!json.contains(secret), "groupsync status --json: \(json)")
  }
}
