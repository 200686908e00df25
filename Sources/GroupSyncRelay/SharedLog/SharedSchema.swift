// SharedSchema: the relay's objects in PostgreSQL (tables, functions), by version.
import Foundation

/// The relay's objects in PostgreSQL, by version: each version's
/// statements stay as they shipped, and a later version adds objects
/// under new names (`gs_ship_2`…) and columns with defaults, so that a
/// relay of the version before goes on using what it knows while newer
/// relays run beside it.
///
/// `gs_schema` says which version the server holds and the oldest relay
/// schema it still serves; a relay migrates the server forward, all
/// versions' statements in one transaction (``SharedLog/createTables()``),
/// never back, and one that meets a server newer than it and not serving
/// it any more stops, naming the relay version it needs.
///
/// Version 1 (relays before versioning, which announce nothing): the five
/// tables and `gs_ship`. Version 2: formats (`gs_change.format`,
/// `gs_conflict.format`, `gs_row.format` computed from the image), the
/// members' announcements (`gs_peer`), the group's format (`gs_group`),
/// holds (`gs_host.held_at`), `gs_member` (made here too, empty unless the
/// set-up fills it), `gs_ship_2` and `gs_advance_2`. Version 3: the merge
/// rules each member announces (`gs_peer.merge_rules`), which must agree.
/// Version 4: the transports (see ``SharedLog/Hint``): a random channel per
/// group (`gs_group.channel`) and a random tag per store
/// (`gs_clock.tag`), so that a notification names neither; the transport
/// each member announces (`gs_peer.transport`; NULL: a relay before
/// version 4, which listens on `gs_changes`); the host's lease
/// (`gs_peer.lease_holder`, `lease_until`), which stands for the advisory
/// lock where a pooler keeps no session; and `gs_ship_3`, which does not
/// notify, so that the wake-up commits apart. Version 5: hosts that
/// cannot harm each other (see `SharedSchema+Version5.swift`): the
/// functions a host role writes through, which check who calls and what
/// it carries, and the group's retention and size limit, an
/// administrator's settings.
enum SharedSchema {
  /// The version this build makes and needs.
  static let version = 5
  /// The oldest relay schema the objects of ``version`` still serve:
  /// version 1's relays go on with `gs_ship`, kept as it was.
  static let servesFrom = 1
  /// The relay version that speaks ``servesFrom`` (named to relays the
  /// server no longer serves).
  static let servesFromRelay = "1"

  /// How long a host that announced, shipped or applied nothing counts as
  /// a member still (where no `gs_member` rows name the group's members):
  /// the group's format waits for it that long.
  static let memberWindow = "7 days"

  /// Every version's statements, in order: the one transaction that
  /// makes or migrates the server's objects.
  static var statements: [String] { version1 + version2 + version3 + version4 + version5 + [recordVersion] }

  // MARK: The tables

  /// A table of the log: its name, as `to_regclass` and `GRANT` name it,
  /// and the version that makes it with its `CREATE TABLE` (columns added
  /// later are in the later versions' statements).
  struct Table: Sendable {
    let name: String
    let version: Int
    /// The inside of `CREATE TABLE IF NOT EXISTS name (…)`.
    private let body: String

    init(_ name: String, version: Int, _ body: String) {
      self.name = name
      self.version = version
      self.body = body
    }

    var create: String { "CREATE TABLE IF NOT EXISTS \(name) (\n\(body))" }
  }

  /// Every table of the log, once: what ``statements`` make, the set-up
  /// grants on and revokes from `PUBLIC` (``AccessSetup``), and a relay
  /// checks exists.
  static let tables: [Table] = [.clock, .change, .row, .host, .conflict, .member, .peer, .group, .schema]

  /// The names of ``tables``.
  static var tableNames: [String] { tables.map(\.name) }

  /// The functions, by signature, and their bodies as the server keeps
  /// them (`pg_proc.prosrc`): a relay that finds another body there (of
  /// its own version) replaces it, or says it may not.
  static var functions: [(signature: String, source: String)] {
    [
      (ship1Signature, body(ship1)), (ship2Signature, body(ship2)), (advance2Signature, body(advance2)),
      (ship3Signature, body(ship3)), (window4Signature, body(window4)),
      (actsAs5Signature, body(actsAs5)), (formatMark5Signature, body(formatMark5)),
      (valueIsValid5Signature, body(valueIsValid5)), (shipmentProblem5Signature, body(shipmentProblem5)),
      (purgePoint5Signature, body(purgePoint5)), (ship5Signature, body(ship5)), (lock5Signature, body(lock5)),
      (advance5Signature, body(advance5)),
    ]
  }

  private static func body(_ statement: String) -> String { statement.components(separatedBy: "$fn$")[1] }

  // MARK: Version 1, as relays before versioning made it (never changed)

  static var version1: [String] { version1Tables + [ship1] }

  /// Version 1's tables, as it made them.
  static var version1Tables: [String] { tables.filter { $0.version == 1 }.map(\.create) }

  static let ship1Signature =
    "gs_ship(text, text, text, bigint, text, bigint, text[], text[], bigint[], text[], text[], "
    + "text[], text[], text[], text[], text[], text[], boolean)"

  static let ship1 = """
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
      IF octet_length(v_hint) + octet_length(p_host) + octet_length(p_body) + 24 < 8000
        AND NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'gs_change'::regclass) THEN
        v_hint := v_hint || E'\\n' || p_host || ' ' || p_through || E'\\n' || p_body;
      END IF;
      PERFORM pg_notify('gs_changes', v_hint);
      RETURN QUERY SELECT 'shipped'::text, v_seq;
    END
    $fn$
    """


  // MARK: Version 2: formats, members, holds

  /// Its tables' `CREATE TABLE` come from ``tables``, in the order it
  /// always made them.
  static var version2: [String] {
    [Table.member.create] + version2Columns + [Table.peer.create, Table.group.create, Table.schema.create]
      + version2Functions
  }

  private static let version2Columns = [
    "ALTER TABLE gs_change ADD COLUMN IF NOT EXISTS format smallint NOT NULL DEFAULT 1",
    "ALTER TABLE gs_conflict ADD COLUMN IF NOT EXISTS format smallint NOT NULL DEFAULT 1",
    // Computed from the image itself, which names its format: a relay of
    // version 1 rewriting a row leaves no stale number behind.
    """
    ALTER TABLE gs_row ADD COLUMN IF NOT EXISTS format smallint GENERATED ALWAYS AS (
      CASE WHEN left(data, 5) = '{"f":' THEN substring(data FROM '^\\{"f":([0-9]{1,4})')::smallint ELSE 1 END) STORED
    """,
    // The position where the host holds an entry it cannot read: no purge passes it.
    "ALTER TABLE gs_host ADD COLUMN IF NOT EXISTS held_at bigint",
  ]

  private static let version2Functions = [
    ship2,
    advance2,
    // Its owner's rights, so a fixed search_path: no object a caller made
    // in another schema stands in for the relay's.
    """
    DO $do$ BEGIN
      EXECUTE format('ALTER FUNCTION gs_advance_2(text) SET search_path = %I, pg_temp', current_schema());
    END $do$
    """,
  ]

  // MARK: Version 3: merge rules

  static let version3 = [
    // The rules the member's relay settles conflicts by
    // (``MergeRules/fingerprint``; NULL: a relay before version 3).
    "ALTER TABLE gs_peer ADD COLUMN IF NOT EXISTS merge_rules text",
  ]

  // MARK: Version 4: transports

  static let version4 = [
    // Random, so that only those who may read the group's row (its
    // members, under row-level security) can listen: a name's hash could
    // be guessed.
    "ALTER TABLE gs_group ADD COLUMN IF NOT EXISTS channel text NOT NULL "
      + "DEFAULT ('gs_' || replace(gen_random_uuid()::text, '-', ''))",
    "ALTER TABLE gs_clock ADD COLUMN IF NOT EXISTS tag text NOT NULL DEFAULT (replace(gen_random_uuid()::text, '-', ''))",
    "ALTER TABLE gs_peer ADD COLUMN IF NOT EXISTS transport text",
    "ALTER TABLE gs_peer ADD COLUMN IF NOT EXISTS lease_holder uuid",
    "ALTER TABLE gs_peer ADD COLUMN IF NOT EXISTS lease_until timestamptz",
    ship3,
    window4,
  ]

  static let window4Signature = "gs_window_4(text, text, bigint, integer, bigint)"

  /// The applier's read of the log (``SharedLog/readWindow``) as a
  /// function, for sessions that send their statements unprepared (the
  /// poll transport, through a pooler): PL/pgSQL keeps its query's plan
  /// per server connection, which a pooler's connections outlive, so a
  /// poll is not parsed and planned anew every time (measured: 145 against
  /// 250 us a call, unprepared, one client). The caller's rights, so
  /// row-level security applies as to the query itself.
  static let window4 = """
    CREATE OR REPLACE FUNCTION gs_window_4(
      p_grp text, p_store text, p_from bigint, p_limit integer, p_bodies_after bigint)
    RETURNS TABLE(head bigint, purged bigint, pos bigint, origin_host text, origin_seq bigint, body text)
    LANGUAGE plpgsql STABLE AS $fn$
    BEGIN
      RETURN QUERY SELECT k.seq, k.purged_through, c.seq, c.origin_host, c.origin_seq, c.body
      FROM gs_clock k LEFT JOIN LATERAL (
        SELECT g.seq, g.origin_host, g.origin_seq, CASE WHEN g.seq > p_bodies_after THEN g.body END AS body
        FROM gs_change g WHERE g.grp = k.grp AND g.store = k.store AND g.seq >= p_from ORDER BY g.seq
        LIMIT p_limit) c ON true
      WHERE k.grp = p_grp AND k.store = p_store;
    END
    $fn$
    """

  /// Records the version made, last (never down).
  static let recordVersion = """
    INSERT INTO gs_schema AS s (version, serves_from, serves_from_relay) VALUES (\(version), \(servesFrom), '\(servesFromRelay)')
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, serves_from = excluded.serves_from,
      serves_from_relay = excluded.serves_from_relay WHERE s.version < excluded.version
    """

  static let ship2Signature =
    "gs_ship_2(text, text, text, bigint, text, bigint, text[], text[], bigint[], text[], text[], "
    + "text[], text[], text[], text[], text[], text[], boolean, smallint)"

  /// `gs_ship`'s successor (see ``SharedLog/ship(_:_:settled:)``): the
  /// entry and its conflicts carry their format, the purge never passes a
  /// position where a host holds, and the group's format comes back with
  /// the outcome. Row locks are taken in (table, global ID) order, as
  /// ``SharedLog/beginShipment(_:targets:)`` takes them, and before the
  /// clock row, so that shippers never deadlock.
  static let ship2 = shipFunction(version: 2)

  static let ship3Signature =
    "gs_ship_3(text, text, text, bigint, text, bigint, text[], text[], bigint[], text[], text[], "
    + "text[], text[], text[], text[], text[], text[], boolean, smallint, uuid, bigint)"

  /// `gs_ship_2` without the notification, and fenced by the host's lease:
  /// the wake-up goes in a transaction of its own after the shipment
  /// commits (``SharedLog/ship(_:_:settled:)``), so the server's notify
  /// lock, which orders every notifying commit, is not held across this
  /// commit's flush. With `p_lease`, a relay of the poll transport ships
  /// only while `gs_peer` names it the host's lease holder ('lease': it
  /// lost the lease to another relay of the host, nothing was written).
  /// With `p_known`, the shipped place the relay last learned the server
  /// holds: a server found below it lost shipments it had acknowledged
  /// ('behind': a failover that a pooler hid from the relay's session,
  /// nothing was written; the relay recovers and ships them again).
  static let ship3 = shipFunction(version: 3)

  /// The text of `gs_ship_2` (`version` 2, byte for byte as it shipped:
  /// relays compare it with the server's), `gs_ship_3` or `gs_ship_5`
  /// (``SharedSchema/ship5``).
  static func shipFunction(version: Int) -> String {
    let checked = version >= 5
    let name = "gs_ship_\(version)"
    let retentionParameter = checked ? "" : " p_retention bigint,"
    let leaseParameter = version == 2 ? "" : ", p_lease uuid, p_known bigint"
    let rights = checked ? " SECURITY DEFINER" : ""
    let checkedDeclarations =
      checked
      ? """
          v_limit bigint;
          v_retention bigint;
          v_passes boolean;
          v_problem text;
          v_point bigint;

      """
      : ""
    let groupRead =
      checked
      ? """
        SELECT coalesce(g.format, 1), coalesce(g.max_shipment_bytes, \(defaultMaxShipmentBytes)), g.retention,
          coalesce(g.retention_passes_members, false)
        INTO v_group, v_limit, v_retention, v_passes
        FROM (SELECT 1) one LEFT JOIN gs_group g ON g.grp = p_grp;
        IF NOT gs_acts_as_5(p_grp, p_host) THEN
          RAISE EXCEPTION 'groupsync: role % may not ship as host % of group %', session_user, p_host, p_grp
            USING ERRCODE = '42501', HINT = 'gs_member names the host roles (groupsync relay --print-setup)';
        END IF;
        v_problem := gs_shipment_problem_5(p_host, p_body, p_format, v_group, v_limit, w_tbl, w_gid, w_base,
          w_columns, w_data, c_tbl, c_gid, c_rule, c_winner, c_loser, c_record);
        IF v_problem IS NOT NULL THEN
          RAISE EXCEPTION 'groupsync: the shipment of host % to store % of group % is refused: %',
            p_host, p_store, p_grp, v_problem USING ERRCODE = '22023';
        END IF;

      """
      : """
        SELECT coalesce((SELECT g.format FROM gs_group g WHERE g.grp = p_grp), 1) INTO v_group;

      """
    let leaseCheck =
      version == 2
      ? ""
      : """
        IF p_lease IS NOT NULL AND NOT EXISTS (SELECT 1 FROM gs_peer p
          WHERE p.grp = p_grp AND p.host = p_host AND p.lease_holder = p_lease) THEN
          RETURN QUERY SELECT 'lease'::text, 0::bigint, v_group;
          RETURN;
        END IF;

      """
    let knownCheck =
      version == 2
      ? ""
      : """
            IF v_shipped < p_known THEN
              RETURN QUERY SELECT 'behind'::text, v_shipped, v_group;
              RETURN;
            END IF;

        """
    let takePosition =
      checked
      ? """
        -- The purge comes last, from the group's retention (``SharedSchema/purge5``).
        UPDATE gs_clock k SET seq = k.seq + 1
        WHERE k.grp = p_grp AND k.store = p_store RETURNING k.seq, k.purged_through INTO v_seq, v_purged;

      """
      : """
        -- Retention never purges an entry a host holds (it cannot read its
        -- format yet, and applies it once upgraded).
        UPDATE gs_clock k SET seq = k.seq + 1,
          purged_through = CASE WHEN p_retention IS NULL THEN k.purged_through
            ELSE greatest(k.purged_through, least(k.seq + 1 - p_retention,
              coalesce((SELECT min(h.held_at) - 1 FROM gs_host h
                        WHERE h.grp = p_grp AND h.store = p_store AND h.held_at IS NOT NULL), k.seq + 1))) END
        WHERE k.grp = p_grp AND k.store = p_store RETURNING k.seq, k.purged_through INTO v_seq, v_purged;

      """
    let purge =
      checked
      ? """
        v_point := gs_purge_point_5(p_grp, p_store, v_seq, v_retention, v_passes);
        IF v_point > v_purged THEN
          UPDATE gs_clock k SET purged_through = v_point WHERE k.grp = p_grp AND k.store = p_store;
          DELETE FROM gs_change c WHERE c.grp = p_grp AND c.store = p_store AND c.seq > v_purged AND c.seq <= v_point;
        END IF;

      """
      : """
        IF p_retention IS NOT NULL THEN
          DELETE FROM gs_change c WHERE c.grp = p_grp AND c.store = p_store AND c.seq <= v_purged;
        END IF;

      """
    let notify =
      version == 2
      ? """
          v_hint := p_grp || '/' || p_store || ':' || v_seq;
          -- Any session may LISTEN: under row-level security the payload
          -- carries no entry, which only members of the group may read.
          IF octet_length(v_hint) + octet_length(p_host) + octet_length(p_body) + 24 < \(SharedLog.Hint.payloadLimit)
            AND NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'gs_change'::regclass) THEN
            v_hint := v_hint || E'\\n' || p_host || ' ' || p_through || E'\\n' || p_body;
          END IF;
          PERFORM pg_notify('\(SharedLog.legacyChannel)', v_hint);

        """
      : ""
    return """
    CREATE OR REPLACE FUNCTION \(name)(
      p_grp text, p_store text, p_host text, p_through bigint, p_body text,\(retentionParameter)
      w_tbl text[], w_gid text[], w_base bigint[], w_columns text[], w_data text[],
      c_tbl text[], c_gid text[], c_rule text[], c_winner text[], c_loser text[], c_record text[],
      p_settled boolean, p_format smallint\(leaseParameter))
    RETURNS TABLE(outcome text, pos bigint, group_format smallint) LANGUAGE plpgsql\(rights) AS $fn$
    DECLARE
      v_shipped bigint;
      v_moved boolean;
      v_seq bigint;
      v_purged bigint;
      v_hint text;
      v_group smallint;
    \(checkedDeclarations)BEGIN
    \(groupRead)\(leaseCheck)  IF NOT p_settled THEN
        SELECT h.shipped_seq INTO v_shipped FROM gs_host h
        WHERE h.grp = p_grp AND h.store = p_store AND h.host = p_host FOR UPDATE;
        IF v_shipped >= p_through THEN
          RETURN QUERY SELECT 'already'::text, v_shipped, v_group;
          RETURN;
        END IF;
    \(knownCheck)    -- One primary-key lookup per row, whatever the planner thinks of
        -- the table's size, in (table, global ID) order.
        SELECT coalesce(bool_or(r.seq > w.base), false) INTO v_moved
        FROM (SELECT DISTINCT u.tbl, u.gid, u.base FROM unnest(w_tbl, w_gid, w_base) AS u(tbl, gid, base)
              ORDER BY u.tbl, u.gid) w
        CROSS JOIN LATERAL (
          SELECT g.seq FROM gs_row g
          WHERE g.grp = p_grp AND g.store = p_store AND g.tbl = w.tbl AND g.gid = w.gid FOR UPDATE) r;
        IF v_moved THEN
          RETURN QUERY SELECT 'moved'::text, 0::bigint, v_group;
          RETURN;
        END IF;
      END IF;
    \(takePosition)  IF v_seq IS NULL THEN
        RETURN QUERY SELECT 'noclock'::text, 0::bigint, v_group;
        RETURN;
      END IF;
      INSERT INTO gs_row AS r (grp, store, tbl, gid, seq, origin_host, columns, data)
      SELECT p_grp, p_store, w.tbl, w.gid, v_seq, p_host, w.columns, w.data
      FROM unnest(w_tbl, w_gid, w_columns, w_data) AS w(tbl, gid, columns, data)
      ON CONFLICT (grp, store, tbl, gid) DO UPDATE SET seq = excluded.seq,
        origin_host = excluded.origin_host, columns = excluded.columns, data = excluded.data;
      INSERT INTO gs_change(grp, store, seq, origin_host, origin_seq, body, format)
      VALUES (p_grp, p_store, v_seq, p_host, p_through, p_body, p_format);
      INSERT INTO gs_conflict(grp, store, seq, tbl, gid, rule, winner_host, loser_host, record, format)
      SELECT p_grp, p_store, v_seq, c.tbl, c.gid, c.rule, c.winner, c.loser, c.record, p_format
      FROM unnest(c_tbl, c_gid, c_rule, c_winner, c_loser, c_record) AS c(tbl, gid, rule, winner, loser, record);
      UPDATE gs_host h SET shipped_seq = p_through, seen_at = now()
      WHERE h.grp = p_grp AND h.store = p_store AND h.host = p_host;
    \(purge)\(notify)  RETURN QUERY SELECT 'shipped'::text, v_seq, v_group;
    END
    $fn$
    """
  }

  static let advance2Signature = "gs_advance_2(text)"

  /// Moves `p_grp`'s format up to the newest every member reads, never
  /// down, and returns it. Members: the hosts `gs_member` names for the
  /// group where the set-up is used, else those that announced, shipped or
  /// applied within ``memberWindow``; less those an administrator retired.
  /// A member that announced nothing (a relay of version 1) reads format 1.
  /// Runs with its owner's rights: under row-level security a host's
  /// role reads only its own rows of `gs_member`.
  static let advance2 = advanceFunction(version: 2)

  /// The text of `gs_advance_2` (byte for byte as it shipped) or
  /// `gs_advance_5`, which moves the format only for a member of the group.
  static func advanceFunction(version: Int) -> String {
    let check =
      version < 5
      ? ""
      : """
        IF NOT gs_acts_as_5(p_grp, NULL) THEN
          RAISE EXCEPTION 'groupsync: role % is no member of group %', session_user, p_grp USING ERRCODE = '42501';
        END IF;

      """
    return """
    CREATE OR REPLACE FUNCTION gs_advance_\(version)(p_grp text)
    RETURNS smallint LANGUAGE plpgsql SECURITY DEFINER AS $fn$
    DECLARE
      v_listed boolean;
      v_next smallint;
      v_format smallint;
    BEGIN
    \(check)  INSERT INTO gs_group AS g (grp) VALUES (p_grp) ON CONFLICT (grp) DO NOTHING;
      SELECT EXISTS (SELECT 1 FROM gs_member m WHERE m.grp = p_grp) INTO v_listed;
      WITH member AS (
        SELECT m.host FROM gs_member m WHERE v_listed AND m.grp = p_grp
        UNION
        SELECT h.host FROM gs_host h
        WHERE NOT v_listed AND h.grp = p_grp AND h.seen_at > now() - interval '\(memberWindow)'
        UNION
        SELECT p.host FROM gs_peer p
        WHERE NOT v_listed AND p.grp = p_grp AND p.announced_at > now() - interval '\(memberWindow)'
      ), reader AS (
        SELECT coalesce(p.reads, '{1}'::smallint[]) AS reads FROM member m
        LEFT JOIN gs_peer p ON p.grp = p_grp AND p.host = m.host
        WHERE p.retired_at IS NULL
      )
      SELECT max(f.format) INTO v_next FROM (SELECT DISTINCT unnest(r.reads) AS format FROM reader r) f
      WHERE NOT EXISTS (SELECT 1 FROM reader r WHERE NOT f.format = ANY (r.reads));
      UPDATE gs_group g SET format = v_next, moved_at = now() WHERE g.grp = p_grp AND g.format < v_next;
      SELECT g.format INTO v_format FROM gs_group g WHERE g.grp = p_grp;
      RETURN v_format;
    END
    $fn$
    """
  }
}

/// The tables of ``SharedSchema/tables``, each with its `CREATE TABLE`.
extension SharedSchema.Table {
  static let clock = Self(
    "gs_clock", version: 1,
    """
      grp text NOT NULL, store text NOT NULL, seq bigint NOT NULL DEFAULT 0,
      purged_through bigint NOT NULL DEFAULT 0, PRIMARY KEY (grp, store)
    """)

  static let change = Self(
    "gs_change", version: 1,
    """
      grp text NOT NULL, store text NOT NULL, seq bigint NOT NULL, origin_host text NOT NULL,
      origin_seq bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      body text NOT NULL, PRIMARY KEY (grp, store, seq), UNIQUE (grp, store, origin_host, origin_seq)
    """)

  static let row = Self(
    "gs_row", version: 1,
    """
      grp text NOT NULL, store text NOT NULL, tbl text NOT NULL, gid text NOT NULL, seq bigint NOT NULL,
      origin_host text NOT NULL, columns text NOT NULL, data text, PRIMARY KEY (grp, store, tbl, gid)
    """)

  static let host = Self(
    "gs_host", version: 1,
    """
      grp text NOT NULL, store text NOT NULL, host text NOT NULL, shipped_seq bigint NOT NULL DEFAULT 0,
      applied_seq bigint NOT NULL DEFAULT 0, seen_at timestamptz, PRIMARY KEY (grp, store, host)
    """)

  static let conflict = Self(
    "gs_conflict", version: 1,
    """
      id bigserial PRIMARY KEY, grp text NOT NULL, store text NOT NULL, seq bigint NOT NULL,
      tbl text NOT NULL, gid text NOT NULL, rule text NOT NULL, winner_host text NOT NULL,
      loser_host text NOT NULL, record text NOT NULL, created_at timestamptz NOT NULL DEFAULT now()
    """)

  /// Filled only by the set-up an administrator runs (``AccessSetup``):
  /// which login role may act as which host of which group.
  static let member = Self(
    "gs_member", version: 2,
    """
      role name NOT NULL, grp text NOT NULL, host text NOT NULL, PRIMARY KEY (grp, host)
    """)

  static let peer = Self(
    "gs_peer", version: 2,
    """
      grp text NOT NULL, host text NOT NULL, version text NOT NULL, reads smallint[] NOT NULL,
      announced_at timestamptz NOT NULL DEFAULT now(), retired_at timestamptz, PRIMARY KEY (grp, host)
    """)

  static let group = Self(
    "gs_group", version: 2,
    """
      grp text PRIMARY KEY, format smallint NOT NULL DEFAULT 1, moved_at timestamptz
    """)

  static let schema = Self(
    "gs_schema", version: 2,
    """
      id boolean PRIMARY KEY DEFAULT true CHECK (id), version integer NOT NULL, serves_from integer NOT NULL,
      serves_from_relay text NOT NULL
    """)
}
