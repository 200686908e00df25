// floor: the least a cross-process change notification can cost on this
// machine, measured the way GroupSync's benchmark measures GroupSync.
//
// One writer (this process) and N watcher processes (forked). Per message,
// the writer stamps CLOCK_REALTIME (GroupSync stamps right after COMMIT),
// writes a 200-byte file in tmp/ and publishes it into every watcher's
// folder:
//   link:   one file, hard-linked into each folder, then unlinked from tmp/
//           (what GroupSync's fan-out does);
//   rename: one file per watcher, each renamed into its folder (maildir).
// Each watcher blocks in read(2) on its own inotify descriptor, and per
// event opens and reads the file, unlinks it, and stamps CLOCK_REALTIME
// (GroupSync's listener stamps when `next()` returns, after the same work).
//
// Output, one JSON object on stdout: per message the latency at the last
// watcher (max over watchers of delivered - published) and the writer's
// publish time (CLOCK_MONOTONIC around write + links), in nanoseconds; and
// the watchers' CPU time (getrusage, user + system) summed over watchers.
//
// Links nothing but libc. Build: cc -O2 -o floor floor.c (with measure.h beside it)
//
// Usage: floor --dir DIR --watchers N --count K [--interval-us U]
//              [--mode link|rename] [--warmup W] [--tmp TMPDIR] [--stopped]
//
// --stopped: the watchers are stopped (SIGSTOP) while the writer publishes
// and resumed afterwards, to measure the writer's cost per watcher without
// the watchers competing for the CPUs (latencies are then meaningless).
//
// --sustained SECONDS --window W: the floor's sustained rate, measured as
// the benchmark measures GroupSync's: the writer publishes back to back for
// SECONDS but never runs more than W messages ahead of the slowest watcher
// (no backlog growth); --count is then an upper bound. Prints
// {"sustained":true,"messages":M,"seconds":S,"messagesPerSecond":R,"maxBacklog":B}.
//
// The watched folders are DIR/w0, DIR/w1, ...; files are written in TMPDIR
// (default DIR/tmp). On ext4 the cost of creating a file depends on the
// block group of its folder, so the benchmark passes the group folder's own
// tmp/: the floor then creates its files where GroupSync creates its own.

#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"

#define MAX_WATCHERS 256
#define FILE_SIZE 200
#define NAME_DIGITS 12

static void die(const char *what) {
  fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void message_name(char *out, size_t size, long seq) {
  snprintf(out, size, "%0*ld.msg", NAME_DIGITS, seq);
}

// A watcher: woken by inotify, reads and removes each file, stamps the time.
static void watcher_main(const char *folder, int index, long total,
                         int64_t *delivered, int64_t *cpu_ns,
                         volatile int64_t *progress, int ready_fd) {
  int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0) die("inotify_init1");
  if (inotify_add_watch(fd, folder, IN_CREATE | IN_MOVED_TO) < 0)
    die("inotify_add_watch");
  if (write(ready_fd, "r", 1) != 1) die("write ready");
  close(ready_fd);

  char events[64 * 1024] __attribute__((aligned(8)));
  char path[8192 + NAME_MAX + 2];
  char content[4096];
  long seen = 0;
  while (seen < total) {
    ssize_t n = read(fd, events, sizeof events);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("read inotify");
    }
    for (char *p = events; p < events + n;) {
      struct inotify_event *event = (struct inotify_event *)p;
      p += sizeof *event + event->len;
      if (event->mask & IN_Q_OVERFLOW) {
        fprintf(stderr, "floor: watcher %d: inotify queue overflowed\n", index);
        exit(3);
      }
      if (event->len == 0) continue;
      char *end;
      long seq = strtol(event->name, &end, 10);
      if (end != event->name + NAME_DIGITS || strcmp(end, ".msg") != 0) continue;
      snprintf(path, sizeof path, "%s/%s", folder, event->name);
      int file = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (file < 0) die("open message");
      ssize_t got = read(file, content, sizeof content);
      if (got != FILE_SIZE) die("read message");
      close(file);
      // The writer put the sequence number first; check we read the file.
      if (strtol(content, NULL, 10) != seq) {
        fprintf(stderr, "floor: message %ld holds the wrong content\n", seq);
        exit(3);
      }
      if (unlink(path) != 0) die("unlink message");
      if (seq >= 0 && seq < total) {
        delivered[seq] = now_ns(CLOCK_REALTIME);
        seen++;
        __atomic_store_n(progress, seen, __ATOMIC_RELEASE);
      }
    }
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  *cpu_ns = ((int64_t)usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000000 +
            ((int64_t)usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000;
  exit(0);
}

static void write_file(const char *path, const char *content) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) die("open tmp");
  if (write(fd, content, FILE_SIZE) != FILE_SIZE) die("write tmp");
  close(fd);
}

static void usage(void) {
  fprintf(stderr,
          "usage: floor --dir DIR --watchers N --count K [--interval-us U] "
          "[--mode link|rename] [--warmup W] [--tmp TMPDIR] [--stopped]\n");
  exit(64);
}

// Removes the (empty) watched folders, the floor's own tmp folder if it
// made one, and the run's folder.
static void remove_folders(const char *dir, int watchers, const char *own_tmp) {
  char path[PATH_MAX];
  for (int w = 0; w < watchers; w++) {
    snprintf(path, sizeof path, "%s/w%d", dir, w);
    rmdir(path);
  }
  if (own_tmp != NULL) rmdir(own_tmp);
  rmdir(dir);
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  const char *tmp = NULL;
  int watchers = 0;
  long count = 0, warmup = 20, interval_us = 0, window = 64;
  double sustained = 0;
  int rename_mode = 0, stopped = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--stopped") == 0) {
      stopped = 1;
      continue;
    }
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!value) usage();
    if (strcmp(argv[i], "--dir") == 0) dir = value;
    else if (strcmp(argv[i], "--tmp") == 0) tmp = value;
    else if (strcmp(argv[i], "--watchers") == 0) watchers = atoi(value);
    else if (strcmp(argv[i], "--count") == 0) count = atol(value);
    else if (strcmp(argv[i], "--warmup") == 0) warmup = atol(value);
    else if (strcmp(argv[i], "--interval-us") == 0) interval_us = atol(value);
    else if (strcmp(argv[i], "--sustained") == 0) sustained = atof(value);
    else if (strcmp(argv[i], "--window") == 0) window = atol(value);
    else if (strcmp(argv[i], "--mode") == 0) {
      if (strcmp(value, "rename") == 0) rename_mode = 1;
      else if (strcmp(value, "link") != 0) usage();
    } else usage();
    i++;
  }
  if (!dir || watchers < 1 || watchers > MAX_WATCHERS || count < 1 || warmup < 0)
    usage();
  if (strlen(dir) > 2048 || (tmp && strlen(tmp) > 2048)) {
    fprintf(stderr, "floor: paths longer than 2048 bytes are not supported\n");
    return 64;
  }

  long total = warmup + count;
  char path[8192], target[8192], name[64], own_tmp[4096];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("mkdir dir");
  if (!tmp) {
    snprintf(own_tmp, sizeof own_tmp, "%s/tmp", dir);
    if (mkdir(own_tmp, 0755) != 0 && errno != EEXIST) die("mkdir tmp");
  }

  // delivered[w * total + seq], written by watcher w, read after it exited;
  // then one CPU time per watcher.
  // Then each watcher's count of messages seen (--sustained).
  size_t bytes = ((size_t)watchers * total + 2 * watchers) * sizeof(int64_t);
  int64_t *delivered = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (delivered == MAP_FAILED) die("mmap");
  int64_t *published = calloc(total, sizeof *published);
  int64_t *publish_ns = calloc(total, sizeof *publish_ns);
  if (!published || !publish_ns) die("calloc");

  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) die("pipe");
  pid_t pids[MAX_WATCHERS];
  for (int w = 0; w < watchers; w++) {
    snprintf(path, sizeof path, "%s/w%d", dir, w);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir watcher");
    pids[w] = fork();
    if (pids[w] < 0) die("fork");
    if (pids[w] == 0) {
      close(ready[0]);
      watcher_main(path, w, total, delivered + (size_t)w * total,
                   delivered + (size_t)watchers * total + w,
                   delivered + (size_t)watchers * total + watchers + w,
                   ready[1]);
    }
  }
  close(ready[1]);
  for (int w = 0; w < watchers; w++) {
    char byte;
    if (read(ready[0], &byte, 1) != 1) die("a watcher did not start");
  }
  close(ready[0]);
  if (stopped) {
    for (int w = 0; w < watchers; w++) {
      int status;
      if (kill(pids[w], SIGSTOP) != 0) die("kill SIGSTOP");
      if (waitpid(pids[w], &status, WUNTRACED) != pids[w]) die("waitpid stopped");
    }
  }

  char content[FILE_SIZE + 1];
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  volatile int64_t *progress = delivered + (size_t)watchers * total + watchers;
  int64_t sustained_start = 0, sustained_end = 0;
  long sustained_first = -1, max_backlog = 0, published_count = total;
  for (long seq = 0; seq < total; seq++) {
    if (sustained > 0 && seq >= warmup) {
      // Hold the backlog under the window, as the benchmark's writer does.
      int64_t now = now_ns(CLOCK_MONOTONIC);
      if (sustained_first < 0) {
        sustained_first = seq;
        sustained_start = now;
        sustained_end = now + (int64_t)(sustained * 1e9);
      }
      if (now >= sustained_end) {
        published_count = seq;
        break;
      }
      for (;;) {
        long slowest = LONG_MAX;
        for (int w = 0; w < watchers; w++) {
          long seen = (long)__atomic_load_n(&progress[w], __ATOMIC_ACQUIRE);
          if (seen < slowest) slowest = seen;
        }
        long backlog = seq - slowest;
        if (backlog > max_backlog) max_backlog = backlog;
        if (backlog < window) break;
        usleep(20);
      }
    }
    if (interval_us > 0) {
      next.tv_nsec += interval_us * 1000;
      while (next.tv_nsec >= 1000000000) {
        next.tv_nsec -= 1000000000;
        next.tv_sec++;
      }
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {}
    }
    int64_t start = now_ns(CLOCK_MONOTONIC);
    published[seq] = now_ns(CLOCK_REALTIME);
    memset(content, 'x', FILE_SIZE);
    int used = snprintf(content, sizeof content, "%ld %lld\n", seq, (long long)published[seq]);
    content[used] = 'x';
    message_name(name, sizeof name, seq);
    if (rename_mode) {
      for (int w = 0; w < watchers; w++) {
        snprintf(path, sizeof path, "%s/%s.floor.%d", tmp ? tmp : own_tmp, name, w);
        write_file(path, content);
        snprintf(target, sizeof target, "%s/w%d/%s", dir, w, name);
        if (rename(path, target) != 0) die("rename");
      }
    } else {
      snprintf(path, sizeof path, "%s/%s.floor", tmp ? tmp : own_tmp, name);
      write_file(path, content);
      for (int w = 0; w < watchers; w++) {
        snprintf(target, sizeof target, "%s/w%d/%s", dir, w, name);
        if (link(path, target) != 0) die("link");
      }
      if (unlink(path) != 0) die("unlink tmp");
    }
    publish_ns[seq] = now_ns(CLOCK_MONOTONIC) - start;
  }

  if (stopped)
    for (int w = 0; w < watchers; w++) kill(pids[w], SIGCONT);

  if (sustained > 0) {
    // Wait for every watcher to see the last message, then stop them.
    int64_t wait_until = now_ns(CLOCK_MONOTONIC) + 60 * 1000000000LL;
    for (int w = 0; w < watchers; w++)
      while (__atomic_load_n(&progress[w], __ATOMIC_ACQUIRE) < published_count &&
             now_ns(CLOCK_MONOTONIC) < wait_until)
        usleep(20);
    double seconds = (now_ns(CLOCK_MONOTONIC) - sustained_start) / 1e9;
    long messages = published_count - (sustained_first < 0 ? published_count : sustained_first);
    for (int w = 0; w < watchers; w++) {
      kill(pids[w], SIGKILL);
      waitpid(pids[w], NULL, 0);
    }
    for (long seq = 0; seq < published_count; seq++) {
      message_name(name, sizeof name, seq);
      for (int w = 0; w < watchers; w++) {
        snprintf(target, sizeof target, "%s/w%d/%s", dir, w, name);
        unlink(target);  // left by a watcher killed mid-way, if any
      }
    }
    printf("{\"sustained\":true,\"watchers\":%d,\"window\":%ld,\"messages\":%ld,"
           "\"seconds\":%.6f,\"messagesPerSecond\":%.1f,\"maxBacklog\":%ld}\n",
           watchers, window, messages, seconds, messages / seconds, max_backlog);
    remove_folders(dir, watchers, tmp ? NULL : own_tmp);
    return 0;
  }

  // Watchers exit once they saw every message; give up after a minute.
  int failed = wait_children(pids, watchers, 60);
  if (failed) {
    fprintf(stderr, "floor: %d watcher(s) failed or timed out\n", failed);
    return 1;
  }

  printf("{\"mode\":\"%s\",\"watchers\":%d,\"count\":%ld,\"intervalUs\":%ld,",
         rename_mode ? "rename" : "link", watchers, count, interval_us);
  print_measurements(delivered, watchers, total, warmup, published, publish_ns);

  remove_folders(dir, watchers, tmp ? NULL : own_tmp);  // empty for the next run
  return 0;
}
