// Row-change capture on an SQLite connection.
//
// The hook only appends to a buffer: SQLite forbids touching the connection
// from inside it, and it runs on the hot path of every row written. The
// capture installs no other hook: commits and rollbacks are told to it by
// the connection's owner (GRDB's transaction observer).
// Declares the pre-update API in sqlite3.h; must precede its inclusion.
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include "CGroupSync.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

// Linked weakly so that the library still loads against an SQLite built
// without the pre-update hook; a NULL address selects the fallback.
#pragma weak sqlite3_preupdate_hook

typedef struct {
  int64_t rowid;
  uint32_t order;  // in the transaction: ties of one rowid keep it
  uint32_t op;
} gs__net_entry;

struct gs_capture_s {
  sqlite3 *db;
  bool uses_preupdate;
  bool detached;  // the hook was uninstalled: never touch the connection again

  char **ignored_tables;
  size_t ignored_table_count;

  // Table names, interned for the capture's life: rows refer to them by
  // index, and most transactions touch the table of the previous row.
  char **tables;
  bool *table_ignored;      // per table: internal or ignored, not captured
  bool *table_invalidated;  // per table, in the open transaction
  size_t *table_rows;       // per table, rows pending in the open transaction
  uint32_t table_count;
  uint32_t table_capacity;
  uint32_t last_table;
  uint32_t invalidated_count;

  gs_row_change *pending;  // rows of the open transaction
  size_t pending_count;
  size_t pending_capacity;
  size_t row_budget;  // 0: none

  // Every captured change bumps `changes`; gs_capture_mark_sequenced
  // remembers the value it covered.
  uint64_t changes;
  uint64_t sequenced_changes;
  bool overflowed;
  // SQLite names the main schema with one static string: once seen, a
  // pointer compare replaces strcmp on every row.
  const char *main_name;

  // Net rows of the open transaction (gs_capture_make_net_rows), kept
  // between transactions so that a commit allocates nothing.
  gs__net_entry *sorted;  // pending rows grouped by table
  size_t sorted_capacity;
  int64_t *net;  // each table's net rows, by category
  size_t net_capacity;
  gs_net_rows *nets;  // per table
  uint32_t nets_capacity;
  bool nets_valid;
};

int gs_is_internal_table(const char *table) {
  static const char *const prefixes[] = {"sqlite_", "groupsync_", "grdb_"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    if (strncmp(table, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  }
  return 0;
}

static bool gs__is_ignored_table(const gs_capture_t *c, const char *table) {
  if (gs_is_internal_table(table)) return true;
  for (size_t i = 0; i < c->ignored_table_count; i++) {
    if (strcmp(table, c->ignored_tables[i]) == 0) return true;
  }
  return false;
}

// Temp and attached schemas are not the store.
static bool gs__is_main(gs_capture_t *c, const char *db_name) {
  if (db_name == c->main_name) return true;
  if (strcmp(db_name, "main") != 0) return false;
  c->main_name = db_name;
  return true;
}

static bool gs__grow_tables(gs_capture_t *c) {
  uint32_t capacity = c->table_capacity ? c->table_capacity * 2 : 16;
  char **tables = realloc(c->tables, capacity * sizeof *tables);
  if (!tables) return false;
  c->tables = tables;
  bool *ignored = realloc(c->table_ignored, capacity * sizeof *ignored);
  if (!ignored) return false;
  c->table_ignored = ignored;
  bool *invalidated = realloc(c->table_invalidated, capacity * sizeof *invalidated);
  if (!invalidated) return false;
  c->table_invalidated = invalidated;
  size_t *rows = realloc(c->table_rows, capacity * sizeof *rows);
  if (!rows) return false;
  c->table_rows = rows;
  c->table_capacity = capacity;
  return true;
}

// Returns the table's index, interning it if new; UINT32_MAX on OOM.
// Names are compared by their bytes: SQLite's own rule.
static uint32_t gs__intern(gs_capture_t *c, const char *table) {
  if (c->last_table < c->table_count &&
      strcmp(c->tables[c->last_table], table) == 0)
    return c->last_table;
  for (uint32_t i = 0; i < c->table_count; i++) {
    if (strcmp(c->tables[i], table) == 0) return c->last_table = i;
  }
  if (c->table_count == c->table_capacity && !gs__grow_tables(c))
    return UINT32_MAX;
  char *copy = strdup(table);
  if (!copy) return UINT32_MAX;
  uint32_t index = c->table_count++;
  c->tables[index] = copy;
  c->table_ignored[index] = gs__is_ignored_table(c, table);
  c->table_invalidated[index] = false;
  c->table_rows[index] = 0;
  return c->last_table = index;
}

static void gs__mark_invalidated(gs_capture_t *c, uint32_t index) {
  if (c->table_invalidated[index]) return;
  c->table_invalidated[index] = true;
  c->invalidated_count++;
}

// Over budget: the tables with the most pending rows are reported as
// invalidated and their rows dropped, until half the budget is left. A
// huge transaction thus costs bounded memory and a bounded change set.
static void gs__enforce_budget(gs_capture_t *c) {
  while (c->pending_count > c->row_budget / 2) {
    uint32_t largest = UINT32_MAX;
    for (uint32_t i = 0; i < c->table_count; i++) {
      if (c->table_rows[i] > 0 &&
          (largest == UINT32_MAX || c->table_rows[i] > c->table_rows[largest]))
        largest = i;
    }
    if (largest == UINT32_MAX) return;
    gs__mark_invalidated(c, largest);
    size_t kept = 0;
    for (size_t i = 0; i < c->pending_count; i++) {
      if (c->pending[i].table != largest) c->pending[kept++] = c->pending[i];
    }
    c->pending_count = kept;
    c->table_rows[largest] = 0;
  }
}

static void gs__record(gs_capture_t *c, int sqlite_op, const char *db_name,
                       const char *table, int64_t rowid) {
  if (c->overflowed || !gs__is_main(c, db_name)) return;
  c->nets_valid = false;
  uint32_t index = gs__intern(c, table);
  if (index == UINT32_MAX) goto overflow;
  if (c->table_ignored[index]) return;
  c->changes++;
  if (c->table_invalidated[index]) return;
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
  c->table_rows[index]++;
  if (c->row_budget && c->pending_count > c->row_budget) gs__enforce_budget(c);
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

void gs_capture_end_transaction(gs_capture_t *c) {
  c->pending_count = 0;
  c->nets_valid = false;
  if (c->invalidated_count) {
    memset(c->table_invalidated, 0, c->table_count * sizeof(bool));
    c->invalidated_count = 0;
  }
  memset(c->table_rows, 0, c->table_count * sizeof(size_t));
  c->changes = 0;
  c->sequenced_changes = 0;
  c->overflowed = false;
}

int gs_capture_create(sqlite3 *db, int options, gs_capture_t **out) {
  *out = NULL;
  if (!db) return GS_EINVAL;
  gs_capture_t *c = calloc(1, sizeof *c);
  if (!c) return GS_ENOMEM;
  c->db = db;
  c->uses_preupdate = sqlite3_preupdate_hook != NULL &&
                      !(options & GS_CAPTURE_NO_PREUPDATE_HOOK);
  if (c->uses_preupdate) sqlite3_preupdate_hook(db, gs__preupdate, c);
  *out = c;
  return GS_OK;
}

void gs_capture_close(gs_capture_t *c) {
  if (!c) return;
  gs_capture_detach(c);
  gs_capture_free(c);
}

void gs_capture_detach(gs_capture_t *c) {
  if (c->uses_preupdate && !c->detached) {
    // Put back whatever another party installed after us.
    void *previous = sqlite3_preupdate_hook(c->db, NULL, NULL);
    if (previous != c) sqlite3_preupdate_hook(c->db, NULL, previous);
  }
  c->detached = true;
}

void gs_capture_free(gs_capture_t *c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->table_count; i++) free(c->tables[i]);
  for (size_t i = 0; i < c->ignored_table_count; i++) free(c->ignored_tables[i]);
  free(c->ignored_tables);
  free(c->tables);
  free(c->table_ignored);
  free(c->table_invalidated);
  free(c->table_rows);
  free(c->pending);
  free(c->sorted);
  free(c->net);
  free(c->nets);
  free(c);
}

// Marks the interned table named `table`, if any, ignored or not.
static void gs__mark_ignored(gs_capture_t *c, const char *table, bool ignored) {
  for (uint32_t i = 0; i < c->table_count; i++) {
    if (strcmp(c->tables[i], table) == 0) c->table_ignored[i] = ignored;
  }
}

int gs_capture_ignore_table(gs_capture_t *c, const char *table) {
  char **grown = realloc(c->ignored_tables,
                         (c->ignored_table_count + 1) * sizeof *grown);
  if (!grown) return GS_ENOMEM;
  c->ignored_tables = grown;
  char *copy = strdup(table);
  if (!copy) return GS_ENOMEM;
  c->ignored_tables[c->ignored_table_count++] = copy;
  gs__mark_ignored(c, table, true);
  return GS_OK;
}

int gs_capture_unignore_table(gs_capture_t *c, const char *table) {
  size_t kept = 0;
  for (size_t i = 0; i < c->ignored_table_count; i++) {
    if (strcmp(c->ignored_tables[i], table) == 0) free(c->ignored_tables[i]);
    else c->ignored_tables[kept++] = c->ignored_tables[i];
  }
  if (kept == c->ignored_table_count) return 0;
  c->ignored_table_count = kept;
  gs__mark_ignored(c, table, gs_is_internal_table(table));
  return 1;
}

int gs_capture_uses_preupdate_hook(const gs_capture_t *c) {
  return c->uses_preupdate;
}

int gs_capture_hook_intact(const gs_capture_t *c) {
  if (!c->uses_preupdate || c->detached) return 0;
  // sqlite3_preupdate_hook returns the previous context: reinstall ours
  // and see whether it was still there.
  void *previous = sqlite3_preupdate_hook(c->db, gs__preupdate, (void *)c);
  return previous == c;
}

void gs_capture_record(gs_capture_t *c, int sqlite_op, const char *db_name,
                       const char *table, int64_t rowid) {
  gs__record(c, sqlite_op, db_name, table, rowid);
}

void gs_capture_invalidate(gs_capture_t *c, const char *table) {
  if (c->overflowed) return;
  c->nets_valid = false;
  uint32_t index = gs__intern(c, table);
  if (index == UINT32_MAX) {
    c->overflowed = true;
    return;
  }
  if (c->table_ignored[index]) return;
  c->changes++;
  gs__mark_invalidated(c, index);
}

void gs_capture_set_row_budget(gs_capture_t *c, size_t budget) {
  c->row_budget = budget;
}

size_t gs_capture_pending(const gs_capture_t *c, const gs_row_change **rows) {
  *rows = c->pending_count ? c->pending : NULL;
  return c->pending_count;
}

int gs_capture_table_invalidated(const gs_capture_t *c, uint32_t table) {
  return table < c->table_count && c->table_invalidated[table];
}

int gs_capture_has_changes(const gs_capture_t *c) { return c->changes > 0; }

uint32_t gs_capture_table_count(const gs_capture_t *c) {
  return c->table_count;
}

const char *gs_capture_table_name(const gs_capture_t *c, uint32_t table) {
  return table < c->table_count ? c->tables[table] : NULL;
}

void gs_capture_mark_sequenced(gs_capture_t *c) {
  c->sequenced_changes = c->changes;
}

int gs_capture_will_commit(const gs_capture_t *c) {
  if (c->overflowed) return GS_CAPTURE_OVERFLOWED;
  if (c->changes != c->sequenced_changes) return GS_CAPTURE_UNSEQUENCED;
  return 0;
}

int gs_capture_overflowed(const gs_capture_t *c) { return c->overflowed; }

// MARK: Net rows

static int gs__net_order(const void *a, const void *b) {
  const gs__net_entry *x = a, *y = b;
  if (x->rowid != y->rowid) return x->rowid < y->rowid ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static bool gs__reserve(void **buffer, size_t *capacity, size_t count,
                        size_t size) {
  if (count <= *capacity) return true;
  size_t grown = *capacity ? *capacity : 64;
  while (grown < count) grown *= 2;
  void *p = realloc(*buffer, grown * size);
  if (!p) return false;
  *buffer = p;
  *capacity = grown;
  return true;
}

// One table's rows (a slice of `sorted`, in transaction order) folded into
// its net rows, written to `out` (room for `count`).
static void gs__fold(gs__net_entry *rows, size_t count, int64_t *out,
                     gs_net_rows *net) {
  // The common bulk case: every row touched once, in rowid order: each
  // operation is its row's net effect and the lists come out sorted.
  bool ascending = true;
  for (size_t i = 1; i < count && ascending; i++)
    ascending = rows[i - 1].rowid < rows[i].rowid;
  if (!ascending) qsort(rows, count, sizeof *rows, gs__net_order);
  // Per distinct rowid: 0 inserted, 1 updated, 2 deleted, 3 transient.
  // Whether it existed before, its first operation tells; whether it exists
  // after, its last (the caller checks that claim against the store).
  size_t counts[4] = {0, 0, 0, 0};
  for (int pass = 0; pass < 2; pass++) {
    int64_t *lists[4];
    if (pass == 1) {
      lists[0] = out;
      lists[1] = lists[0] + counts[0];
      lists[2] = lists[1] + counts[1];
      lists[3] = lists[2] + counts[2];
      net->inserted = lists[0];
      net->updated = lists[1];
      net->deleted = lists[2];
      net->transient = lists[3];
      net->inserted_count = counts[0];
      net->updated_count = counts[1];
      net->deleted_count = counts[2];
      net->transient_count = counts[3];
      memset(counts, 0, sizeof counts);
    }
    for (size_t i = 0; i < count;) {
      size_t last = i;
      while (last + 1 < count && rows[last + 1].rowid == rows[i].rowid) last++;
      bool existed = rows[i].op != GS_OP_INSERT;
      bool exists = rows[last].op != GS_OP_DELETE;
      int category = existed ? (exists ? 1 : 2) : (exists ? 0 : 3);
      if (pass == 1) lists[category][counts[category]] = rows[i].rowid;
      counts[category]++;
      i = last + 1;
    }
  }
}

int gs_capture_make_net_rows(gs_capture_t *c) {
  if (c->nets_valid) return GS_OK;
  size_t n = c->pending_count;
  if (!gs__reserve((void **)&c->sorted, &c->sorted_capacity, n,
                   sizeof *c->sorted) ||
      !gs__reserve((void **)&c->net, &c->net_capacity, n, sizeof *c->net))
    return GS_ENOMEM;
  if (c->table_count > c->nets_capacity) {
    gs_net_rows *nets = realloc(c->nets, c->table_capacity * sizeof *nets);
    if (!nets) return GS_ENOMEM;
    c->nets = nets;
    c->nets_capacity = c->table_capacity;
  }
  // Grouped by table, a counting sort on table_rows: each table's rows
  // keep their order in the transaction.
  size_t offset = 0;
  for (uint32_t t = 0; t < c->table_count; t++) {
    c->nets[t] = (gs_net_rows){.inserted_count = offset};  // a cursor, for now
    offset += c->table_rows[t];
  }
  for (size_t i = 0; i < n; i++) {
    const gs_row_change *row = &c->pending[i];
    size_t at = c->nets[row->table].inserted_count++;
    c->sorted[at] = (gs__net_entry){
        .rowid = row->rowid, .order = (uint32_t)i, .op = row->op};
  }
  offset = 0;
  for (uint32_t t = 0; t < c->table_count; t++) {
    size_t count = c->table_rows[t];
    c->nets[t] = (gs_net_rows){0};
    if (count)
      gs__fold(c->sorted + offset, count, c->net + offset, &c->nets[t]);
    offset += count;
  }
  c->nets_valid = true;
  return GS_OK;
}

size_t gs_capture_table_rows(const gs_capture_t *c, uint32_t table) {
  return table < c->table_count ? c->table_rows[table] : 0;
}

int gs_capture_net_rows(const gs_capture_t *c, uint32_t table,
                        gs_net_rows *out) {
  *out = (gs_net_rows){0};
  if (!c->nets_valid || table >= c->table_count) return GS_EINVAL;
  *out = c->nets[table];
  return GS_OK;
}
