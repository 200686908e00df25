// SharedLog+Applying: what the applier reads from the log, and the applied place it records.
import Foundation

/// What the applier reads from the log, and the applied place it records
/// there.
extension SharedLog {
  /// The log of one store from a place on, read in one snapshot.
  struct Window: Sendable {
    /// The log's last position, and its purge horizon.
    let head: Int64
    let purged: Int64
    /// The entries from the place on, in order.
    let entries: [StoredEntry]
  }

  /// An entry of `gs_change`.
  struct StoredEntry: Sendable, Equatable {
    let position: Int64
    let origin: EntryOrigin
    /// nil when not asked for (the entry at the place itself).
    let body: String?
  }

  /// ``window(_:from:limit:bodiesAfter:)``'s statement, prepared once per
  /// session.
  static let readWindow = PreparedSQL(
    "window",
    """
    SELECT k.seq, k.purged_through, c.seq, c.origin_host, c.origin_seq, c.body
    FROM gs_clock k LEFT JOIN LATERAL (
      SELECT seq, origin_host, origin_seq, CASE WHEN seq > $5 THEN body END AS body FROM gs_change
      WHERE grp = k.grp AND store = k.store AND seq >= $3 ORDER BY seq LIMIT $4) c ON true
    WHERE k.grp = $1 AND k.store = $2
    """)

  /// In one statement, so one snapshot: the clock row of `replica`'s
  /// store, and at most `limit` entries from position `from` on, with the
  /// bodies of those after `bodiesAfter` (nil when there is no clock row).
  /// Unprepared (a pooler's session), through `gs_window_4`, whose plan
  /// the server keeps.
  func window(_ replica: Replica, from: Int64, limit: Int, bodiesAfter: Int64) throws -> Window? {
    let parameters: [any PostgresBindable] = [replica.group, replica.store, from, limit, bodiesAfter]
    let rows = try exchange([
      connection.preparesStatements
        ? Statement(Self.readWindow, parameters)
        : Statement("SELECT * FROM gs_window_4($1, $2, $3::bigint, $4::integer, $5::bigint)", parameters)
    ])[0]
    guard let clock = rows.first, let head = try clock.decode(Int64?.self, at: 0) else { return nil }
    var entries: [StoredEntry] = []
    for row in rows {
      // No entry: the clock row alone, its entry columns NULL.
      guard let position = try row.decode(Int64?.self, at: 2), let origin = try Self.origin(row, host: 3, sequence: 4)
      else { break }
      entries.append(StoredEntry(position: position, origin: origin, body: try row.decode(String?.self, at: 5)))
    }
    return Window(head: head, purged: try clock.decode(Int64?.self, at: 1) ?? 0, entries: entries)
  }

  /// Records `replica`'s applied place with the next round trip (see
  /// ``deferBookkeeping(_:for:)``): it is the other hosts' view of this
  /// one, never this host's own truth (that commits with the rows).
  func recordApplied(_ replica: Replica, through position: Int64) {
    deferBookkeeping(
      Statement(Self.updateApplied, [replica.group, replica.store, replica.host, position]), for: replica)
  }

  /// ``recordApplied(_:through:)``'s statement, prepared once per session:
  /// a hold the place passed is let go with it.
  static let updateApplied = PreparedSQL(
    "applied",
    """
    UPDATE gs_host SET applied_seq = $4, seen_at = now(), held_at = CASE WHEN held_at <= $4 THEN NULL ELSE held_at END
    WHERE grp = $1 AND store = $2 AND host = $3
    """)

  /// The rows' current images of `replica`'s store and the log's head,
  /// read in one read-only snapshot, to re-synchronise from.
  struct Snapshot: Sendable {
    let head: Int64
    /// The origin of the entry at the head (nil: none, or purged).
    let headOrigin: EntryOrigin?
    /// The rows' current images, oldest position first.
    let rows: [StoredRow]
  }

  /// Reads `replica`'s store whole: a read-only `REPEATABLE READ`
  /// transaction, so the head and the rows are one snapshot.
  func snapshot(_ replica: Replica) throws -> Snapshot {
    let keys = [replica.group, replica.store]
    return try connection.transaction {
      try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
      let clock = try connection.query(
        """
        SELECT k.seq, c.origin_host, c.origin_seq FROM gs_clock k
        LEFT JOIN gs_change c ON c.grp = k.grp AND c.store = k.store AND c.seq = k.seq
        WHERE k.grp = $1 AND k.store = $2
        """, keys)
      let rows = try connection.query(
        "SELECT tbl, gid, seq, columns, data FROM gs_row WHERE grp = $1 AND store = $2 ORDER BY seq, tbl, gid", keys)
      return Snapshot(
        head: try clock.first?.decode(Int64?.self, at: 0) ?? 0,
        headOrigin: try clock.first.flatMap { try Self.origin($0, host: 1, sequence: 2) },
        rows: try rows.map { try StoredRow($0) })
    }
  }

  /// How long ago the oldest entry of `replica`'s store after `applied`
  /// committed, in seconds (nil when there is none).
  func lagSeconds(_ replica: Replica, after applied: Int64) throws -> Double? {
    let rows = try exchange([
      Statement(
        """
        SELECT extract(epoch from clock_timestamp() - committed_at) FROM gs_change
        WHERE grp = $1 AND store = $2 AND seq > $3 ORDER BY seq LIMIT 1
        """, [replica.group, replica.store, applied]),
    ])[0]
    return try rows.first?.decode(Double?.self, at: 0)
  }
}
