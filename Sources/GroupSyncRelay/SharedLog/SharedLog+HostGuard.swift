// SharedLog+HostGuard: one relay per host of a group, on the whole server:
// the advisory lock a notify session holds, or the lease a poll relay
// renews (a pooler keeps no session for a lock to live in).
import Foundation

extension SharedLog {
  /// The advisory lock's keys, of `$1` = group U+0001 host.
  private static let hostLockKeys = "hashtext('groupsync-relay'), hashtext($1)"

  /// The notify transport's guard: takes the session-level advisory lock
  /// of `host` in `group`, which the server frees when the session ends
  /// (the relay died or disconnected); then checks that no relay of the
  /// poll transport holds the host's lease, unless it is `holder`: this
  /// folder's own relay, gone. Lock first, lease read after, while a poll
  /// relay writes its lease first and looks for the lock after: of two
  /// relays starting at once, at least one sees the other.
  ///
  /// - Throws: ``RelayError/relayAlreadyRunning(host:group:where:)`` when
  ///   another session holds the lock or another relay the lease.
  func lockHost(group: String, host: String, holder: UUID) throws {
    let results = try connection.query([
      Statement("SELECT pg_try_advisory_lock(\(Self.hostLockKeys))", [group + "\u{1}" + host]),
      Statement(
        """
        SELECT to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM gs_peer
        WHERE grp = $1 AND host = $2 AND lease_holder <> $3::uuid AND lease_until > clock_timestamp()
        """, [group, host, holder.uuidString]),
    ])
    guard let row = results[0].first, try row.decode(Bool.self, at: 0) else {
      throw RelayError.relayAlreadyRunning(host: host, group: group, where: "PostgreSQL advisory lock held")
    }
    if let until = try results[1].first?.decode(String?.self, at: 0) {
      try connection.query("SELECT pg_advisory_unlock(\(Self.hostLockKeys))", [group + "\u{1}" + host])
      throw RelayError.relayAlreadyRunning(
        host: host, group: group, where: "a relay of the poll transport holds the host's lease until \(until)")
    }
  }

  /// The poll transport's guard: takes `host`'s lease in `group` for
  /// `duration` as `holder`, if no other holder's lease is live; then
  /// checks that no notify session holds the host's advisory lock.
  ///
  /// - Throws: ``RelayError/relayAlreadyRunning(host:group:where:)``.
  func takeLease(group: String, host: String, holder: UUID, duration: Duration, version: RelayVersion) throws {
    let taken = try exchange([
      Statement(
        """
        INSERT INTO gs_peer AS p (grp, host, version, reads, transport, lease_holder, lease_until)
        VALUES ($1, $2, $3, $4::smallint[], 'poll', $5::uuid, clock_timestamp() + make_interval(secs => $6::float8))
        ON CONFLICT (grp, host) DO UPDATE SET lease_holder = excluded.lease_holder, lease_until = excluded.lease_until
        WHERE p.lease_holder IS NULL OR p.lease_until IS NULL OR p.lease_holder = excluded.lease_holder
          OR p.lease_until < clock_timestamp()
        RETURNING 1
        """,
        [group, host, version.name, version.reads.map(\.rawValue), holder.uuidString, duration.inSeconds]),
      Statement(
        "SELECT to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM gs_peer "
          + "WHERE grp = $1 AND host = $2", [group, host]),
    ])
    guard !taken[0].isEmpty else {
      let until = try taken[1].first?.decode(String?.self, at: 0) ?? "?"
      throw RelayError.relayAlreadyRunning(
        host: host, group: group, where: "another relay holds the host's lease until \(until)")
    }
    let locked = try connection.query(
      """
      SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
        AND l.classid = hashtext('groupsync-relay')::oid AND l.objid = hashtext($1)::oid AND l.objsubid = 2)
      """, [group + "\u{1}" + host])
    if let row = locked.first, try row.decode(Bool.self, at: 0) {
      try releaseLease(group: group, host: host, holder: holder)
      throw RelayError.relayAlreadyRunning(host: host, group: group, where: "PostgreSQL advisory lock held")
    }
    leaseHolder = holder
  }

  /// Renews the lease `holder` holds for another `duration`.
  ///
  /// - Throws: ``RelayError/relayAlreadyRunning(host:group:where:)`` when
  ///   another relay of the host took it over (this one was silent past
  ///   its lease).
  func renewLease(group: String, host: String, holder: UUID, duration: Duration) throws {
    let rows = try exchange([
      Statement(
        """
        UPDATE gs_peer SET lease_until = clock_timestamp() + make_interval(secs => $4::float8)
        WHERE grp = $1 AND host = $2 AND lease_holder = $3::uuid RETURNING 1
        """, [group, host, holder.uuidString, duration.inSeconds])
    ])
    guard !rows[0].isEmpty else {
      throw RelayError.relayAlreadyRunning(
        host: host, group: group, where: "another relay took the host's lease over while this one was silent")
    }
  }

  /// Gives the lease up, so that the host's next relay need not wait for
  /// it to run out.
  func releaseLease(group: String, host: String, holder: UUID) throws {
    _ = try exchange([
      Statement(
        "UPDATE gs_peer SET lease_until = NULL WHERE grp = $1 AND host = $2 AND lease_holder = $3::uuid",
        [group, host, holder.uuidString])
    ])
  }
}
