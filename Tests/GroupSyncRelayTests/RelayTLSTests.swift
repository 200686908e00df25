import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
import Testing
@testable import GroupSyncRelay
#if canImport(Glibc)
import Glibc
#endif

/// The relay over TLS with `sslmode=verify-full`, against a throw-away
/// server whose certificate a certificate authority made in the test
/// signed; the server refuses connections without TLS.
@Suite(.timed)
struct RelayTLSTests {
  /// Two relays verify the server against the test's authority, one told
  /// so by its connection string, the other by libpq's environment alone
  /// (PGSSLMODE, PGSSLROOTCERT...): a row crosses, and the server says
  /// both sessions are encrypted.
  @Test func verifiedConnectionReplicates() async throws {
    let password = "Sesame-\(UUID().uuidString.prefix(8))"
    let root = try HostsFolder()
    let authority = try TestAuthority(in: root.path + "/ca")
    let options = PostgresServer.Options(password: password, tls: (authority.serverCertificate, authority.serverKey))
    try await PostgresServer.with(options: options) { server in
      let passwordFile = root.path + "/pgpass"
      try writePrivate("localhost:\(server.port):*:postgres:\(password)\n", to: passwordFile)
      let conninfo =
        "host=localhost port=\(server.port) user=postgres dbname=postgres sslmode=verify-full sslrootcert=\(authority.certificate)"
      let a = try await GroupHost("a", root: root.path, conninfo: conninfo)
      let b = try await GroupHost("b", root: root.path, conninfo: "")
      b.postgresArguments = []
      try await a.startRelay(environment: ["PGPASSFILE": passwordFile])
      try await b.startRelay(environment: [
        "PGHOST": "localhost", "PGPORT": String(server.port), "PGUSER": "postgres", "PGDATABASE": "postgres",
        "PGSSLMODE": "verify-full", "PGSSLROOTCERT": authority.certificate, "PGPASSFILE": passwordFile,
      ])
      try await a.exec(["INSERT INTO note(title, body) VALUES ('sealed', 'over TLS')"])
      try await waitForConvergence([a, b], server: server)
      #expect(try b.rows("SELECT title, body FROM note") == ["sealed|over TLS"])
      let sessions = try server.query(
        """
        SELECT a.application_name, s.ssl, s.version IS NOT NULL FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
        WHERE a.application_name LIKE 'groupsync-relay %' ORDER BY 1
        """)
      #expect(sessions == [["groupsync-relay a", "t", "t"], ["groupsync-relay b", "t", "t"]])
      try await a.stopRelay()
      try await b.stopRelay()
    }
  }

  /// verify-full refuses a server whose certificate another authority
  /// signed, and one reached by a name its certificate does not carry;
  /// the server refuses a client without TLS. No such relay connects or
  /// replicates, and each says why.
  @Test func unverifiedServerIsRefused() async throws {
    let password = "Sesame-\(UUID().uuidString.prefix(8))"
    let root = try HostsFolder()
    let authority = try TestAuthority(in: root.path + "/ca")
    let stranger = try TestAuthority(in: root.path + "/other-ca")
    let options = PostgresServer.Options(password: password, tls: (authority.serverCertificate, authority.serverKey))
    try await PostgresServer.with(options: options) { server in
      let passwordFile = root.path + "/pgpass"
      try writePrivate("*:\(server.port):*:postgres:\(password)\n", to: passwordFile)
      let common = "port=\(server.port) user=postgres dbname=postgres connect_timeout=5"
      let cases = [
        (
          "wrong-ca", "host=localhost \(common) sslmode=verify-full sslrootcert=\(stranger.certificate)",
          "certificate verify failed"
        ),
        (
          "by-address", "host=127.0.0.1 \(common) sslmode=verify-full sslrootcert=\(authority.certificate)",
          "does not match host name \\\"127.0.0.1\\\""
        ),
        ("plain", "host=localhost \(common) sslmode=disable", "no encryption"),
      ]
      let writer = try await GroupHost("writer", root: root.path, conninfo: server.conninfo)
      try await writer.startRelay()
      try await writer.exec(["INSERT INTO note(title) VALUES ('kept from the unverified')"])
      try await waitForConvergence([writer], server: server)
      var hosts: [(GroupHost, String)] = []
      for (name, conninfo, reason) in cases {
        let host = try await GroupHost(name, root: root.path, conninfo: conninfo)
        try await host.startRelay(environment: ["PGPASSFILE": passwordFile], waitConnected: false)
        hosts.append((host, reason))
      }
      for (host, reason) in hosts {
        try await waitUntil("relay \(host.name) reports: \(reason)", timeout: .seconds(30)) {
          host.eventLines.contains { $0.contains(reason) } && host.relayStatus() != nil
        }
        #expect(!host.eventLines.contains { $0.contains("\"connected\"") }, "relay \(host.name) connected")
        #expect(try host.content().isEmpty, "relay \(host.name) replicated")
        #expect(host.relayStatus()?.isConnected == false)
        try await host.stopRelay()
      }
      try await writer.stopRelay()
    }
  }
}

/// A certificate authority made for one test with /usr/bin/openssl: its
/// key and certificate, and a server key and certificate it signed for
/// the name `localhost` (subject and subjectAltName) alone.
struct TestAuthority {
  let certificate: String
  let serverCertificate: String
  let serverKey: String

  init(in folder: String) throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    certificate = folder + "/ca.pem"
    serverCertificate = folder + "/server.crt"
    serverKey = folder + "/server.key"
    let key = folder + "/ca.key", request = folder + "/server.csr", extensions = folder + "/server.ext"
    // P-256 keys: made in milliseconds, unlike RSA ones.
    let newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    try Self.openssl(
      ["req", "-x509"] + newKey
        + ["-keyout", key, "-out", certificate, "-days", "2", "-subj", "/CN=GroupSync test CA \(UUID().uuidString)",
          "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    try Self.openssl(["req", "-new"] + newKey + ["-keyout", serverKey, "-out", request, "-subj", "/CN=localhost"])
    try "subjectAltName=DNS:localhost\n".write(toFile: extensions, atomically: true, encoding: .utf8)
    try Self.openssl(
      ["x509", "-req", "-in", request, "-CA", certificate, "-CAkey", key, "-CAcreateserial", "-out", serverCertificate,
       "-days", "2", "-extfile", extensions])
  }

  private static func openssl(_ arguments: [String]) throws {
    let program = "/usr/bin/openssl"
    guard FileManager.default.isExecutableFile(atPath: program) else {
      throw RelayTestFailure("no \(program) (make test installs openssl)")
    }
    try PostgresServer.run(program, arguments)
  }
}
