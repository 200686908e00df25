// Stress test of the watcher half of CGroupSync (not part of the Swift
// build): `make test-c` builds and runs it under ASan and UBSan. By hand,
// from the package root:
//
//   gcc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror
//     -fsanitize=address,undefined -I CSupport/include CSupport/watcher.c
//     CSupport/folder_watch.c CSupport/errors.c Tests/c/watcher_test.c
//     -luv -lpthread
//     -o /tmp/watcher_test && /tmp/watcher_test
//
// and, built without -fsanitize, under
// `valgrind --leak-check=full --error-exitcode=1`.
// Exits 0 on success; prints every failed check otherwise.

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // nftw
#endif


#include "CGroupSync.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

// Generous: valgrind slows everything down a lot.
#define TIMEOUT_MS 15000
#define MAX_IDS 4096
#define MAX_RECS 20000

static atomic_int g_failures;

static void fail_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  atomic_fetch_add(&g_failures, 1);
}

#define FAIL(...) fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)    \
  do {                      \
    if (!(cond))            \
      FAIL(__VA_ARGS__);    \
  } while (0)

// Test plumbing failing (mkdir, pthread_create...) makes results useless.
#define MUST(cond)                                               \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "FATAL %s:%d: %s (errno %d: %s)\n",        \
              __FILE__, __LINE__, #cond, errno, strerror(errno)); \
      exit(2);                                                   \
    }                                                            \
  } while (0)

static void lock(pthread_mutex_t *m) { MUST(pthread_mutex_lock(m) == 0); }
static void unlock(pthread_mutex_t *m) { MUST(pthread_mutex_unlock(m) == 0); }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int64_t now_ms(void) {
  struct timespec ts;
  MUST(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char g_base[64];  // the temporary folder everything happens in
static int g_base_fd = -1;  // g_base held open, for watches of it

// MARK: Recording callback

typedef struct {
  uint64_t id;
  int has_name;
  char name[64];
  int events;
  int status;
} rec_t;

typedef struct ctx_s {
  gs_watcher_t *w;  // set before the first add
  // Modes.
  int self_remove;     // remove the watch from its first callback
  int slow;            // sleep a little in some callbacks
  int block_on_close;  // test_close_from_callback's dance
  atomic_int add_from_cb;  // add a watch from the first callback (set late)

  pthread_mutex_t mu;
  pthread_cond_t cv;
  rec_t recs[MAX_RECS];
  size_t nrecs;
  // Per watch id: callbacks seen, and set once remove returned (after which
  // a callback is a bug).
  atomic_ulong calls[MAX_IDS];
  atomic_ulong rescans[MAX_IDS];  // GS_EVENT_RESCAN only, not ticks
  atomic_ulong wakes[MAX_IDS];    // GS_EVENT_WAKE
  atomic_int removed[MAX_IDS];
  atomic_int wake_from_cb;  // each wake-up asks for one more, this many times

  // block_on_close state, under mu.
  int entered;
  int closing_seen;
  int main_done;
  int cb_add_rc;
  int cb_remove_rc;
  // add_from_cb result.
  atomic_int cb_added_rc;
  atomic_ullong cb_added_id;
} ctx_t;

static ctx_t *ctx_new(void) {
  ctx_t *c = calloc(1, sizeof(*c));
  MUST(c != NULL);
  MUST(pthread_mutex_init(&c->mu, NULL) == 0);
  MUST(pthread_cond_init(&c->cv, NULL) == 0);
  c->cb_add_rc = 1;
  c->cb_remove_rc = 1;
  c->cb_added_rc = 1;
  return c;
}

static void ctx_free(ctx_t *c) {
  MUST(pthread_cond_destroy(&c->cv) == 0);
  MUST(pthread_mutex_destroy(&c->mu) == 0);
  free(c);
}

static void ctx_clear(ctx_t *c) {
  lock(&c->mu);
  c->nrecs = 0;
  unlock(&c->mu);
}

static void close_dance(ctx_t *c, uint64_t id);

static void on_event(void *context, uint64_t id, const char *filename,
                     int events, int status) {
  ctx_t *c = context;
  if (id == 0 || id >= MAX_IDS) {
    FAIL("callback with watch id %llu", (unsigned long long)id);
    return;
  }
  if (atomic_load(&c->removed[id]))
    FAIL("callback for watch %llu after its remove returned",
         (unsigned long long)id);
  unsigned long prior = atomic_fetch_add(&c->calls[id], 1);

  if (events & GS_EVENT_RESCAN) atomic_fetch_add(&c->rescans[id], 1);
  if (events & GS_EVENT_WAKE) atomic_fetch_add(&c->wakes[id], 1);
  if (events & (GS_EVENT_RESCAN | GS_EVENT_TICK | GS_EVENT_WAKE)) {
    CHECK(events == GS_EVENT_RESCAN || events == GS_EVENT_TICK ||
              events == GS_EVENT_WAKE,
          "rescan with events %d", events);
    CHECK(filename == NULL, "rescan with filename %s", filename);
    CHECK(status == 0, "rescan with status %d", status);
  } else {
    CHECK(status == 0, "event with status %d (%s)", status,
          uv_strerror(status));
    CHECK(events != 0 &&
              (events & ~(GS_EVENT_RENAME | GS_EVENT_CHANGE)) == 0,
          "event with events %d", events);
  }

  lock(&c->mu);
  if (c->nrecs < MAX_RECS) {
    rec_t *r = &c->recs[c->nrecs++];
    r->id = id;
    r->has_name = filename != NULL;
    snprintf(r->name, sizeof(r->name), "%s", filename ? filename : "");
    r->events = events;
    r->status = status;
  }
  MUST(pthread_cond_broadcast(&c->cv) == 0);
  unlock(&c->mu);

  // Now and then only: libuv reads inotify until it runs dry, so callbacks
  // slower than the events would starve the commands queued for the loop.
  if (c->slow && prior % 16 == 0)
    sleep_ms(1);
  if (c->self_remove && prior == 0) {
    int rc = gs_watcher_remove(c->w, id);
    CHECK(rc == GS_OK, "remove from callback: %d", rc);
    atomic_store(&c->removed[id], 1);
    rc = gs_watcher_remove(c->w, id);
    CHECK(rc == GS_ENOTFOUND, "second remove from callback: %d", rc);
  }
  if (atomic_load(&c->add_from_cb) && prior == 0 &&
      atomic_load(&c->cb_added_rc) == 1) {
    uint64_t new_id = 0;
    gs_uv_failure err = {0};
    int rc = gs_watcher_add(c->w, g_base_fd, 0, 0, &new_id, &err);
    atomic_store(&c->cb_added_id, new_id);
    atomic_store(&c->cb_added_rc, rc);
  }
  if (c->block_on_close && prior == 0)
    close_dance(c, id);
  if ((events & GS_EVENT_WAKE) && atomic_fetch_sub(&c->wake_from_cb, 1) > 0) {
    int rc = gs_watcher_wake(c->w, id);
    CHECK(rc == GS_OK, "wake from callback: %d", rc);
  }
}

// Waits for a record of watch `id` (0: any) named `name` (NULL: a rescan)
// whose events include `mask`.
static int wait_rec(ctx_t *c, uint64_t id, const char *name, int mask) {
  int64_t deadline = now_ms() + TIMEOUT_MS;
  lock(&c->mu);
  for (;;) {
    for (size_t i = 0; i < c->nrecs; i++) {
      rec_t *r = &c->recs[i];
      if ((id == 0 || r->id == id) && (r->events & mask) == mask &&
          (name == NULL ? !r->has_name
                        : r->has_name && strcmp(r->name, name) == 0)) {
        unlock(&c->mu);
        return 1;
      }
    }
    int64_t left = deadline - now_ms();
    if (left <= 0)
      break;
    struct timespec ts;
    MUST(clock_gettime(CLOCK_REALTIME, &ts) == 0);
    long step = left < 50 ? left : 50;  // also bounds clock jumps
    ts.tv_nsec += step * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    int rc = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    MUST(rc == 0 || rc == ETIMEDOUT);
  }
  unlock(&c->mu);
  return 0;
}

static int wait_calls(ctx_t *c, uint64_t id, unsigned long n) {
  int64_t deadline = now_ms() + TIMEOUT_MS;
  while (atomic_load(&c->calls[id]) < n) {
    if (now_ms() > deadline)
      return 0;
    sleep_ms(1);
  }
  return 1;
}

// MARK: Files

static void make_path(char *out, size_t size, const char *dir,
                      const char *name) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  MUST(n > 0 && (size_t)n < size);
}

static void make_dir(char *out, size_t size, const char *name) {
  make_path(out, size, g_base, name);
  MUST(mkdir(out, 0700) == 0);
}

static void write_file(const char *dir, const char *name) {
  char path[256];
  make_path(path, sizeof(path), dir, name);
  int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  MUST(fd >= 0);
  MUST(write(fd, "x", 1) == 1);
  MUST(close(fd) == 0);
}

// The folder at `path`, held open: a watch needs its descriptor for as
// long as it is registered.
static int open_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MUST(fd >= 0);
  return fd;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static gs_watcher_t *watcher_new(ctx_t *c) {
  gs_watcher_t *w = NULL;
  int rc = gs_watcher_create(on_event, c, &w);
  MUST(rc == GS_OK && w != NULL);
  c->w = w;
  return w;
}

// Touches files in a folder until told to stop, to keep events flowing.
typedef struct {
  char dir[256];
  atomic_int stop;
  pthread_t thread;
} churn_t;

static void *churn_main(void *arg) {
  churn_t *ch = arg;
  for (unsigned i = 0; !atomic_load(&ch->stop); i++) {
    char name[32];
    snprintf(name, sizeof(name), "churn%u", i % 8);
    write_file(ch->dir, name);
    sleep_ms(2);
  }
  return NULL;
}

static void churn_start(churn_t *ch, const char *dir) {
  snprintf(ch->dir, sizeof(ch->dir), "%s", dir);
  atomic_store(&ch->stop, 0);
  MUST(pthread_create(&ch->thread, NULL, churn_main, ch) == 0);
}

static void churn_stop(churn_t *ch) {
  atomic_store(&ch->stop, 1);
  MUST(pthread_join(ch->thread, NULL) == 0);
}

// MARK: Tests

static void test_errors(void) {
  gs_watcher_t *w = (gs_watcher_t *)1;
  gs_watch_cb no_callback = NULL;  // a variable: clang rejects a NULL literal
  CHECK(gs_watcher_create(no_callback, NULL, &w) == GS_EINVAL,
        "create without callback");
  CHECK(w == NULL, "create failure leaves *out set");
  gs_watcher_close(NULL);  // a no-op
}

static void test_events(void) {
  char dir[256];
  char a[256], b[256], c2[256], sub[256];
  make_dir(dir, sizeof(dir), "events");
  make_path(a, sizeof(a), dir, "a.txt");
  make_path(b, sizeof(b), dir, "b.txt");
  make_path(c2, sizeof(c2), dir, "c.txt");
  make_path(sub, sizeof(sub), dir, "sub");
  int dirfd = open_dir(dir);

  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  CHECK(gs_watcher_count(w) == 0, "new watcher has watches");

  uint64_t id = 0;
  gs_uv_failure err = {0};
  int rc = gs_watcher_add(w, dirfd, 0, 0, &id, &err);
  CHECK(rc == GS_OK, "add: %d (uv %d)", rc, err.code);
  CHECK(id == 1, "first watch id is %llu, not 1", (unsigned long long)id);
  CHECK(err.code == 0 && err.call == NULL,
        "uv failure %d after a successful add", err.code);
  CHECK(gs_watcher_count(w) == 1, "count after add");

  ctx_clear(c);
  write_file(dir, "a.txt");
  CHECK(wait_rec(c, id, "a.txt", GS_EVENT_RENAME), "no RENAME a.txt (create)");
  CHECK(wait_rec(c, id, "a.txt", GS_EVENT_CHANGE), "no CHANGE a.txt (write)");

  ctx_clear(c);
  MUST(link(a, b) == 0);
  CHECK(wait_rec(c, id, "b.txt", GS_EVENT_RENAME), "no RENAME b.txt (link)");

  ctx_clear(c);
  MUST(rename(b, c2) == 0);
  CHECK(wait_rec(c, id, "b.txt", GS_EVENT_RENAME), "no RENAME b.txt (from)");
  CHECK(wait_rec(c, id, "c.txt", GS_EVENT_RENAME), "no RENAME c.txt (to)");

  ctx_clear(c);
  MUST(unlink(a) == 0);
  CHECK(wait_rec(c, id, "a.txt", GS_EVENT_RENAME), "no RENAME a.txt (unlink)");

  ctx_clear(c);
  MUST(mkdir(sub, 0700) == 0);
  CHECK(wait_rec(c, id, "sub", GS_EVENT_RENAME), "no RENAME sub (mkdir)");

  rc = gs_watcher_remove(w, id);
  CHECK(rc == GS_OK, "remove: %d", rc);
  atomic_store(&c->removed[id], 1);
  CHECK(gs_watcher_count(w) == 0, "count after remove");
  CHECK(gs_watcher_remove(w, id) == GS_ENOTFOUND, "second remove");
  CHECK(gs_watcher_remove(w, 12345) == GS_ENOTFOUND, "remove unknown id");
  CHECK(gs_watcher_remove(w, 0) == GS_ENOTFOUND, "remove id 0");
  write_file(dir, "after.txt");  // must not reach the removed watch

  uint64_t id2 = 0;
  rc = gs_watcher_add(w, dirfd, 0, 0, &id2, &err);
  CHECK(rc == GS_OK && id2 == 2, "second add: %d, id %llu", rc,
        (unsigned long long)id2);
  CHECK(gs_watcher_add(w, -1, 0, 0, &id2, &err) == GS_EINVAL,
        "add a negative descriptor");

  // Adding from the callback runs on the loop thread without waiting.
  atomic_store(&c->add_from_cb, 1);
  write_file(dir, "d.txt");
  CHECK(wait_rec(c, id2, "d.txt", GS_EVENT_RENAME), "no RENAME d.txt");
  int64_t deadline = now_ms() + TIMEOUT_MS;
  while (atomic_load(&c->cb_added_rc) == 1 && now_ms() < deadline)
    sleep_ms(1);
  CHECK(atomic_load(&c->cb_added_rc) == GS_OK, "add from callback: %d",
        atomic_load(&c->cb_added_rc));
  CHECK(atomic_load(&c->cb_added_id) == 3, "add from callback: id %llu",
        (unsigned long long)atomic_load(&c->cb_added_id));
  CHECK(gs_watcher_count(w) == 2, "count after add from callback");
  CHECK(gs_watcher_remove(w, 3) == GS_OK, "remove watch added in callback");
  atomic_store(&c->removed[3], 1);

  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// GS_WATCH_ARRIVALS: entries that appear, by create, link or rename, are
// reported; removals, writes and link-count changes wake nobody; the
// folder itself going away is a rescan.
static void test_arrivals(void) {
  char dir[256], a[256], b[256], c2[256], outside[256];
  make_dir(dir, sizeof(dir), "arrivals");
  make_path(a, sizeof(a), dir, "a.txt");
  make_path(b, sizeof(b), dir, "b.txt");
  make_path(c2, sizeof(c2), dir, "c.txt");
  make_path(outside, sizeof(outside), g_base, "arrivals-outside.txt");
  int dirfd = open_dir(dir);

  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  uint64_t id = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 0, GS_WATCH_ARRIVALS, &id, &err) == GS_OK,
        "add arrivals watch: uv %d", err.code);

  write_file(dir, "a.txt");
  CHECK(wait_rec(c, id, "a.txt", GS_EVENT_RENAME), "no event a.txt (create)");
  MUST(link(a, b) == 0);
  CHECK(wait_rec(c, id, "b.txt", GS_EVENT_RENAME), "no event b.txt (link)");
  write_file(g_base, "arrivals-outside.txt");
  MUST(rename(outside, c2) == 0);
  CHECK(wait_rec(c, id, "c.txt", GS_EVENT_RENAME), "no event c.txt (moved in)");

  // None of these may be reported: a write, a link elsewhere (the link
  // count of an entry changes), removals, a rename out. A last create
  // then shows the watch still works and everything before it was read.
  ctx_clear(c);
  unsigned long before = atomic_load(&c->calls[id]);
  int fd = open(a, O_WRONLY | O_APPEND);
  MUST(fd >= 0);
  MUST(write(fd, "y", 1) == 1);
  MUST(close(fd) == 0);
  MUST(link(a, outside) == 0);
  MUST(unlink(outside) == 0);
  MUST(unlink(a) == 0);
  MUST(unlink(b) == 0);
  MUST(rename(c2, outside) == 0);
  MUST(unlink(outside) == 0);
  write_file(dir, "last.txt");
  CHECK(wait_rec(c, id, "last.txt", GS_EVENT_RENAME), "no event last.txt");
  CHECK(atomic_load(&c->calls[id]) == before + 1,
        "%lu events for one arrival after removals and changes",
        atomic_load(&c->calls[id]) - before);

  // The folder itself removed: a rescan, without a name. Held open, it
  // gets no IN_DELETE_SELF until the descriptor closes, so a watch with a
  // rescan timer tells it: once the emptied folder has settled (ticks, no
  // rescans), a rescan can only be the removal's.
  CHECK(gs_watcher_remove(w, id) == GS_OK, "remove");
  atomic_store(&c->removed[id], 1);
  CHECK(gs_watcher_add(w, dirfd, 50, GS_WATCH_ARRIVALS, &id, &err) == GS_OK,
        "add timed arrivals watch: uv %d", err.code);
  char last[256];
  make_path(last, sizeof(last), dir, "last.txt");
  MUST(unlink(last) == 0);
  CHECK(wait_rec(c, id, NULL, GS_EVENT_TICK), "the folder never settled");
  ctx_clear(c);
  MUST(rmdir(dir) == 0);
  CHECK(wait_rec(c, id, NULL, GS_EVENT_RESCAN), "no rescan on removal");

  CHECK(gs_watcher_remove(w, id) == GS_OK, "remove");
  atomic_store(&c->removed[id], 1);
  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// The watch is on the folder its descriptor holds: the same arrivals-only
// reports, the watch follows the folder when it is renamed, and the
// folder's removal (held open: no IN_DELETE_SELF until the descriptor
// closes) is a rescan at the next timer tick.
static void test_arrivals_follow_folder(void) {
  char dir[256], moved[256], a[256];
  make_dir(dir, sizeof(dir), "arrivals-fd");
  make_path(moved, sizeof(moved), g_base, "arrivals-fd-moved");
  make_path(a, sizeof(a), moved, "a.txt");
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MUST(dirfd >= 0);

  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  uint64_t id = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, -1, 0, GS_WATCH_ARRIVALS, &id, &err) == GS_EINVAL,
        "a negative descriptor is refused");
  CHECK(gs_watcher_add(w, dirfd, 50, GS_WATCH_ARRIVALS, &id, &err) == GS_OK,
        "add: uv %d", err.code);
  MUST(rename(dir, moved) == 0);  // the watch follows the folder
  write_file(moved, "a.txt");
  CHECK(wait_rec(c, id, "a.txt", GS_EVENT_RENAME), "no event a.txt (create)");

  ctx_clear(c);
  MUST(unlink(a) == 0);
  write_file(moved, "last.txt");
  CHECK(wait_rec(c, id, "last.txt", GS_EVENT_RENAME), "no event last.txt");
  lock(&c->mu);
  for (size_t i = 0; i < c->nrecs; i++)
    CHECK(!(c->recs[i].has_name && strcmp(c->recs[i].name, "a.txt") == 0),
          "the removal of a.txt was reported");
  unlock(&c->mu);

  ctx_clear(c);
  char last[256];
  make_path(last, sizeof(last), moved, "last.txt");
  MUST(unlink(last) == 0);
  MUST(rmdir(moved) == 0);
  CHECK(wait_rec(c, id, NULL, GS_EVENT_RESCAN), "no rescan after removal");

  CHECK(gs_watcher_remove(w, id) == GS_OK, "remove");
  atomic_store(&c->removed[id], 1);
  MUST(close(dirfd) == 0);
  gs_watcher_close(w);
  ctx_free(c);
}

// Two watches of one folder share its inotify watch, each with its own
// mask; removing one leaves the other working. And a watcher takes one
// inotify instance however many folders it watches (instances are limited
// per user, 128 by default).
static void test_shared_folder_and_many_folders(void) {
  char dir[256], a[256];
  make_dir(dir, sizeof(dir), "shared");
  make_path(a, sizeof(a), dir, "a.txt");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  uint64_t all = 0, arrivals = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &all, &err) == GS_OK, "add all");
  CHECK(gs_watcher_add(w, dirfd, 0, GS_WATCH_ARRIVALS, &arrivals, &err) ==
            GS_OK,
        "add arrivals");
  write_file(dir, "a.txt");
  CHECK(wait_rec(c, all, "a.txt", GS_EVENT_RENAME), "all: no create");
  CHECK(wait_rec(c, arrivals, "a.txt", GS_EVENT_RENAME), "arrivals: no create");
  ctx_clear(c);
  unsigned long before = atomic_load(&c->calls[arrivals]);
  MUST(unlink(a) == 0);
  CHECK(wait_rec(c, all, "a.txt", GS_EVENT_RENAME), "all: no unlink");
  write_file(dir, "b.txt");
  CHECK(wait_rec(c, arrivals, "b.txt", GS_EVENT_RENAME), "arrivals: no b.txt");
  CHECK(atomic_load(&c->calls[arrivals]) == before + 1,
        "the arrivals watch got the other watch's events");
  CHECK(gs_watcher_remove(w, all) == GS_OK, "remove all");
  atomic_store(&c->removed[all], 1);
  write_file(dir, "c.txt");
  CHECK(wait_rec(c, arrivals, "c.txt", GS_EVENT_RENAME),
        "arrivals: nothing after the other watch went");

  // More folders than inotify instances a user may have.
  int instances = 128;
  FILE *limit = fopen("/proc/sys/fs/inotify/max_user_instances", "r");
  if (limit != NULL) {
    if (fscanf(limit, "%d", &instances) != 1) instances = 128;
    fclose(limit);
  }
  int count = instances + 8 < MAX_IDS - 16 ? instances + 8 : MAX_IDS - 16;
  // Each folder is held open while watched (main raised the limit).
  struct rlimit files;
  MUST(getrlimit(RLIMIT_NOFILE, &files) == 0);
  MUST(files.rlim_cur == RLIM_INFINITY || (rlim_t)count + 64 < files.rlim_cur);
  static int fds[MAX_IDS];
  char last[256] = "";
  uint64_t last_id = 0;
  for (int i = 0; i < count; i++) {
    char name[64];
    snprintf(name, sizeof name, "folder-%d", i);
    make_dir(last, sizeof(last), name);
    fds[i] = open_dir(last);
    CHECK(gs_watcher_add(w, fds[i], 0, GS_WATCH_ARRIVALS, &last_id, &err) ==
              GS_OK,
          "watch %d of %d: uv %d", i + 1, count, err.code);
  }
  write_file(last, "z.txt");
  CHECK(wait_rec(c, last_id, "z.txt", GS_EVENT_RENAME), "no event in the last folder");
  gs_watcher_close(w);  // with every watch still registered
  for (int i = 0; i < count; i++)
    MUST(close(fds[i]) == 0);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// The one rule for coarse file times: settled once the stamp's second and
// two more have passed.
static void test_file_time_settled(void) {
  struct timespec stamp = {100, 0}, late_stamp = {100, 999999999};
  CHECK(!gs_file_time_settled(stamp, (struct timespec){100, 1}),
        "settled at once");
  CHECK(!gs_file_time_settled(stamp, (struct timespec){102, 999999999}),
        "settled within two seconds");
  CHECK(gs_file_time_settled(stamp, (struct timespec){103, 0}),
        "not settled after three seconds");
  CHECK(gs_file_time_settled(late_stamp, (struct timespec){103, 0}),
        "not settled after more than two seconds");
  CHECK(!gs_file_time_settled(late_stamp, (struct timespec){102, 999999999}),
        "settled within two seconds of a stamp late in its second");
  CHECK(!gs_file_time_settled(stamp, (struct timespec){99, 0}),
        "a stamp in the future settled");
}

static void test_rescan(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "rescan");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);

  uint64_t id = 0;
  gs_uv_failure err = {0};
  int rc = gs_watcher_add(w, dirfd, 20, 0, &id, &err);
  CHECK(rc == GS_OK, "add with rescan: %d", rc);
  CHECK(wait_rec(c, id, NULL, GS_EVENT_RESCAN), "rescan timer never fired");
  CHECK(wait_calls(c, id, 3), "rescan timer fired fewer than 3 times");

  // Events still arrive next to the timer.
  write_file(dir, "r.txt");
  CHECK(wait_rec(c, id, "r.txt", GS_EVENT_RENAME), "no RENAME r.txt");

  rc = gs_watcher_remove(w, id);
  CHECK(rc == GS_OK, "remove: %d", rc);
  atomic_store(&c->removed[id], 1);
  unsigned long calls = atomic_load(&c->calls[id]);
  sleep_ms(100);
  CHECK(atomic_load(&c->calls[id]) == calls, "rescan after remove");

  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// A folder unchanged for a while costs a stat per tick, not a rescan; a
// change brings the rescans back.
static void test_rescan_skips_settled_folder(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "settled");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);

  uint64_t id = 0;
  gs_uv_failure err = {0};
  int rc = gs_watcher_add(w, dirfd, 50, 0, &id, &err);
  CHECK(rc == GS_OK, "add with rescan: %d", rc);
  // The folder's times settle (gs_file_time_settled) after at most three
  // seconds; from the next tick on, ticks instead of rescans.
  sleep_ms(4500);
  unsigned long settled = atomic_load(&c->rescans[id]);
  unsigned long ticks = atomic_load(&c->calls[id]);
  sleep_ms(500);
  CHECK(atomic_load(&c->rescans[id]) == settled,
        "rescans of a settled folder: %lu", atomic_load(&c->rescans[id]) - settled);
  CHECK(atomic_load(&c->calls[id]) > ticks, "no ticks on a settled folder");

  write_file(dir, "new.txt");
  CHECK(wait_rec(c, id, "new.txt", GS_EVENT_RENAME), "no RENAME new.txt");
  ctx_clear(c);
  CHECK(wait_rec(c, id, NULL, GS_EVENT_RESCAN), "no rescan after a change");

  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// A descriptor that names no folder (not open: /proc/self/fd has no such
// entry) is libuv's failure to report, and takes no watch id.
static void test_missing(void) {
  // Well above any descriptor in use, and closed again: the kernel hands
  // out the lowest free number, so nothing reopens it meanwhile.
  int missing = fcntl(g_base_fd, F_DUPFD_CLOEXEC, 900);
  MUST(missing >= 900);
  MUST(close(missing) == 0);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);

  for (int i = 0; i < 2; i++) {
    uint64_t id = 99;
    gs_uv_failure err = {0};
    int rc = gs_watcher_add(w, missing, i == 0 ? 0 : 10, 0, &id, &err);
    CHECK(rc == GS_EUV, "add of a missing folder: %d", rc);
    CHECK(err.code == UV_ENOENT, "add of a missing folder: uv %d (%s)", err.code,
          err.code ? uv_strerror(err.code) : "none");
    // The call that failed is named: libuv's start of the watch, which
    // adds the inotify watch.
    CHECK(err.call != NULL && strcmp(err.call, "uv_fs_event_start") == 0,
          "add of a missing folder: failed call %s", err.call ? err.call : "none");
    CHECK(id == 0, "failed add set id %llu", (unsigned long long)id);
    CHECK(gs_watcher_count(w) == 0, "failed add counted");
  }
  // Failed adds do not break the ids that follow.
  uint64_t id = 0;
  gs_uv_failure err = {0};
  int rc = gs_watcher_add(w, g_base_fd, 0, 0, &id, &err);
  CHECK(rc == GS_OK && id >= 1, "add after failures: %d", rc);

  gs_watcher_close(w);  // with the watch still registered
  ctx_free(c);
}

typedef struct {
  ctx_t *c;
  uint64_t id;
  int rc;
} remover_t;

static void *remover_main(void *arg) {
  remover_t *r = arg;
  sleep_ms(50);
  r->rc = gs_watcher_remove(r->c->w, r->id);
  atomic_store(&r->c->removed[r->id], 1);
  return NULL;
}

static void test_remove_other_thread(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "remove-thread");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  c->slow = 1;  // callbacks are likely running when remove is called
  gs_watcher_t *w = watcher_new(c);

  uint64_t fs_id = 0, timer_id = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &fs_id, &err) == GS_OK, "add fs watch");
  CHECK(gs_watcher_add(w, dirfd, 1, 0, &timer_id, &err) == GS_OK, "add timed");

  churn_t ch;
  churn_start(&ch, dir);
  CHECK(wait_calls(c, fs_id, 1), "fs watch saw nothing");
  CHECK(wait_calls(c, timer_id, 1), "timed watch saw nothing");

  remover_t r1 = {c, fs_id, 1}, r2 = {c, timer_id, 1};
  pthread_t t1, t2;
  MUST(pthread_create(&t1, NULL, remover_main, &r1) == 0);
  MUST(pthread_create(&t2, NULL, remover_main, &r2) == 0);
  MUST(pthread_join(t1, NULL) == 0);
  MUST(pthread_join(t2, NULL) == 0);
  CHECK(r1.rc == GS_OK, "remove fs watch: %d", r1.rc);
  CHECK(r2.rc == GS_OK, "remove timed watch: %d", r2.rc);
  CHECK(gs_watcher_count(w) == 0, "count after removes");

  // Any callback from here on is reported by on_event.
  unsigned long fs_calls = atomic_load(&c->calls[fs_id]);
  unsigned long timer_calls = atomic_load(&c->calls[timer_id]);
  sleep_ms(100);
  churn_stop(&ch);
  CHECK(atomic_load(&c->calls[fs_id]) == fs_calls, "fs events after remove");
  CHECK(atomic_load(&c->calls[timer_id]) == timer_calls,
        "rescans after remove");

  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// Wakes another thread asks for: delivered on the loop thread, coalesced
// while pending, asked for again from the callback, none for another
// watch, none after remove returned, none once close started.
typedef struct {
  gs_watcher_t *w;
  uint64_t id;
  atomic_int *stop;
  int failures;
} waker_t;

static void *waker_main(void *arg) {
  waker_t *k = arg;
  while (!atomic_load(k->stop)) {
    int rc = gs_watcher_wake(k->w, k->id);
    if (rc != GS_OK)
      k->failures++;
  }
  return NULL;
}

static void test_wake(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "wake");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  CHECK(gs_watcher_wake(NULL, 1) == GS_EINVAL, "wake without watcher");

  uint64_t id = 0, other = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &id, &err) == GS_OK, "add watch");
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &other, &err) == GS_OK, "add other");
  CHECK(gs_watcher_wake(w, id) == GS_OK, "wake");
  CHECK(wait_rec(c, id, NULL, GS_EVENT_WAKE), "no wake delivered");
  CHECK(atomic_load(&c->wakes[other]) == 0, "the other watch was woken");

  // A burst coalesces while pending: at least one call, at most one each.
  unsigned long before = atomic_load(&c->wakes[id]);
  for (int i = 0; i < 1000; i++)
    CHECK(gs_watcher_wake(w, id) == GS_OK, "wake in a burst");
  int64_t burst_deadline = now_ms() + TIMEOUT_MS;
  while (atomic_load(&c->wakes[id]) == before && now_ms() < burst_deadline)
    sleep_ms(1);
  sleep_ms(20);  // let any pending one land
  unsigned long burst = atomic_load(&c->wakes[id]) - before;
  CHECK(burst >= 1 && burst <= 1000, "burst gave %lu wakes", burst);

  // From the callback: the next one comes on a later turn of the loop.
  before = atomic_load(&c->wakes[id]);
  atomic_store(&c->wake_from_cb, 5);
  CHECK(gs_watcher_wake(w, id) == GS_OK, "wake before chain");
  int64_t deadline = now_ms() + TIMEOUT_MS;
  while (atomic_load(&c->wakes[id]) < before + 6 && now_ms() < deadline)
    sleep_ms(1);
  CHECK(atomic_load(&c->wakes[id]) >= before + 6,
        "chained wakes: %lu of 6", atomic_load(&c->wakes[id]) - before);

  // Wakers racing the removal: nothing after remove returned (on_event
  // checks), and waking a removed watch is harmless.
  atomic_int stop = 0;
  waker_t k1 = {w, id, &stop, 0}, k2 = {w, id, &stop, 0};
  pthread_t t1, t2;
  MUST(pthread_create(&t1, NULL, waker_main, &k1) == 0);
  MUST(pthread_create(&t2, NULL, waker_main, &k2) == 0);
  sleep_ms(20);
  CHECK(gs_watcher_remove(w, id) == GS_OK, "remove while woken");
  atomic_store(&c->removed[id], 1);
  sleep_ms(20);
  atomic_store(&stop, 1);
  MUST(pthread_join(t1, NULL) == 0);
  MUST(pthread_join(t2, NULL) == 0);
  CHECK(k1.failures == 0 && k2.failures == 0, "wake failed: %d, %d",
        k1.failures, k2.failures);
  CHECK(gs_watcher_wake(w, id) == GS_OK, "wake of a removed watch");
  sleep_ms(20);

  // Wakes still pending at close are dropped and freed (ASan: no leak).
  for (int i = 0; i < 8; i++)
    CHECK(gs_watcher_wake(w, other) == GS_OK, "wake before close");
  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

static void test_remove_in_callback(void) {
  char dir[256], dir2[256];
  make_dir(dir, sizeof(dir), "remove-callback");
  make_dir(dir2, sizeof(dir2), "remove-callback-timer");
  int dirfd = open_dir(dir), dirfd2 = open_dir(dir2);
  ctx_t *c = ctx_new();
  c->self_remove = 1;
  gs_watcher_t *w = watcher_new(c);

  // Two watches of one folder share an inotify watch in libuv: the first
  // removing itself must not disturb the second.
  uint64_t a = 0, b = 0, t = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &a, &err) == GS_OK, "add a");
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &b, &err) == GS_OK, "add b");
  CHECK(gs_watcher_add(w, dirfd2, 1, 0, &t, &err) == GS_OK, "add timed");

  // One write makes several inotify events (create, modify), typically
  // read in one batch: only the first may be delivered.
  for (int i = 0; i < 5; i++) {
    char name[32];
    snprintf(name, sizeof(name), "f%d", i);
    write_file(dir, name);
    write_file(dir2, name);
  }
  CHECK(wait_calls(c, a, 1), "watch a saw nothing");
  CHECK(wait_calls(c, b, 1), "watch b saw nothing");
  CHECK(wait_calls(c, t, 1), "timed watch saw nothing");
  sleep_ms(100);
  write_file(dir, "late");
  sleep_ms(50);
  CHECK(atomic_load(&c->calls[a]) == 1, "watch a: %lu callbacks",
        atomic_load(&c->calls[a]));
  CHECK(atomic_load(&c->calls[b]) == 1, "watch b: %lu callbacks",
        atomic_load(&c->calls[b]));
  CHECK(atomic_load(&c->calls[t]) == 1, "timed watch: %lu callbacks",
        atomic_load(&c->calls[t]));
  CHECK(gs_watcher_count(w) == 0, "count after removes in callback: %zu",
        gs_watcher_count(w));
  CHECK(gs_watcher_remove(w, a) == GS_ENOTFOUND, "remove of removed a");

  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  MUST(close(dirfd2) == 0);
  ctx_free(c);
}

#define THREADS 4
#define ROUNDS 200

typedef struct {
  ctx_t *c;
  int dirfd;
  int index;
  uint64_t ids[ROUNDS];
} worker_t;

static void *worker_main(void *arg) {
  worker_t *wk = arg;
  gs_watcher_t *w = wk->c->w;
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t id = 0;
    gs_uv_failure err = {0};
    uint64_t rescan = (uint64_t)((i + wk->index) % 3);  // 0: no timer
    int rc = gs_watcher_add(w, wk->dirfd, rescan, 0, &id, &err);
    if (rc != GS_OK || id == 0 || id >= MAX_IDS) {
      FAIL("thread %d round %d: add %d, id %llu", wk->index, i, rc,
           (unsigned long long)id);
      continue;
    }
    wk->ids[i] = id;
    if (i % 4 == 0)
      sleep_ms(1);  // let events and rescans reach some watches
    rc = gs_watcher_remove(w, id);
    CHECK(rc == GS_OK, "thread %d round %d: remove %d", wk->index, i, rc);
    atomic_store(&wk->c->removed[id], 1);
    rc = gs_watcher_remove(w, id);
    CHECK(rc == GS_ENOTFOUND, "thread %d round %d: remove again %d",
          wk->index, i, rc);
  }
  return NULL;
}

static void test_concurrent(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "concurrent");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);

  // A busy watch keeps the loop thread working throughout.
  uint64_t busy = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 1, 0, &busy, &err) == GS_OK, "add busy watch");
  churn_t ch;
  churn_start(&ch, dir);

  worker_t workers[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker_t){.c = c, .dirfd = dirfd, .index = i};
    MUST(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
  }
  // Reading the count concurrently must be safe (and bounded).
  for (int i = 0; i < 100; i++) {
    size_t n = gs_watcher_count(w);
    CHECK(n >= 1 && n <= 1 + THREADS, "count %zu during the stress", n);
    sleep_ms(1);
  }
  for (int i = 0; i < THREADS; i++)
    MUST(pthread_join(threads[i], NULL) == 0);
  churn_stop(&ch);

  static unsigned char seen[MAX_IDS];
  memset(seen, 0, sizeof(seen));
  seen[busy] = 1;
  for (int t = 0; t < THREADS; t++) {
    for (int i = 0; i < ROUNDS; i++) {
      uint64_t id = workers[t].ids[i];
      if (id == 0)
        continue;  // already reported
      CHECK(!seen[id], "watch id %llu given twice", (unsigned long long)id);
      seen[id] = 1;
      CHECK(i == 0 || id > workers[t].ids[i - 1], "ids not increasing");
    }
  }
  CHECK(gs_watcher_count(w) == 1, "count after the stress: %zu",
        gs_watcher_count(w));
  CHECK(atomic_load(&c->calls[busy]) > 0, "busy watch saw nothing");

  uint64_t last = 0;
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &last, &err) == GS_OK,
        "add after stress");
  CHECK(last == 2 + THREADS * ROUNDS, "id after the stress is %llu",
        (unsigned long long)last);

  gs_watcher_close(w);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

// Closing with every kind of watch registered while events flow.
static void test_close_busy(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "close-busy");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  churn_t ch;
  churn_start(&ch, dir);
  for (int i = 0; i < 10; i++) {
    uint64_t id = 0;
    gs_uv_failure err = {0};
    CHECK(gs_watcher_add(w, dirfd, (uint64_t)(i % 2), 0, &id, &err) == GS_OK,
          "add %d", i);
  }
  CHECK(wait_calls(c, 1, 1), "no event before close");
  gs_watcher_close(w);
  churn_stop(&ch);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

typedef struct {
  gs_watcher_t *w;
} closer_t;

static void *closer_main(void *arg) {
  closer_t *cl = arg;
  gs_watcher_close(cl->w);
  return NULL;
}

// Runs in the first callback, blocking the loop thread while another
// thread closes the watcher: add and remove must then say GS_ECLOSED.
static void close_dance(ctx_t *c, uint64_t id) {
  lock(&c->mu);
  c->entered = 1;
  MUST(pthread_cond_broadcast(&c->cv) == 0);
  unlock(&c->mu);

  // Until the closer thread got going, adds still succeed (directly, from
  // the callback); those watches are closed with the rest.
  int rc = GS_OK;
  for (int i = 0; i < 2000 && rc == GS_OK; i++) {
    uint64_t new_id = 0;
    gs_uv_failure err = {0};
    rc = gs_watcher_add(c->w, g_base_fd, 0, 0, &new_id, &err);
    if (rc == GS_OK)
      sleep_ms(2);
  }
  int remove_rc = gs_watcher_remove(c->w, id);
  atomic_store(&c->removed[id], 1);

  lock(&c->mu);
  c->cb_add_rc = rc;
  c->cb_remove_rc = remove_rc;
  c->closing_seen = 1;
  MUST(pthread_cond_broadcast(&c->cv) == 0);
  while (!c->main_done)
    MUST(pthread_cond_wait(&c->cv, &c->mu) == 0);
  unlock(&c->mu);
}

static void test_close_from_other_thread(void) {
  char dir[256];
  make_dir(dir, sizeof(dir), "close-dance");
  int dirfd = open_dir(dir);
  ctx_t *c = ctx_new();
  c->block_on_close = 1;
  gs_watcher_t *w = watcher_new(c);

  uint64_t id = 0, id2 = 0;
  gs_uv_failure err = {0};
  CHECK(gs_watcher_add(w, dirfd, 0, 0, &id2, &err) == GS_OK, "add plain watch");
  CHECK(gs_watcher_add(w, dirfd, 5, 0, &id, &err) == GS_OK, "add timed watch");

  lock(&c->mu);
  while (!c->entered)
    MUST(pthread_cond_wait(&c->cv, &c->mu) == 0);
  unlock(&c->mu);

  closer_t cl = {w};
  pthread_t closer;
  MUST(pthread_create(&closer, NULL, closer_main, &cl) == 0);

  lock(&c->mu);
  while (!c->closing_seen)
    MUST(pthread_cond_wait(&c->cv, &c->mu) == 0);
  unlock(&c->mu);
  CHECK(c->cb_add_rc == GS_ECLOSED, "add from callback while closing: %d",
        c->cb_add_rc);
  CHECK(c->cb_remove_rc == GS_ECLOSED,
        "remove from callback while closing: %d", c->cb_remove_rc);

  // The loop thread is held in the callback, so `w` is still alive.
  uint64_t late = 7;
  int rc = gs_watcher_add(w, dirfd, 0, 0, &late, &err);
  CHECK(rc == GS_ECLOSED, "add from another thread while closing: %d", rc);
  CHECK(late == 0, "add while closing set an id");
  rc = gs_watcher_remove(w, id2);
  CHECK(rc == GS_ECLOSED, "remove from another thread while closing: %d", rc);

  lock(&c->mu);
  c->main_done = 1;
  MUST(pthread_cond_broadcast(&c->cv) == 0);
  unlock(&c->mu);
  MUST(pthread_join(closer, NULL) == 0);
  MUST(close(dirfd) == 0);
  ctx_free(c);
}

#define MANY 100

static void test_many(void) {
  static char dirs[MANY][256];
  static int fds[MANY];
  static uint64_t ids[MANY];
  ctx_t *c = ctx_new();
  gs_watcher_t *w = watcher_new(c);
  for (int i = 0; i < MANY; i++) {
    char name[32];
    snprintf(name, sizeof(name), "many%03d", i);
    make_dir(dirs[i], sizeof(dirs[i]), name);
    fds[i] = open_dir(dirs[i]);
    gs_uv_failure err = {0};
    int rc = gs_watcher_add(w, fds[i], i % 10 == 0 ? 50 : 0, 0, &ids[i], &err);
    CHECK(rc == GS_OK, "add %d: %d (uv %d)", i, rc, err.code);
  }
  CHECK(gs_watcher_count(w) == MANY, "count %zu, not %d", gs_watcher_count(w),
        MANY);
  for (int i = 0; i < MANY; i++) {
    char name[32];
    snprintf(name, sizeof(name), "file%03d", i);
    write_file(dirs[i], name);
  }
  for (int i = 0; i < MANY; i++) {
    char name[32];
    snprintf(name, sizeof(name), "file%03d", i);
    CHECK(wait_rec(c, ids[i], name, GS_EVENT_RENAME), "watch %d: no %s", i,
          name);
  }
  // Events go to the right watch only.
  lock(&c->mu);
  for (size_t r = 0; r < c->nrecs; r++) {
    rec_t *rec = &c->recs[r];
    if (!rec->has_name)
      continue;
    int index = -1;
    for (int i = 0; i < MANY; i++)
      if (ids[i] == rec->id)
        index = i;
    char want[32];
    snprintf(want, sizeof(want), "file%03d", index);
    CHECK(index >= 0 && strcmp(rec->name, want) == 0,
          "watch %llu got %s", (unsigned long long)rec->id, rec->name);
  }
  unlock(&c->mu);
  // Remove half; close with the other half still registered.
  for (int i = 0; i < MANY; i += 2) {
    CHECK(gs_watcher_remove(w, ids[i]) == GS_OK, "remove %d", i);
    atomic_store(&c->removed[ids[i]], 1);
  }
  CHECK(gs_watcher_count(w) == MANY / 2, "count after removing half");
  gs_watcher_close(w);
  for (int i = 0; i < MANY; i++)
    MUST(close(fds[i]) == 0);
  ctx_free(c);
}

// A hung watcher (a lost wake-up, a deadlock) fails the run, not hangs it.
#define WATCHDOG_MS 120000
static const char *_Atomic g_current_test;
static atomic_llong g_test_started_ms;
static atomic_int g_all_done;

static void *watchdog_main(void *arg) {
  (void)arg;
  while (!atomic_load(&g_all_done)) {
    sleep_ms(100);
    const char *name = atomic_load(&g_current_test);
    if (name != NULL && now_ms() - atomic_load(&g_test_started_ms) >
                            WATCHDOG_MS) {
      fprintf(stderr, "FAIL %s: still running after %d ms\n", name,
              WATCHDOG_MS);
      _exit(1);
    }
  }
  return NULL;
}

int main(void) {
  // Output order matters more than speed when something fails.
  setvbuf(stdout, NULL, _IONBF, 0);
  pthread_t watchdog;
  MUST(pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0);
  snprintf(g_base, sizeof(g_base), "/tmp/gs_watcher_test.XXXXXX");
  MUST(mkdtemp(g_base) != NULL);
  g_base_fd = open_dir(g_base);
  // Every watched folder is held open: allow as many as the system lets.
  struct rlimit files;
  MUST(getrlimit(RLIMIT_NOFILE, &files) == 0);
  files.rlim_cur = files.rlim_max;
  MUST(setrlimit(RLIMIT_NOFILE, &files) == 0);

  struct {
    const char *name;
    void (*run)(void);
  } tests[] = {
      {"errors", test_errors},
      {"events", test_events},
      {"arrivals", test_arrivals},
      {"arrivals_follow_folder", test_arrivals_follow_folder},
      {"shared_folder_and_many_folders", test_shared_folder_and_many_folders},
      {"file_time_settled", test_file_time_settled},
      {"rescan", test_rescan},
      {"rescan_skips_settled_folder", test_rescan_skips_settled_folder},
      {"missing", test_missing},
      {"remove_other_thread", test_remove_other_thread},
      {"remove_in_callback", test_remove_in_callback},
      {"wake", test_wake},
      {"concurrent", test_concurrent},
      {"close_busy", test_close_busy},
      {"close_from_other_thread", test_close_from_other_thread},
      {"many", test_many},
  };
  int failed_tests = 0;
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    int before = atomic_load(&g_failures);
    int64_t start = now_ms();
    atomic_store(&g_test_started_ms, start);
    atomic_store(&g_current_test, tests[i].name);
    tests[i].run();
    atomic_store(&g_current_test, NULL);
    int failed = atomic_load(&g_failures) != before;
    failed_tests += failed;
    printf("%s %s (%lld ms)\n", failed ? "FAIL" : "ok  ", tests[i].name,
           (long long)(now_ms() - start));
  }

  atomic_store(&g_all_done, 1);
  MUST(pthread_join(watchdog, NULL) == 0);  // joined: valgrind sees no leak
  MUST(close(g_base_fd) == 0);
  MUST(nftw(g_base, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
  if (failed_tests != 0) {
    printf("%d test(s) failed, %d check(s)\n", failed_tests,
           atomic_load(&g_failures));
    return 1;
  }
  printf("all watcher tests passed\n");
  return 0;
}
