// What a relay is told: its folder, server, names, stores, rules and limits.
import CoreMetrics
import Foundation

/// How a relay connects a group folder to the other hosts.
public struct RelayConfiguration: Sendable {
  /// The group folder (this host's replicas).
  public var folder: String
  /// The libpq connection string of the shared database (empty: libpq's
  /// environment and files say everything). It may hold a password (read
  /// from a connection file): print it only as
  /// ``ConnectionString/redacted(_:)`` renders it.
  public var conninfo: String
  /// The group's name in PostgreSQL: the same on every host (by default
  /// the folder's last path component).
  public var group: String
  /// This host's name: unique in the group (by default the machine's).
  public var host: String
  /// The stores to replicate, by name (by default the main store).
  public var stores: [String]
  /// How concurrent writes are settled: by property (log format 2), with a
  /// policy for the group, per table and per column, tables that settle
  /// whole rows and merges of the program's own. The same on every host.
  public var merge: MergeRules
  /// The group's policy (``MergeRules/policy``).
  public var policy: ConflictPolicy {
    get { merge.policy }
    set { merge.policy = newValue }
  }
  /// Retention is no host's to decide since relay 5: one host could purge
  /// what the others had not applied yet. It is the group's setting on
  /// the server, an administrator's (``GroupSettings``).
  @available(
    *, unavailable,
    message: "retention is the group's setting on the server: GroupSettings, set by an administrator with GroupFleet.configure or AccessSetup(settings:)"
  )
  public var retention: Int64? {
    get { nil }
    set {}
  }
  /// How the relay learns that another host shipped (``RelayTransport``;
  /// default ``RelayTransport/notify``).
  public var transport: RelayTransport
  /// How often the log and the store are read without a wake-up (NOTIFY
  /// or a local commit); with the poll transport, how often the log is
  /// read whatever happens: the longest a shipment waits to be seen.
  public var pollInterval: Duration
  /// With the poll transport: how long the host's lease lasts unrenewed
  /// (renewed every third of it). A relay of the host on another machine
  /// takes over that long after this one went silent; this folder's own
  /// relay, restarted, takes it over at once. Default 10 s.
  public var leaseDuration: Duration
  /// How long after a shipment the next one waits, at least: commits that
  /// arrive in a stream then ship together, one entry and one round trip
  /// for many, instead of one each (which costs every relay CPU per entry
  /// and starves the writers of a busy machine). A commit after a quiet
  /// spell ships at once. Default 2 ms; zero ships every commit as soon
  /// as the relay sees it.
  public var batchWindow: Duration
  /// The longest wait between reconnection attempts (the wait doubles
  /// from 50 ms up to it).
  public var maximumReconnectDelay: Duration
  /// How long the relay waits on PostgreSQL, at most, for each thing: see
  /// ``RelayTimeouts`` for the defaults (a dead link is noticed within
  /// about 6 s; a host cut off mid-shipment holds the others about 2 s,
  /// until the server ends its idle transaction).
  public var timeouts: RelayTimeouts
  /// Relations the schema does not declare (no `REFERENCES`): columns that
  /// hold the rowid of another replicated row. They are translated like
  /// foreign keys (see ``RowReference``). Every host must declare the same.
  public var references: [RowReference]
  /// Where the relay reports its metrics (see ``RelayMetrics``); nil for
  /// the factory the program bootstrapped with `MetricsSystem.bootstrap(_:)`
  /// (by default one that drops them).
  public var metricsFactory: (any MetricsFactory)?
  /// For tests of rolling upgrades only: the relay also reads and writes
  /// ``LogFormat/testing``, a format newer than this build's with a change
  /// of meaning, as the next version's relay would (see
  /// ``RelayVersion/testing``). Never in production: only builds that set
  /// it read what it writes once the group moves up.
  public var speaksTestingFormat = false

  /// The newest log format this relay reads, announces and writes (nil:
  /// this build's newest). A group writes the newest format every member
  /// reads, so one relay capped at format 1 keeps the whole group at
  /// format 1: settling whole rows, as relays before format 2 did. Set it
  /// before the group moves up: a group never moves down, and a relay
  /// capped below the group's format holds at the first entry it cannot
  /// read.
  public var newestFormat: LogFormat?

  /// Whether the relay's session prepares the statements it sends with
  /// every shipment and apply once, under a name, so that the server
  /// parses and plans them once per session (the default). Off for a
  /// transport that does not keep a session's prepared statements from
  /// one transaction to the next (a pooler in transaction mode): every
  /// statement then goes unnamed, as before. A session that finds them
  /// forgotten time after time stops preparing by itself. The poll
  /// transport, made for poolers, never prepares.
  public var preparesStatements = true

  /// Where the relay writes the timestamps of each step of its shipments
  /// and applies (JSON lines, see the Benchmarks article) when it stops;
  /// nil, the default: nothing is stamped.
  public var traceFile: String?

  /// The relay's version and the formats it reads and writes.
  public var version: RelayVersion {
    var version: RelayVersion = speaksTestingFormat ? .testing : .current
    if let newestFormat {
      version.reads = version.reads.filter { $0 <= newestFormat }
      version.newestWritten = min(version.newestWritten, newestFormat)
    }
    return version
  }

  public init(folder: String, conninfo: String, group: String? = nil, host: String? = nil) {
    self.folder = folder
    self.conninfo = conninfo
    self.group = group ?? URL(fileURLWithPath: folder).standardizedFileURL.lastPathComponent
    self.host = host ?? ProcessInfo.processInfo.hostName
    stores = ["main"]
    merge = MergeRules(policy: .objectTrump)
    transport = .notify
    pollInterval = .seconds(1)
    leaseDuration = .seconds(10)
    batchWindow = .milliseconds(2)
    maximumReconnectDelay = .seconds(2)
    timeouts = RelayTimeouts()
    references = []
    metricsFactory = nil
  }
}
