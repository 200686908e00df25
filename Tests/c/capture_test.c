// The C capture on a real SQLite connection, under AddressSanitizer and
// UBSan (make test-c): rows recorded by the pre-update hook, ignored
// and un-ignored tables, the row budget, commit refusal, a replaced hook.
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include "CGroupSync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(condition)                                           \
  do {                                                             \
    if (!(condition)) {                                            \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__,   \
              #condition);                                         \
      failures++;                                                  \
    }                                                              \
  } while (0)

static void exec(sqlite3 *db, const char *sql) {
  char *error = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &error) != SQLITE_OK) {
    fprintf(stderr, "SQL failed: %s: %s\n", sql, error);
    sqlite3_free(error);
    exit(2);
  }
}

static uint32_t table_index(gs_capture_t *c, const char *name) {
  for (uint32_t i = 0; i < gs_capture_table_count(c); i++) {
    if (strcmp(gs_capture_table_name(c, i), name) == 0) return i;
  }
  return UINT32_MAX;
}

static size_t rows_of(gs_capture_t *c, const char *name) {
  const gs_row_change *rows;
  size_t count = gs_capture_pending(c, &rows);
  uint32_t index = table_index(c, name);
  size_t found = 0;
  for (size_t i = 0; i < count; i++) found += rows[i].table == index;
  return found;
}

// The WAL's commit counter: one per commit, none for a checkpoint that
// restarts the WAL, read by a second connection from its own mapping.
static void test_wal_commit_counter(void) {
  char path[] = "/tmp/gs-walcounter-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  sqlite3 *writer, *reader;
  CHECK(sqlite3_open(path, &writer) == SQLITE_OK);
  exec(writer, "PRAGMA journal_mode = WAL; CREATE TABLE t(v)");
  CHECK(sqlite3_open(path, &reader) == SQLITE_OK);
  uint32_t start = 0, now = 0;
  exec(reader, "BEGIN; SELECT count(*) FROM t");
  CHECK(gs_wal_commit_counter(reader, &start) == GS_OK);
  exec(reader, "COMMIT");
  exec(writer, "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)");
  exec(reader, "BEGIN; SELECT count(*) FROM t");
  CHECK(gs_wal_commit_counter(reader, &now) == GS_OK);
  exec(reader, "COMMIT");
  CHECK(now == start + 2);
  exec(writer, "PRAGMA wal_checkpoint(TRUNCATE)");
  exec(reader, "BEGIN; SELECT count(*) FROM t");
  CHECK(gs_wal_commit_counter(reader, &now) == GS_OK);
  exec(reader, "COMMIT");
  CHECK(now == start + 2);
  // Not WAL: nothing to read.
  sqlite3 *memory;
  CHECK(sqlite3_open(":memory:", &memory) == SQLITE_OK);
  CHECK(gs_wal_commit_counter(memory, &now) == GS_EINVAL);
  sqlite3_close(memory);
  sqlite3_close(reader);
  sqlite3_close(writer);
  char wal[64], shm[64];
  snprintf(wal, sizeof wal, "%s-wal", path);
  snprintf(shm, sizeof shm, "%s-shm", path);
  unlink(wal);
  unlink(shm);
  unlink(path);
}

int main(void) {
  test_wal_commit_counter();
  sqlite3 *db;
  CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK);
  exec(db,
       "CREATE TABLE t(id INTEGER PRIMARY KEY, v);"
       "CREATE TABLE big(v); CREATE TABLE skip_me(v);"
       "CREATE TABLE groupsync_x(v)");
  gs_capture_t *c;
  CHECK(gs_capture_create(db, 0, &c) == GS_OK);
  CHECK(gs_capture_uses_preupdate_hook(c));
  CHECK(gs_is_internal_table("groupsync_x") && gs_is_internal_table("sqlite_stat1"));
  CHECK(!gs_is_internal_table("GroupSync_x") && !gs_is_internal_table("notes"));
  CHECK(gs_capture_ignore_table(c, "skip_me") == GS_OK);

  // Rows, ignored tables, and the temp schema.
  exec(db, "CREATE TEMP TABLE scratch(v)");
  exec(db,
       "BEGIN; INSERT INTO t(id, v) VALUES (1, 'a'), (2, 'b');"
       "UPDATE t SET id = 20 WHERE id = 2; DELETE FROM t WHERE id = 1;"
       "INSERT INTO skip_me VALUES (1); INSERT INTO groupsync_x VALUES (1);"
       "INSERT INTO scratch VALUES (1)");
  const gs_row_change *rows;
  size_t count = gs_capture_pending(c, &rows);
  CHECK(count == 5);  // 2 inserts, a rowid change (delete + insert), a delete
  CHECK(rows_of(c, "t") == 5);
  CHECK(table_index(c, "scratch") == UINT32_MAX);
  CHECK(gs_capture_has_changes(c));
  CHECK(gs_capture_will_commit(c) == GS_CAPTURE_UNSEQUENCED);
  gs_capture_mark_sequenced(c);
  CHECK(gs_capture_will_commit(c) == 0);
  exec(db, "INSERT INTO t(id, v) VALUES (3, 'late')");
  CHECK(gs_capture_will_commit(c) == GS_CAPTURE_UNSEQUENCED);
  exec(db, "COMMIT");
  gs_capture_end_transaction(c);
  CHECK(gs_capture_pending(c, &rows) == 0);
  CHECK(!gs_capture_has_changes(c));

  // Net rows, made in C: per table, sorted, each row by its first and last
  // operation; a rowid change is a delete and an insert.
  exec(db, "INSERT INTO t(id, v) VALUES (5, 'e'), (6, 'f'), (7, 'g')");
  gs_capture_end_transaction(c);
  exec(db,
       "BEGIN; INSERT INTO t(id, v) VALUES (9, 'i'), (8, 'h');"
       "UPDATE t SET v = 'x' WHERE id IN (6, 8); DELETE FROM t WHERE id = 7;"
       "INSERT INTO t(id, v) VALUES (4, 'd'); DELETE FROM t WHERE id = 4;"
       "UPDATE t SET id = 50 WHERE id = 5; INSERT INTO big VALUES (1)");
  CHECK(gs_capture_make_net_rows(c) == GS_OK);
  CHECK(gs_capture_make_net_rows(c) == GS_OK);  // again: nothing new
  gs_net_rows net;
  CHECK(gs_capture_net_rows(c, table_index(c, "t"), &net) == GS_OK);
  CHECK(net.inserted_count == 3 && net.inserted[0] == 8 &&
        net.inserted[1] == 9 && net.inserted[2] == 50);
  CHECK(net.updated_count == 1 && net.updated[0] == 6);
  CHECK(net.deleted_count == 2 && net.deleted[0] == 5 && net.deleted[1] == 7);
  CHECK(net.transient_count == 1 && net.transient[0] == 4);
  CHECK(gs_capture_table_rows(c, table_index(c, "t")) == 9);
  CHECK(gs_capture_net_rows(c, table_index(c, "big"), &net) == GS_OK);
  CHECK(net.inserted_count == 1 && net.updated_count == 0);
  exec(db, "INSERT INTO t(id, v) VALUES (60, 'late')");  // unmade again
  CHECK(gs_capture_net_rows(c, table_index(c, "t"), &net) == GS_EINVAL);
  CHECK(gs_capture_make_net_rows(c) == GS_OK);
  CHECK(gs_capture_net_rows(c, table_index(c, "t"), &net) == GS_OK);
  CHECK(net.inserted_count == 4 && net.inserted[3] == 60);
  exec(db, "ROLLBACK");
  gs_capture_end_transaction(c);
  CHECK(gs_capture_net_rows(c, table_index(c, "t"), &net) == GS_EINVAL);
  // In rowid order, each row once: the lists as they came.
  exec(db, "BEGIN; INSERT INTO t(id, v) VALUES (10, 'a'), (11, 'b');"
           "UPDATE t SET v = 'y' WHERE id = 12");
  exec(db, "INSERT INTO t(id, v) VALUES (12, 'c')");
  CHECK(gs_capture_make_net_rows(c) == GS_OK);
  CHECK(gs_capture_net_rows(c, table_index(c, "t"), &net) == GS_OK);
  CHECK(net.inserted_count == 3 && net.inserted[2] == 12);
  exec(db, "ROLLBACK");
  gs_capture_end_transaction(c);

  // Un-ignored, a table is captured again from its next row; its rows
  // while ignored stay uncaptured. Internal tables stay ignored.
  exec(db, "BEGIN; INSERT INTO skip_me VALUES (2)");
  CHECK(rows_of(c, "skip_me") == 0 && !gs_capture_has_changes(c));
  CHECK(gs_capture_unignore_table(c, "skip_me") == 1);
  CHECK(gs_capture_unignore_table(c, "skip_me") == 0);  // no longer ignored
  CHECK(gs_capture_unignore_table(c, "never_ignored") == 0);
  exec(db, "INSERT INTO skip_me VALUES (3)");
  CHECK(rows_of(c, "skip_me") == 1 && gs_capture_has_changes(c));
  exec(db, "ROLLBACK");
  gs_capture_end_transaction(c);
  CHECK(gs_capture_ignore_table(c, "groupsync_x") == GS_OK);
  CHECK(gs_capture_unignore_table(c, "groupsync_x") == 1);
  exec(db, "INSERT INTO groupsync_x VALUES (2)");
  CHECK(!gs_capture_has_changes(c));
  // Ignored again (twice: one un-ignore forgets the name), also a name
  // not interned yet, which is ignored from its first row.
  CHECK(gs_capture_ignore_table(c, "skip_me") == GS_OK);
  CHECK(gs_capture_ignore_table(c, "skip_me") == GS_OK);
  CHECK(gs_capture_ignore_table(c, "later") == GS_OK);
  exec(db, "CREATE TABLE later(v); INSERT INTO later VALUES (1); INSERT INTO skip_me VALUES (4)");
  CHECK(!gs_capture_has_changes(c));
  CHECK(gs_capture_unignore_table(c, "skip_me") == 1);
  exec(db, "INSERT INTO skip_me VALUES (5)");
  CHECK(rows_of(c, "skip_me") == 1);
  gs_capture_end_transaction(c);
  // The ignored names left are freed with the capture (ASan's leak check).
  CHECK(gs_capture_ignore_table(c, "skip_me") == GS_OK);

  // The row budget: the largest table is invalidated, its rows dropped,
  // later rows of it skipped; memory stays bounded.
  gs_capture_set_row_budget(c, 100);
  exec(db,
       "BEGIN; INSERT INTO t(id, v) VALUES (100, 'x');"
       "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
       "WHERE i < 5000) INSERT INTO big SELECT i FROM n;"
       "INSERT INTO t(id, v) VALUES (101, 'y')");
  CHECK(gs_capture_table_invalidated(c, table_index(c, "big")));
  CHECK(!gs_capture_table_invalidated(c, table_index(c, "t")));
  CHECK(rows_of(c, "big") == 0);
  CHECK(rows_of(c, "t") == 2);
  exec(db, "ROLLBACK");
  gs_capture_end_transaction(c);
  CHECK(!gs_capture_table_invalidated(c, table_index(c, "big")));
  // Nothing of the rolled-back transaction is left for the next one.
  CHECK(!gs_capture_has_changes(c));
  CHECK(gs_capture_pending(c, &rows) == 0);
  CHECK(gs_capture_will_commit(c) == 0);
  gs_capture_set_row_budget(c, 0);

  // Explicit invalidation counts as a change.
  gs_capture_invalidate(c, "t");
  CHECK(gs_capture_has_changes(c));
  CHECK(gs_capture_will_commit(c) == GS_CAPTURE_UNSEQUENCED);
  gs_capture_invalidate(c, "groupsync_x");  // internal: ignored
  gs_capture_end_transaction(c);

  // A replaced hook is detected (and ours put back).
  CHECK(gs_capture_hook_intact(c));
  sqlite3_preupdate_hook(db, NULL, NULL);
  CHECK(!gs_capture_hook_intact(c));
  CHECK(gs_capture_hook_intact(c));

  // The fallback: rows fed by the owner.
  gs_capture_t *fallback;
  CHECK(gs_capture_create(db, GS_CAPTURE_NO_PREUPDATE_HOOK, &fallback) ==
        GS_OK);
  CHECK(!gs_capture_uses_preupdate_hook(fallback));
  gs_capture_record(fallback, SQLITE_INSERT, "main", "t", 7);
  gs_capture_record(fallback, SQLITE_INSERT, "temp", "t", 8);
  CHECK(gs_capture_pending(fallback, &rows) == 1 && rows[0].rowid == 7);
  gs_capture_close(fallback);

  // Detached, the hook is gone and writes are not recorded; freed after
  // the connection is closed, the capture does not touch it (GRDB releases
  // its observers after closing the connection; ASan would flag a use).
  gs_capture_detach(c);
  CHECK(!gs_capture_hook_intact(c));
  CHECK(sqlite3_exec(db, "INSERT INTO t(v) VALUES ('after')", 0, 0, 0) == SQLITE_OK);
  CHECK(gs_capture_pending(c, &rows) == 0);
  sqlite3_close(db);
  gs_capture_free(c);
  if (failures) {
    fprintf(stderr, "capture_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("capture_test: ok\n");
  return 0;
}
