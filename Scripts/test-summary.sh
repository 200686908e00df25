#!/usr/bin/env bash
# Scripts/test-summary.sh [REPORT]: where `make test`'s time went, from what
# Scripts/timed.sh kept in REPORT (.build/test-report): each phase's start
# and length, how many tests each Swift pass ran, and the ten slowest
# tests of every pass.
set -uo pipefail
report=${1:-${TEST_REPORT:-.build/test-report}}
phases="$report/phases.tsv"
[ -f "$phases" ] || { echo "test-summary: no $phases"; exit 0; }

first=$(cut -f2 "$phases" | sort -n | head -1)
last=$(cut -f3 "$phases" | sort -n | tail -1)
echo
echo "== where make test's time went (seconds; phases run side by side; cpu: user + system)"
awk -F'\t' -v t0="$first" '{
  printf "  %-12s start %5.0f  took %5.0f  cpu %5s  %s\n", $1, $2 - t0, $3 - $2, $5, ($4 == 0 ? "ok" : "FAILED (" $4 ")")
  cpu += $5
} END { printf "  %-12s             took %5.0f  cpu %5.0f\n", "in all", '"$last"' - t0, cpu }' "$phases"

# Swift Testing's lines: "✔ Test name() passed after 1.234 seconds." (or
# "✘ ... failed after", and "✔ Test run with N tests in M suites ...").
echo
echo "== tests run in each Swift pass"
for log in "$report"/*.log; do
  line=$(grep -aE 'Test run with [0-9]+ tests?' "$log" | tail -1)
  [ -n "$line" ] || continue
  echo "  $(basename "$log" .log): $(echo "$line" | sed -E 's/.*(Test run with [0-9]+ tests? in [0-9]+ suites?) (passed|failed)( after [0-9.]+ seconds)?.*/\1 \2\3/')"
done

# Each test case's own running time, from the lines Tests/GroupSyncTestSupport's
# `.timed` trait prints ("test-time SECONDS SUITE/TEST"): Swift Testing's
# "passed after" also counts the wait for a free slot. A parameterized
# test's cases are added up.
echo
echo "== the ten slowest tests (their own running time; a parameterized test's cases added up)"
for log in "$report"/*.log; do
  grep -aE '^test-time [0-9.]+ ' "$log" | awk -v pass="$(basename "$log" .log)" '{
    seconds[$3] += $2; cases[$3]++
  } END {
    for (name in seconds) printf "%s\t%s\t%s\t%d\n", seconds[name], pass, name, cases[name]
  }'
done | sort -t$'\t' -k1,1 -rn | head -10 \
  | awk -F'\t' '{ printf "  %7.1f s  %-12s %s%s\n", $1, $2, $3, ($4 > 1 ? " (" $4 " cases)" : "") }'

# What failed, last: CI shows the end of the output only. Each issue's
# line, cut to 400 characters (an expectation may print a whole result).
failed=$(grep -aH '✘ Test .* recorded an issue' "$report"/*.log 2>/dev/null)
if [ -n "$failed" ]; then
  echo
  echo "== tests that failed (pass: the issue, first 400 characters)"
  echo "$failed" | sed -E 's|^.*/([^/]+)\.log:|  \1: |' | cut -c1-400
fi
