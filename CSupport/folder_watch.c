// folder_watch: GroupSync's rules for a watched folder (see folder_watch.h);
// the loop thread, its commands and the libuv handles are watcher.c's.
//
// A watch with GS_WATCH_ARRIVALS is told only of entries that appear:
// inotify's UV_CHANGE (a write, or a link count changed by a writer linking
// the same file into another inbox) is dropped, and so is a UV_RENAME
// whose entry is gone (a removal, a rename out), which one fstatat through
// the folder's descriptor tells. So a listener's own removals and the other
// inboxes' links never wake its consumer.
//
// A folder that was itself removed is reported as a rescan. Held open by
// the caller, it gets no inotify event of its own (IN_DELETE_SELF waits for
// the last descriptor to close), but its removal moves its ctime, so the
// next tick of the rescan timer reports a rescan; an event that finds the
// folder with no link left reports one too.
//
// A folder whose times have not moved since the last rescan costs an fstat
// per tick of the rescan timer, not a rescan, once its times had settled
// (gs_file_time_settled) when that rescan read them.


#include "folder_watch.h"

#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>

// How long a file time may stand still while its file changes, in whole
// seconds (see gs_file_time_settled): FAT's two-second times are the
// coarsest Linux writes; it covers one-second times and the coarse clock's
// tick with a second to spare. The one definition of that fact: FanOut's
// listing of listeners/ uses it too.
enum { GS__FILE_TIME_STILL_SECONDS = 2 };

int gs_file_time_settled(struct timespec stamp, struct timespec now) {
  return stamp.tv_sec + GS__FILE_TIME_STILL_SECONDS < now.tv_sec;
}

void gs__folder_init(gs__folder_t *folder, int dirfd, unsigned flags) {
  *folder = (gs__folder_t){.dirfd = dirfd, .flags = flags};
}

// Whether the folder was removed: held open, it has no link left (or
// cannot be looked at any more).
static int gs__folder_gone(const gs__folder_t *folder) {
  struct stat st;
  if (fstat(folder->dirfd, &st) != 0)
    return 1;
  return st.st_nlink == 0;
}

int gs__folder_filter(const gs__folder_t *folder,
                      const char *_Nullable *_Nonnull filename, int events) {
  if (!(folder->flags & GS_WATCH_ARRIVALS))
    return events;
  if (!(events & GS_EVENT_RENAME) || *filename == NULL)
    return 0;  // a write, or a link count changed: nothing arrived
  // Through the descriptor: no path walk, and the entry of this very
  // folder whatever its path became. An event about the folder itself
  // (moved, or deleted once no descriptor holds it) is named after the
  // path libuv watches, /proc/self/fd/N: "N", not an entry.
  struct stat st;
  if (fstatat(folder->dirfd, *filename, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return GS_EVENT_RENAME;
  if (gs__folder_gone(folder)) {
    *filename = NULL;  // the folder itself went
    return GS_EVENT_RESCAN;
  }
  return 0;  // a removal or a rename out
}

static int gs__same_time(struct timespec a, struct timespec b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

int gs__folder_tick(gs__folder_t *folder) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct stat st;
  if (fstat(folder->dirfd, &st) == 0) {
    // An entry added just after the last rescan may have left the times as
    // they were: skip only if they had settled when that rescan read them.
    int unchanged = gs__same_time(st.st_mtim, folder->scanned_mtime) &&
                    gs__same_time(st.st_ctim, folder->scanned_ctime) &&
                    gs_file_time_settled(st.st_mtim, folder->scanned_at) &&
                    gs_file_time_settled(st.st_ctim, folder->scanned_at);
    if (unchanged)
      return GS_EVENT_TICK;
    folder->scanned_mtime = st.st_mtim;
    folder->scanned_ctime = st.st_ctim;
  }
  folder->scanned_at = now;
  return GS_EVENT_RESCAN;
}
