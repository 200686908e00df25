// Row-change capture on an SQLite connection.
//
// The hooks only append to a buffer: SQLite forbids touching the connection
// from inside them, and they run on the hot path of every row written.
// Declares the pre-update API in sqlite3.h; must precede its inclusion.
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include "CGroupSync.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

// Linked weakly so that the library still loads against an SQLite built
// without the pre-update hook; a NULL address selects the update hook.
#pragma weak sqlite3_preupdate_hook

struct gs_capture_s {
  sqlite3 *db;
  gs_hook_kind kind;
  char *ignored_prefix;
  size_t ignored_prefix_len;

  // Table names, interned for the capture's life: rows refer to them by
  // index, and most transactions touch the table of the previous row.
  char **tables;
  bool *table_ignored;  // per table: internal, so never reported
  uint32_t table_count;
  uint32_t table_capacity;
  uint32_t last_table;

  gs_row_change *pending;  // rows of the open transaction
  size_t pending_count;
  size_t pending_capacity;

  gs_row_change *committed;  // rows of the last commit, until taken
  size_t committed_count;
  size_t committed_capacity;

  bool allow_commit;
  bool overflowed;
  // SQLite names the main schema with one static string: once seen, a
  // pointer compare replaces strcmp on every row.
  const char *main_name;
};

static bool gs__is_ignored_table(const gs_capture_t *c, const char *table) {
  if (strncmp(table, "sqlite_", 7) == 0) return true;
  return c->ignored_prefix_len > 0 &&
         strncmp(table, c->ignored_prefix, c->ignored_prefix_len) == 0;
}

// Temp and attached schemas are not the store.
static bool gs__is_main(gs_capture_t *c, const char *db_name) {
  if (db_name == c->main_name) return true;
  if (strcmp(db_name, "main") != 0) return false;
  c->main_name = db_name;
  return true;
}

// Returns the table's index, interning it if new; UINT32_MAX on OOM.
static uint32_t gs__intern(gs_capture_t *c, const char *table) {
  if (c->last_table < c->table_count &&
      strcmp(c->tables[c->last_table], table) == 0)
    return c->last_table;
  for (uint32_t i = 0; i < c->table_count; i++) {
    if (strcmp(c->tables[i], table) == 0) return c->last_table = i;
  }
  if (c->table_count == c->table_capacity) {
    uint32_t capacity = c->table_capacity ? c->table_capacity * 2 : 16;
    char **grown = realloc(c->tables, capacity * sizeof *grown);
    if (!grown) return UINT32_MAX;
    c->tables = grown;
    bool *flags = realloc(c->table_ignored, capacity * sizeof *flags);
    if (!flags) return UINT32_MAX;
    c->table_ignored = flags;
    c->table_capacity = capacity;
  }
  char *copy = strdup(table);
  if (!copy) return UINT32_MAX;
  c->tables[c->table_count] = copy;
  c->table_ignored[c->table_count] = gs__is_ignored_table(c, table);
  return c->last_table = c->table_count++;
}

static void gs__record(gs_capture_t *c, int sqlite_op, const char *db_name,
                       const char *table, int64_t rowid) {
  if (c->overflowed || !gs__is_main(c, db_name)) return;
  uint32_t index = gs__intern(c, table);
  if (index == UINT32_MAX) goto overflow;
  if (c->table_ignored[index]) return;
  if (c->pending_count == c->pending_capacity) {
    size_t capacity = c->pending_capacity ? c->pending_capacity * 2 : 64;
    gs_row_change *grown = realloc(c->pending, capacity * sizeof *grown);
    if (!grown) goto overflow;
    c->pending = grown;
    c->pending_capacity = capacity;
  }
  uint32_t op = sqlite_op == SQLITE_INSERT   ? GS_OP_INSERT
                : sqlite_op == SQLITE_DELETE ? GS_OP_DELETE
                                             : GS_OP_UPDATE;
  c->pending[c->pending_count++] =
      (gs_row_change){.rowid = rowid, .table = index, .op = op};
  return;
overflow:
  c->overflowed = true;
}

static void gs__preupdate(void *context, sqlite3 *db, int op,
                          const char *db_name, const char *table,
                          sqlite3_int64 old_key, sqlite3_int64 new_key) {
  (void)db;
  gs_capture_t *c = context;
  if (op == SQLITE_UPDATE && old_key != new_key) {
    // The rowid itself changed: the old ID is gone, a new one appeared.
    gs__record(c, SQLITE_DELETE, db_name, table, old_key);
    gs__record(c, SQLITE_INSERT, db_name, table, new_key);
  } else {
    gs__record(c, op, db_name, table, op == SQLITE_INSERT ? new_key : old_key);
  }
}

static void gs__update(void *context, int op, const char *db_name,
                       const char *table, sqlite3_int64 rowid) {
  gs__record(context, op, db_name, table, rowid);
}

// With only the update hook, DELETE without WHERE would take the truncate
// optimisation and report nothing; SQLITE_IGNORE on SQLITE_DELETE makes
// SQLite delete row by row instead (documented in sqlite3_set_authorizer).
static int gs__authorize(void *context, int action, const char *a,
                         const char *b, const char *c, const char *d) {
  (void)context, (void)a, (void)b, (void)c, (void)d;
  return action == SQLITE_DELETE ? SQLITE_IGNORE : SQLITE_OK;
}

static int gs__commit(void *context) {
  gs_capture_t *c = context;
  if (c->overflowed) return 1;
  if (c->pending_count == 0) return 0;
  if (!c->allow_commit) return 1;  // unsequenced changes must not commit
  c->allow_commit = false;
  // Swap buffers so both keep their capacity across transactions.
  gs_row_change *rows = c->committed;
  size_t capacity = c->committed_capacity;
  c->committed = c->pending;
  c->committed_capacity = c->pending_capacity;
  c->committed_count = c->pending_count;
  c->pending = rows;
  c->pending_capacity = capacity;
  c->pending_count = 0;
  return 0;
}

static void gs__rollback(void *context) {
  gs_capture_t *c = context;
  c->pending_count = 0;
  c->allow_commit = false;
  c->overflowed = false;
}

int gs_capture_create(sqlite3 *db, const char *ignored_prefix, int options,
                      gs_capture_t **out) {
  *out = NULL;
  if (!db) return GS_EINVAL;
  gs_capture_t *c = calloc(1, sizeof *c);
  if (!c) return GS_ENOMEM;
  c->ignored_prefix = strdup(ignored_prefix);
  if (!c->ignored_prefix) {
    free(c);
    return GS_ENOMEM;
  }
  c->ignored_prefix_len = strlen(ignored_prefix);
  c->db = db;
  bool preupdate = sqlite3_preupdate_hook != NULL &&
                   !(options & GS_CAPTURE_FORCE_UPDATE_HOOK);
  c->kind = preupdate ? GS_HOOK_PREUPDATE : GS_HOOK_UPDATE;
  if (preupdate) {
    sqlite3_preupdate_hook(db, gs__preupdate, c);
  } else {
    sqlite3_update_hook(db, gs__update, c);
    if (sqlite3_set_authorizer(db, gs__authorize, c) != SQLITE_OK) {
      sqlite3_update_hook(db, NULL, NULL);
      gs_capture_close(c);
      return GS_ESQLITE;
    }
  }
  sqlite3_commit_hook(db, gs__commit, c);
  sqlite3_rollback_hook(db, gs__rollback, c);
  *out = c;
  return GS_OK;
}

void gs_capture_close(gs_capture_t *c) {
  if (!c) return;
  if (c->db) {
    sqlite3_commit_hook(c->db, NULL, NULL);
    sqlite3_rollback_hook(c->db, NULL, NULL);
    if (c->kind == GS_HOOK_PREUPDATE) {
      sqlite3_preupdate_hook(c->db, NULL, NULL);
    } else {
      sqlite3_update_hook(c->db, NULL, NULL);
      sqlite3_set_authorizer(c->db, NULL, NULL);
    }
  }
  for (uint32_t i = 0; i < c->table_count; i++) free(c->tables[i]);
  free(c->tables);
  free(c->table_ignored);
  free(c->pending);
  free(c->committed);
  free(c->ignored_prefix);
  free(c);
}

gs_hook_kind gs_capture_hook_kind(const gs_capture_t *c) { return c->kind; }

size_t gs_capture_pending_count(const gs_capture_t *c) {
  return c->pending_count;
}

void gs_capture_allow_commit(gs_capture_t *c) { c->allow_commit = true; }

size_t gs_capture_take_committed(gs_capture_t *c, const gs_row_change **rows) {
  size_t count = c->committed_count;
  *rows = count ? c->committed : NULL;
  c->committed_count = 0;
  return count;
}

const char *gs_capture_table_name(const gs_capture_t *c, uint32_t table) {
  return table < c->table_count ? c->tables[table] : NULL;
}

void gs_capture_reset(gs_capture_t *c) {
  c->pending_count = 0;
  c->committed_count = 0;
  c->allow_commit = false;
  c->overflowed = false;
}

int gs_capture_overflowed(const gs_capture_t *c) { return c->overflowed; }
