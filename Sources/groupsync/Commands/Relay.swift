import ArgumentParser
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `groupsync relay`: runs `groupsync-relay`, the executable beside this
/// one, in this process's place. The relay links libpq; `groupsync` does
/// not, so building it (`make demo`) never builds the PostgreSQL client.
struct RelayCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "relay",
    abstract: "Connect the group folder to other hosts through PostgreSQL (runs groupsync-relay).",
    discussion: """
      groupsync relay DIR [--postgres CONNINFO | --postgres-file FILE] [--store NAME]... [--host NAME]
        [--group NAME] [--policy [TABLE[.COLUMN]=]object-trump|store-trump]... [--whole-rows TABLE]...
        [--poll-interval SECONDS] [--dead-link-timeout SECONDS]
      Without --postgres or --postgres-file, libpq's PG* environment says where to connect.
      A password never goes on the command line (--postgres with one is refused): put it in
      ~/.pgpass or PGPASSFILE, or the connection string in --postgres-file FILE (mode 0600).
      Prints what the relay does as JSON lines; stops on SIGTERM or SIGINT.
      groupsync relay --print-setup --group NAME [SETTINGS] [--older-relays] ROLE[:HOST]...
      Prints the SQL an administrator runs once: the tables, a login role per host, row-level security.
      groupsync relay --configure --group NAME [--postgres ADMIN_CONNINFO] SETTINGS
      Sets the group's settings on the server (an administrator's), SETTINGS being any of
      --retention N|all, --retention-passes-members true|false, --max-shipment-bytes N.
      """)

  @Argument(parsing: .captureForPassthrough, help: "The relay's arguments (see groupsync-relay --help).")
  var arguments: [String] = []

  func run() throws {
    let executable = Self.relayExecutable()
    guard access(executable, X_OK) == 0 else {
      printError("no groupsync-relay beside groupsync (\(executable)); build it: swift build --product groupsync-relay")
      throw ExitCode.failure
    }
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    execv(executable, argv)
    printError("execv(\(executable)) failed: \(String(cString: strerror(errno)))")
    throw ExitCode.failure
  }

  /// `groupsync-relay` in the folder of the running executable.
  static func relayExecutable() -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    let own = count > 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    return URL(fileURLWithPath: own).deletingLastPathComponent().appendingPathComponent("groupsync-relay").path
  }
}
