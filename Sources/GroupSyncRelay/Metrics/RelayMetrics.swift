// The names and labels of the relay's metrics, for dashboards.
import CoreMetrics

/// The names of the metrics a ``Relay`` reports through swift-metrics, and
/// their dimensions.
///
/// A relay reports to ``RelayConfiguration/metricsFactory``, or else to the
/// factory the program bootstrapped with `MetricsSystem.bootstrap(_:)`.
/// Metric objects are made once per replicated store when the relay
/// starts, so reporting costs a few atomic operations per entry, and
/// nothing is asked of the server for them: they are the figures the relay
/// counts anyway (see ``RelayEvent`` and `RelayStatus`). For example:
///
/// ```swift
/// var configuration = RelayConfiguration(folder: "/srv/app/group", conninfo: "host=db.example dbname=app")
/// configuration.metricsFactory = PrometheusMetricsFactory(registry: registry)
/// let relay = try Relay(configuration)
/// // … later, scrape:
/// // groupsync_relay_entries_shipped_total{group="group",host="web-1",store="main"} 42
/// ```
///
/// Per replicated store (dimensions `group`, `store` and `host`):
/// - ``entriesShipped``: log entries this host shipped.
/// - ``entriesApplied``: log entries applied here, other hosts' and this
///   host's own (an own entry that settled nothing counts as applied when
///   it ships).
/// - ``lagEntries``: log entries past this host's applied place (a gauge,
///   set with the relay's status, at most every 200 ms and on each pass).
/// - ``lagSeconds``: the age of the oldest entry not applied yet, 0 when
///   caught up (a gauge, as ``lagEntries``).
/// - ``conflicts``: conflicts this host saw settled (since log format 2,
///   one per column both writes changed), with a dimension `rule`:
///   `object-trump`, `store-trump` (before relay 3: `last-writer-wins`,
///   `first-writer-wins`), `merge:` and the name of a ``CustomMerge``,
///   `unique-key`, or `parent-deleted:` and the reference's
///   ``RowReference/DeleteAction`` (`cascade`, `set-null`, `set-default`).
/// - ``heldRows``: row images held back now, waiting to be applied, with a
///   dimension `reason`, one of ``HeldCause``'s raw values (a gauge, as
///   ``lagEntries``).
/// - ``formatHeld``: the log format the store holds for (an entry in a
///   format this relay does not read: it applies and ships nothing until
///   upgraded), 0 when it does not hold (a gauge, as ``lagEntries``).
/// - ``shipDuration``: one shipment, from reading the local changes to the
///   local bookkeeping after PostgreSQL's COMMIT (a timer).
/// - ``applyDuration``: one batch of entries applied in one local
///   transaction (a timer).
///
/// Per relay (dimensions `group` and `host`):
/// - ``reconnects``: connections made again after the first one of the
///   relay's life (after a lost link, a failover, a killed backend).
/// - ``connected``: 1 while the relay holds a working connection, else 0.
public enum RelayMetrics {
  /// Log entries this host shipped (counter; `group`, `store`, `host`).
  public static let entriesShipped = "groupsync_relay_entries_shipped_total"
  /// Log entries applied here (counter; `group`, `store`, `host`).
  public static let entriesApplied = "groupsync_relay_entries_applied_total"
  /// Log entries past the applied place (gauge; `group`, `store`, `host`).
  public static let lagEntries = "groupsync_relay_lag_entries"
  /// Age of the oldest entry not applied yet, in seconds (gauge; `group`, `store`, `host`).
  public static let lagSeconds = "groupsync_relay_lag_seconds"
  /// Conflicts settled (counter; `group`, `store`, `host`, `rule`).
  public static let conflicts = "groupsync_relay_conflicts_total"
  /// Row images held back now (gauge; `group`, `store`, `host`, `reason`).
  public static let heldRows = "groupsync_relay_held_rows"
  /// One shipment (timer; `group`, `store`, `host`).
  public static let shipDuration = "groupsync_relay_ship_duration"
  /// See the list above.
  public static let formatHeld = "groupsync_relay_format_held"
  /// One batch of entries applied in one local transaction (timer; `group`, `store`, `host`).
  public static let applyDuration = "groupsync_relay_apply_duration"
  /// Connections made again (counter; `group`, `host`).
  public static let reconnects = "groupsync_relay_reconnects_total"
  /// Whether the relay is connected, 1 or 0 (gauge; `group`, `host`).
  public static let connected = "groupsync_relay_connected"

  /// Why a row image is held back, as the `reason` dimension of
  /// ``heldRows`` says it (the ``RelayEvent/held(store:table:gid:reason:)``
  /// event tells it in words).
  public enum HeldCause: String, Sendable, CaseIterable, Codable {
    /// A reference in it names a row this host does not have yet (a parent
    /// later in the log, or held itself).
    case missingRow = "missing_row"
    /// A reference column holds a plain number, from a host that does not
    /// translate the column as a reference: give every host the same
    /// references.
    case untranslatedReference = "untranslated_reference"
    /// Its table does not exist here yet (added on another host).
    case missingTable = "missing_table"
    /// Held by a relay of a version that did not record why.
    case unknown
  }

  /// The `rule` values of ``conflicts`` a relay can report, each counted
  /// from 0 from the start.
  public static let conflictRules: [String] =
    ConflictPolicy.allCases.map(\.rawValue) + ["unique-key"]
    + RowReference.DeleteAction.allCases.map { "parent-deleted:\($0.rawValue)" }
}
