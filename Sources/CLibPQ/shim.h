// Found on the include path pkg-config gives for libpq
// (`pkg-config --cflags libpq`: -I/usr/include/postgresql on Debian).
#include <libpq-fe.h>
