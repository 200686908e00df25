// folder_watch: GroupSync's rules for a watched folder (internal to
// CGroupSync; the public API is in include/CGroupSync.h).
//
// The watcher (watcher.c) runs the libuv loop and owns the handles; it asks
// these functions what an inotify event or a rescan-timer tick means for a
// folder: which events are worth reporting (GS_WATCH_ARRIVALS), whether the
// folder itself was removed, and whether a tick needs a rescan or the
// folder has not changed since the last one. They run on the loop thread
// and make no libuv call.
#ifndef CGROUPSYNC_FOLDER_WATCH_H
#define CGROUPSYNC_FOLDER_WATCH_H

#include <time.h>

#include "CGroupSync.h"

#ifdef __clang__
#pragma clang assume_nonnull begin
#endif

/// One watched folder: the caller's descriptor of it, what the watch asks
/// for, and what the folder looked like at the last rescan passed on.
typedef struct {
  int dirfd;       // held open by the caller until the watch is removed
  unsigned flags;  // GS_WATCH_*
  struct timespec scanned_mtime, scanned_ctime, scanned_at;
} gs__folder_t;

void gs__folder_init(gs__folder_t *folder, int dirfd, unsigned flags);

/// What to report of an inotify event about `*filename` (NULL: unknown),
/// given as GS_EVENT_RENAME and GS_EVENT_CHANGE bits: the events to pass
/// on, 0 to drop it. Sets `*filename` to NULL when the event turned out to
/// be about the folder itself (its removal, reported as GS_EVENT_RESCAN).
int gs__folder_filter(const gs__folder_t *folder,
                      const char *_Nullable *_Nonnull filename, int events);

/// What a tick of the rescan timer reports: GS_EVENT_RESCAN, or
/// GS_EVENT_TICK if the folder has not changed since the last rescan.
int gs__folder_tick(gs__folder_t *folder);

#ifdef __clang__
#pragma clang assume_nonnull end
#endif

#endif  // CGROUPSYNC_FOLDER_WATCH_H
