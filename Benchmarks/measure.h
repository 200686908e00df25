// What the floor (floor.c) and the PostgreSQL peer (pgnotify.c) share:
// clocks, waiting for the child processes that measured, and the JSON of
// what they measured.
#ifndef GROUPSYNC_BENCH_MEASURE_H
#define GROUPSYNC_BENCH_MEASURE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Waits for `count` children, killing any still running after `seconds`;
// returns how many failed, were killed or exited non-zero.
static inline int wait_children(const pid_t *pids, int count, int seconds) {
  int64_t deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)seconds * 1000000000;
  int failed = 0;
  for (int i = 0; i < count; i++) {
    int status = 0;
    for (;;) {
      pid_t done = waitpid(pids[i], &status, WNOHANG);
      if (done == pids[i]) break;
      if (now_ns(CLOCK_MONOTONIC) > deadline) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &status, 0);
        break;
      }
      usleep(1000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  return failed;
}

// Prints the measured fields of the JSON line the benchmark reads:
// `latencyNs` (per message, from `sent` to its arrival at the last of
// `children`), `publishNs`, `watcherCpuNs` (summed) and the closing brace.
// `delivered` holds each child's arrival times (`total` a child), then each
// child's CPU time.
static inline void print_measurements(const int64_t *delivered, int children, long total, long warmup,
                                      const int64_t *sent, const int64_t *publish_ns) {
  printf("\"latencyNs\":[");
  for (long seq = warmup; seq < total; seq++) {
    int64_t last = 0;
    for (int c = 0; c < children; c++) {
      int64_t at = delivered[(size_t)c * total + seq];
      if (at > last) last = at;
    }
    printf("%s%lld", seq == warmup ? "" : ",", (long long)(last - sent[seq]));
  }
  printf("],\"publishNs\":[");
  for (long seq = warmup; seq < total; seq++)
    printf("%s%lld", seq == warmup ? "" : ",", (long long)publish_ns[seq]);
  int64_t cpu = 0;
  for (int c = 0; c < children; c++) cpu += delivered[(size_t)children * total + c];
  printf("],\"watcherCpuNs\":%lld,\"messagesPerWatcher\":%ld}\n", (long long)cpu, total);
}

#endif
