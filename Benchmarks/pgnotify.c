// pgnotify: PostgreSQL LISTEN/NOTIFY, measured the way GroupSync's
// benchmark measures GroupSync (a peer a user would choose between).
//
// One writer (this process) and N listener processes (forked), each with a
// connection of its own over the server's unix socket. Per message the
// writer runs BEGIN and NOTIFY, stamps CLOCK_REALTIME and sends COMMIT:
// the server signals listeners while it commits, before the writer's
// COMMIT returns, so the stamp is taken when the writer asks to commit (the
// benchmark compares GroupSync from the same point: its change set's
// committedAt, stamped inside the transaction before its COMMIT). Each
// listener blocks in poll(2) on its socket, reads the notification
// (PQconsumeInput, PQnotifies) and stamps CLOCK_REALTIME.
//
// Output, one JSON object on stdout, as floor.c prints: per message the
// latency at the last listener (max over listeners of delivered -
// committed), the writer's COMMIT round trip (publishNs), and the listeners' CPU time
// (getrusage) summed over listeners.
//
// Build: cc -O2 -I/usr/include/postgresql -o pgnotify pgnotify.c -lpq
//
// Usage: pgnotify --conninfo CONNINFO --listeners N --count K
//                 [--interval-us U] [--warmup W]

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"

#define MAX_LISTENERS 64

static void die(const char *what, PGconn *connection) {
  fprintf(stderr, "pgnotify: %s: %s\n", what,
          connection ? PQerrorMessage(connection) : strerror(errno));
  exit(2);
}

static PGconn *connect_or_die(const char *conninfo) {
  PGconn *connection = PQconnectdb(conninfo);
  if (PQstatus(connection) != CONNECTION_OK) die("connect", connection);
  return connection;
}

static void command(PGconn *connection, const char *sql) {
  PGresult *result = PQexec(connection, sql);
  if (PQresultStatus(result) != PGRES_COMMAND_OK) die(sql, connection);
  PQclear(result);
}

// A listener: woken by its socket, stamps each notification.
static void listener_main(const char *conninfo, long total, int64_t *delivered,
                          int64_t *cpu_ns, int ready_fd) {
  PGconn *connection = connect_or_die(conninfo);
  command(connection, "LISTEN bench");
  if (write(ready_fd, "r", 1) != 1) die("write ready", NULL);
  close(ready_fd);
  int socket = PQsocket(connection);
  long seen = 0;
  while (seen < total) {
    struct pollfd wait = {.fd = socket, .events = POLLIN};
    if (poll(&wait, 1, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll", NULL);
    }
    if (!PQconsumeInput(connection)) die("PQconsumeInput", connection);
    PGnotify *notify;
    while ((notify = PQnotifies(connection)) != NULL) {
      long seq = atol(notify->extra);
      if (seq >= 0 && seq < total) {
        delivered[seq] = now_ns(CLOCK_REALTIME);
        seen++;
      }
      PQfreemem(notify);
    }
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  *cpu_ns = ((int64_t)usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000000 +
            ((int64_t)usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000;
  PQfinish(connection);
  exit(0);
}

static void usage(void) {
  fprintf(stderr, "usage: pgnotify --conninfo CONNINFO --listeners N --count K "
                  "[--interval-us U] [--warmup W]\n");
  exit(64);
}

int main(int argc, char **argv) {
  const char *conninfo = NULL;
  int listeners = 0;
  long count = 0, warmup = 20, interval_us = 0;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage();
    const char *value = argv[i + 1];
    if (strcmp(argv[i], "--conninfo") == 0) conninfo = value;
    else if (strcmp(argv[i], "--listeners") == 0) listeners = atoi(value);
    else if (strcmp(argv[i], "--count") == 0) count = atol(value);
    else if (strcmp(argv[i], "--warmup") == 0) warmup = atol(value);
    else if (strcmp(argv[i], "--interval-us") == 0) interval_us = atol(value);
    else usage();
  }
  if (!conninfo || listeners < 1 || listeners > MAX_LISTENERS || count < 1 || warmup < 0)
    usage();

  long total = warmup + count;
  // delivered[l * total + seq], then one CPU time per listener.
  size_t bytes = ((size_t)listeners * total + listeners) * sizeof(int64_t);
  int64_t *delivered = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (delivered == MAP_FAILED) die("mmap", NULL);
  int64_t *committed = calloc(total, sizeof *committed);
  int64_t *commit_ns = calloc(total, sizeof *commit_ns);
  if (!committed || !commit_ns) die("calloc", NULL);

  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) die("pipe", NULL);
  pid_t pids[MAX_LISTENERS];
  for (int l = 0; l < listeners; l++) {
    pids[l] = fork();
    if (pids[l] < 0) die("fork", NULL);
    if (pids[l] == 0) {
      close(ready[0]);
      listener_main(conninfo, total, delivered + (size_t)l * total,
                    delivered + (size_t)listeners * total + l, ready[1]);
    }
  }
  close(ready[1]);
  for (int l = 0; l < listeners; l++) {
    char byte;
    if (read(ready[0], &byte, 1) != 1) die("a listener did not start", NULL);
  }
  close(ready[0]);

  PGconn *writer = connect_or_die(conninfo);
  char sql[64];
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long seq = 0; seq < total; seq++) {
    if (interval_us > 0) {
      next.tv_nsec += interval_us * 1000;
      while (next.tv_nsec >= 1000000000) {
        next.tv_nsec -= 1000000000;
        next.tv_sec++;
      }
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {}
    }
    command(writer, "BEGIN");
    snprintf(sql, sizeof sql, "NOTIFY bench, '%ld'", seq);
    command(writer, sql);
    int64_t start = now_ns(CLOCK_MONOTONIC);
    committed[seq] = now_ns(CLOCK_REALTIME);
    command(writer, "COMMIT");
    commit_ns[seq] = now_ns(CLOCK_MONOTONIC) - start;
  }
  PQfinish(writer);

  int failed = wait_children(pids, listeners, 60);
  if (failed) {
    fprintf(stderr, "pgnotify: %d listener(s) failed or timed out\n", failed);
    return 1;
  }

  printf("{\"watchers\":%d,\"count\":%ld,\"intervalUs\":%ld,", listeners, count, interval_us);
  print_measurements(delivered, listeners, total, warmup, committed, commit_ns);
  return 0;
}
