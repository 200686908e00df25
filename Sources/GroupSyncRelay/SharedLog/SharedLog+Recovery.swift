// SharedLog+Recovery: what a relay reads after each (re)connect to find where its store stands.
import Foundation

/// What a relay reads after each (re)connect, to find where its store
/// stands against the log (see ``Relay``'s recovery).
extension SharedLog {
  /// A replica's places on the server.
  struct Enrollment: Sendable {
    /// `gs_host.shipped_seq` (0 when none).
    let shipped: Int64
    /// The store's clock row (nil when none).
    let clock: Clock?
  }

  /// The log's last position and purge horizon, and the origin of the
  /// entry at the place asked about (nil: the log holds none there).
  struct Clock: Sendable {
    let head: Int64
    let purged: Int64
    let entryAtPlace: EntryOrigin?
  }

  /// Makes `replica`'s rows of `gs_host` and `gs_clock` if missing, clears
  /// a hold an earlier relay of this host left that its applied place
  /// passed (one it has not passed stays until this relay applies past it:
  /// the group's retention never purges the entries it holds for), and
  /// reads its shipped place, the clock, and the origin of the entry at
  /// `place` (this host's applied place), and the store's tag (``tags``):
  /// one round trip.
  func enroll(_ replica: Replica, place: Int64) throws -> Enrollment {
    let keys = [replica.group, replica.store, replica.host]
    let results = try exchange([
      .init("INSERT INTO gs_host(grp, store, host) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", keys),
      .init(
        "UPDATE gs_host SET held_at = NULL WHERE grp = $1 AND store = $2 AND host = $3 AND held_at <= applied_seq", keys),
      .init("INSERT INTO gs_clock(grp, store) VALUES ($1, $2) ON CONFLICT DO NOTHING", [replica.group, replica.store]),
      .init("SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3", keys),
      .init(
        """
        SELECT k.seq, k.purged_through, c.origin_host, c.origin_seq, k.tag FROM gs_clock k
        LEFT JOIN gs_change c ON c.grp = k.grp AND c.store = k.store AND c.seq = $3
        WHERE k.grp = $1 AND k.store = $2
        """, [replica.group, replica.store, place]),
    ])
    tags[replica.store] = try results[4].first?.decode(String?.self, at: 4)
    let clock = try results[4].first.flatMap { row -> Clock? in
      guard let head = try row.decode(Int64?.self, at: 0) else { return nil }
      return Clock(
        head: head, purged: try row.decode(Int64?.self, at: 1) ?? 0,
        entryAtPlace: try Self.origin(row, host: 2, sequence: 3))
    }
    return Enrollment(shipped: try results[3].first?.decode(Int64?.self, at: 0) ?? 0, clock: clock)
  }

  /// An entry `replica`'s host shipped: its position and body.
  struct OwnEntry: Sendable, Equatable {
    let position: Int64
    let body: String
  }

  /// The entries `replica`'s host shipped of local sequences after
  /// `originSequence`, in the log's order.
  func ownEntries(_ replica: Replica, after originSequence: Int64) throws -> [OwnEntry] {
    let rows = try connection.query(
      """
      SELECT seq, body FROM gs_change WHERE grp = $1 AND store = $2 AND origin_host = $3 AND origin_seq > $4
      ORDER BY seq
      """, [replica.group, replica.store, replica.host, originSequence])
    return try rows.map { row in
      OwnEntry(position: try row.decode(Int64.self, at: 0), body: try row.decode(String.self, at: 1))
    }
  }
}
