import ArgumentParser
import Foundation
import GroupSync
import GroupSyncRelay
import GroupSyncRelayMetricsFile
import Metrics
import Prometheus
#if canImport(Glibc)
import Glibc
#endif

/// `groupsync-relay`: the relay of one group folder, as its own process
/// (`groupsync relay` runs it). It prints each event as one JSON line and
/// stops cleanly on SIGTERM or SIGINT.
@main
struct RelayCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "groupsync-relay",
    abstract: "Connect a group folder to the other hosts of its group through PostgreSQL.",
    version: "groupsync-relay " + RelayVersion.current.description)

  @Argument(
    help: ArgumentHelp(
      "The group folder; with --print-setup, the host roles: ROLE or ROLE:HOST (the host name defaults to the role's).",
      valueName: "folder-or-roles"))
  var arguments: [String] = []

  /// The group folder (`validate()` requires exactly one unless printing the set-up).
  private var directory: String { arguments.first ?? "" }

  @Flag(
    name: .customLong("print-setup"),
    help: "Print the SQL an administrator runs once (psql -v ON_ERROR_STOP=1) to make the tables, a login role per host and row-level security for --group, and exit.")
  var printSetup = false

  @Option(
    name: .long,
    help: ArgumentHelp(
      "libpq connection string of the shared database, without a password (default: libpq's PG* environment).",
      valueName: "conninfo"))
  var postgres: String?

  @Option(
    name: .customLong("postgres-file"),
    help: ArgumentHelp(
      "A file holding the connection string (it may hold the password); mode 0600 or less.", valueName: "file"))
  var postgresFile: String?

  @Option(name: .customLong("store"), help: "A store to replicate (repeatable; default: main).")
  var stores: [String] = []

  @Option(name: .long, help: "This host's name in the group (default: the machine's).")
  var host: String?

  @Option(name: .long, help: "The group's name in PostgreSQL (default: the folder's name).")
  var group: String?

  @Option(
    name: .long,
    help: ArgumentHelp(
      "How concurrent writes are settled (repeatable): POLICY for the group, TABLE=POLICY, TABLE.COLUMN=POLICY; "
        + "POLICY is object-trump (the later write's values win; the default) or store-trump (the earlier's), "
        + "also named last-writer-wins and first-writer-wins. The same on every host.",
      valueName: "rule"))
  var policy: [String] = []

  @Option(
    name: .long,
    help: ArgumentHelp(
      "A table whose concurrent writes are settled whole rows, not column by column (repeatable).",
      valueName: "table"))
  var wholeRows: [String] = []

  @Option(
    name: .long,
    help: ArgumentHelp(
      "The newest log format this relay reads and writes (default: the newest it knows); 1 keeps the group "
        + "settling whole rows, as relays before format 2 did.",
      valueName: "N"))
  var logFormat: Int?

  @Option(
    name: .long,
    help: ArgumentHelp(
      "With --print-setup or --configure: the group's retention, 'all' (the default) or the number of entries each store's log keeps; older ones are purged once every member has applied them.",
      valueName: "N|all"))
  var retention: String?

  @Option(
    name: .customLong("retention-passes-members"),
    help: ArgumentHelp(
      "With --print-setup or --configure: true lets retention purge entries members have not applied yet (they re-synchronise); default false.",
      valueName: "true|false"))
  var retentionPassesMembers: Bool?

  @Option(
    name: .customLong("max-shipment-bytes"),
    help: ArgumentHelp(
      "With --print-setup or --configure: the largest shipment the server takes from a host (default 64 MiB).",
      valueName: "bytes"))
  var maxShipmentBytes: Int64?

  @Flag(
    name: .customLong("older-relays"),
    help: "With --print-setup: also grant what relays before version 5 write with, during a rolling upgrade (any host could then rewrite the log); run the set-up again without it once every host runs relay 5.")
  var olderRelays = false

  @Flag(
    name: .long,
    help: "Set --group's settings on the server (--retention, --retention-passes-members, --max-shipment-bytes; an administrator's act), print the fleet and exit.")
  var configure = false

  @Option(
    name: .long,
    help: ArgumentHelp(
      "How this relay learns that another host shipped: notify (a session of its own, LISTENing on the group's "
        + "channel; the default) or poll (reads the log every --poll-interval; works through a pooler in "
        + "transaction mode such as PgBouncer). Hosts of one group may differ.",
      valueName: "notify|poll"))
  var transport: String = "notify"

  @Option(
    name: .long,
    help: "Seconds between reads of the log: with --transport poll, always (default 0.1); with notify, after a quiet spell (default 1).")
  var pollInterval: Double?

  @Option(
    name: .long,
    help: "With --transport poll: seconds the host's lease on the server lasts unrenewed (default 10); another relay of the host takes over that long after this one went silent.")
  var leaseDuration: Double = 10

  @Option(
    name: .long,
    help: "Seconds a shipment waits after the one before, so that a stream of commits ships together (default 0.002).")
  var batchWindow: Double = 0.002

  @Option(name: .long, help: "Seconds of silence after which the link to PostgreSQL is taken for dead (default 6).")
  var deadLinkTimeout: Double?

  @Option(
    name: .long,
    help: ArgumentHelp(
      "Write the relay's metrics to this file in Prometheus's text format, for node_exporter's textfile collector.",
      valueName: "path"))
  var metricsFile: String?

  @Option(
    name: .long,
    help: ArgumentHelp(
      "Write the timestamps of each step of every shipment and apply (JSON lines) to this file when the relay stops.",
      valueName: "path"))
  var trace: String?

  @Option(name: .long, help: "Seconds between writes of the --metrics-file.")
  var metricsInterval: Double = 5

  /// With --metrics-file: the relay's metrics and its stores' go to the
  /// file (written once now, so that a path that cannot be written stops
  /// the relay as it starts); without it they are dropped, as by default.
  private func openMetricsFile() throws -> MetricsFile? {
    guard let metricsFile else { return nil }
    guard metricsInterval > 0, metricsInterval.isFinite else {
      throw ValidationError("--metrics-interval: a number of seconds above 0")
    }
    let registry = PrometheusCollectorRegistry()
    MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    do {
      return try MetricsFile(
        path: metricsFile, interval: .milliseconds(Int64(metricsInterval * 1000)), registry: registry)
    } catch {
      FileHandle.standardError.write(Data("groupsync-relay: \(error)\n".utf8))
      throw ExitCode.failure
    }
  }

  @Flag(
    name: .long,
    help: "Print where --group's fleet stands (its log format; each host's relay version, formats, last sign of life, holds) and exit.")
  var fleet = false

  @Option(
    name: .long,
    help: ArgumentHelp(
      "Retire a host of --group gone for good, so that the group's log format no longer waits for it (an administrator's act), print the fleet and exit.",
      valueName: "host"))
  var retire: String?

  @Flag(
    name: .customLong("no-prepared-statements"),
    help: "Send every statement unnamed, prepared nowhere: for a pooler in transaction mode, which does not keep a session's prepared statements.")
  var noPreparedStatements = false

  /// Tests of rolling upgrades only (``RelayConfiguration/speaksTestingFormat``).
  @Flag(name: .customLong("testing-format"), help: .hidden)
  var testingFormat = false

  @Option(
    name: .customLong("reference"),
    help: ArgumentHelp(
      "A relation the schema does not declare: TABLE.COLUMN=PARENT[:set-null] (repeatable; every host the same).",
      valueName: "relation"))
  var references: [String] = []

  func validate() throws {
    if printSetup {
      guard group != nil else {
        throw ValidationError("--print-setup needs --group NAME (the group's name in PostgreSQL, as its relays use it)")
      }
      guard !arguments.isEmpty else { throw ValidationError("--print-setup needs at least one ROLE or ROLE:HOST") }
      guard postgres == nil, postgresFile == nil else {
        throw ValidationError("--print-setup prints SQL for psql and connects nowhere: drop --postgres and --postgres-file")
      }
    } else if fleet || retire != nil || configure {
      guard group != nil else {
        throw ValidationError("--fleet, --retire and --configure need --group NAME (the group's name in PostgreSQL)")
      }
      guard arguments.isEmpty else { throw ValidationError("--fleet, --retire and --configure take no folder") }
      if configure, try settings().isEmpty {
        throw ValidationError("--configure: name a setting (--retention, --retention-passes-members, --max-shipment-bytes)")
      }
      let namesSettings = try !settings().isEmpty
      guard configure || !namesSettings, !olderRelays else {
        throw ValidationError("the group's settings go with --configure (or --print-setup), --older-relays with --print-setup")
      }
    } else {
      guard retention == nil, retentionPassesMembers == nil, maxShipmentBytes == nil, !olderRelays else {
        throw ValidationError(
          "--retention, --retention-passes-members, --max-shipment-bytes and --older-relays are the group's settings "
            + "on the server, an administrator's, since relay 5 (one host must not purge what the others need): "
            + "set them with `groupsync relay --configure --group GROUP --postgres ADMIN_CONNINFO --retention N`, "
            + "or in the set-up (--print-setup)")
      }
      guard arguments.count == 1 else {
        throw ValidationError(arguments.isEmpty ? "missing the group folder" : "one group folder only (roles go with --print-setup)")
      }
    }
  }

  func run() throws {
    if printSetup {
      do {
        let setup = try AccessSetup(
          group: group ?? "", members: arguments.map(AccessSetup.Member.init(parsing:)), settings: try settings(),
          allowsOlderRelays: olderRelays)
        print(setup.script, terminator: "")
        return
      } catch {
        throw ValidationError("--print-setup: \(error)")
      }
    }
    if fleet || retire != nil || configure { return try showFleet() }
    var configuration = RelayConfiguration(folder: directory, conninfo: try conninfo(), group: group, host: host)
    if !stores.isEmpty { configuration.stores = stores }
    do {
      for rule in policy { try configuration.merge.parse(rule) }
    } catch let error as RelayError {
      throw ValidationError(error.description)
    }
    for table in wholeRows { configuration.merge.settleWholeRows(table) }
    if let logFormat {
      let known = configuration.version.reads.map(\.rawValue)
      guard known.contains(logFormat) else {
        throw ValidationError("--log-format \(logFormat): this relay knows formats \(known.map(String.init).joined(separator: ", "))")
      }
      configuration.newestFormat = LogFormat(rawValue: logFormat)
    }
    configuration.speaksTestingFormat = testingFormat
    configuration.traceFile = trace
    configuration.preparesStatements = !noPreparedStatements
    do {
      configuration.references = try references.map(RowReference.init(parsing:))
    } catch {
      throw ValidationError("--reference: \(error)")
    }
    guard let transport = RelayTransport(rawValue: transport) else {
      throw ValidationError("--transport \(transport): notify or poll")
    }
    configuration.transport = transport
    let pollInterval = pollInterval ?? (transport == .poll ? 0.1 : 1)
    guard pollInterval >= 0.001, pollInterval <= 3600 else { throw ValidationError("--poll-interval: seconds from 0.001 to 3600") }
    configuration.pollInterval = .microseconds(Int64(pollInterval * 1_000_000))
    guard leaseDuration.isFinite, leaseDuration >= 1, leaseDuration <= 3600 else {
      throw ValidationError("--lease-duration: seconds from 1 to 3600")
    }
    configuration.leaseDuration = .milliseconds(Int64(leaseDuration * 1000))
    guard batchWindow >= 0, batchWindow <= 10 else { throw ValidationError("--batch-window: seconds from 0 to 10") }
    configuration.batchWindow = .microseconds(Int64(batchWindow * 1_000_000))
    if let deadLinkTimeout {
      configuration.timeouts.deadLink = .milliseconds(Int64(deadLinkTimeout * 1000))
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let metrics = try openMetricsFile()
    // The final figures, also when the relay gave up.
    defer { metrics?.close() }
    let relay: Relay
    // A relay that gives up wakes the sigwait below, as a signal would.
    let mainThread = pthread_self()
    do {
      relay = try Relay(configuration) { event in
        guard let data = try? encoder.encode(event) else { return }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
        if case .failed = event { pthread_kill(mainThread, SIGTERM) }
      }
      // Signals are taken by a thread of their own (sigwait), so stop()
      // runs in an ordinary context.
      var signals = sigset_t()
      sigemptyset(&signals)
      sigaddset(&signals, SIGTERM)
      sigaddset(&signals, SIGINT)
      pthread_sigmask(SIG_BLOCK, &signals, nil)
      try relay.start()
      metrics?.start()
      FileHandle.standardError.write(
        Data("groupsync-relay: host \(configuration.host), group \(configuration.group), relaying \(configuration.stores.joined(separator: ", ")), transport \(configuration.transport)\n".utf8))
      var received: Int32 = 0
      sigwait(&signals, &received)
      relay.stop()
      if let failure = relay.failure { throw failure }
    } catch {
      FileHandle.standardError.write(Data("groupsync-relay: \(error)\n".utf8))
      throw ExitCode.failure
    }
  }

  /// The group settings the options name.
  private func settings() throws -> GroupSettings {
    do {
      let settings = GroupSettings(
        retention: try retention.map(GroupSettings.Retention.init(parsing:)),
        retentionPassesMembers: retentionPassesMembers, maxShipmentBytes: maxShipmentBytes)
      try settings.validate()
      return settings
    } catch let error as RelayError {
      throw ValidationError(error.description)
    }
  }

  /// `--fleet`, `--retire HOST`, `--configure`: where the group's fleet
  /// stands, after retiring a host or setting the group's settings if asked.
  private func showFleet() throws {
    let group = self.group ?? ""
    let state: GroupFleet
    do {
      if configure {
        state = try GroupFleet.configure(try settings(), group: group, conninfo: try conninfo())
      } else if let retire {
        state = try GroupFleet.retire(host: retire, group: group, conninfo: try conninfo())
      } else {
        state = try GroupFleet.read(group: group, conninfo: try conninfo())
      }
    } catch let error as RelayError {
      FileHandle.standardError.write(Data("groupsync-relay: \(error)\n".utf8))
      throw ExitCode.failure
    }
    print("group \(state.group): log format \(state.format)")
    print(state.settings.description)
    let header = ["HOST", "VERSION", "READS", "ANNOUNCED", "SEEN", "HOLDS", "TRANSPORT", "STATE"]
    let rows = state.members.map { member in
      [member.host, member.version ?? "1 (announces nothing)", member.reads.map(String.init).joined(separator: ","),
       member.announcedAt ?? "-", member.seenAt ?? "-", member.holds.isEmpty ? "-" : member.holds.joined(separator: " "),
       member.transport ?? "notify", member.retired ? "retired" : "member"]
    }
    let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
    for row in [header] + rows {
      print(row.indices.map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
        .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
    }
  }

  /// The connection string: `--postgres`, which must not hold a password
  /// (every user of the machine sees a command line), or `--postgres-file`,
  /// or neither (libpq's environment and files then say everything).
  private func conninfo() throws -> String {
    switch (postgres, postgresFile) {
    case (.some, .some):
      throw ValidationError("--postgres and --postgres-file: give one or the other")
    case (let conninfo?, nil):
      let holdsPassword: Bool
      do {
        holdsPassword = try ConnectionString.holdsPassword(conninfo)
      } catch {
        throw ValidationError("--postgres: \(error)")
      }
      if holdsPassword {
        throw ValidationError(
          "--postgres holds a password, which every user of this machine can read on the command line (ps): "
            + "put it in ~/.pgpass or the file PGPASSFILE names (host:port:database:user:password, mode 0600), "
            + "or the whole connection string in a file given as --postgres-file FILE (mode 0600)")
      }
      return conninfo
    case (nil, let path?):
      do {
        return try ConnectionString.read(fromFile: path)
      } catch {
        FileHandle.standardError.write(Data("groupsync-relay: \(error)\n".utf8))
        throw ExitCode.failure
      }
    case (nil, nil):
      return ""
    }
  }
}
