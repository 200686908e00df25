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
#include <time.h>

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
  GS_EAGAIN = -7,      // a writer was changing it; ask again
};

/// A static, human-readable description of a GS_E* code.
const char *gs_strerror(int code);

// MARK: The WAL's commit counter

/// Reads `iChange` of the wal-index header of `db`'s main database: SQLite
/// moves it by one on every commit and on nothing else (a checkpoint that
/// restarts the WAL rewrites the header but not the counter), so it tells
/// a commit from a mere move of `PRAGMA data_version`.
///
/// The header is read from the connection's own mapping of the wal-index
/// (the VFS's xShmMap, reached through SQLITE_FCNTL_FILE_POINTER): no
/// descriptor of the `-shm` file is opened, since closing one would drop
/// every POSIX lock the process holds on it, SQLite's included. Its layout
/// is SQLite's file format (walformat.html): two 48-byte copies, written
/// second first; equal copies are a consistent header.
///
/// Call it on the thread that owns `db`, inside a read transaction.
/// Returns 0, GS_EAGAIN (torn by a writer: ask again), GS_EINVAL (not a
/// WAL-mode database with a mapped wal-index) or GS_ESQLITE.
int gs_wal_commit_counter(sqlite3 *db, uint32_t *counter);

// MARK: Capture

/// The operation a captured row went through.
typedef enum {
  GS_OP_INSERT = 1,
  GS_OP_UPDATE = 2,
  GS_OP_DELETE = 3,
} gs_op;

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
  /// Do not install the pre-update hook even where SQLite has it: rows are
  /// fed with gs_capture_record instead (tests of the fallback).
  GS_CAPTURE_NO_PREUPDATE_HOOK = 1,
};

/// Why gs_capture_will_commit refuses a commit.
enum {
  /// Rows were captured that gs_capture_mark_sequenced did not cover.
  GS_CAPTURE_UNSEQUENCED = 1,
  /// Memory ran out while capturing: the rows are incomplete.
  GS_CAPTURE_OVERFLOWED = 2,
};

/// Records the rows each transaction on `db` changes, with SQLite's
/// pre-update hook: it sees REPLACE deletes, WITHOUT ROWID tables and rows
/// of `DELETE FROM t` (it switches off the truncate optimisation).
///
/// The capture owns the pre-update hook and no other hook: on a connection
/// that GRDB.swift owns, commit, rollback, update hooks and the authorizer
/// are GRDB's, and the owner of the connection tells the capture of
/// commits and rollbacks through gs_capture_will_commit and
/// gs_capture_end_transaction. Without the pre-update hook (SQLite built without it, or
/// GS_CAPTURE_NO_PREUPDATE_HOOK) the owner feeds rows with
/// gs_capture_record.
///
/// Tables whose name starts with `sqlite_` or an ignored prefix are not
/// captured, nor are tables outside the `main` schema.
int gs_capture_create(sqlite3 *db, int options,
                      gs_capture_t *_Nullable *_Nonnull out);

/// Uninstalls the hook (if it is still the capture's) and frees the
/// capture. Call before sqlite3_close.
void gs_capture_close(gs_capture_t *_Nullable capture);

/// Uninstalls the hook (if it is still the capture's); the capture records
/// nothing more. The connection must be open.
void gs_capture_detach(gs_capture_t *_Nonnull capture);

/// Frees the capture without touching its connection, which may be closed
/// already: after gs_capture_detach, or once the connection is closed
/// (a closed connection runs no hook).
void gs_capture_free(gs_capture_t *_Nullable capture);

/// Whether `table` is internal, so never captured, replicated or copied:
/// SQLite's (`sqlite_`), GroupSync's (`groupsync_`) and GRDB's (`grdb_`),
/// compared by bytes as the names are created.
int gs_is_internal_table(const char *table);

/// Adds a table that is not captured (by exact name, compared by bytes)
/// until gs_capture_unignore_table: e.g. the shadow tables of a full-text
/// index, which SQLite writes while the transaction commits.
int gs_capture_ignore_table(gs_capture_t *capture, const char *table);

/// Captures `table` again from its next row on: the shadow name of a
/// virtual table that is gone may name an ordinary table. The rows it
/// got while ignored stay uncaptured (the caller invalidates the table if
/// the open transaction wrote it). Returns 1 if it was ignored, else 0
/// (internal tables stay ignored either way).
int gs_capture_unignore_table(gs_capture_t *capture, const char *table);

/// Nonzero if the capture runs on the pre-update hook.
int gs_capture_uses_preupdate_hook(const gs_capture_t *capture);

/// Nonzero if the pre-update hook installed on the connection is still the
/// capture's; another party (a GRDB built with SQLITE_ENABLE_PREUPDATE_HOOK,
/// the session extension) may have replaced it, and then rows were missed.
int gs_capture_hook_intact(const gs_capture_t *capture);

/// Records a row change seen by other means (the fallback without the
/// pre-update hook). `sqlite_op` is SQLITE_INSERT, SQLITE_UPDATE or
/// SQLITE_DELETE; `db_name` the schema ("main").
void gs_capture_record(gs_capture_t *capture, int sqlite_op,
                       const char *db_name, const char *table, int64_t rowid);

/// Marks `table` as changed in a way rows cannot name: any of its rows may
/// have changed in the open transaction.
void gs_capture_invalidate(gs_capture_t *capture, const char *table);

/// Rows a transaction may hold before its largest tables are reported as
/// invalidated instead (their rows are dropped; memory stays bounded).
/// 0 means no budget.
void gs_capture_set_row_budget(gs_capture_t *capture, size_t budget);

/// The rows captured in the open transaction, in the order they changed.
/// Valid until the next row is captured or the transaction ends.
size_t gs_capture_pending(const gs_capture_t *capture,
                          const gs_row_change *_Nullable *_Nonnull rows);

/// Nonzero if `table` (an index) is invalidated in the open transaction.
int gs_capture_table_invalidated(const gs_capture_t *capture, uint32_t table);

/// Nonzero if the open transaction changed anything captured: rows or
/// invalidated tables.
int gs_capture_has_changes(const gs_capture_t *capture);

/// The number of interned table names; indexes below it are valid.
uint32_t gs_capture_table_count(const gs_capture_t *capture);

/// The name of the table with index `table` (NUL-terminated bytes, as
/// SQLite gave them). Indexes stay valid for the capture's life.
const char *_Nullable gs_capture_table_name(const gs_capture_t *capture,
                                            uint32_t table);

/// Declares that what the open transaction captured so far has its
/// sequence number. Rows captured after this call are unsequenced again.
void gs_capture_mark_sequenced(gs_capture_t *capture);

/// To call when the transaction is about to commit: 0 to let it commit, or
/// GS_CAPTURE_UNSEQUENCED / GS_CAPTURE_OVERFLOWED to refuse it.
int gs_capture_will_commit(const gs_capture_t *capture);

/// To call once the transaction ended, committed or rolled back alike:
/// drops everything it captured (rows, net rows, invalidated tables, the
/// sequenced mark, the overflow). A rollback needs nothing more: what a
/// committed transaction captured was consumed before COMMIT, what a
/// rolled-back one captured is void, and savepoints rolled back inside a
/// transaction leave their rows to be checked against the store (see
/// gs_net_rows). Interned tables are kept for the capture's life, ignored
/// ones until gs_capture_unignore_table.
void gs_capture_end_transaction(gs_capture_t *capture);

/// Nonzero if memory ran out while capturing the open transaction.
int gs_capture_overflowed(const gs_capture_t *capture);

/// Rows captured for `table` (an index) in the open transaction.
size_t gs_capture_table_rows(const gs_capture_t *capture, uint32_t table);

/// One table's rows reduced to their net effect in the open transaction,
/// each list sorted by rowid. Whether a row existed before is exact (its
/// first operation tells); whether it exists after is what its last
/// operation says, which a savepoint rolled back or a failed statement
/// can contradict: the owner checks that claim against the store.
typedef struct {
  /// Did not exist before; exist after.
  const int64_t *_Nullable inserted;
  size_t inserted_count;
  /// Existed before; exist after.
  const int64_t *_Nullable updated;
  size_t updated_count;
  /// Existed before; gone after.
  const int64_t *_Nullable deleted;
  size_t deleted_count;
  /// Did not exist before; gone again after.
  const int64_t *_Nullable transient;
  size_t transient_count;
} gs_net_rows;

/// Computes the net rows of every table of the open transaction, once per
/// change captured (calling again without a new change costs nothing).
/// GS_ENOMEM if memory ran out.
int gs_capture_make_net_rows(gs_capture_t *capture);

/// The net rows of `table` (an index) as gs_capture_make_net_rows last made
/// them: valid until the next row is captured or the transaction ends.
/// GS_EINVAL if they are not made, or no such table.
int gs_capture_net_rows(const gs_capture_t *capture, uint32_t table,
                        gs_net_rows *out);

// MARK: File times

/// Nonzero if the file time `stamp` (a st_mtim or st_ctim), read at `now`
/// (CLOCK_REALTIME), has settled: any later change of the file moves it.
/// File times are coarse and may stand still for up to two seconds while
/// the file changes (stamped from the kernel's coarse clock, a tick behind
/// CLOCK_REALTIME; to the second on ext2, ext3 and ext4 with 128-byte
/// inodes; to two seconds on FAT), so a time has settled once its second
/// and two more have passed. A folder whose times are those a listing read
/// when they had settled has not changed since that listing; times read
/// before they settled prove nothing.
int gs_file_time_settled(struct timespec stamp, struct timespec now);

// MARK: Watcher

typedef struct gs_watcher_s gs_watcher_t;

/// What a watch asks for (`flags` of gs_watcher_add).
enum {
  /// Only entries that appear in the folder (created, linked, moved in):
  /// removals and changes of entries wake nobody (one fstatat through the
  /// folder's descriptor, on the loop thread, tells an arrival from a
  /// removal). An event that finds the folder itself removed (no link
  /// left) is reported as GS_EVENT_RESCAN.
  GS_WATCH_ARRIVALS = 1,
};

/// What a watch reports.
enum {
  /// An entry was created, removed or renamed (libuv's UV_RENAME).
  GS_EVENT_RENAME = 1,
  /// An entry changed (libuv's UV_CHANGE).
  GS_EVENT_CHANGE = 2,
  /// The periodic rescan timer fired and the folder may have changed
  /// (held open, a removed folder gets no inotify event of its own: its
  /// removal moves its ctime, and the next tick reports it), or
  /// (GS_WATCH_ARRIVALS) an event found the folder removed; `filename` is
  /// NULL. inotify can drop events (IN_Q_OVERFLOW, which libuv ignores),
  /// so events are hints and folders are rescanned.
  GS_EVENT_RESCAN = 4,
  /// The watch failed (`status` holds the uv error); it stays registered.
  GS_EVENT_ERROR = 8,
  /// The rescan timer fired but the folder has not changed since the last
  /// GS_EVENT_RESCAN: nothing to list, a moment for other periodic checks.
  GS_EVENT_TICK = 16,
  /// gs_watcher_wake asked for a call; nothing happened in the folder and
  /// `filename` is NULL.
  GS_EVENT_WAKE = 32,
};

/// Called on the watcher's thread for every event of a watch. `filename` is
/// relative to the watched folder and NULL when unknown. Return quickly.
typedef void (*gs_watch_cb)(void *_Nullable context, uint64_t watch_id,
                            const char *_Nullable filename, int events,
                            int status);

/// Starts a libuv loop on a new thread.
int gs_watcher_create(gs_watch_cb callback, void *_Nullable context,
                      gs_watcher_t *_Nullable *_Nonnull out);

/// Which libuv call failed, and with what (gs_watcher_add).
typedef struct {
  /// The libuv function, such as "uv_fs_event_start" (a static string);
  /// NULL when none failed.
  const char *_Nullable call;
  /// Its error: a UV_E* code, on Linux a negated errno; 0 when none.
  int code;
} gs_uv_failure;

/// Watches the folder the caller holds open as `dirfd`, which must stay
/// open until the watch is removed, and rescans it every `rescan_ms`
/// milliseconds (0: never); `flags` 0 reports every change,
/// GS_WATCH_ARRIVALS only new entries. The watch is on that very folder
/// (through /proc/self/fd), whatever its path becomes, and its entries,
/// its removal (no link left) and its rescans are looked at through the
/// descriptor, without a path walk. Callable from any thread; waits until
/// the watch is running or failed. `*watch_id` is passed to every callback
/// of this watch. On a libuv failure returns GS_EUV and stores the call
/// that failed and its code in `*uv_failure`.
int gs_watcher_add(gs_watcher_t *watcher, int dirfd, uint64_t rescan_ms,
                   unsigned flags, uint64_t *watch_id,
                   gs_uv_failure *uv_failure);

/// Asks the loop thread to call the watch's callback once with
/// GS_EVENT_WAKE, and returns at once: how another thread hands work to a
/// consumer that runs on the loop thread. Wake-ups not yet delivered
/// coalesce; none is delivered after the watch was removed. Callable from
/// any thread, the callback too. GS_ECLOSED once close started, GS_ENOMEM
/// if memory ran out, GS_EUV if libuv could not wake the loop.
int gs_watcher_wake(gs_watcher_t *watcher, uint64_t watch_id);

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
