// errors: descriptions of the GS_E* codes.


#include "CGroupSync.h"

const char *gs_strerror(int code) {
  switch (code) {
    case GS_OK:
      return "success";
    case GS_ENOMEM:
      return "out of memory";
    case GS_EINVAL:
      return "invalid argument";
    case GS_ESQLITE:
      return "SQLite error";
    case GS_ECLOSED:
      return "handle is closing or closed";
    case GS_ENOTFOUND:
      return "no such watch";
    case GS_EUV:
      return "libuv error";
    case GS_EAGAIN:
      return "changed while read; try again";
    default:
      // Static, never NULL: callers print it as is.
      return "unknown error";
  }
}
