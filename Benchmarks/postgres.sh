#!/bin/sh
# A throw-away PostgreSQL server for the benchmark's peers phase.
#
#   Benchmarks/postgres.sh start FOLDER PORT   installs Debian's postgresql
#       and libpq-dev if missing, creates a cluster in FOLDER (initdb, trust
#       authentication) and starts it on a unix socket in FOLDER only (no
#       TCP: listen_addresses is empty), as the user `postgres`.
#   Benchmarks/postgres.sh stop FOLDER         stops it and removes FOLDER.
#
# The server never runs as root: PostgreSQL refuses to, and a benchmark has
# no business doing so.
set -eu
command=$1
folder=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$command" in
start)
  port=$3
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ] || [ ! -f /usr/include/postgresql/libpq-fe.h ]; then
    echo "postgres.sh: installing postgresql and libpq-dev"
    apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql libpq-dev >/dev/null
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  rm -rf "$folder"
  mkdir -p "$folder"
  if [ "$(id -u)" = 0 ]; then chown postgres "$folder"; fi
  as_postgres "$bin/initdb" -D "$folder/data" -A trust -U postgres >/dev/null
  # fsync off in the configuration file, not on the command line, so that
  # the hosts phase can turn it on for a run (ALTER SYSTEM and a reload).
  echo "fsync = off" >>"$folder/data/postgresql.conf"
  as_postgres "$bin/pg_ctl" -D "$folder/data" -l "$folder/server.log" -w \
    -o "-c listen_addresses='' -k $folder -p $port" start >/dev/null
  echo "postgres.sh: server $("$bin/postgres" --version) on $folder/.s.PGSQL.$port"
  ;;
stop)
  if [ -d "$folder/data" ] && [ -n "$bin" ]; then
    as_postgres "$bin/pg_ctl" -D "$folder/data" -m fast -w stop >/dev/null || true
  fi
  rm -rf "$folder"
  ;;
*)
  echo "usage: postgres.sh start FOLDER PORT | stop FOLDER" >&2
  exit 64
  ;;
esac
