// SharedSchema+Version5: hosts that cannot harm each other. Every write a
// relay makes to the log's shared state goes through functions that run
// with their owner's rights and check who calls and what it carries.
import Foundation

/// Version 5: a host speaks only for itself.
///
/// - `gs_ship_5` (a shipment), `gs_lock_5` (a settled shipment's locks)
///   and `gs_advance_5` (the group's format) run with their owner's
///   rights (`SECURITY DEFINER`), with a fixed `search_path`, and check
///   inside that the session's login role acts as the host it names
///   (``actsAs5``): the set-up gives a host's role no direct write on the
///   clock, the entries, the row images or the conflicts.
/// - `gs_ship_5` checks what a shipment carries (``shipmentProblem5``):
///   its format is one the group ships in, its size is within the group's
///   limit, its body and images parse and have an entry's shape, its
///   conflicts name the host as winner or loser.
/// - Retention is the group's setting (`gs_group.retention`,
///   `retention_passes_members`), kept by an administrator: a purge never
///   passes what every member has applied (``purgePoint5``) unless the
///   administrator said so.
extension SharedSchema {
  /// The size limit of a shipment where the administrator set none.
  static let defaultMaxShipmentBytes: Int64 = 64 << 20

  static var version5: [String] {
    version5Columns + [actsAs5, formatMark5, valueIsValid5, shipmentProblem5, purgePoint5, ship5, lock5, advance5]
      + [fixedSearchPaths5]
  }

  private static let version5Columns = [
    // The administrator's: NULL keeps every entry; N lets entries older
    // than the newest N go once every member has applied them (or
    // whatever its members applied, with retention_passes_members).
    "ALTER TABLE gs_group ADD COLUMN IF NOT EXISTS retention bigint CHECK (retention >= 1)",
    "ALTER TABLE gs_group ADD COLUMN IF NOT EXISTS retention_passes_members boolean NOT NULL DEFAULT false",
    "ALTER TABLE gs_group ADD COLUMN IF NOT EXISTS max_shipment_bytes bigint NOT NULL "
      + "DEFAULT \(defaultMaxShipmentBytes) CHECK (max_shipment_bytes > 0)",
  ]

  /// The functions of version 5 that run with their owner's rights: the
  /// only way a host role writes the log's shared state.
  static let checkedFunctions5 = [ship5Signature, lock5Signature, advance5Signature]

  /// Their helpers, which no role is granted: they run inside them, with
  /// their owner's rights and pinned `search_path` (a `SET` clause of
  /// their own would keep the SQL ones from being inlined and cost a
  /// setting's save and restore at every call, per value checked).
  static let helpers5 = [
    actsAs5Signature, formatMark5Signature, valueIsValid5Signature, shipmentProblem5Signature, purgePoint5Signature,
  ]

  /// Pins each checked function's `search_path` to the log's schema then
  /// `pg_temp` (last: no temporary table or function a caller made
  /// stands in for the log's, in it or in the helpers it calls).
  private static var fixedSearchPaths5: String {
    let statements = checkedFunctions5.map { signature in
      "  EXECUTE format('ALTER FUNCTION \(signature) SET search_path = %I, pg_temp', current_schema());"
    }
    return "DO $do$ BEGIN\n" + statements.joined(separator: "\n") + "\nEND $do$"
  }

  // MARK: Who calls

  static let actsAs5Signature = "gs_acts_as_5(text, text)"

  /// Whether the session may act as `p_host` in `p_grp` (NULL: as any of
  /// its hosts): its login role
  /// (`session_user`: inside a function of its owner's rights,
  /// `current_user` is the owner) is the one `gs_member` names for the
  /// host, or it could write the log itself anyway: a superuser, the
  /// tables' owner, or, where no set-up secured the tables (no row-level
  /// security), a role granted `INSERT` on `gs_change`.
  static let actsAs5 = """
    CREATE OR REPLACE FUNCTION gs_acts_as_5(p_grp text, p_host text)
    RETURNS boolean LANGUAGE plpgsql STABLE AS $fn$
    BEGIN
      -- PL/pgSQL: its queries' plans are kept for the session.
      RETURN EXISTS (SELECT 1 FROM gs_member m
          WHERE m.role = session_user AND m.grp = p_grp AND (p_host IS NULL OR m.host = p_host))
        OR EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = session_user AND (r.rolsuper OR r.rolbypassrls))
        OR pg_has_role(session_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'gs_change'::regclass), 'MEMBER')
        OR (NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'gs_change'::regclass)
            AND has_table_privilege(session_user, 'gs_change'::regclass, 'INSERT'));
    END
    $fn$
    """

  // MARK: What a shipment carries

  static let formatMark5Signature = "gs_format_mark_5(text)"

  /// The format a stored text names, as ``LogFormat/of(_:)`` reads it:
  /// the number after a leading `{"f":` (1-4 digits), else 1; NULL when
  /// the mark holds no such number.
  static let formatMark5 = """
    CREATE OR REPLACE FUNCTION gs_format_mark_5(p_text text)
    RETURNS integer LANGUAGE sql IMMUTABLE AS $fn$
      SELECT CASE WHEN left(p_text, 5) <> '{"f":' THEN 1
        WHEN p_text ~ '^\\{"f":[0-9]{1,4}([^0-9]|$)' THEN substring(p_text FROM '^\\{"f":([0-9]{1,4})')::integer END
    $fn$
    """

  static let valueIsValid5Signature = "gs_value_is_valid_5(jsonb)"

  /// Whether `p_value` is a value as ``RowValue`` decodes it: null, or an
  /// object naming an integer (`i`, 64 bits), a real (`r`), a text (`t`),
  /// a reference (`g`) or a blob in base64 (`b`).
  static let valueIsValid5 = """
    CREATE OR REPLACE FUNCTION gs_value_is_valid_5(p_value jsonb)
    RETURNS boolean LANGUAGE sql IMMUTABLE AS $fn$
      SELECT CASE jsonb_typeof(p_value)
        WHEN 'null' THEN true
        WHEN 'object' THEN CASE
          WHEN p_value ? 'i' THEN jsonb_typeof(p_value -> 'i') = 'number' AND (p_value ->> 'i') ~ '^-?[0-9]{1,19}$'
            AND (p_value ->> 'i')::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
          WHEN p_value ? 'r' THEN jsonb_typeof(p_value -> 'r') = 'number' OR (p_value ->> 'r') IN ('inf', '-inf')
          WHEN p_value ? 't' THEN jsonb_typeof(p_value -> 't') = 'string'
          WHEN p_value ? 'g' THEN jsonb_typeof(p_value -> 'g') = 'string'
          WHEN p_value ? 'b' THEN jsonb_typeof(p_value -> 'b') = 'string'
            AND (p_value ->> 'b') ~ '^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$'
          ELSE false END
        ELSE false END
    $fn$
    """

  static let shipmentProblem5Signature =
    "gs_shipment_problem_5(text, text, smallint, smallint, bigint, text[], text[], bigint[], text[], text[], "
    + "text[], text[], text[], text[], text[], text[])"

  /// What is wrong with a shipment of `p_host`, in words, or NULL: what
  /// every relay must be able to read (an entry it cannot decode would
  /// hold its store there), within the group's format and size limit, and
  /// the conflicts only those this host settled. Internal tables
  /// (SQLite's, GRDB's, GroupSync's and the relay's own) are never
  /// written through the log.
  static let shipmentProblem5 = """
    CREATE OR REPLACE FUNCTION gs_shipment_problem_5(
      p_host text, p_body text, p_format smallint, p_group smallint, p_limit bigint,
      w_tbl text[], w_gid text[], w_base bigint[], w_columns text[], w_data text[],
      c_tbl text[], c_gid text[], c_rule text[], c_winner text[], c_loser text[], c_record text[])
    RETURNS text LANGUAGE plpgsql IMMUTABLE AS $fn$
    -- Indexed loops and plain expressions only: no query per table, row
    -- or value (measured: a query costs more than the checks it holds).
    DECLARE
      v_size bigint;
      v_body jsonb;
      v_entry jsonb;
      v_tables jsonb;
      v_table jsonb;
      v_rows jsonb;
      v_row jsonb;
      v_values jsonb;
      v_item jsonb;
      v_columns jsonb;
      v_name text;
      v_mark integer;
      v_count integer;
      v_width integer;
      v_parsing text;
      v_t integer;
      v_r integer;
      v_internal constant text := '^(sqlite_|groupsync_|grdb_|gs_relay_)';
    BEGIN
      IF p_format IS NULL OR p_format < 1 OR p_format > p_group THEN
        RETURN format('format %s is not one the group ships in (1 to %s)', coalesce(p_format::text, 'NULL'), p_group);
      END IF;
      v_count := coalesce(cardinality(w_tbl), 0);
      IF coalesce(cardinality(w_gid), 0) <> v_count OR coalesce(cardinality(w_base), 0) <> v_count
        OR coalesce(cardinality(w_columns), 0) <> v_count OR coalesce(cardinality(w_data), 0) <> v_count
        OR coalesce(cardinality(c_gid), 0) <> coalesce(cardinality(c_tbl), 0)
        OR coalesce(cardinality(c_rule), 0) <> coalesce(cardinality(c_tbl), 0)
        OR coalesce(cardinality(c_winner), 0) <> coalesce(cardinality(c_tbl), 0)
        OR coalesce(cardinality(c_loser), 0) <> coalesce(cardinality(c_tbl), 0)
        OR coalesce(cardinality(c_record), 0) <> coalesce(cardinality(c_tbl), 0) THEN
        RETURN 'its lists of rows or of conflicts differ in length';
      END IF;
      v_size := octet_length(p_body) + coalesce(octet_length(array_to_string(w_tbl, '')), 0)
        + coalesce(octet_length(array_to_string(w_gid, '')), 0) + coalesce(octet_length(array_to_string(w_columns, '')), 0)
        + coalesce(octet_length(array_to_string(w_data, '')), 0) + coalesce(octet_length(array_to_string(c_tbl, '')), 0)
        + coalesce(octet_length(array_to_string(c_gid, '')), 0) + coalesce(octet_length(array_to_string(c_rule, '')), 0)
        + coalesce(octet_length(array_to_string(c_winner, '')), 0)
        + coalesce(octet_length(array_to_string(c_loser, '')), 0)
        + coalesce(octet_length(array_to_string(c_record, '')), 0);
      IF v_size > p_limit THEN
        RETURN format('it is %s bytes, over the group''s limit of %s (gs_group.max_shipment_bytes)', v_size, p_limit);
      END IF;
      v_mark := gs_format_mark_5(p_body);
      IF v_mark IS DISTINCT FROM p_format THEN
        RETURN format('its body is marked format %s, the shipment says %s', coalesce(v_mark::text, '(no number)'),
          p_format);
      END IF;
      -- One subtransaction for every text that must parse.
      BEGIN
        v_parsing := 'its body';
        v_body := p_body::jsonb;
        -- The body: an entry (format 1), or {"f":N,"e":entry}.
        v_entry := v_body;
        IF p_format > 1 THEN
          IF jsonb_typeof(v_body) IS DISTINCT FROM 'object' OR NOT v_body ? 'e' OR v_body - 'f' - 'e' <> '{}' THEN
            RETURN 'its body is not {"f":N,"e":entry}';
          END IF;
          v_entry := v_body -> 'e';
        END IF;
        IF jsonb_typeof(v_entry) IS DISTINCT FROM 'object' OR jsonb_typeof(v_entry -> 't') IS DISTINCT FROM 'array'
          OR jsonb_typeof(v_entry -> 'c') IS DISTINCT FROM 'array'
          OR coalesce(jsonb_typeof(v_entry -> 'n'), 'null') NOT IN ('null', 'array') THEN
          RETURN 'its body is no entry (tables "t", conflicts "c", notes "n")';
        END IF;
        v_tables := v_entry -> 't';
        FOR v_t IN 0 .. jsonb_array_length(v_tables) - 1 LOOP
          v_table := v_tables -> v_t;
          IF jsonb_typeof(v_table) IS DISTINCT FROM 'object' OR jsonb_typeof(v_table -> 'n') IS DISTINCT FROM 'string'
            OR jsonb_typeof(v_table -> 'k') IS DISTINCT FROM 'array'
            OR jsonb_typeof(v_table -> 's') IS DISTINCT FROM 'boolean'
            OR jsonb_typeof(v_table -> 'r') IS DISTINCT FROM 'array'
            OR jsonb_path_exists(v_table -> 'k', 'strict $[*] ? (@.type() != "string")') THEN
            RETURN 'a table of its body is no table (name "n", columns "k", snapshot "s", rows "r")';
          END IF;
          v_name := v_table ->> 'n';
          IF lower(v_name) ~ v_internal OR v_name = '' THEN
            RETURN format('its body writes table %s, internal to SQLite, GRDB or GroupSync', v_name);
          END IF;
          v_width := jsonb_array_length(v_table -> 'k');
          v_rows := v_table -> 'r';
          FOR v_r IN 0 .. jsonb_array_length(v_rows) - 1 LOOP
            v_row := v_rows -> v_r;
            IF jsonb_typeof(v_row) IS DISTINCT FROM 'object' OR jsonb_typeof(v_row -> 'g') IS DISTINCT FROM 'string'
              OR jsonb_typeof(v_row -> 'b') IS DISTINCT FROM 'number'
              OR coalesce(jsonb_typeof(v_row -> 'i'), 'null') NOT IN ('null', 'number')
              OR coalesce(jsonb_typeof(v_row -> 'l'), 'null') NOT IN ('null', 'boolean')
              OR coalesce(jsonb_typeof(v_row -> 'v'), 'null') NOT IN ('null', 'array')
              OR coalesce(jsonb_typeof(v_row -> 'c'), 'null') NOT IN ('null', 'array') THEN
              RETURN format('a row of table %s in its body is no row (global ID "g", base "b", values "v")', v_name);
            END IF;
            v_values := v_row -> 'v';
            CONTINUE WHEN jsonb_typeof(v_values) IS DISTINCT FROM 'array';
            IF jsonb_typeof(v_row -> 'c') = 'array' THEN
              IF p_format < 2 OR jsonb_array_length(v_row -> 'c') <> jsonb_array_length(v_values)
                OR jsonb_path_exists(v_row -> 'c',
                  'strict $[*] ? (@.type() != "number" || @ < 0 || @ >= $n || @ != @.floor())',
                  jsonb_build_object('n', v_width)) THEN
                RETURN format('row %s of table %s in its body: its changed columns do not match its values and columns',
                  v_row ->> 'g', v_name);
              END IF;
            ELSIF jsonb_array_length(v_values) <> v_width THEN
              RETURN format('row %s of table %s in its body has %s values for %s columns', v_row ->> 'g', v_name,
                jsonb_array_length(v_values), v_width);
            END IF;
          END LOOP;
        END LOOP;
        -- Every value of the body, in one query (the rows' shape is known
        -- good by now).
        SELECT v::text INTO v_name FROM jsonb_path_query(v_entry, 'lax $.t[*].r[*].v[*]') AS v
        WHERE NOT gs_value_is_valid_5(v) LIMIT 1;
        IF FOUND THEN
          RETURN format('its body holds %s, which is no value', left(v_name, 100));
        END IF;
        v_rows := v_entry -> 'c';
        FOR v_r IN 0 .. jsonb_array_length(v_rows) - 1 LOOP
          v_item := v_rows -> v_r;
          IF jsonb_typeof(v_item) IS DISTINCT FROM 'object'
            OR jsonb_typeof(v_item -> 'winnerHost') IS DISTINCT FROM 'string'
            OR jsonb_typeof(v_item -> 'loserHost') IS DISTINCT FROM 'string'
            OR NOT p_host IN (v_item ->> 'winnerHost', v_item ->> 'loserHost') THEN
            RETURN format('a conflict in its body is not one host %s settled', p_host);
          END IF;
        END LOOP;
        v_rows := coalesce(v_entry -> 'n', '[]');
        FOR v_r IN 0 .. jsonb_array_length(v_rows) - 1 LOOP
          v_item := v_rows -> v_r;
          IF jsonb_typeof(v_item) IS DISTINCT FROM 'object' OR jsonb_typeof(v_item -> 'name') IS DISTINCT FROM 'string'
            OR jsonb_typeof(v_item -> 'payload') IS DISTINCT FROM 'string' THEN
            RETURN 'a note of its body is no note (name, payload)';
          END IF;
        END LOOP;
        -- The rows' current images, as gs_row keeps them.
        FOR v_index IN 1 .. v_count LOOP
          IF coalesce(w_tbl[v_index], '') = '' OR coalesce(w_gid[v_index], '') = '' OR w_base[v_index] IS NULL THEN
            RETURN 'a row image without its table, global ID or base';
          END IF;
          IF lower(w_tbl[v_index]) ~ v_internal THEN
            RETURN format('it writes table %s, internal to SQLite, GRDB or GroupSync', w_tbl[v_index]);
          END IF;
          -- A table's rows share their column list: checked once.
          IF v_index = 1 OR w_columns[v_index] IS DISTINCT FROM w_columns[v_index - 1] THEN
            v_parsing := 'the column list of row ' || w_gid[v_index] || ' of table ' || w_tbl[v_index];
            v_columns := w_columns[v_index]::jsonb;
            IF jsonb_typeof(v_columns) IS DISTINCT FROM 'array'
              OR jsonb_path_exists(v_columns, 'strict $[*] ? (@.type() != "string")') THEN
              RETURN format('row %s of table %s: its columns are no list of names', w_gid[v_index], w_tbl[v_index]);
            END IF;
            v_width := jsonb_array_length(v_columns);
          END IF;
          CONTINUE WHEN w_data[v_index] IS NULL;
          v_mark := gs_format_mark_5(w_data[v_index]);
          IF v_mark IS NULL OR v_mark < 1 OR v_mark > p_group THEN
            RETURN format('row %s of table %s: its image is marked format %s, not one the group ships in (1 to %s)',
              w_gid[v_index], w_tbl[v_index], coalesce(v_mark::text, '(no number)'), p_group);
          END IF;
          v_parsing := 'the image of row ' || w_gid[v_index] || ' of table ' || w_tbl[v_index];
          v_values := w_data[v_index]::jsonb;
          IF v_mark > 1 THEN
            IF jsonb_typeof(v_values) IS DISTINCT FROM 'object' OR NOT v_values ? 'v'
              OR v_values - 'f' - 'v' <> '{}' THEN
              RETURN format('row %s of table %s: its image is not {"f":N,"v":[values]}', w_gid[v_index],
                w_tbl[v_index]);
            END IF;
            v_values := v_values -> 'v';
          END IF;
          IF jsonb_typeof(v_values) IS DISTINCT FROM 'array' OR jsonb_array_length(v_values) <> v_width THEN
            RETURN format('row %s of table %s: its image does not list one value per column', w_gid[v_index],
              w_tbl[v_index]);
          END IF;
        END LOOP;
        -- Every value of the images, in one query (each image parsed again:
        -- cheaper than a query per image).
        SELECT v::text INTO v_name
        FROM unnest(w_data) AS d, jsonb_array_elements(CASE WHEN left(d, 5) = '{"f":' THEN d::jsonb -> 'v' ELSE d::jsonb END) AS v
        WHERE d IS NOT NULL AND NOT gs_value_is_valid_5(v) LIMIT 1;
        IF FOUND THEN
          RETURN format('a row image holds %s, which is no value', left(v_name, 100));
        END IF;
        -- The conflicts recorded: settled by this host, as winner or loser.
        FOR v_index IN 1 .. coalesce(cardinality(c_tbl), 0) LOOP
          IF NOT p_host IN (c_winner[v_index], c_loser[v_index]) THEN
            RETURN format('it records a conflict between %s and %s, which host %s did not settle',
              c_winner[v_index], c_loser[v_index], p_host);
          END IF;
          v_mark := gs_format_mark_5(c_record[v_index]);
          v_parsing := 'the conflict record of row ' || c_gid[v_index];
          IF v_mark IS NULL OR v_mark < 1 OR v_mark > p_group
            OR jsonb_typeof(c_record[v_index]::jsonb) IS DISTINCT FROM 'object' THEN
            RETURN format('its conflict record of row %s is no record of a format the group ships in', c_gid[v_index]);
          END IF;
        END LOOP;
      EXCEPTION WHEN invalid_text_representation THEN
        RETURN v_parsing || ' is not JSON';
      END;
      RETURN NULL;
    END
    $fn$
    """

  // MARK: The purge

  static let purgePoint5Signature = "gs_purge_point_5(text, text, bigint, bigint, boolean)"

  /// How far `p_store`'s log may be purged once position `p_head` is
  /// taken: nowhere while the group keeps every entry (`p_retention`
  /// NULL); else up to the newest `p_retention` entries, but never past
  /// what a member has applied, unless the administrator let retention
  /// pass members (`p_passes`), who then re-synchronise from the rows'
  /// images; and never where a member holds (it cannot read the entry's
  /// format yet, and applies it once upgraded; an administrator retires a
  /// member gone for good). Members: the hosts `gs_member`
  /// names where the set-up is used, else those seen within
  /// ``memberWindow``; less the retired.
  static let purgePoint5 = """
    CREATE OR REPLACE FUNCTION gs_purge_point_5(p_grp text, p_store text, p_head bigint, p_retention bigint,
      p_passes boolean)
    RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
    DECLARE
      v_listed boolean;
      v_applied bigint;
      v_held bigint;
    BEGIN
      IF p_retention IS NULL THEN
        RETURN 0;
      END IF;
      SELECT EXISTS (SELECT 1 FROM gs_member m WHERE m.grp = p_grp) INTO v_listed;
      SELECT min(h.applied_seq), min(h.held_at) INTO v_applied, v_held FROM gs_host h
      WHERE h.grp = p_grp AND h.store = p_store
        AND CASE WHEN v_listed THEN EXISTS (SELECT 1 FROM gs_member m WHERE m.grp = p_grp AND m.host = h.host)
                 ELSE h.seen_at > now() - interval '\(memberWindow)' END
        AND NOT EXISTS (SELECT 1 FROM gs_peer p WHERE p.grp = p_grp AND p.host = h.host AND p.retired_at IS NOT NULL);
      RETURN greatest(least(p_head - p_retention, coalesce(v_held - 1, p_head),
        CASE WHEN p_passes THEN p_head ELSE coalesce(v_applied, 0) END), 0);
    END
    $fn$
    """

  // MARK: The checked functions

  static let ship5Signature =
    "gs_ship_5(text, text, text, bigint, text, text[], text[], bigint[], text[], text[], "
    + "text[], text[], text[], text[], text[], text[], boolean, smallint, uuid, bigint)"

  /// `gs_ship_3` with its owner's rights and the checks of version 5: it
  /// ships only as a host the session's role acts as, only what
  /// ``shipmentProblem5`` finds nothing wrong with (SQLSTATE 22023
  /// otherwise, the message naming what), and purges as the group's
  /// retention says (``purgePoint5``), not as the caller asks.
  static let ship5 = shipFunction(version: 5)

  static let lock5Signature = "gs_lock_5(text, text, text, text[], text[])"

  /// A settled shipment's locks (``SharedLog/beginShipment(_:targets:)``):
  /// the rows of `gs_row` it writes, in (table, global ID) order, read.
  /// With its owner's rights (a host role may not lock rows it may not
  /// update), for a host the session's role acts as.
  static let lock5 = """
    CREATE OR REPLACE FUNCTION gs_lock_5(p_grp text, p_store text, p_host text, p_tbl text[], p_gid text[])
    RETURNS TABLE(tbl text, gid text, seq bigint, origin_host text, columns text, data text)
    LANGUAGE plpgsql SECURITY DEFINER AS $fn$
    BEGIN
      IF NOT gs_acts_as_5(p_grp, p_host) THEN
        RAISE EXCEPTION 'groupsync: role % may not ship as host % of group %', session_user, p_host, p_grp
          USING ERRCODE = '42501', HINT = 'gs_member names the host roles (groupsync relay --print-setup)';
      END IF;
      RETURN QUERY SELECT r.tbl, r.gid, r.seq, r.origin_host, r.columns, r.data
      FROM (SELECT DISTINCT u.tbl, u.gid FROM unnest(p_tbl, p_gid) AS u(tbl, gid) ORDER BY u.tbl, u.gid) w
      CROSS JOIN LATERAL (
        SELECT g.tbl, g.gid, g.seq, g.origin_host, g.columns, g.data FROM gs_row g
        WHERE g.grp = p_grp AND g.store = p_store AND g.tbl = w.tbl AND g.gid = w.gid FOR UPDATE) r;
    END
    $fn$
    """

  static let advance5Signature = "gs_advance_5(text)"

  /// `gs_advance_2` for members of the group only.
  static let advance5 = advanceFunction(version: 5)
}
