// CGroupSync: the C core of GroupSync.
//
// Two small pieces that Swift cannot do well on its own:
//  - capture: SQLite hooks that record (table, operation, rowid) for every
//    row a transaction changes, handed over only once it commits;
//  - watcher: one libuv loop on its own thread that watches folders with
//    uv_fs_event (inotify) and calls back on every event.
//
// Conventions (libuv's): every public symbol is prefixed `gs_`; handles are
// opaque with create/close pairs; functions return 0 on success or a
// negative GS_E* code, which gs_strerror describes.
#ifndef CGROUPSYNC_H
#define CGROUPSYNC_H

#include <sqlite3.h>  // re-exported: Swift reaches SQLite through this module
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(__clang__)  // gcc builds (benchmarks, valgrind) lack these
#define _Nullable
#define _Nonnull
#endif

#ifdef __clang__
#pragma clang assume_nonnull begin
#endif

// MARK: Errors

enum {
  GS_OK = 0,
  GS_ENOMEM = -1,      // out of memory
  GS_EINVAL = -2,      // an argument was invalid
  GS_ESQLITE = -3,     // SQLite refused (see sqlite3_errmsg)
  GS_ECLOSED = -4,     // the handle is closing or closed
  GS_ENOTFOUND = -5,   // no such watch
  GS_EUV = -6,         // libuv failed; the detail is the uv error code
};

/// A static, human-readable description of a GS_E* code.
const char *gs_strerror(int code);

// MARK: Capture

/// The operation a captured row went through.
typedef enum {
  GS_OP_INSERT = 1,
  GS_OP_UPDATE = 2,
  GS_OP_DELETE = 3,
} gs_op;

/// Which SQLite hook a capture runs on.
typedef enum {
  /// The pre-update hook: sees REPLACE deletes, disables the truncate
  /// optimisation, and sees WITHOUT ROWID tables. SQLite reports their
  /// rows with rowid 0, so a captured rowid of 0 means "row 0, or any row
  /// of a WITHOUT ROWID table"; the caller tells the two apart.
  GS_HOOK_PREUPDATE = 1,
  /// The update hook, for SQLite builds without the pre-update hook. It
  /// misses REPLACE deletes and WITHOUT ROWID tables; the capture installs
  /// an authorizer that switches off the truncate optimisation.
  GS_HOOK_UPDATE = 2,
} gs_hook_kind;

/// One captured row change. `table` indexes gs_capture_table_name.
typedef struct {
  int64_t rowid;
  uint32_t table;
  uint32_t op;  // a gs_op
} gs_row_change;

_Static_assert(sizeof(gs_row_change) == 16, "gs_row_change is 16 bytes");

typedef struct gs_capture_s gs_capture_t;

/// Options for gs_capture_create.
enum {
  /// Use the update hook even where the pre-update hook exists (for tests).
  GS_CAPTURE_FORCE_UPDATE_HOOK = 1,
};

/// Installs the capture hooks on `db`, replacing any commit, rollback,
/// update, pre-update hooks (and, with the update hook, the authorizer).
///
/// Tables whose name starts with `sqlite_` or with `ignored_prefix` are not
/// captured, nor are tables outside the `main` schema.
///
/// While the capture is installed, a COMMIT that changed captured rows
/// succeeds only after gs_capture_allow_commit; any other such commit is
/// turned into a rollback (SQLITE_CONSTRAINT_COMMITHOOK). This is how every
/// committed change is guaranteed a sequence number.
int gs_capture_create(sqlite3 *db, const char *ignored_prefix, int options,
                      gs_capture_t *_Nullable *_Nonnull out);

/// Uninstalls the hooks and frees the capture. Call before sqlite3_close.
void gs_capture_close(gs_capture_t *_Nullable capture);

/// The hook the capture runs on.
gs_hook_kind gs_capture_hook_kind(const gs_capture_t *capture);

/// Number of row changes buffered in the open transaction.
size_t gs_capture_pending_count(const gs_capture_t *capture);

/// Lets the next commit through although it changed rows. Call once the
/// transaction has written its sequence number, right before COMMIT.
void gs_capture_allow_commit(gs_capture_t *capture);

/// After a successful COMMIT: the committed row changes, valid until the
/// next call to gs_capture_take_committed, gs_capture_reset or close.
/// Returns the number of changes; `*rows` points at them.
size_t gs_capture_take_committed(gs_capture_t *capture,
                                 const gs_row_change *_Nullable *_Nonnull rows);

/// The name of the table with index `table`. Indexes stay valid for the
/// capture's life.
const char *_Nullable gs_capture_table_name(const gs_capture_t *capture,
                                            uint32_t table);

/// Drops everything buffered (pending and committed).
void gs_capture_reset(gs_capture_t *capture);

/// Nonzero if memory ran out while capturing the open transaction. Its
/// commit is refused (so nothing commits unreported) until it rolls back.
int gs_capture_overflowed(const gs_capture_t *capture);

// MARK: Watcher

typedef struct gs_watcher_s gs_watcher_t;

/// What a watch reports.
enum {
  /// An entry was created, removed or renamed (libuv's UV_RENAME).
  GS_EVENT_RENAME = 1,
  /// An entry changed (libuv's UV_CHANGE).
  GS_EVENT_CHANGE = 2,
  /// The periodic rescan timer fired; `filename` is NULL. inotify can drop
  /// events (IN_Q_OVERFLOW), so events are hints and folders are rescanned.
  GS_EVENT_RESCAN = 4,
  /// The watch failed (`status` holds the uv error); it stays registered.
  GS_EVENT_ERROR = 8,
};

/// Called on the watcher's thread for every event of a watch. `filename` is
/// relative to the watched folder and NULL when unknown. Return quickly.
typedef void (*gs_watch_cb)(void *_Nullable context, uint64_t watch_id,
                            const char *_Nullable filename, int events,
                            int status);

/// Starts a libuv loop on a new thread.
int gs_watcher_create(gs_watch_cb callback, void *_Nullable context,
                      gs_watcher_t *_Nullable *_Nonnull out);

/// Watches `path` (a folder) and rescans it every `rescan_ms` milliseconds
/// (0: never). Callable from any thread; waits until the watch is running
/// or failed. `*watch_id` is passed to every callback of this watch.
/// On a libuv failure returns GS_EUV and stores the uv code in `*uv_error`.
int gs_watcher_add(gs_watcher_t *watcher, const char *path,
                   uint64_t rescan_ms, uint64_t *watch_id, int *uv_error);

/// Stops a watch. Callable from any thread, including from the callback;
/// from any other thread it waits until no callback of the watch can run.
int gs_watcher_remove(gs_watcher_t *watcher, uint64_t watch_id);

/// Stops every watch, closes every handle, joins the thread and closes the
/// loop. Must not be called from the callback.
void gs_watcher_close(gs_watcher_t *_Nullable watcher);

/// Number of watches currently registered (for tests and status).
size_t gs_watcher_count(gs_watcher_t *watcher);

#ifdef __clang__
#pragma clang assume_nonnull end
#endif

#ifdef __cplusplus
}
#endif

#endif  // CGROUPSYNC_H
