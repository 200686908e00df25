// Found on the include path pkg-config gives for libpq
// (`pkg-config --cflags libpq`: -I/usr/include/postgresql on Debian).
#include <libpq-fe.h>

// The error fields of PQresultErrorField (postgres_ext.h) are character
// macros ('C'), which Swift does not import: the ones the relay reads, as
// constants of the same values.
static const int GS_PG_DIAG_SQLSTATE = PG_DIAG_SQLSTATE;
static const int GS_PG_DIAG_MESSAGE_DETAIL = PG_DIAG_MESSAGE_DETAIL;
static const int GS_PG_DIAG_MESSAGE_HINT = PG_DIAG_MESSAGE_HINT;
