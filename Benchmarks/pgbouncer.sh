#!/bin/sh
# A throw-away PgBouncer in transaction pooling mode, in front of the
# benchmark's server (Benchmarks/postgres.sh), for the scale phase's poll
# transport.
#
#   Benchmarks/pgbouncer.sh start FOLDER PORT PG_SOCKET_FOLDER PG_PORT POOL_SIZE
#       installs Debian's pgbouncer if missing, writes FOLDER/pgbouncer.ini
#       (pool_mode = transaction, a unix socket in FOLDER only: no TCP,
#       auth_type = any, every database as the user postgres, at most
#       POOL_SIZE server connections per database) and starts it,
#       daemonized, as the user `postgres`; waits until it answers.
#   Benchmarks/pgbouncer.sh stop FOLDER
#       stops it (its pidfile) and removes FOLDER.
#
# PgBouncer refuses to run as root, and a benchmark has no business doing
# so. Its admin console is the database `pgbouncer` on the same socket
# (SHOW POOLS, SHOW SERVERS), for the user postgres.
set -eu
command=$1
folder=$2

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$command" in
start)
  port=$3
  pg_socket_folder=$4
  pg_port=$5
  pool_size=$6
  if ! command -v pgbouncer >/dev/null 2>&1; then
    echo "pgbouncer.sh: installing pgbouncer"
    apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null
  fi
  rm -rf "$folder"
  mkdir -p "$folder"
  if [ "$(id -u)" = 0 ]; then chown postgres "$folder"; fi
  cat >"$folder/pgbouncer.ini" <<EOF
[databases]
* = host=$pg_socket_folder port=$pg_port user=postgres

[pgbouncer]
pool_mode = transaction
listen_addr =
listen_port = $port
unix_socket_dir = $folder
auth_type = any
admin_users = postgres
stats_users = postgres
max_client_conn = 4000
default_pool_size = $pool_size
min_pool_size = 0
reserve_pool_size = 0
max_db_connections = $pool_size
ignore_startup_parameters = extra_float_digits,options
server_reset_query =
logfile = $folder/pgbouncer.log
pidfile = $folder/pgbouncer.pid
EOF
  # Each client is a file descriptor: past the shell's limit PgBouncer
  # would refuse clients.
  ulimit -n 8192 2>/dev/null || true
  as_postgres pgbouncer -d -q "$folder/pgbouncer.ini"
  tries=0
  until psql -X -q -d "host=$folder port=$port user=postgres dbname=postgres" -c "SELECT 1" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ $tries -ge 100 ]; then
      echo "pgbouncer.sh: pgbouncer on $folder/.s.PGSQL.$port did not answer within 10 s:" >&2
      tail -n 20 "$folder/pgbouncer.log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  echo "pgbouncer.sh: $(pgbouncer --version | head -n 1) on $folder/.s.PGSQL.$port, transaction pooling, $pool_size server connections"
  ;;
stop)
  if [ -f "$folder/pgbouncer.pid" ]; then
    pid=$(cat "$folder/pgbouncer.pid")
    kill -TERM "$pid" 2>/dev/null || true
    tries=0
    while kill -0 "$pid" 2>/dev/null && [ $tries -lt 100 ]; do tries=$((tries + 1)); sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$folder"
  ;;
*)
  echo "usage: pgbouncer.sh start FOLDER PORT PG_SOCKET_FOLDER PG_PORT POOL_SIZE | stop FOLDER" >&2
  exit 64
  ;;
esac
