#!/usr/bin/env bash
# Scripts/timed.sh PHASE COMMAND...: runs COMMAND, its output kept in
# $TEST_REPORT/PHASE.log and shown once it ends, and appends the phase's start and end
# (s since the epoch), its exit status and the CPU time it used (s, its
# processes' user and system time) to $TEST_REPORT/phases.tsv for
# Scripts/test-summary.sh. Exits as COMMAND did.
#
# Runs of `make test` on one machine share its cores: each phase runs in
# one of $TEST_SLOTS machine-wide slots (lock files in /tmp), so that the
# phases of a second run started meanwhile wait for a slot instead of
# oversubscribing the machine (two runs at once on two cores put hundreds
# of processes on each core, and a PostgreSQL server could not answer a
# connect in half a minute). A run alone never waits: make runs at most
# TEST_JOBS phases at once, and there are as many slots. The slot's lock
# stays with this script: COMMAND's processes do not inherit it.
set -uo pipefail
report=${TEST_REPORT:-.build/test-report}
phase=$1
shift
mkdir -p "$report"
slots=${TEST_SLOTS:-6}
slot_dir=${TMPDIR:-/tmp}/groupsync-test-slots
mkdir -p "$slot_dir"
told=0
while :; do
  for slot in $(seq 1 "$slots"); do
    exec 9>"$slot_dir/$slot"
    flock -n 9 && break 2
  done
  exec 9>&-
  if [ "$told" = 0 ]; then echo "$phase: waiting for a test slot (another run of make test on this machine)"; told=1; fi
  sleep 1
done
start=$(date +%s.%N)
# COMMAND runs in a session of its own, its output to the log: a process a
# failed test left behind (a child it started) would otherwise hold the
# phase's output pipe open, and make would wait for it forever. Once
# COMMAND has ended, what is left of its session is killed. (`setsid`
# does not fork here: a background job of a script leads no group, so its
# pid is the new session's.)
setsid "$@" 9>&- >"$report/$phase.log" 2>&1 &
session=$!
trap 'kill -TERM -- -"$session" 2>/dev/null; wait "$session"; exit 130' INT TERM
wait "$session"
status=$?
trap - INT TERM
end=$(date +%s.%N)
if pkill -0 -s "$session" 2>/dev/null; then
  echo "$phase: killing what its tests left running: $(pgrep -s "$session" -d ' ' -l 2>/dev/null | head -c 300)" \
    >>"$report/$phase.log"
  pkill -KILL -s "$session" 2>/dev/null
fi
cat "$report/$phase.log"
# `times`' second line: the user and system time of the finished children
# (run by this shell itself: a subshell would have none).
times >"$report/.times-$phase"
cpu=$(tail -1 "$report/.times-$phase" | awk '{
  total = 0
  for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); total += t[1] * 60 + t[2] }
  printf "%.0f", total
}')
rm -f "$report/.times-$phase"
printf '%s\t%s\t%s\t%s\t%s\n' "$phase" "$start" "$end" "$status" "$cpu" >>"$report/phases.tsv"
exit "$status"
