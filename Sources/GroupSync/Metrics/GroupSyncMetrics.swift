import CoreMetrics

/// The names of the metrics GroupSync reports through swift-metrics, and
/// their dimensions.
///
/// GroupSync reports to the factory the program bootstraps with
/// `MetricsSystem.bootstrap(_:)`, or to the one given in
/// ``StoreOptions/metricsFactory`` and ``ListenerOptions/metricsFactory``.
/// Metric objects are made once per store and per listener, so reporting
/// costs a few atomic operations per change set. For example, with
/// swift-prometheus:
///
/// ```swift
/// let registry = PrometheusCollectorRegistry()
/// MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
/// let group = try GroupFolder(path: "/srv/app/group")
/// // … later, scrape: groupsync_listener_lag_sequences{listener="indexer",store="main"} 0
/// ```
///
/// Writers (dimension `store`, the store's name):
/// - ``changeSetsPublished``: change sets committed and published.
/// - ``deliveriesFailed``: deliveries to a live listener that failed (it
///   reads that change set from the history instead).
/// - ``captureRows``: rows named per change set (a recorder).
/// - ``commitDuration``: from the start of a `Store.write` transaction to
///   its COMMIT, for transactions that changed rows (a timer).
/// - ``publishDuration``: fan-out of one change set to the inboxes (a timer).
///
/// Listeners (dimensions `listener`, its name or `ephemeral` for one
/// started without a name, and `store`):
/// - ``changeSetsDelivered``: change sets delivered.
/// - ``resets``: resets, with a dimension `reason`, one of
///   ``ResetCause``'s raw values.
/// - ``gapRepairs``: missing change sets read from the history.
/// - ``backlog``: change sets waiting for the listener, in its inbox and in
///   memory (a gauge, set on each rescan tick).
/// - ``lagSequences``: how many sequence numbers the listener is behind the
///   store (a gauge, set on each delivery and each rescan tick).
/// - ``lagSeconds``: how long ago the change set just delivered committed
///   (a gauge).
public enum GroupSyncMetrics {
  /// Change sets committed and published (counter; `store`).
  public static let changeSetsPublished = "groupsync_change_sets_published_total"
  /// Deliveries to live listeners that failed (counter; `store`).
  public static let deliveriesFailed = "groupsync_deliveries_failed_total"
  /// Rows named per change set (recorder; `store`).
  public static let captureRows = "groupsync_capture_rows"
  /// A `Store.write` transaction, from its start to COMMIT (timer; `store`).
  public static let commitDuration = "groupsync_commit_duration"
  /// The fan-out of one change set (timer; `store`).
  public static let publishDuration = "groupsync_publish_duration"
  /// Change sets delivered (counter; `listener`, `store`).
  public static let changeSetsDelivered = "groupsync_change_sets_delivered_total"
  /// Resets (counter; `listener`, `store`, `reason`).
  public static let resets = "groupsync_resets_total"
  /// Missing change sets read from the history (counter; `listener`, `store`).
  public static let gapRepairs = "groupsync_gap_repairs_total"
  /// Change sets waiting for a listener (gauge; `listener`, `store`).
  public static let backlog = "groupsync_listener_backlog"
  /// Sequence numbers a listener is behind its store (gauge; `listener`, `store`).
  public static let lagSequences = "groupsync_listener_lag_sequences"
  /// Age of the change set a listener just delivered, in seconds (gauge; `listener`, `store`).
  public static let lagSeconds = "groupsync_listener_lag_seconds"

  /// The value of the `listener` dimension of a listener started without
  /// a name: such names are made up per process and would make a new
  /// series on every start.
  public static let ephemeralListener = "ephemeral"

  /// Why a listener reset, as the `reason` dimension of ``resets`` says it:
  /// a small fixed set, each a group of ``ResetReason``'s cases.
  public enum ResetCause: String, Sendable, CaseIterable {
    /// A durable listener's place expired or cannot be read.
    case expired
    /// A missing change set could not be read from the history (purged,
    /// unreadable, never committed).
    case historyUnavailable = "history_unavailable"
    /// A change-set file was unreadable, oversized, forged or of another store.
    case badFile = "bad_file"
    /// The store changed without a change set (a foreign writer, VACUUM),
    /// or a read-only store was replaced or removed.
    case storeChanged = "store_changed"
    /// The inbox or the in-process backlog went over its bounds.
    case overflow
    /// The listener's inbox or folder was tampered with, removed or replaced.
    case folder
    /// Anything else.
    case other

    /// The cause of `reset`: ``expired`` for a durable listener's expired
    /// place, else the group its ``Reset/why`` belongs to.
    ///
    /// For example:
    ///
    /// ```swift
    /// let cause = GroupSyncMetrics.ResetCause(reset)  // .historyUnavailable
    /// ```
    public init(_ reset: Reset) {
      self = reset.isExpired ? .expired : Self(reset.why)
    }

    /// The group `reason` belongs to.
    public init(_ reason: ResetReason) {
      switch reason {
      case .placeUnreadable, .placeAhead, .placeExpired, .readOnlyStoreReplacedWhileAway:
        self = .expired
      case .historyPurged, .notInHistory, .historyEntryUnreadable, .historyUnreadable, .replayUnreadable, .noHistory:
        self = .historyUnavailable
      case .fileUnopenable, .fileTooLarge, .fileUnreadable, .fileOfAnotherStore, .fileSequenceMismatch,
        .fileUnknownTable:
        self = .badFile
      case .foreignCommit, .readOnlyStoreReplaced, .readOnlyStoreRemoved:
        self = .storeChanged
      case .inProcessBacklogOverflowed, .inboxOverflowed:
        self = .overflow
      case .foreignEntries, .inboxUnlistable, .foldersReplaced, .foldersUnrecoverable:
        self = .folder
      case .text:
        self = .other
      }
    }
  }
}
