#!/bin/sh
# make demo-hosts: a throw-away PostgreSQL server, three hosts (group
# folders a/, b/, c/ of one work folder, each with its own relay process),
# writers on each committing overlapping rows at once, notes in folders (a
# foreign key: folder ids are each host's own), one folder deleted while
# the others add notes to it; then waits until every replica holds the
# same rows (compared row by row, by global ID, each note with its
# folder's name) and prints that, whether every relation holds, and the
# conflicts the log settled.
#
#   Scripts/demo-hosts.sh BIN_FOLDER [WORK_FOLDER]
set -eu
bin=$1
if [ $# -ge 2 ]; then work=$2; mkdir -p "$work"; made=""; else
  work=$(mktemp -d /tmp/groupsync-demo-hosts-XXXXXX); made=$work; fi
# The server runs as the user postgres, which must reach its folder.
chmod 755 "$work"
port=54330
pg="$work/pg"
conninfo="host=$pg port=$port user=postgres dbname=postgres"
relays=""

cleanup() {
  for pid in $relays; do kill "$pid" 2>/dev/null || true; done
  for pid in $relays; do wait "$pid" 2>/dev/null || true; done
  "$(dirname "$0")/../Benchmarks/postgres.sh" stop "$pg"
  if [ -n "$made" ]; then rm -rf "$made"; fi
}
trap cleanup EXIT INT TERM

"$(dirname "$0")/../Benchmarks/postgres.sh" start "$pg" "$port"
cat > "$work/schema.sql" <<'SQL'
CREATE TABLE folder(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT, edits INTEGER NOT NULL DEFAULT 0,
                  folder_id INTEGER REFERENCES folder(id) ON DELETE CASCADE);
SQL
for host in a b c; do
  rm -rf "${work:?}/$host"
  "$bin/groupsync" init "$work/$host/app" --schema "$work/schema.sql" >/dev/null
  "$bin/groupsync" relay "$work/$host/app" --postgres "$conninfo" --host "$host" --poll-interval 0.2 \
    >"$work/relay-$host.log" 2>&1 &
  relays="$relays $!"
done
# Each host makes its folder at once: their ids collide (1 everywhere).
for host in a b c; do
  "$bin/groupsync" exec "$work/$host/app" "INSERT INTO folder(name) VALUES ('folder-$host')" >/dev/null &
done
wait_writers() { for job in $(jobs -p); do case " $relays " in *" $job "*) ;; *) wait "$job";; esac; done; }
wait_writers
"$bin/groupsync" exec "$work/a/app" "INSERT INTO folder(name) VALUES ('scratch')" >/dev/null
"$bin/groupsync" exec "$work/a/app" --repeat 20 \
  "INSERT INTO note(title, body, folder_id) VALUES ('seed-' || hex(randomblob(4)), 'seed',
     (SELECT id FROM folder WHERE name = 'folder-a'))" >/dev/null

# The same rows everywhere: title, body, edits and folder (by its name) of
# every replicated row, by global ID (rowids are each host's own).
content() {
  "$bin/groupsync" query "$1" "SELECT m.gid, n.title, n.body, n.edits, f.name FROM note n
    LEFT JOIN folder f ON f.id = n.folder_id
    LEFT JOIN gs_relay_row m ON m.tbl = 'note' AND m.local_rowid = n.rowid ORDER BY m.gid, n.title"
}
settled() {
  for host in a b c; do
    "$bin/groupsync" status "$work/$host/app" | grep -q "(0 unshipped), applied \([0-9]*\) of \1 " || return 1
  done
  a=$(content "$work/a/app") && b=$(content "$work/b/app") && c=$(content "$work/c/app") || return 1
  [ "$a" = "$b" ] && [ "$b" = "$c" ]
}
tries=0
until settled; do tries=$((tries + 1)); [ $tries -lt 600 ] || { echo "seed did not converge"; exit 1; }; sleep 0.1; done

echo "demo-hosts: 3 hosts, 3 writers x 300 commits of overlapping updates, moves between folders, inserts and deletes"
start=$(date +%s.%N)
for host in a b c; do
  "$bin/groupsync" exec "$work/$host/app" --repeat 300 \
    "UPDATE note SET body = '$host-' || abs(random() % 1000), edits = edits + 1 WHERE id IN (SELECT id FROM note ORDER BY random() LIMIT 2)" \
    "UPDATE note SET folder_id = (SELECT id FROM folder ORDER BY random() LIMIT 1) WHERE id = (SELECT id FROM note ORDER BY random() LIMIT 1)" \
    "INSERT INTO note(title, body, folder_id) VALUES ('$host-' || hex(randomblob(6)), 'new', (SELECT id FROM folder ORDER BY random() LIMIT 1))" \
    "DELETE FROM note WHERE id = (SELECT id FROM note WHERE title NOT LIKE 'seed-%' AND abs(random() % 4) = 0 ORDER BY random() LIMIT 1)" \
    >/dev/null &
done
# Meanwhile c deletes the scratch folder (its notes go with it, on every
# host, also those the others add to it before they hear of it).
sleep 1
"$bin/groupsync" exec "$work/c/app" "DELETE FROM folder WHERE name = 'scratch'" >/dev/null
wait_writers
tries=0
until settled; do tries=$((tries + 1)); [ $tries -lt 1200 ] || { echo "replicas did not converge"; exit 1; }; sleep 0.1; done
end=$(date +%s.%N)
rows=$(content "$work/a/app" | grep -c '^  | [0-9a-f]\{8\}-' || true)
conflicts=$(psql -At "$conninfo" -c "SELECT count(*) FROM gs_conflict")
entries=$(psql -At "$conninfo" -c "SELECT max(seq) FROM gs_change")
printf 'demo-hosts: every replica converged: %s rows identical on a, b and c (row by row, by global ID)\n' "$rows"
for host in a b c; do
  dangling=$("$bin/groupsync" query "$work/$host/app" "SELECT count(*) FROM note n WHERE n.folder_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM folder f WHERE f.id = n.folder_id)" | sed -n 2p | grep -o '[0-9]\+')
  [ "$dangling" = "0" ] || { echo "demo-hosts: $dangling notes of $host point at no folder"; exit 1; }
done
ids() { "$bin/groupsync" query "$1" "SELECT name || '=' || id FROM folder ORDER BY name" | sed 1d | grep -o '[a-z-]*=[0-9]*' | tr '\n' ' '; }
printf 'demo-hosts: every relation holds: each note in the same folder on a, b and c, none pointing at no folder\n'
printf '            (folder ids are each host'"'"'s own: a %s| b %s| c %s)\n' "$(ids "$work/a/app")" "$(ids "$work/b/app")" "$(ids "$work/c/app")"
orphans=$(grep -c 'parent-deleted' "$work/relay-a.log" || true)
printf 'demo-hosts: %s log entries, %s conflicts settled (last writer wins) and reported; %.1f s from the first commit\n' \
  "$entries" "$conflicts" "$(echo "$end - $start" | bc)"
printf 'demo-hosts: %s notes added to the scratch folder on one host while another deleted it followed it (reported)\n' \
  "$orphans"
"$bin/groupsync" status "$work/b/app" | grep -A1 '^relay'
