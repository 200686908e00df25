#!/usr/bin/env bash
# Scripts/timed.sh PHASE COMMAND...: runs COMMAND, its output both shown
# and kept in $TEST_REPORT/PHASE.log, and appends the phase's start and end
# (s since the epoch), its exit status and the CPU time it used (s, its
# processes' user and system time) to $TEST_REPORT/phases.tsv for
# Scripts/test-summary.sh. Exits as COMMAND did.
set -uo pipefail
report=${TEST_REPORT:-.build/test-report}
phase=$1
shift
mkdir -p "$report"
start=$(date +%s.%N)
"$@" 2>&1 | tee "$report/$phase.log"
status=${PIPESTATUS[0]}
end=$(date +%s.%N)
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
