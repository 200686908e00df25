// watcher: one libuv loop on its own thread, watching folders.
//
// This file is the mechanism: the thread, the commands that cross to it,
// the uv handles of each watch and their life cycle. What an event means
// for a folder (which ones are reported, the rescan, a removed folder) is
// GroupSync's policy, in folder_watch.c.
//
// libuv handles are not thread-safe, so every uv_* call except
// uv_async_send runs on the loop thread. Other threads queue a command
// under the mutex, wake the loop with uv_async_send and wait on the
// condition variable until the loop thread has carried it out; that is how
// add reports the real uv_fs_event_start result and remove can promise that
// no callback of the watch runs after it returns. From the callback (the
// loop thread itself) add and remove run directly instead, since waiting
// for ourselves would deadlock.
//
// A wake-up (gs_watcher_wake) does not wait: its watch id joins a list
// under the mutex, which the loop thread takes whole, with the commands,
// and calls each watch still registered once with GS_EVENT_WAKE.
//
// Lifetime: a watch is freed in the close callback of its last handle, the
// watcher after its thread was joined and the loop closed.


#include "CGroupSync.h"
#include "folder_watch.h"

#include <assert.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef enum {
  GS__CMD_ADD = 1,
  GS__CMD_REMOVE = 2,
} gs__cmd_kind;

// A request from another thread. It lives on the caller's stack: once
// `done` is set under the mutex the loop thread never touches it again.
typedef struct gs__cmd_s gs__cmd_t;
struct gs__cmd_s {
  gs__cmd_t *next;
  gs__cmd_kind kind;
  int dirfd;           // add: the folder, held open by the caller
  uint64_t rescan_ms;  // add
  unsigned flags;      // add
  uint64_t watch_id;   // add: out; remove: in
  gs_uv_failure uv_failure;  // add, and a failed send: out
  int result;
  int done;
};

typedef struct gs__watch_s gs__watch_t;
struct gs__watch_s {
  gs__watch_t *next;  // in watcher->watches while registered
  gs_watcher_t *watcher;
  uint64_t id;
  uv_fs_event_t event;
  uv_timer_t timer;
  int has_timer;
  gs__folder_t folder;  // what the events mean: folder_watch.c
  // Set as soon as removal starts, so events libuv already has in hand are
  // dropped rather than delivered after remove returned.
  int removed;
  int closing;            // handles whose close callback is still due
  gs__cmd_t *remove_cmd;  // completed once `closing` drops to 0
};

struct gs_watcher_s {
  // Loop thread only (or before the thread starts / after it was joined).
  uv_loop_t loop;
  uv_async_t async;
  gs__watch_t *watches;
  uint64_t next_id;
  gs_watch_cb callback;
  void *context;
  pthread_t thread;  // written before any command can reach the loop

  // Guarded by mutex.
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  gs__cmd_t *queue_head;
  gs__cmd_t *queue_tail;
  size_t count;  // registered watches
  uint64_t *wakes;  // watch ids to call with GS_EVENT_WAKE, no repeats
  size_t wake_count;
  size_t wake_capacity;
  int users;     // threads inside add/remove waiting on `cond`
  int closing;   // gs_watcher_close started; no more commands
};

// MARK: Helpers

// pthread mutex/cond calls fail only on misuse or corrupted state, where
// carrying on would hang or corrupt more: stop like libuv's uv_mutex_lock.
static void gs__check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "CGroupSync watcher: %s failed: %s\n", what,
            strerror(rc));
    abort();
  }
}

static void gs__check_uv(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "CGroupSync watcher: %s failed: %s\n", what,
            uv_strerror(rc));
    abort();
  }
}

static void gs__lock(gs_watcher_t *w) {
  gs__check(pthread_mutex_lock(&w->mutex), "pthread_mutex_lock");
}

static void gs__unlock(gs_watcher_t *w) {
  gs__check(pthread_mutex_unlock(&w->mutex), "pthread_mutex_unlock");
}

static void gs__broadcast(gs_watcher_t *w) {
  gs__check(pthread_cond_broadcast(&w->cond), "pthread_cond_broadcast");
}

static void gs__wait(gs_watcher_t *w) {
  gs__check(pthread_cond_wait(&w->cond, &w->mutex), "pthread_cond_wait");
}

static int gs__on_loop_thread(gs_watcher_t *w) {
  return pthread_equal(pthread_self(), w->thread);
}

static int gs__is_closing(gs_watcher_t *w) {
  gs__lock(w);
  int closing = w->closing;
  gs__unlock(w);
  return closing;
}

// Hands a command's result back to the thread waiting for it.
static void gs__complete(gs_watcher_t *w, gs__cmd_t *cmd, int result) {
  gs__lock(w);
  cmd->result = result;
  cmd->done = 1;
  gs__broadcast(w);
  gs__unlock(w);
}

// MARK: Loop thread

// Passes on what the folder's rules make of an inotify event.
static void gs__on_fs_event(uv_fs_event_t *handle, const char *filename,
                            int events, int status) {
  gs__watch_t *watch = handle->data;
  if (watch->removed)
    return;
  int gs_events;
  if (status < 0) {
    gs_events = GS_EVENT_ERROR;
  } else {
    gs_events = 0;
    if (events & UV_RENAME)
      gs_events |= GS_EVENT_RENAME;
    if (events & UV_CHANGE)
      gs_events |= GS_EVENT_CHANGE;
    gs_events = gs__folder_filter(&watch->folder, &filename, gs_events);
    if (gs_events == 0)
      return;
  }
  gs_watcher_t *w = watch->watcher;
  w->callback(w->context, watch->id, filename, gs_events, status);
}

static void gs__on_timer(uv_timer_t *timer) {
  gs__watch_t *watch = timer->data;
  if (watch->removed)
    return;
  int gs_events = gs__folder_tick(&watch->folder);
  gs_watcher_t *w = watch->watcher;
  w->callback(w->context, watch->id, NULL, gs_events, 0);
}

static void gs__on_watch_close(uv_handle_t *handle) {
  gs__watch_t *watch = handle->data;
  if (--watch->closing > 0)
    return;
  // Both handles are closed: no callback of this watch can run any more.
  if (watch->remove_cmd != NULL)
    gs__complete(watch->watcher, watch->remove_cmd, GS_OK);
  free(watch);
}

// Closes the handles of a watch that is no longer in the list. `cmd`, if
// any, is completed once both close callbacks ran.
static void gs__close_watch(gs__watch_t *watch, gs__cmd_t *cmd) {
  watch->removed = 1;
  watch->remove_cmd = cmd;
  watch->closing = watch->has_timer ? 2 : 1;
  // uv_close stops the handle first: no event or timer callback after it.
  uv_close((uv_handle_t *)&watch->event, gs__on_watch_close);
  if (watch->has_timer)
    uv_close((uv_handle_t *)&watch->timer, gs__on_watch_close);
}

static int gs__do_add(gs_watcher_t *w, int dirfd, uint64_t rescan_ms,
                      unsigned flags, uint64_t *watch_id,
                      gs_uv_failure *uv_failure) {
  gs__watch_t *watch = calloc(1, sizeof(*watch));
  if (watch == NULL)
    return GS_ENOMEM;
  watch->watcher = w;
  gs__folder_init(&watch->folder, dirfd, flags);

  int rc = uv_fs_event_init(&w->loop, &watch->event);
  if (rc != 0) {
    // A handle whose init failed is not registered with the loop.
    free(watch);
    *uv_failure = (gs_uv_failure){.call = "uv_fs_event_init", .code = rc};
    return GS_EUV;
  }
  watch->event.data = watch;
  // libuv watches paths: this one names the very folder the descriptor
  // holds, whatever its path became (libuv keeps a copy).
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", dirfd);
  const char *call = "uv_fs_event_start";
  rc = uv_fs_event_start(&watch->event, gs__on_fs_event, path, 0);
  if (rc == 0 && rescan_ms > 0) {
    call = "uv_timer_init";
    rc = uv_timer_init(&w->loop, &watch->timer);
    if (rc == 0) {
      watch->has_timer = 1;
      watch->timer.data = watch;
      call = "uv_timer_start";
      rc = uv_timer_start(&watch->timer, gs__on_timer, rescan_ms, rescan_ms);
    }
  }
  if (rc != 0) {
    // Initialised handles must be closed before the memory can go.
    gs__close_watch(watch, NULL);
    *uv_failure = (gs_uv_failure){.call = call, .code = rc};
    return GS_EUV;
  }

  // Ids are taken only by watches that started, so they stay dense.
  watch->id = ++w->next_id;
  watch->next = w->watches;
  w->watches = watch;
  gs__lock(w);
  w->count++;
  gs__unlock(w);
  *watch_id = watch->id;
  return GS_OK;
}

// Unregisters a watch and starts closing it; `cmd` (NULL from the callback)
// is completed by the close callbacks. Returns GS_ENOTFOUND if no such watch
// is registered, including one already being removed.
static int gs__do_remove(gs_watcher_t *w, uint64_t watch_id, gs__cmd_t *cmd) {
  gs__watch_t **link = &w->watches;
  while (*link != NULL && (*link)->id != watch_id)
    link = &(*link)->next;
  gs__watch_t *watch = *link;
  if (watch == NULL)
    return GS_ENOTFOUND;
  *link = watch->next;
  gs__lock(w);
  w->count--;
  gs__unlock(w);
  gs__close_watch(watch, cmd);
  return GS_OK;
}

// Closes every handle; uv_run then returns once their close callbacks ran.
static void gs__do_stop(gs_watcher_t *w) {
  while (w->watches != NULL) {
    gs__watch_t *watch = w->watches;
    w->watches = watch->next;
    gs__lock(w);
    w->count--;
    gs__unlock(w);
    gs__close_watch(watch, NULL);
  }
  uv_close((uv_handle_t *)&w->async, NULL);
}

// Calls each watch of `ids` that is still registered with GS_EVENT_WAKE.
static void gs__deliver_wakes(gs_watcher_t *w, const uint64_t *ids,
                              size_t count) {
  for (size_t i = 0; i < count; i++) {
    gs__watch_t *watch = w->watches;
    while (watch != NULL && watch->id != ids[i])
      watch = watch->next;
    if (watch != NULL && !watch->removed)
      w->callback(w->context, watch->id, NULL, GS_EVENT_WAKE, 0);
  }
}

static void gs__on_async(uv_async_t *async) {
  gs_watcher_t *w = async->data;
  // uv_async_send coalesces wake-ups: take every queued command and
  // every wake-up at once.
  gs__lock(w);
  gs__cmd_t *cmd = w->queue_head;
  w->queue_head = NULL;
  w->queue_tail = NULL;
  uint64_t *wakes = w->wakes;
  size_t wake_count = w->wake_count;
  w->wakes = NULL;
  w->wake_count = 0;
  w->wake_capacity = 0;
  int closing = w->closing;
  gs__unlock(w);

  while (cmd != NULL) {
    // Read before completing: the caller may return and drop `cmd`.
    gs__cmd_t *next = cmd->next;
    int rc;
    switch (cmd->kind) {
      case GS__CMD_ADD:
        rc = gs__do_add(w, cmd->dirfd, cmd->rescan_ms, cmd->flags,
                        &cmd->watch_id, &cmd->uv_failure);
        gs__complete(w, cmd, rc);
        break;
      case GS__CMD_REMOVE:
        rc = gs__do_remove(w, cmd->watch_id, cmd);
        if (rc != GS_OK)
          gs__complete(w, cmd, rc);
        break;
      default:
        assert(!"unknown watcher command");
        gs__complete(w, cmd, GS_EINVAL);
        break;
    }
    cmd = next;
  }
  // After the commands: a watch removed meanwhile is told nothing.
  if (!closing)
    gs__deliver_wakes(w, wakes, wake_count);
  free(wakes);

  // Every command queued before close started was in this batch, and none
  // can be queued after it, so stopping now strands nobody.
  if (closing)
    gs__do_stop(w);
}

static void *gs__thread_main(void *arg) {
  gs_watcher_t *w = arg;
  // Returns only after the stop closed the async handle and every watch.
  int rc = uv_run(&w->loop, UV_RUN_DEFAULT);
  assert(rc == 0);
  (void)rc;
  return NULL;
}

// MARK: Other threads

// Queues `cmd`, wakes the loop and waits until the loop thread completed
// it. Returns the command's result, or GS_ECLOSED if close started.
static int gs__submit(gs_watcher_t *w, gs__cmd_t *cmd) {
  gs__lock(w);
  if (w->closing) {
    gs__unlock(w);
    return GS_ECLOSED;
  }
  // Sending under the mutex: the loop cannot drain before we queue, and
  // once it saw `closing` no thread sends to the closed async handle.
  int rc = uv_async_send(&w->async);
  if (rc != 0) {
    gs__unlock(w);
    cmd->uv_failure = (gs_uv_failure){.call = "uv_async_send", .code = rc};
    return GS_EUV;
  }
  cmd->next = NULL;
  if (w->queue_tail != NULL)
    w->queue_tail->next = cmd;
  else
    w->queue_head = cmd;
  w->queue_tail = cmd;

  w->users++;
  while (!cmd->done)
    gs__wait(w);
  w->users--;
  // gs_watcher_close waits for us before destroying the mutex.
  if (w->closing && w->users == 0)
    gs__broadcast(w);
  int result = cmd->result;
  gs__unlock(w);
  return result;
}

// MARK: API

int gs_watcher_create(gs_watch_cb callback, void *context,
                      gs_watcher_t **out) {
  if (out == NULL)
    return GS_EINVAL;
  *out = NULL;
  if (callback == NULL)
    return GS_EINVAL;

  gs_watcher_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return GS_ENOMEM;
  w->callback = callback;
  w->context = context;

  int result = GS_ENOMEM;
  int rc;
  if (pthread_mutex_init(&w->mutex, NULL) != 0)
    goto fail_mutex;
  if (pthread_cond_init(&w->cond, NULL) != 0)
    goto fail_cond;
  if (uv_loop_init(&w->loop) != 0) {
    result = GS_EUV;
    goto fail_loop;
  }
  if (uv_async_init(&w->loop, &w->async, gs__on_async) != 0) {
    result = GS_EUV;
    goto fail_async;
  }
  w->async.data = w;

  // The thread inherits the mask: blocked from its first instruction, so
  // signals are delivered to the program's own threads.
  sigset_t all;
  sigset_t old;
  if (sigfillset(&all) != 0) {
    result = GS_EINVAL;
    goto fail_thread;
  }
  rc = pthread_sigmask(SIG_SETMASK, &all, &old);
  if (rc != 0) {
    result = GS_EINVAL;
    goto fail_thread;
  }
  rc = pthread_create(&w->thread, NULL, gs__thread_main, w);
  gs__check(pthread_sigmask(SIG_SETMASK, &old, NULL), "pthread_sigmask");
  if (rc != 0)
    goto fail_thread;  // EAGAIN: out of resources

  *out = w;
  return GS_OK;

fail_thread:
  // No thread runs the loop: close the async handle from here.
  uv_close((uv_handle_t *)&w->async, NULL);
  rc = uv_run(&w->loop, UV_RUN_DEFAULT);
  assert(rc == 0);
fail_async:
  rc = uv_loop_close(&w->loop);
  assert(rc == 0);
  (void)rc;
fail_loop:
  gs__check(pthread_cond_destroy(&w->cond), "pthread_cond_destroy");
fail_cond:
  gs__check(pthread_mutex_destroy(&w->mutex), "pthread_mutex_destroy");
fail_mutex:
  free(w);
  return result;
}

int gs_watcher_add(gs_watcher_t *watcher, int dirfd, uint64_t rescan_ms,
                   unsigned flags, uint64_t *watch_id,
                   gs_uv_failure *uv_failure) {
  if (watcher == NULL || dirfd < 0 || watch_id == NULL || uv_failure == NULL)
    return GS_EINVAL;
  *watch_id = 0;
  *uv_failure = (gs_uv_failure){0};
  if (gs__on_loop_thread(watcher)) {
    // From the callback: waiting for the loop would deadlock, and we are it.
    if (gs__is_closing(watcher))
      return GS_ECLOSED;
    return gs__do_add(watcher, dirfd, rescan_ms, flags, watch_id, uv_failure);
  }
  gs__cmd_t cmd = {.kind = GS__CMD_ADD,
                   .dirfd = dirfd,
                   .rescan_ms = rescan_ms,
                   .flags = flags};
  int rc = gs__submit(watcher, &cmd);
  *watch_id = rc == GS_OK ? cmd.watch_id : 0;
  if (rc == GS_EUV)
    *uv_failure = cmd.uv_failure;
  return rc;
}

int gs_watcher_wake(gs_watcher_t *watcher, uint64_t watch_id) {
  if (watcher == NULL)
    return GS_EINVAL;
  gs__lock(watcher);
  if (watcher->closing) {
    gs__unlock(watcher);
    return GS_ECLOSED;
  }
  for (size_t i = 0; i < watcher->wake_count; i++) {
    if (watcher->wakes[i] == watch_id) {
      gs__unlock(watcher);  // already due
      return GS_OK;
    }
  }
  if (watcher->wake_count == watcher->wake_capacity) {
    size_t capacity = watcher->wake_capacity ? watcher->wake_capacity * 2 : 4;
    uint64_t *grown = realloc(watcher->wakes, capacity * sizeof(*grown));
    if (grown == NULL) {
      gs__unlock(watcher);
      return GS_ENOMEM;
    }
    watcher->wakes = grown;
    watcher->wake_capacity = capacity;
  }
  // Sent under the mutex, like every send: see gs__submit.
  int rc = uv_async_send(&watcher->async);
  if (rc == 0)
    watcher->wakes[watcher->wake_count++] = watch_id;
  gs__unlock(watcher);
  return rc == 0 ? GS_OK : GS_EUV;
}

int gs_watcher_remove(gs_watcher_t *watcher, uint64_t watch_id) {
  if (watcher == NULL)
    return GS_EINVAL;
  if (gs__on_loop_thread(watcher)) {
    // From the callback: we are the loop, so nothing of the watch runs
    // concurrently and `removed` stops what libuv has queued. Once close
    // started the watch goes anyway, but still drop its late events.
    int closing = gs__is_closing(watcher);
    int rc = gs__do_remove(watcher, watch_id, NULL);
    return closing ? GS_ECLOSED : rc;
  }
  gs__cmd_t cmd = {.kind = GS__CMD_REMOVE, .watch_id = watch_id};
  return gs__submit(watcher, &cmd);
}

void gs_watcher_close(gs_watcher_t *watcher) {
  if (watcher == NULL)
    return;
  if (gs__on_loop_thread(watcher)) {
    // Joining our own thread cannot work; this is a caller bug.
    fprintf(stderr, "CGroupSync: gs_watcher_close called from the callback\n");
    abort();
  }

  gs__lock(watcher);
  assert(!watcher->closing && "gs_watcher_close called twice");
  watcher->closing = 1;
  // Under the mutex, like every send: see gs__submit.
  int rc = uv_async_send(&watcher->async);
  gs__unlock(watcher);
  // Without the wake-up the loop would never stop and join would hang.
  gs__check_uv(rc, "uv_async_send");

  gs__check(pthread_join(watcher->thread, NULL), "pthread_join");

  // The loop has ended, so every command is done; wait for the threads that
  // were waiting on one to leave the mutex.
  gs__lock(watcher);
  while (watcher->users > 0)
    gs__wait(watcher);
  gs__unlock(watcher);

  rc = uv_loop_close(&watcher->loop);
  assert(rc == 0 && "a watcher handle was not closed");
  (void)rc;
  gs__check(pthread_cond_destroy(&watcher->cond), "pthread_cond_destroy");
  gs__check(pthread_mutex_destroy(&watcher->mutex), "pthread_mutex_destroy");
  free(watcher->wakes);
  free(watcher);
}

size_t gs_watcher_count(gs_watcher_t *watcher) {
  if (watcher == NULL)
    return 0;
  gs__lock(watcher);
  size_t count = watcher->count;
  gs__unlock(watcher);
  return count;
}
