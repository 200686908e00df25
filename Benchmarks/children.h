// What the floor (floor.c) and the PostgreSQL peer (pgnotify.c) share:
// clocks and waiting for the child processes that measured.
#ifndef GROUPSYNC_BENCH_CHILDREN_H
#define GROUPSYNC_BENCH_CHILDREN_H

#include <signal.h>
#include <stdint.h>
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

#endif
