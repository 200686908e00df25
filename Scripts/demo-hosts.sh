#!/bin/sh
# make demo-hosts: a throw-away PostgreSQL server, three hosts (group
# folders a/, b/, c/ of one work folder, each with its own relay process),
# writers on each committing overlapping rows at once; then waits until
# every replica holds the same rows (compared row by row, by global ID) and
# prints that, with the conflicts the log settled.
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
echo "CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT, edits INTEGER NOT NULL DEFAULT 0);" \
  > "$work/schema.sql"
for host in a b c; do
  rm -rf "${work:?}/$host"
  "$bin/groupsync" init "$work/$host/app" --schema "$work/schema.sql" >/dev/null
  "$bin/groupsync" relay "$work/$host/app" --postgres "$conninfo" --host "$host" --poll-interval 0.2 \
    >"$work/relay-$host.log" 2>&1 &
  relays="$relays $!"
done
"$bin/groupsync" exec "$work/a/app" --repeat 20 \
  "INSERT INTO note(title, body) VALUES ('seed-' || hex(randomblob(4)), 'seed')" >/dev/null

# The same rows everywhere: title, body and edits of every replicated row,
# by global ID (rowids are each host's own).
content() {
  "$bin/groupsync" query "$1" "SELECT m.gid, n.title, n.body, n.edits FROM note n
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

echo "demo-hosts: 3 hosts, 3 writers x 300 commits of overlapping updates, inserts and deletes"
start=$(date +%s.%N)
for host in a b c; do
  "$bin/groupsync" exec "$work/$host/app" --repeat 300 \
    "UPDATE note SET body = '$host-' || abs(random() % 1000), edits = edits + 1 WHERE id IN (SELECT id FROM note ORDER BY random() LIMIT 2)" \
    "INSERT INTO note(title, body) VALUES ('$host-' || hex(randomblob(6)), 'new')" \
    "DELETE FROM note WHERE id = (SELECT id FROM note WHERE title NOT LIKE 'seed-%' AND abs(random() % 4) = 0 ORDER BY random() LIMIT 1)" \
    >/dev/null &
done
wait_writers() { for job in $(jobs -p); do case " $relays " in *" $job "*) ;; *) wait "$job";; esac; done; }
wait_writers
tries=0
until settled; do tries=$((tries + 1)); [ $tries -lt 1200 ] || { echo "replicas did not converge"; exit 1; }; sleep 0.1; done
end=$(date +%s.%N)
rows=$(content "$work/a/app" | grep -c '^  | [0-9a-f]\{8\}-' || true)
conflicts=$(psql -At "$conninfo" -c "SELECT count(*) FROM gs_conflict")
entries=$(psql -At "$conninfo" -c "SELECT max(seq) FROM gs_change")
printf 'demo-hosts: every replica converged: %s rows identical on a, b and c (row by row, by global ID)\n' "$rows"
printf 'demo-hosts: %s log entries, %s conflicts settled (last writer wins) and reported; %.1f s from the first commit\n' \
  "$entries" "$conflicts" "$(echo "$end - $start" | bc)"
"$bin/groupsync" status "$work/b/app" | grep -A1 '^relay'
