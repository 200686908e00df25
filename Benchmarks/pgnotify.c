// pgnotify: PostgreSQL LISTEN/NOTIFY, measured the way GroupSync's
// benchmark measures GroupSync (a peer a user would choose between).
//
// One writer (this process) and N listener processes (forked), each with a
// connection of its own over the server's unix socket. Per message the
// writer runs BEGIN and NOTIFY, stamps CLOCK_REALTIME and sends COMMIT:
// the server signals listeners while it commits, before the writer's
// COMMIT returns, so the stamp is taken when the writer asks to commit (the
// benchmark compares GroupSync from the same point: its change set's
// committedAt, stamped inside the transaction before its COMMIT). Each
// listener blocks in poll(2) on its socket, reads the notification
// (PQconsumeInput, PQnotifies) and stamps CLOCK_REALTIME.
//
// Output, one JSON object on stdout, as floor.c prints: per message the
// latency at the last listener (max over listeners of delivered -
// committed), the writer's COMMIT round trip (publishNs), and the listeners' CPU time
// (getrusage) summed over listeners.
//
// --ship: the server's irreducible part of a relay's shipment (S), with
// no relay in the way. The writer runs the relay's shipping function,
// gs_ship_2, as a named prepared statement (PQprepare once, PQexecPrepared
// a message) of the text the relay sends (SharedLog+Shipping.swift,
// `ship(_:_:settled:)`; the relay sends it unnamed, parsed each time),
// not settled, retention none, no deferred bookkeeping riding along: one
// statement, its own transaction, so its round trip is the commit. Each
// call ships a new row: the newest one-row entry HOST shipped to
// GROUP/STORE (its body, format, table, columns and data, read once at
// start), with a fresh global ID (36 characters, like a UUID, swapped
// into the body too, so the payload keeps its size), base 0, and `through`
// one past the host's shipped place; the answer must be `shipped` (else
// this program dies naming it). The writer stamps CLOCK_REALTIME just before sending the
// call; listeners LISTEN on the relay's channel (gs_changes,
// SharedLog.channel) and match each notification to its call by the
// position its payload starts with ("GROUP/STORE:POSITION\n...",
// SharedLog+Hint.swift), which the call answers (`pos`). publishNs is the
// call's round trip. The output adds "mode":"ship", the group, store,
// host, the first position and the body's bytes.
//
// The group must be on the server (gs_clock's row for the store, gs_host's
// for the host): run a real relay for HOST once on a fresh group folder
// whose store has a table and one row, until it prints "connected" and
// ships the row ({"shipped":...}), then stop it (SIGTERM). No relay of
// HOST may run meanwhile: the writer takes the relay's advisory lock for
// HOST and refuses to start without it. E.g.:
//
//   groupsync init DIR/app --schema item.sql   (CREATE TABLE item(...))
//   groupsync exec DIR/app "INSERT INTO item(...) VALUES (...)"
//   groupsync-relay DIR/app --postgres CONNINFO --host h --group G
//       --poll-interval 1          (until "shipped"; then SIGTERM)
//   pgnotify --ship --conninfo CONNINFO --group G --host h --listeners 1
//       --count 300 --interval-us 5000 --warmup 20
//
// Each run ships count + warmup more entries to the group; runs may
// follow one another on it.
//
// Build: cc -O2 -I/usr/include/postgresql -o pgnotify pgnotify.c -lpq
//
// Usage: pgnotify --conninfo CONNINFO --listeners N --count K
//                 [--interval-us U] [--warmup W]
//        pgnotify --ship --conninfo CONNINFO --group G --host H [--store S]
//                 [--listeners N] --count K [--interval-us U] [--warmup W]
//        (--store defaults to main, --listeners to 1 with --ship)

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"

#define MAX_LISTENERS 64

// The listeners, so that a writer that dies takes them along (they would
// wait for notifications that never come).
static pid_t children[MAX_LISTENERS];
static int child_count;
static pid_t parent;

// Exits with status 2, killing the listeners first (in the writer).
static void quit(void) {
  if (getpid() == parent)
    for (int l = 0; l < child_count; l++) kill(children[l], SIGKILL);
  exit(2);
}

static void die(const char *what, PGconn *connection) {
  fprintf(stderr, "pgnotify: %s: %s\n", what,
          connection ? PQerrorMessage(connection) : strerror(errno));
  quit();
}

static PGconn *connect_or_die(const char *conninfo) {
  PGconn *connection = PQconnectdb(conninfo);
  if (PQstatus(connection) != CONNECTION_OK) die("connect", connection);
  return connection;
}

static void command(PGconn *connection, const char *sql) {
  PGresult *result = PQexec(connection, sql);
  if (PQresultStatus(result) != PGRES_COMMAND_OK) die(sql, connection);
  PQclear(result);
}

// Runs `sql` with text parameters; its rows, or death.
static PGresult *rows(PGconn *connection, const char *sql, int count, const char *const *values) {
  PGresult *result = PQexecParams(connection, sql, count, NULL, values, NULL, NULL, 0);
  if (PQresultStatus(result) != PGRES_TUPLES_OK) die(sql, connection);
  return result;
}

static int64_t cpu_time_ns(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return ((int64_t)usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000000 +
         ((int64_t)usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000;
}

// Sleeps until `interval_us` after the last wake-up (none when 0).
static void pace(struct timespec *next, long interval_us) {
  if (interval_us <= 0) return;
  next->tv_nsec += interval_us * 1000;
  while (next->tv_nsec >= 1000000000) {
    next->tv_nsec -= 1000000000;
    next->tv_sec++;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL) == EINTR) {}
}

// The next notification on `connection`, blocking in poll(2) on its
// socket until one comes (PQfreemem it).
static PGnotify *next_notification(PGconn *connection) {
  PGnotify *notify;
  while ((notify = PQnotifies(connection)) == NULL) {
    struct pollfd wait = {.fd = PQsocket(connection), .events = POLLIN};
    if (poll(&wait, 1, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll", NULL);
    }
    if (!PQconsumeInput(connection)) die("PQconsumeInput", connection);
  }
  return notify;
}

// A listener: woken by its socket, stamps each notification.
static void listener_main(const char *conninfo, long total, int64_t *delivered,
                          int64_t *cpu_ns, int ready_fd) {
  PGconn *connection = connect_or_die(conninfo);
  command(connection, "LISTEN bench");
  if (write(ready_fd, "r", 1) != 1) die("write ready", NULL);
  close(ready_fd);
  long seen = 0;
  while (seen < total) {
    PGnotify *notify = next_notification(connection);
    long seq = atol(notify->extra);
    if (seq >= 0 && seq < total) {
      delivered[seq] = now_ns(CLOCK_REALTIME);
      seen++;
    }
    PQfreemem(notify);
  }
  *cpu_ns = cpu_time_ns();
  PQfinish(connection);
  exit(0);
}

// MARK: --ship

// The relay's channel (SharedLog.channel) and the statement it ships by
// (SharedLog+Shipping.swift, `ship(_:_:settled:)`), word for word.
#define SHIP_CHANNEL "gs_changes"
static const char ship_sql[] =
    "SELECT outcome, pos, group_format FROM gs_ship_2($1, $2, $3, $4::bigint, $5, $6::bigint,\n"
    "  $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[],\n"
    "  $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], "
    "$18::boolean, $19::smallint)";

// What a shipment of this run writes, from the host's newest one-row
// entry on the server; and where the log and the host stand.
struct ship {
  const char *group, *store, *host;
  char *body, *format, *table, *gid, *columns, *data;
  long long head;     // gs_clock.seq: the log's last position
  long long shipped;  // gs_host.shipped_seq: the host's shipped place
};

static char *copy(const char *text) {
  char *copied = strdup(text);
  if (!copied) die("strdup", NULL);
  return copied;
}

// A one-element array literal, as the relay writes them
// (PostgresArray.literal): the element quoted, `"` and `\` escaped.
static char *array1(const char *element) {
  size_t length = strlen(element);
  char *text = malloc(2 * length + 5), *at = text;
  if (!text) die("malloc", NULL);
  *at++ = '{';
  *at++ = '"';
  for (const char *c = element; *c; c++) {
    if (*c == '"' || *c == '\\') *at++ = '\\';
    *at++ = *c;
  }
  *at++ = '"';
  *at++ = '}';
  *at = '\0';
  return text;
}

// The one row `sql` answers for the group, store and host in `keys`, or
// the program ends saying `why`.
static PGresult *one_row(PGconn *connection, const char *sql, const char *const keys[3], const char *why) {
  PGresult *result = rows(connection, sql, 3, keys);
  if (PQntuples(result) != 1) {
    PQclear(result);
    PQfinish(connection);
    fprintf(stderr, "pgnotify: %s\n", why);
    exit(2);
  }
  return result;
}

// Takes the relay's advisory lock for the host (SharedLog.lockHost), held
// until the writer's session ends, and reads what the run ships.
static void load_ship(PGconn *connection, struct ship *ship) {
  size_t length = strlen(ship->group) + strlen(ship->host) + 2;
  char *key = malloc(length);
  if (!key) die("malloc", NULL);
  snprintf(key, length, "%s\001%s", ship->group, ship->host);
  const char *lock[] = {key};
  // A relay stopped just now may still hold it for a moment: its backend
  // ends after its client went away. Up to 10 s.
  for (int tries = 0;; tries++) {
    PGresult *result = rows(
        connection, "SELECT pg_try_advisory_lock(hashtext('groupsync-relay'), hashtext($1))", 1, lock);
    int taken = strcmp(PQgetvalue(result, 0, 0), "t") == 0;
    PQclear(result);
    if (taken) break;
    if (tries == 200) {
      PQfinish(connection);
      fprintf(stderr, "pgnotify: a relay for host '%s' of group '%s' is running (it holds its "
                      "advisory lock): stop it first\n", ship->host, ship->group);
      exit(2);
    }
    usleep(50000);
  }
  PGresult *result;
  free(key);

  const char *keys[] = {ship->group, ship->store, ship->host};
  char why[1024];
  snprintf(why, sizeof why, "the server has no store '%s' of group '%s' with host '%s' (gs_clock, "
           "gs_host): run a relay for the host once first", ship->store, ship->group, ship->host);
  result = one_row(connection,
                   "SELECT k.seq, h.shipped_seq FROM gs_clock k JOIN gs_host h ON h.grp = k.grp "
                   "AND h.store = k.store WHERE k.grp = $1 AND k.store = $2 AND h.host = $3",
                   keys, why);
  ship->head = atoll(PQgetvalue(result, 0, 0));
  ship->shipped = atoll(PQgetvalue(result, 0, 1));
  PQclear(result);

  snprintf(why, sizeof why, "host '%s' shipped no one-row entry to store '%s' of group '%s': "
           "run its relay once on a store with one row first", ship->host, ship->store, ship->group);
  result = one_row(connection,
                   "SELECT c.body, c.format, min(r.tbl), min(r.gid), min(r.columns), min(r.data) "
                   "FROM gs_change c JOIN gs_row r ON r.grp = c.grp AND r.store = c.store AND r.seq = c.seq "
                   "WHERE c.grp = $1 AND c.store = $2 AND c.origin_host = $3 AND r.data IS NOT NULL "
                   "GROUP BY c.seq, c.body, c.format HAVING count(*) = 1 ORDER BY c.seq DESC LIMIT 1",
                   keys, why);
  ship->body = copy(PQgetvalue(result, 0, 0));
  ship->format = copy(PQgetvalue(result, 0, 1));
  ship->table = copy(PQgetvalue(result, 0, 2));
  ship->gid = copy(PQgetvalue(result, 0, 3));
  ship->columns = copy(PQgetvalue(result, 0, 4));
  ship->data = copy(PQgetvalue(result, 0, 5));
  PQclear(result);
  const char *named = strstr(ship->body, ship->gid);
  if (!named || strstr(named + 1, ship->gid)) {
    fprintf(stderr, "pgnotify: the entry's body does not name its row's global ID %s once: %s\n",
            ship->gid, ship->body);
    exit(2);
  }
}

// A listener of --ship: stamps each notification about GROUP/STORE past
// `after`, as (position, arrival) pairs in the order they come.
static void ship_listener_main(const char *conninfo, const char *prefix, long long after, long total,
                               int64_t *arrivals, int64_t *cpu_ns, int ready_fd) {
  PGconn *connection = connect_or_die(conninfo);
  command(connection, "LISTEN " SHIP_CHANNEL);
  if (write(ready_fd, "r", 1) != 1) die("write ready", NULL);
  close(ready_fd);
  size_t prefix_length = strlen(prefix);
  long seen = 0;
  while (seen < total) {
    PGnotify *notify = next_notification(connection);
    int64_t at = now_ns(CLOCK_REALTIME);
    // "GROUP/STORE:POSITION", then "\n" and the entry when it fitted.
    const char *digits = notify->extra + prefix_length;
    long long position = 0;
    int count = 0;
    if (strncmp(notify->extra, prefix, prefix_length) == 0)
      for (; digits[count] >= '0' && digits[count] <= '9' && count < 18; count++)
        position = position * 10 + (digits[count] - '0');
    if (count > 0 && (digits[count] == '\0' || digits[count] == '\n') && position > after) {
      arrivals[2 * seen] = position;
      arrivals[2 * seen + 1] = at;
      seen++;
    }
    PQfreemem(notify);
  }
  *cpu_ns = cpu_time_ns();
  PQfinish(connection);
  exit(0);
}

static void print_json_string(const char *text) {
  putchar('"');
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    if (*c == '"' || *c == '\\') printf("\\%c", *c);
    else if (*c < 0x20) printf("\\u%04x", *c);
    else putchar(*c);
  }
  putchar('"');
}

// Starts `listeners` processes, each running `run(l)` (which exits), and
// waits until each is listening.
static void start_listeners(int listeners, void (*run)(int listener, int ready_fd, void *context),
                            void *context) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) die("pipe", NULL);
  for (int l = 0; l < listeners; l++) {
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid == 0) {
      close(ready[0]);
      run(l, ready[1], context);
      exit(0);
    }
    children[child_count++] = pid;
  }
  close(ready[1]);
  for (int l = 0; l < listeners; l++) {
    char byte;
    if (read(ready[0], &byte, 1) != 1) die("a listener did not start", NULL);
  }
  close(ready[0]);
}

struct ship_listening {
  const char *conninfo, *prefix;
  long long after;
  long total;
  int listeners;
  int64_t *arrivals;  // 2 * total a listener, then one CPU time a listener
};

static void run_ship_listener(int l, int ready_fd, void *context) {
  struct ship_listening *listening = context;
  ship_listener_main(listening->conninfo, listening->prefix, listening->after, listening->total,
                     listening->arrivals + (size_t)l * 2 * listening->total,
                     listening->arrivals + (size_t)listening->listeners * 2 * listening->total + l, ready_fd);
}

static int ship_main(const char *conninfo, struct ship *ship, int listeners, long count, long warmup,
                     long interval_us) {
  long total = warmup + count;
  PGconn *writer = connect_or_die(conninfo);
  load_ship(writer, ship);
  PGresult *prepared = PQprepare(writer, "gs_ship", ship_sql, 19, NULL);
  if (PQresultStatus(prepared) != PGRES_COMMAND_OK) die("PQprepare gs_ship_2", writer);
  PQclear(prepared);

  size_t prefix_length = strlen(ship->group) + strlen(ship->store) + 3;
  char *prefix = malloc(prefix_length);
  if (!prefix) die("malloc", NULL);
  snprintf(prefix, prefix_length, "%s/%s:", ship->group, ship->store);
  size_t bytes = ((size_t)listeners * 2 * total + listeners) * sizeof(int64_t);
  int64_t *arrivals = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (arrivals == MAP_FAILED) die("mmap", NULL);
  struct ship_listening listening = {conninfo, prefix, ship->head, total, listeners, arrivals};
  start_listeners(listeners, run_ship_listener, &listening);

  int64_t *sent = calloc(total, sizeof *sent), *call_ns = calloc(total, sizeof *call_ns);
  long long *positions = calloc(total, sizeof *positions);
  if (!sent || !call_ns || !positions) die("calloc", NULL);
  // The body with a fresh global ID in place of the row's: before it,
  // the ID, after it.
  size_t before = (size_t)(strstr(ship->body, ship->gid) - ship->body);
  const char *after = ship->body + before + strlen(ship->gid);
  size_t body_size = before + 36 + strlen(after) + 1;
  char *body = malloc(body_size), gid[40], through[24];
  if (!body) die("malloc", NULL);
  char *w_table = array1(ship->table), *w_columns = array1(ship->columns), *w_data = array1(ship->data);
  unsigned run = (unsigned)(now_ns(CLOCK_REALTIME) ^ ((int64_t)getpid() << 16));
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long seq = 0; seq < total; seq++) {
    pace(&next, interval_us);
    long long place = ship->shipped + 1 + seq;
    snprintf(through, sizeof through, "%lld", place);
    snprintf(gid, sizeof gid, "%08x-0000-4000-8000-%012llx", run, place & 0xffffffffffffLL);
    snprintf(body, body_size, "%.*s%s%s", (int)before, ship->body, gid, after);
    char w_gid[48];
    snprintf(w_gid, sizeof w_gid, "{\"%s\"}", gid);
    const char *values[19] = {
        ship->group, ship->store, ship->host, through, body, NULL /* retention: none */,
        w_table, w_gid, "{\"0\"}" /* base */, w_columns, w_data,
        "{}", "{}", "{}", "{}", "{}", "{}" /* no conflicts */, "false" /* not settled */, ship->format};
    int64_t start = now_ns(CLOCK_MONOTONIC);
    sent[seq] = now_ns(CLOCK_REALTIME);
    PGresult *result = PQexecPrepared(writer, "gs_ship", 19, values, NULL, NULL, 0);
    call_ns[seq] = now_ns(CLOCK_MONOTONIC) - start;
    if (PQresultStatus(result) != PGRES_TUPLES_OK) die("gs_ship_2", writer);
    if (PQntuples(result) != 1 || strcmp(PQgetvalue(result, 0, 0), "shipped") != 0) {
      fprintf(stderr, "pgnotify: gs_ship_2 of through %lld answered '%s' (pos %s), not 'shipped'\n", place,
              PQntuples(result) == 1 ? PQgetvalue(result, 0, 0) : "no row",
              PQntuples(result) == 1 ? PQgetvalue(result, 0, 1) : "-");
      quit();
    }
    positions[seq] = atoll(PQgetvalue(result, 0, 1));
    PQclear(result);
    if (positions[seq] <= (seq ? positions[seq - 1] : ship->head)) {
      fprintf(stderr, "pgnotify: position %lld after %lld\n", positions[seq],
              seq ? positions[seq - 1] : ship->head);
      quit();
    }
  }
  PQfinish(writer);

  int failed = wait_children(children, listeners, 60);
  if (failed) {
    fprintf(stderr, "pgnotify: %d listener(s) failed or timed out\n", failed);
    return 1;
  }

  // Arrivals by message, matched by position.
  long long first = ship->head + 1, span = positions[total - 1] - ship->head;
  long *message = malloc((size_t)span * sizeof *message);
  int64_t *delivered = calloc((size_t)listeners * total + listeners, sizeof *delivered);
  if (!message || !delivered) die("malloc", NULL);
  for (long long p = 0; p < span; p++) message[p] = -1;
  for (long seq = 0; seq < total; seq++) message[positions[seq] - first] = seq;
  for (int l = 0; l < listeners; l++) {
    const int64_t *pairs = arrivals + (size_t)l * 2 * total;
    for (long i = 0; i < total; i++) {
      long long p = pairs[2 * i] - first;
      if (p >= 0 && p < span && message[p] >= 0) delivered[(size_t)l * total + message[p]] = pairs[2 * i + 1];
    }
    for (long seq = 0; seq < total; seq++)
      if (delivered[(size_t)l * total + seq] == 0) {
        fprintf(stderr, "pgnotify: listener %d was not told of position %lld (another shipper?)\n", l,
                positions[seq]);
        return 1;
      }
    delivered[(size_t)listeners * total + l] = arrivals[(size_t)listeners * 2 * total + l];
  }

  printf("{\"mode\":\"ship\",\"group\":");
  print_json_string(ship->group);
  printf(",\"store\":");
  print_json_string(ship->store);
  printf(",\"host\":");
  print_json_string(ship->host);
  printf(",\"firstPosition\":%lld,\"bodyBytes\":%zu,\"watchers\":%d,\"count\":%ld,\"intervalUs\":%ld,",
         positions[0], strlen(body), listeners, count, interval_us);
  print_measurements(delivered, listeners, total, warmup, sent, call_ns);
  free(message);
  free(delivered);
  free(sent);
  free(call_ns);
  free(positions);
  free(body);
  free(w_table);
  free(w_columns);
  free(w_data);
  free(prefix);
  free(ship->body);
  free(ship->format);
  free(ship->table);
  free(ship->gid);
  free(ship->columns);
  free(ship->data);
  munmap(arrivals, bytes);
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: pgnotify --conninfo CONNINFO --listeners N --count K "
                  "[--interval-us U] [--warmup W]\n"
                  "       pgnotify --ship --conninfo CONNINFO --group G --host H [--store S] "
                  "[--listeners N] --count K [--interval-us U] [--warmup W]\n");
  exit(64);
}

struct listening {
  const char *conninfo;
  long total;
  int listeners;
  int64_t *delivered;
};

static void run_listener(int l, int ready_fd, void *context) {
  struct listening *listening = context;
  listener_main(listening->conninfo, listening->total, listening->delivered + (size_t)l * listening->total,
                listening->delivered + (size_t)listening->listeners * listening->total + l, ready_fd);
}

int main(int argc, char **argv) {
  const char *conninfo = NULL;
  int listeners = 0, ship_mode = 0;
  long count = 0, warmup = 20, interval_us = 0;
  struct ship ship = {.store = "main"};
  parent = getpid();
  for (int i = 1; i < argc; i += 2) {
    if (strcmp(argv[i], "--ship") == 0) {
      ship_mode = 1;
      i--;
      continue;
    }
    if (i + 1 >= argc) usage();
    const char *value = argv[i + 1];
    if (strcmp(argv[i], "--conninfo") == 0) conninfo = value;
    else if (strcmp(argv[i], "--listeners") == 0) listeners = atoi(value);
    else if (strcmp(argv[i], "--count") == 0) count = atol(value);
    else if (strcmp(argv[i], "--warmup") == 0) warmup = atol(value);
    else if (strcmp(argv[i], "--interval-us") == 0) interval_us = atol(value);
    else if (ship_mode && strcmp(argv[i], "--group") == 0) ship.group = value;
    else if (ship_mode && strcmp(argv[i], "--store") == 0) ship.store = value;
    else if (ship_mode && strcmp(argv[i], "--host") == 0) ship.host = value;
    else usage();
  }
  if (ship_mode && listeners == 0) listeners = 1;
  if (!conninfo || listeners < 1 || listeners > MAX_LISTENERS || count < 1 || warmup < 0)
    usage();
  if (ship_mode) {
    if (!ship.group || !ship.host) usage();
    return ship_main(conninfo, &ship, listeners, count, warmup, interval_us);
  }

  long total = warmup + count;
  // delivered[l * total + seq], then one CPU time per listener.
  size_t bytes = ((size_t)listeners * total + listeners) * sizeof(int64_t);
  int64_t *delivered = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (delivered == MAP_FAILED) die("mmap", NULL);
  int64_t *committed = calloc(total, sizeof *committed);
  int64_t *commit_ns = calloc(total, sizeof *commit_ns);
  if (!committed || !commit_ns) die("calloc", NULL);

  struct listening listening = {conninfo, total, listeners, delivered};
  start_listeners(listeners, run_listener, &listening);

  PGconn *writer = connect_or_die(conninfo);
  char sql[64];
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long seq = 0; seq < total; seq++) {
    pace(&next, interval_us);
    command(writer, "BEGIN");
    snprintf(sql, sizeof sql, "NOTIFY bench, '%ld'", seq);
    command(writer, sql);
    int64_t start = now_ns(CLOCK_MONOTONIC);
    committed[seq] = now_ns(CLOCK_REALTIME);
    command(writer, "COMMIT");
    commit_ns[seq] = now_ns(CLOCK_MONOTONIC) - start;
  }
  PQfinish(writer);

  int failed = wait_children(children, listeners, 60);
  if (failed) {
    fprintf(stderr, "pgnotify: %d listener(s) failed or timed out\n", failed);
    return 1;
  }

  printf("{\"watchers\":%d,\"count\":%ld,\"intervalUs\":%ld,", listeners, count, interval_us);
  print_measurements(delivered, listeners, total, warmup, committed, commit_ns);
  free(committed);
  free(commit_ns);
  munmap(delivered, bytes);
  return 0;
}
