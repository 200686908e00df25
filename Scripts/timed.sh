#!/usr/bin/env bash
# Scripts/timed.sh PHASE COMMAND...: runs COMMAND, its output both shown
# and kept in $TEST_REPORT/PHASE.log, and appends the phase's start (s
# since the epoch), its length (s) and its exit status to
# $TEST_REPORT/phases.tsv for Scripts/test-summary.sh. Exits as COMMAND did.
set -uo pipefail
report=${TEST_REPORT:-.build/test-report}
phase=$1
shift
mkdir -p "$report"
start=$(date +%s.%N)
"$@" 2>&1 | tee "$report/$phase.log"
status=${PIPESTATUS[0]}
end=$(date +%s.%N)
printf '%s\t%s\t%s\t%s\n' "$phase" "$start" "$end" "$status" >>"$report/phases.tsv"
exit "$status"
