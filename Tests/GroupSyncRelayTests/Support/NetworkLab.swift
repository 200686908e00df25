import Foundation
import GroupSyncProcess
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// A throw-away network for one test: PostgreSQL in a Linux network namespace
/// of its own and each simulated host in another, each host joined to the
/// server by a veth pair, so that a host's link can be cut like a pulled
/// cable (no FIN, no RST, only silence), which a unix socket cannot do.
///
/// Host `i` (from 1, in the order given) is `10.<subnet>.<i>.2` in the
/// namespace `<prefix>-<host>`; the server answers it on `10.<subnet>.<i>.1`
/// in `<prefix>-pg`. ``cut(_:)`` sets the server's end of the pair down: the
/// host's end stays up, so the host keeps its route and its TCP connections
/// stay established, unanswered, until ``heal(_:)``. New connections made
/// while cut fail after about 3 s with "No route to host" (ARP gets no
/// answer). Needs root; ``isAvailable()`` says why not, for a clear skip.
///
/// For example:
/// ```swift
/// try await NetworkLab.with(hosts: ["a", "b"]) { lab in
///   try await PostgresServer.withInNamespace(lab) { server in
///     let (program, arguments) = lab.command(
///       in: "a", Executables.groupsync,
///       ["relay", folder, "--postgres", lab.conninfo(for: "a", server: server), "--host", "a"])
///     let relay = try ChildProcess(executable: program, arguments: arguments, name: "relay a")
///     try lab.cut("a")    // a's relay hears nothing from here on
///     try lab.heal("a")
///   }
/// }
/// ```
///
/// ``destroy()`` (also run by `deinit`) deletes every namespace, and with
/// them the veth pairs; a watchdog process does the same if the test process
/// is killed. A namespace whose name was deleted lives on, out of sight, while
/// a process still runs in it (a relay, the server): stop those too.
///
/// `@unchecked Sendable`: the one mutable field is guarded by `lock`.
final class NetworkLab: @unchecked Sendable {
  /// Every name of this lab starts with it: `gs` and 6 hex digits.
  let prefix: String
  /// The second byte of every address of the lab, 200...249, picked from the
  /// prefix. Each lab has namespaces of its own, so equal subnets would not
  /// collide; different ones keep logs of parallel labs apart.
  let subnet: Int
  /// The hosts' names, in the order given (host `i` is at index `i - 1`).
  let hosts: [String]
  private let lock = NSLock()
  private var destroyed = false

  static let ip = "/usr/sbin/ip"

  /// The namespace PostgreSQL runs in: the hub every host's link ends at.
  var serverNamespace: String { "\(prefix)-pg" }

  /// Runs `body` with a fresh lab, destroyed whatever happens.
  static func with<T>(hosts: [String], _ body: (NetworkLab) async throws -> T) async throws -> T {
    let lab = try NetworkLab(hosts: hosts)
    defer { lab.destroy() }
    return try await body(lab)
  }

  /// Whether this process can make labs (root, `ip netns add` and veth pairs
  /// work), and if not why, so that tests can skip with a clear message.
  static func isAvailable() -> (Bool, String) { availability }

  /// Probed once: a namespace with a veth pair in it, made and deleted.
  private static let availability: (Bool, String) = {
    guard getuid() == 0 else { return (false, "network namespaces need root (uid \(getuid()))") }
    guard FileManager.default.isExecutableFile(atPath: ip) else { return (false, "no \(ip) (iproute2)") }
    let probe = "gs-probe-\(UUID().uuidString.prefix(8).lowercased())"
    do {
      let added = try ChildProcess.run(ip, ["netns", "add", probe], timeout: 30)
      guard added.succeeded else { return (false, "ip netns add failed: \(added.stderr)") }
      defer { _ = try? ChildProcess.run(ip, ["netns", "delete", probe], timeout: 30) }
      let pair = try ChildProcess.run(
        ip, ["-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"], timeout: 30)
      guard pair.succeeded else { return (false, "cannot make a veth pair: \(pair.stderr)") }
      return (true, "network namespaces and veth pairs work")
    } catch {
      return (false, "cannot run \(ip): \(error)")
    }
  }()

  /// Makes the server's namespace and one per host, each host linked to the
  /// server; whatever was made is deleted again if a step fails.
  ///
  /// - Parameter hosts: short names (letters and digits, at most 16, not
  ///   `pg`), at most 250 of them; one's namespace is `<prefix>-<name>`.
  /// - Throws: ``RelayTestFailure`` without root or namespaces, for a bad
  ///   name, or when an `ip` command fails.
  init(hosts: [String]) throws {
    // The probe runs once, alone: the first `ip netns add` sets up /run/netns,
    // which labs made at once by parallel tests could otherwise do twice over.
    let (available, why) = Self.isAvailable()
    guard available else { throw RelayTestFailure("no network lab: \(why)") }
    for host in hosts {
      guard !host.isEmpty, host.count <= 16, host != "pg",
        host.unicodeScalars.allSatisfy({ $0.isASCII && CharacterSet.alphanumerics.contains($0) })
      else { throw RelayTestFailure("bad host name for a network lab: '\(host)'") }
    }
    guard Set(hosts).count == hosts.count, hosts.count <= 250 else {
      throw RelayTestFailure("network lab hosts must be distinct, at most 250: \(hosts)")
    }
    let random = UInt32.random(in: 0..<(1 << 24))
    prefix = "gs" + String(String(random | (1 << 24), radix: 16).dropFirst())
    subnet = 200 + Int(random >> 16) % 50
    self.hosts = hosts
    do {
      try Self.run(["netns", "add", serverNamespace])
      try startWatchdog()
      try Self.run(["-n", serverNamespace, "link", "set", "lo", "up"])
      for host in hosts { try link(host) }
    } catch {
      destroy()
      throw error
    }
  }

  /// Makes `host`'s namespace and its veth pair, both ends addressed and up.
  /// The pair is made with each end in its namespace at once, so no end ever
  /// shows in the root namespace; ends are named by index (at most 15 bytes).
  private func link(_ host: String) throws {
    let space = namespace(of: host)
    try Self.run(["netns", "add", space])
    try Self.run(["-n", space, "link", "set", "lo", "up"])
    try Self.run([
      "link", "add", hostEnd(host), "netns", space, "type", "veth",
      "peer", "name", serverEnd(host), "netns", serverNamespace,
    ])
    try Self.run(["-n", space, "addr", "add", "\(hostAddress(of: host))/24", "dev", hostEnd(host)])
    try Self.run(["-n", space, "link", "set", hostEnd(host), "up"])
    try Self.run(["-n", serverNamespace, "addr", "add", "\(serverAddress(of: host))/24", "dev", serverEnd(host)])
    try Self.run(["-n", serverNamespace, "link", "set", serverEnd(host), "up"])
  }

  /// Host `host`'s number `i`: the third byte of its addresses.
  private func number(of host: String) -> Int {
    guard let index = hosts.firstIndex(of: host) else {
      preconditionFailure("no host '\(host)' in network lab \(prefix) (hosts: \(hosts))")
    }
    return index + 1
  }

  /// The namespace `host`'s processes run in.
  func namespace(of host: String) -> String {
    _ = number(of: host)
    return "\(prefix)-\(host)"
  }

  /// `host`'s own address, `10.<subnet>.<i>.2`.
  func hostAddress(of host: String) -> String { "10.\(subnet).\(number(of: host)).2" }

  /// The server's address on `host`'s link, `10.<subnet>.<i>.1`.
  func serverAddress(of host: String) -> String { "10.\(subnet).\(number(of: host)).1" }

  /// The end of `host`'s pair in `host`'s namespace.
  private func hostEnd(_ host: String) -> String { "\(prefix)-h\(number(of: host))" }

  /// The end of `host`'s pair in the server's namespace: the one ``cut(_:)`` sets down.
  private func serverEnd(_ host: String) -> String { "\(prefix)-s\(number(of: host))" }

  /// How `host` reaches the server: over TCP through its own link, so that
  /// ``cut(_:)`` silences it. The test's own checks keep `server.conninfo`
  /// (the unix socket, reachable from every namespace).
  func conninfo(for host: String, server: PostgresServer) -> String {
    "host=\(serverAddress(of: host)) port=\(server.port) user=postgres dbname=postgres"
  }

  /// The program and arguments that run `executable` inside `host`'s
  /// namespace, for ``ChildProcess``: `ip netns exec` execs it in place, so
  /// the child's pid is the program's own and signals reach it.
  func command(in host: String, _ executable: String, _ arguments: [String]) -> (String, [String]) {
    (Self.ip, ["netns", "exec", namespace(of: host), executable] + arguments)
  }

  /// Silences `host`'s link, as a pulled cable would: the server's end goes
  /// down, so nothing crosses either way, and neither side is told. The
  /// host's end stays up (its route stays, marked `linkdown`); the server
  /// loses its route to the host, so its unsent data waits unsent.
  func cut(_ host: String) throws {
    try Self.run(["-n", serverNamespace, "link", "set", serverEnd(host), "down"])
  }

  /// Brings `host`'s link back: established connections resume at their
  /// next retransmission (within about a second, even after a long cut).
  /// Traffic passes at once, though `ip link` may show the end DOWN and
  /// NO-CARRIER for up to a second more (the kernel's link watch lags).
  func heal(_ host: String) throws {
    try Self.run(["-n", serverNamespace, "link", "set", serverEnd(host), "up"])
    // The address outlives down and up today; put it back should a kernel drop it.
    let shown = try Self.run(["-n", serverNamespace, "-4", "addr", "show", "dev", serverEnd(host)])
    if !shown.contains("inet \(serverAddress(of: host))/24 ") {
      try Self.run(["-n", serverNamespace, "addr", "add", "\(serverAddress(of: host))/24", "dev", serverEnd(host)])
    }
  }

  /// Cuts every host's link: the server (the hub) is gone for all of them,
  /// while it runs on and its unix socket still answers the test.
  func cutAll() throws {
    for host in hosts { try cut(host) }
  }

  /// Heals every host's link.
  func healAll() throws {
    for host in hosts { try heal(host) }
  }

  /// Deletes every namespace of the lab, and with them the veth pairs; the
  /// server's last, as the watchdog waits on it. Runs once; errors are ignored.
  func destroy() {
    let first = lock.withLock {
      defer { destroyed = true }
      return !destroyed
    }
    guard first else { return }
    for namespace in hosts.map({ "\(prefix)-\($0)" }) + [serverNamespace] {
      _ = try? ChildProcess.run(Self.ip, ["netns", "delete", namespace], timeout: 30)
    }
  }

  deinit { destroy() }

  /// A shell that outlives a killed test process: once that process is gone
  /// (and the server's namespace is still there), it deletes every namespace
  /// of the lab. It ends on its own when the server's namespace goes.
  private func startWatchdog() throws {
    let namespaces = (hosts.map { "\(prefix)-\($0)" } + [serverNamespace]).joined(separator: " ")
    let script = """
      while [ -d /proc/\(getpid()) ] && [ -e /var/run/netns/\(serverNamespace) ]; do sleep 1; done
      [ -e /var/run/netns/\(serverNamespace) ] || exit 0
      for namespace in \(namespaces); do \(Self.ip) netns delete $namespace >/dev/null 2>&1; done
      """
    // As root: deleting namespaces needs it.
    try PostgresServer.startWatchdog(script, asPostgres: false)
  }

  /// Runs `ip arguments...`, requiring success; returns stdout.
  @discardableResult
  private static func run(_ arguments: [String]) throws -> String {
    try PostgresServer.run(ip, arguments)
  }
}

extension PostgresServer {
  /// Runs `body` with a fresh server inside `lab`'s server namespace,
  /// stopped whatever happens: ``with(_:)`` starts it on its unix socket
  /// (and its watchdog), then it is stopped and started again in there.
  static func withInNamespace<T>(_ lab: NetworkLab, _ body: (PostgresServer) async throws -> T) async throws -> T {
    try await with { server in
      let pgCtl = try Self.binFolder() + "/pg_ctl"
      try Self.runAsPostgres(pgCtl, ["-D", "\(server.folder)/data", "-m", "fast", "-w", "stop"])
      try server.startInNamespace(lab.serverNamespace)
      return try await body(server)
    }
  }

  /// Starts the (stopped) server inside network namespace `namespace` and
  /// waits until it accepts connections: listening on every address there
  /// (`listen_addresses='*'`, hosts of `10.0.0.0/8` trusted) and on its
  /// unix socket, which the test reaches from any namespace. After a
  /// ``crash()``, a test starts it again with this rather than `start()`.
  /// `pg_ctl stop` (by pid) works for it from anywhere.
  func startInNamespace(_ namespace: String) throws {
    let bin = try Self.binFolder()
    let hba = "\(folder)/data/pg_hba.conf"
    let line = "host all all 10.0.0.0/8 trust"
    let current = try String(contentsOfFile: hba, encoding: .utf8)
    if !current.split(separator: "\n").contains(where: { $0.trimmingCharacters(in: .whitespaces) == line }) {
      // Not atomically: the file stays postgres's own.
      try (current + (current.hasSuffix("\n") ? "" : "\n") + line + "\n")
        .write(toFile: hba, atomically: false, encoding: .utf8)
    }
    try Self.run(NetworkLab.ip, [
      "netns", "exec", namespace, "/usr/sbin/runuser", "-u", "postgres", "--",
      "\(bin)/pg_ctl", "-D", "\(folder)/data", "-l", "\(folder)/server.log", "-w", "-t", "60", "-o",
      "-c listen_addresses='*' -k \(folder) -p \(port) -c fsync=off -c max_connections=60", "start",
    ])
  }

  /// Runs `program` as the user postgres (the server refuses root).
  private static func runAsPostgres(_ program: String, _ arguments: [String]) throws {
    if getuid() == 0 {
      try run("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments)
    } else {
      try run(program, arguments)
    }
  }
}
