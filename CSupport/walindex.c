// walindex: the WAL's commit counter, read from SQLite's own mapping of the
// wal-index (see gs_wal_commit_counter in CGroupSync.h).

#include <string.h>

#include "CGroupSync.h"

// The wal-index header: two copies of WalIndexHdr, 48 bytes each
// (walformat.html, "The WAL-Index Header").
enum { HEADER_SIZE = 48, CHANGE_OFFSET = 8, INIT_OFFSET = 12, REGION_SIZE = 32768 };

int gs_wal_commit_counter(sqlite3 *db, uint32_t *counter) {
  sqlite3_file *file = NULL;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) !=
      SQLITE_OK) {
    return GS_ESQLITE;
  }
  if (file == NULL || file->pMethods == NULL || file->pMethods->iVersion < 2 ||
      file->pMethods->xShmMap == NULL) {
    return GS_EINVAL;
  }
  volatile void *region = NULL;
  // bExtend 0: the region the connection mapped already, never a new one.
  int rc = file->pMethods->xShmMap(file, 0, REGION_SIZE, 0, &region);
  if (rc != SQLITE_OK || region == NULL) return GS_EINVAL;
  unsigned char first[HEADER_SIZE];
  unsigned char second[HEADER_SIZE];
  // SQLite writes the second copy, then the first; read in that order's
  // reverse, with a barrier, as its readers do (walIndexTryHdr).
  const volatile unsigned char *header = region;
  for (int i = 0; i < HEADER_SIZE; i++) first[i] = header[i];
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  for (int i = 0; i < HEADER_SIZE; i++) second[i] = header[HEADER_SIZE + i];
  if (memcmp(first, second, HEADER_SIZE) != 0) return GS_EAGAIN;
  if (first[INIT_OFFSET] != 1) return GS_EINVAL;
  memcpy(counter, first + CHANGE_OFFSET, sizeof *counter);
  return GS_OK;
}
