import Foundation
import GRDB
import GroupSync
import GroupSyncProcess
import GroupSyncTestSupport
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// The project's executables, as the tests start them: beside the test
/// bundle, else in the package's .build/debug ($GROUPSYNC_BIN names the
/// `groupsync` to use, as in the core tests; `groupsync-relay` is beside).
enum Executables {
  static let groupsync = ChildProcess.projectExecutable("groupsync")
  static let relay = ChildProcess.projectExecutable("groupsync-relay")

  /// Runs `groupsync args...`, requiring success; returns stdout.
  @discardableResult
  static func groupsync(_ arguments: [String], timeout: Double = 300) async throws -> String {
    try await onThread {
      let result = try ChildProcess(executable: groupsync, arguments: arguments).finish(timeout: timeout)
      guard result.succeeded else {
        throw RelayTestFailure("groupsync \(arguments.prefix(3).joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
      }
      return result.stdout
    }
  }

  /// Runs `groupsync args...` on the calling thread (for conditions
  /// polled by `waitUntil`), requiring success; returns stdout.
  static func runSync(_ arguments: [String]) throws -> String {
    let result = try ChildProcess(executable: groupsync, arguments: arguments).finish(timeout: 60)
    guard result.succeeded else { throw RelayTestFailure("groupsync \(arguments.first ?? "") failed: \(result.stderr)") }
    return result.stdout
  }

  /// Runs blocking `body` on a thread of its own.
  static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
      Thread { continuation.resume(with: Result { try body() }) }.start()
    }
  }
}

/// A relay build a host runs: this one, this one speaking the testing
/// log format too (as the next version would), or the relay of the commit
/// before log formats were versioned (`GROUPSYNC_LEGACY_RELAY`, else
/// `.build-legacy/bin/groupsync-relay`, which `make legacy-relay` builds).
enum RelayBuild: Sendable, Equatable {
  case current
  case testingFormat
  case legacy

  /// The executable to start (nil: `groupsync relay`).
  var executable: String? {
    guard self == .legacy else { return nil }
    if let path = ProcessInfo.processInfo.environment["GROUPSYNC_LEGACY_RELAY"], !path.isEmpty { return path }
    // The package's root, from this file's path (Tests/GroupSyncRelayTests/Support/).
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent().deletingLastPathComponent()
    return root.appendingPathComponent(".build-legacy/bin/groupsync-relay").path
  }

  var arguments: [String] { self == .testingFormat ? ["--testing-format"] : [] }
}

/// One simulated host: its own group folder (`ROOT/NAME/app`, so every
/// host's group is named `app`) and its own relay process.
final class GroupHost: @unchecked Sendable {
  let name: String
  let folder: String
  var policy = "last-writer-wins"
  /// The relay's `--transport` (this build's relay only; the legacy
  /// relays notify): ``PostgresServer/testTransport`` unless a test says.
  var transport = PostgresServer.testTransport
  /// More `--policy` rules (`TABLE=POLICY`, `TABLE.COLUMN=POLICY`) and
  /// `--whole-rows` tables (this build's relay only).
  var rules: [String] = []
  var wholeRows: [String] = []
  /// The group's retention, entries (nil: the group's setting stays):
  /// this build's relay has the group configured so before it starts
  /// (`groupsync relay --configure`, on ``directConninfo``, purging past
  /// members as relays' own `--retention` did before relay 5); a legacy
  /// relay is given `--retention`.
  var retention: Int64?
  /// Where the relay writes its metrics (`--metrics-file`), and how often
  /// (`--metrics-interval`, seconds).
  var metricsFile: String?
  var metricsInterval = 0.2
  /// Where the relay writes its trace at stop (`--trace`).
  var traceFile: String?
  /// The relay's `--batch-window`, seconds (nil: its default).
  var batchWindow: Double?
  /// The relay's `--dead-link-timeout` (nil: its default).
  var deadLinkTimeout: Duration?
  /// Relations declared to the relay (`--reference`).
  var references: [String] = []
  var conninfo: String
  /// The server itself, not a pooler in front of it: where a legacy
  /// relay (LISTEN, an advisory lock: a session of its own) connects.
  var directConninfo: String
  /// The relay's connection options (nil: `--postgres` ``conninfo``;
  /// empty: libpq's environment alone).
  var postgresArguments: [String]?
  /// Wraps the relay's command line (executable, arguments), e.g. to run
  /// it in the host's network namespace (``NetworkLab/command(in:_:_:)``).
  var launch: (@Sendable (String, [String]) -> (String, [String]))?
  /// Which relay build runs (see ``RelayBuild``).
  var build = RelayBuild.current
  private(set) var relay: ChildProcess?
  /// Everything every relay process of this host printed, by run.
  private(set) var finishedOutputs: [String] = []
  /// What every relay process of this host wrote to stderr, by run.
  private(set) var finishedErrors: [String] = []

  static let schema = """
    CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT, n INTEGER, x REAL, b BLOB);
    """

  convenience init(_ name: String, root: String, server: PostgresServer, schema: String = GroupHost.schema)
    async throws
  {
    try await self.init(name, root: root, conninfo: server.relayConninfo ?? server.conninfo, schema: schema)
    directConninfo = server.conninfo
  }

  init(_ name: String, root: String, conninfo: String, schema: String = GroupHost.schema) async throws {
    self.name = name
    self.conninfo = conninfo
    directConninfo = conninfo
    folder = root + "/" + name + "/app"
    try FileManager.default.createDirectory(atPath: root + "/" + name, withIntermediateDirectories: true)
    let schemaFile = root + "/\(name)-schema.sql"
    try schema.write(toFile: schemaFile, atomically: true, encoding: .utf8)
    try await Executables.groupsync(["init", folder, "--schema", schemaFile])
  }

  /// A relay left running by a failed test is killed with its host.
  deinit {
    relay?.signal(SIGKILL)
    _ = relay?.finish(timeout: 10)
  }

  /// Starts this host's relay (`groupsync relay`, which runs
  /// `groupsync-relay`) and waits until it says it started.
  func startRelay(environment extra: [String: String] = [:], waitConnected: Bool = true) async throws {
    var arguments = [folder] + (postgresArguments ?? ["--postgres", build == .legacy ? directConninfo : conninfo])
    arguments += ["--host", name, "--policy", policy] + build.arguments
    if build != .legacy && transport == "poll" {
      arguments += ["--transport", "poll", "--poll-interval", "0.05"]
    } else {
      arguments += ["--poll-interval", "0.2"]
    }
    for rule in rules { arguments += ["--policy", rule] }
    for table in wholeRows { arguments += ["--whole-rows", table] }
    if let retention {
      if build == .legacy {
        arguments += ["--retention", String(retention)]
      } else {
        _ = try await Executables.groupsync([
          "relay", "--configure", "--group", "app", "--postgres", directConninfo, "--retention", String(retention),
          "--retention-passes-members", "true",
        ])
      }
    }
    if let deadLinkTimeout { arguments += ["--dead-link-timeout", String(deadLinkTimeout.inSeconds)] }
    for reference in references { arguments += ["--reference", reference] }
    if let metricsFile { arguments += ["--metrics-file", metricsFile, "--metrics-interval", String(metricsInterval)] }
    if let traceFile { arguments += ["--trace", traceFile] }
    if let batchWindow { arguments += ["--batch-window", String(batchWindow)] }
    var environment = ProcessInfo.processInfo.environment
    for (key, value) in extra { environment[key] = value }
    // The current build through `groupsync relay`, as users start it;
    // another build's relay executable directly.
    let (executable, command) = try build.executable.map { ($0, arguments) } ?? (Executables.groupsync, ["relay"] + arguments)
    guard FileManager.default.isExecutableFile(atPath: executable) else {
      throw RelayTestFailure("no relay executable at \(executable) (make legacy-relay builds the legacy one)")
    }
    let (program, programArguments) = launch?(executable, command) ?? (executable, command)
    let child = try ChildProcess(
      executable: program, arguments: programArguments, environment: environment, name: "relay \(name)")
    relay = child
    // A deadline for a hang, not a bound on the machine's speed.
    try await Executables.onThread { try child.waitForStderr(containing: "groupsync-relay: host", timeout: 300) }
    if waitConnected {
      try await waitUntil("relay \(name) connected") { child.stdout.contains("\"connected\"") || !child.isRunning }
      guard child.isRunning else { throw RelayTestFailure("relay \(name) exited: \(child.stderr)") }
    }
  }

  /// SIGKILLs the relay (nothing of it runs on).
  func killRelay() async throws {
    guard let relay else { return }
    relay.signal(SIGKILL)
    let result = try await Executables.onThread { relay.finish(timeout: 120) }
    finishedOutputs.append(result.stdout)
    finishedErrors.append(result.stderr)
    self.relay = nil
  }

  /// Stops the relay with SIGTERM and requires a clean exit.
  func stopRelay() async throws {
    guard let relay else { return }
    relay.signal(SIGTERM)
    let result = try await Executables.onThread { relay.finish(timeout: 120) }
    finishedOutputs.append(result.stdout)
    finishedErrors.append(result.stderr)
    self.relay = nil
    guard result.status == 0, !result.signalled else {
      throw RelayTestFailure("relay \(name) did not stop cleanly (\(result.status)): \(result.stderr)")
    }
  }

  /// Sends SIGTERM and returns how long the relay took to exit (nil: it
  /// was still running after `timeout` seconds, and was killed).
  func terminateRelay(timeout: Double = 30) async throws -> Duration? {
    guard let relay else { return .zero }
    let start = ContinuousClock.now
    relay.signal(SIGTERM)
    let exited = try await Executables.onThread { relay.waitForExit(timeout: timeout) }
    let elapsed = ContinuousClock.now - start
    if !exited { relay.signal(SIGKILL) }
    let result = try await Executables.onThread { relay.finish(timeout: 120) }
    finishedOutputs.append(result.stdout)
    finishedErrors.append(result.stderr)
    self.relay = nil
    return exited ? elapsed : nil
  }

  /// Every event line of every relay run so far, the running one included.
  var eventLines: [String] {
    (finishedOutputs + [relay?.stdout ?? ""]).flatMap { $0.split(separator: "\n").map(String.init) }
  }

  /// Everything every relay run wrote to stderr, the running one included.
  var errorOutput: String { (finishedErrors + [relay?.stderr ?? ""]).joined(separator: "\n") }

  /// The events of one kind (`"conflict"`, `"error"`...), decoded.
  func events(_ kind: String) -> [[String: Any]] {
    eventLines.compactMap { line in
      guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
        let value = object[kind]
      else { return nil }
      // An unlabelled associated value is encoded under "_0".
      if let wrapped = value as? [String: Any], wrapped.count == 1, let inner = wrapped["_0"] {
        return inner as? [String: Any] ?? ["value": inner]
      }
      return value as? [String: Any] ?? ["value": value]
    }
  }

  func exec(_ statements: [String], repeat count: Int = 1) async throws {
    try await Executables.groupsync(["exec", folder, "--repeat", String(count)] + statements, timeout: 300)
  }

  /// Starts a writer process in the background.
  func startWriter(_ statements: [String], repeat count: Int) throws -> ChildProcess {
    try ChildProcess(
      executable: Executables.groupsync, arguments: ["exec", folder, "--repeat", String(count)] + statements,
      name: "writer \(name)")
  }

  /// The replicated content of `note`, by global ID: each row's values
  /// (without the local rowid), plus rows no global ID names yet.
  func content(table: String = "note") throws -> [String: [String]] {
    var configuration = Configuration()
    configuration.readonly = true
    let queue = try DatabaseQueue(path: folder + "/store.sqlite", configuration: configuration)
    return try queue.read { db in
      var rows: [String: [String]] = [:]
      let columns = try db.columns(in: table).map(\.name).filter { $0 != "id" }
      let select = columns.map { "t.\($0.quotedDatabaseIdentifier)" }.joined(separator: ", ")
      let hasMap = try db.tableExists(GlobalIDTable.name)
      let join = hasMap
        ? "LEFT JOIN \(GlobalIDTable.name) m ON m.tbl = '\(table)' AND m.local_rowid = t.rowid" : ""
      for row in try Row.fetchAll(db, sql: "SELECT \(hasMap ? "m.gid" : "NULL"), t.rowid, \(select) FROM \(table) t \(join)") {
        let gid: String = row[0] ?? "unmapped rowid \(row[1] as Int64)"
        rows[gid] = (0..<columns.count).map { (row[$0 + 2] as DatabaseValue).description }
      }
      return rows
    }
  }

  /// The rows `sql` selects, each as its values joined by `|`, sorted: a
  /// comparison by what the rows say (a join, say), not by local ids.
  func rows(_ sql: String) throws -> [String] {
    var configuration = Configuration()
    configuration.readonly = true
    let queue = try DatabaseQueue(path: folder + "/store.sqlite", configuration: configuration)
    return try queue.read { db in
      try Row.fetchAll(db, sql: sql).map { row in
        row.databaseValues.map { $0.isNull ? "NULL" : (String.fromDatabaseValue($0) ?? $0.description) }
          .joined(separator: "|")
      }.sorted()
    }
  }

  /// The relay's last status file.
  func relayStatus() -> RelayStatus? {
    RelayStatusFile.readAll(group: folder).first { $0.host == name }
  }
}

/// Waits until `condition` holds, up to `timeout`, polling every 5 ms at
/// first and every 100 ms at most.
func waitUntil(
  _ what: String, timeout: Duration = .seconds(60), _ condition: @Sendable () throws -> Bool
) async throws {
  let deadline = ContinuousClock.now + timeout
  var backoff = PollBackoff(maximum: .milliseconds(100))
  while try !condition() {
    guard ContinuousClock.now < deadline else { throw RelayTestFailure("timed out waiting: \(what)") }
    try await backoff.pause()
  }
}

extension GroupHost {
  /// Hosts "a" and "b" with the default schema, in a folder of their own
  /// (kept while the returned folder lives), each with its relay running.
  static func twoWithRelays(_ server: PostgresServer) async throws -> (HostsFolder, GroupHost, GroupHost) {
    let root = try HostsFolder()
    let a = try await GroupHost("a", root: root.path, server: server)
    let b = try await GroupHost("b", root: root.path, server: server)
    try await a.startRelay()
    try await b.startRelay()
    return (root, a, b)
  }
}

/// Waits until every host's relay shipped everything, applied the whole
/// log, and every replica holds the same rows; returns the content.
@discardableResult
func waitForConvergence(
  _ hosts: [GroupHost], server: PostgresServer, timeout: Duration = .seconds(90)
) async throws -> [String: [String]] {
  try await waitForConvergence(hosts, timeout: timeout) {
    Int64(try server.query("SELECT coalesce(max(seq), 0) FROM gs_clock WHERE grp = 'app'").first?[0] ?? "0") ?? 0
  }
}

/// The same, comparing what `query` selects on each host (a join that
/// tells the relations, say) instead of `note` by global ID; returns it.
@discardableResult
func waitForConvergence(
  _ hosts: [GroupHost], server: PostgresServer, query: String, timeout: Duration = .seconds(90)
) async throws -> [String] {
  let content = try await waitForConvergence(
    hosts, timeout: timeout,
    logHead: {
      Int64(try server.query("SELECT coalesce(max(seq), 0) FROM gs_clock WHERE grp = 'app'").first?[0] ?? "0") ?? 0
    },
    content: { ["": try $0.rows(query)] })
  return content[""] ?? []
}

/// The same, with the log's head read by `logHead`.
@discardableResult
func waitForConvergence(
  _ hosts: [GroupHost], timeout: Duration = .seconds(90), logHead: () throws -> Int64,
  content: (GroupHost) throws -> [String: [String]] = { try $0.content() }
) async throws -> [String: [String]] {
  let deadline = ContinuousClock.now + timeout
  var last = ""
  var backoff = PollBackoff(first: .milliseconds(20), maximum: .milliseconds(200))
  while true {
    let head: Int64
    do {
      head = try logHead()
    } catch {
      // No relay has connected yet: the log's tables come with the first.
      last = "the log's head unreadable: \(error)"
      guard ContinuousClock.now < deadline else { throw RelayTestFailure("replicas did not converge: \(last)") }
      try await backoff.pause()
      continue
    }
    let statuses = hosts.map { $0.relayStatus() }
    let contents = try hosts.map { try content($0) }
    let settled = statuses.allSatisfy { status in
      guard let store = status?.stores.first else { return false }
      return store.unshipped == 0 && store.applied == head && store.logHead == head
    }
    if settled && contents.allSatisfy({ $0 == contents[0] }) { return contents[0] }
    last = "head \(head); " + zip(hosts, statuses).map { host, status in
      "\(host.name): \(status?.stores.first.map { "unshipped \($0.unshipped) applied \($0.applied) head \($0.logHead)" } ?? "no status") rows \((try? content(host).values.map(\.count).reduce(0, +)) ?? -1)"
    }.joined(separator: "; ")
    guard ContinuousClock.now < deadline else {
      let errors = hosts.map { "\($0.name): \($0.eventLines.filter { $0.contains("error") || $0.contains("disconnected") }.suffix(3))" }
      throw RelayTestFailure("replicas did not converge: \(last); errors: \(errors)")
    }
    try await backoff.pause()
  }
}

/// A folder for one test's hosts, removed afterwards.
final class HostsFolder: @unchecked Sendable {
  let path: String
  init() throws {
    path = ScratchFolder.unique("gs-hosts")
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  }
  deinit { try? FileManager.default.removeItem(atPath: path) }
}
