import Foundation

/// A shipment's statements: in one round trip when no row it writes moved
/// on in the log meanwhile, else the rows locked and read, then the
/// position taken, the images and the entry written, in two more (see
/// ``Shipper``).
extension SharedLog {
  /// A row of `gs_row`: its current image, the position and host that
  /// wrote it, its columns (a JSON array) and values (JSON; nil: deleted).
  struct CurrentRow: Sendable, Equatable {
    let table: String
    let gid: String
    let position: Int64
    let host: String
    let columns: String
    let data: String?
  }

  /// What a shipment's first round trip found, its transaction left open.
  struct OpenShipment: Sendable {
    /// This host's shipped place in `gs_host` (0 when none), locked.
    let shippedPlace: Int64
    /// The current images of the rows the shipment writes, locked.
    let rows: [CurrentRow]
  }

  /// An image that goes into `gs_row` as the row's current one, and the
  /// position of the image it was written on (checked when not settled).
  struct Winner: Sendable, Equatable {
    let table: String
    let gid: String
    let base: Int64
    let columns: String
    let data: String?
  }

  /// What a shipment writes.
  struct Shipment: Sendable {
    /// The local sequence it ships through (`gs_host.shipped_seq`, and the
    /// entry's `origin_seq`).
    let through: Int64
    /// The entry's body (``LogEntry/encoded()``).
    let body: String
    /// Entries older than the newest minus this are purged (nil: none).
    let retention: Int64?
    let winners: [Winner]
    /// The conflicts settled, each with its record as JSON.
    let conflicts: [(record: ConflictRecord, json: String)]
  }

  /// `BEGIN`, then locks `replica`'s row of `gs_host` and the rows of
  /// `gs_row` named by `targets`, and reads them: one round trip. The
  /// transaction stays open for ``ship(_:_:settled:)`` (or a rollback).
  func beginShipment(_ replica: Replica, targets: [(table: String, gid: String)]) throws -> OpenShipment {
    let results = try connection.run([
      .init("BEGIN"),
      .init(
        "SELECT shipped_seq FROM gs_host WHERE grp = $1 AND store = $2 AND host = $3 FOR UPDATE",
        [replica.group, replica.store, replica.host]),
      .init(
        """
        SELECT r.tbl, r.gid, r.seq, r.origin_host, r.columns, r.data
        FROM (SELECT DISTINCT u.tbl, u.gid FROM unnest($3::text[], $4::text[]) AS u(tbl, gid) ORDER BY u.tbl, u.gid) w
        CROSS JOIN LATERAL (
          SELECT g.tbl, g.gid, g.seq, g.origin_host, g.columns, g.data FROM gs_row g
          WHERE g.grp = $1 AND g.store = $2 AND g.tbl = w.tbl AND g.gid = w.gid FOR UPDATE) r
        """,
        [replica.group, replica.store, PostgresArray.literal(targets.map(\.table)),
         PostgresArray.literal(targets.map(\.gid))]),
    ])
    let rows = results[2].compactMap { row -> CurrentRow? in
      guard let table = row[0], let gid = row[1], let position = Self.integer(row[2]), let host = row[3],
        let columns = row[4]
      else { return nil }
      return CurrentRow(table: table, gid: gid, position: position, host: host, columns: columns, data: row[5])
    }
    return OpenShipment(shippedPlace: Self.integer(results[1].first?[0] ?? nil) ?? 0, rows: rows)
  }

  /// How ``ship(_:_:settled:)`` ended.
  enum ShipOutcome: Sendable, Equatable {
    /// Appended as the entry at this position.
    case shipped(position: Int64)
    /// This host's shipped place on the server is already `through` or
    /// past it (a relay killed after COMMIT): nothing was written.
    case alreadyShipped(through: Int64)
    /// A row the shipment writes moved on in the log since the image this
    /// host wrote on: nothing was written; settle it
    /// (``beginShipment(_:targets:)``) and ship again, settled.
    case rowsMoved
  }

  /// Ships in one statement, `gs_ship`: unless `settled`, it locks this
  /// host's shipped place and the rows the shipment writes, and stops if
  /// the place is already past `through` or a row moved past the image's
  /// base; then it takes the next position (`UPDATE gs_clock … RETURNING
  /// seq`: the row lock orders shippers, so positions are gapless and in
  /// commit order), records the winners, appends the entry and its
  /// conflicts, moves the shipped place, purges what retention lets go
  /// and notifies (the entry itself in the payload when it fits and the
  /// log is not under row-level security, see ``Hint``).
  ///
  /// Not `settled`: one statement on its own, so one round trip and its
  /// own transaction; the deferred bookkeeping rides along. `settled`:
  /// inside the transaction ``beginShipment(_:targets:)`` opened, with its
  /// `COMMIT` in the same pipeline, so the server runs it through without
  /// waiting for this host.
  ///
  /// - Throws: ``RelayError/invalidEntry(store:sequence:reason:)`` when
  ///   `gs_clock` has no row for the store.
  func ship(_ replica: Replica, _ shipment: Shipment, settled: Bool) throws -> ShipOutcome {
    let conflicts = shipment.conflicts.map(\.record)
    let statement = Statement(
      """
      SELECT outcome, pos FROM gs_ship($1, $2, $3, $4::bigint, $5, $6::bigint,
        $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[],
        $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::boolean)
      """,
      [
        replica.group, replica.store, replica.host, String(shipment.through), shipment.body,
        shipment.retention.map { String($0) },
        PostgresArray.literal(shipment.winners.map(\.table)), PostgresArray.literal(shipment.winners.map(\.gid)),
        PostgresArray.literal(shipment.winners.map { String($0.base) }),
        PostgresArray.literal(shipment.winners.map(\.columns)), PostgresArray.literal(shipment.winners.map(\.data)),
        PostgresArray.literal(conflicts.map(\.table)), PostgresArray.literal(conflicts.map(\.gid)),
        PostgresArray.literal(conflicts.map(\.rule)), PostgresArray.literal(conflicts.map(\.winnerHost)),
        PostgresArray.literal(conflicts.map(\.loserHost)), PostgresArray.literal(shipment.conflicts.map(\.json)),
        settled ? "true" : "false",
      ])
    let rows = settled ? try connection.run([statement, Statement("COMMIT")])[0] : try exchange([statement])[0]
    let outcome = rows.first?[0] ?? nil, position = Self.integer(rows.first?[1] ?? nil) ?? 0
    switch outcome {
    case "shipped": return .shipped(position: position)
    case "already": return .alreadyShipped(through: position)
    case "moved": return .rowsMoved
    default:
      throw RelayError.invalidEntry(store: replica.store, sequence: 0, reason: "gs_clock has no row for the store")
    }
  }

  /// `gs_ship`'s argument types, as `GRANT` and `to_regprocedure` name it.
  static let shipSignature =
    "gs_ship(text, text, text, bigint, text, bigint, text[], text[], bigint[], text[], text[], "
    + "text[], text[], text[], text[], text[], text[], boolean)"

  /// `gs_ship`'s body as the server keeps it (`pg_proc.prosrc`): a
  /// relay that finds another one there replaces it, or says it may not.
  static let shipSource = shipFunction.components(separatedBy: "$fn$")[1]

  /// `gs_ship`, created with the tables (see ``ship(_:_:settled:)``). Its
  /// row locks are taken in (table, global ID) order, as
  /// ``beginShipment(_:targets:)`` takes them, and before the clock row,
  /// so that shippers never deadlock.
  static let shipFunction = """
    CREATE OR REPLACE FUNCTION gs_ship(
      p_grp text, p_store text, p_host text, p_through bigint, p_body text, p_retention bigint,
      w_tbl text[], w_gid text[], w_base bigint[], w_columns text[], w_data text[],
      c_tbl text[], c_gid text[], c_rule text[], c_winner text[], c_loser text[], c_record text[],
      p_settled boolean)
    RETURNS TABLE(outcome text, pos bigint) LANGUAGE plpgsql AS $fn$
    DECLARE
      v_shipped bigint;
      v_moved boolean;
      v_seq bigint;
      v_purged bigint;
      v_hint text;
    BEGIN
      IF NOT p_settled THEN
        SELECT h.shipped_seq INTO v_shipped FROM gs_host h
        WHERE h.grp = p_grp AND h.store = p_store AND h.host = p_host FOR UPDATE;
        IF v_shipped >= p_through THEN
          RETURN QUERY SELECT 'already'::text, v_shipped;
          RETURN;
        END IF;
        -- One primary-key lookup per row, whatever the planner thinks of
        -- the table's size, in (table, global ID) order.
        SELECT coalesce(bool_or(r.seq > w.base), false) INTO v_moved
        FROM (SELECT DISTINCT u.tbl, u.gid, u.base FROM unnest(w_tbl, w_gid, w_base) AS u(tbl, gid, base)
              ORDER BY u.tbl, u.gid) w
        CROSS JOIN LATERAL (
          SELECT g.seq FROM gs_row g
          WHERE g.grp = p_grp AND g.store = p_store AND g.tbl = w.tbl AND g.gid = w.gid FOR UPDATE) r;
        IF v_moved THEN
          RETURN QUERY SELECT 'moved'::text, 0::bigint;
          RETURN;
        END IF;
      END IF;
      UPDATE gs_clock k SET seq = k.seq + 1,
        purged_through = CASE WHEN p_retention IS NULL THEN k.purged_through
                              ELSE greatest(k.purged_through, k.seq + 1 - p_retention) END
      WHERE k.grp = p_grp AND k.store = p_store RETURNING k.seq, k.purged_through INTO v_seq, v_purged;
      IF v_seq IS NULL THEN
        RETURN QUERY SELECT 'noclock'::text, 0::bigint;
        RETURN;
      END IF;
      INSERT INTO gs_row AS r (grp, store, tbl, gid, seq, origin_host, columns, data)
      SELECT p_grp, p_store, w.tbl, w.gid, v_seq, p_host, w.columns, w.data
      FROM unnest(w_tbl, w_gid, w_columns, w_data) AS w(tbl, gid, columns, data)
      ON CONFLICT (grp, store, tbl, gid) DO UPDATE SET seq = excluded.seq,
        origin_host = excluded.origin_host, columns = excluded.columns, data = excluded.data;
      INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body)
      VALUES (p_grp, p_store, v_seq, p_host, p_through, p_body);
      INSERT INTO gs_conflict(grp, store, seq, tbl, gid, rule, winner_host, loser_host, record)
      SELECT p_grp, p_store, v_seq, c.tbl, c.gid, c.rule, c.winner, c.loser, c.record
      FROM unnest(c_tbl, c_gid, c_rule, c_winner, c_loser, c_record) AS c(tbl, gid, rule, winner, loser, record);
      UPDATE gs_host h SET shipped_seq = p_through, seen_at = now()
      WHERE h.grp = p_grp AND h.store = p_store AND h.host = p_host;
      IF p_retention IS NOT NULL THEN
        DELETE FROM gs_change c WHERE c.grp = p_grp AND c.store = p_store AND c.seq <= v_purged;
      END IF;
      v_hint := p_grp || '/' || p_store || ':' || v_seq;
      -- Any session may LISTEN: under row-level security the payload
      -- carries no entry, which only members of the group may read.
      IF octet_length(v_hint) + octet_length(p_host) + octet_length(p_body) + 24 < \(Hint.payloadLimit)
        AND NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'gs_change'::regclass) THEN
        v_hint := v_hint || E'\\n' || p_host || ' ' || p_through || E'\\n' || p_body;
      END IF;
      PERFORM pg_notify('\(channel)', v_hint);
      RETURN QUERY SELECT 'shipped'::text, v_seq;
    END
    $fn$
    """
}
