# GroupSync: `make help` lists the targets.
SWIFT ?= swift
PREFIX ?= /usr/local
CONFIG ?= debug
BIN = .build/$(CONFIG)/groupsync

.PHONY: help deps deps-libpq deps-postgres deps-test demo-hosts build legacy-relay docs test check test-c test-swift test-asan test-tsan check-poll demo lib install install-check bench bench-quick bench-peers bench-scale bench-tools pg-start clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## Install libuv and SQLite headers with apt-get if they are missing
	@if [ ! -f /usr/include/uv.h ] || [ ! -f /usr/include/sqlite3.h ]; then \
	  echo "installing libuv1-dev libsqlite3-dev"; \
	  apt-get update && apt-get install -y libuv1-dev libsqlite3-dev; \
	fi

# The relay (GroupSyncRelay, groupsync-relay) links libpq, and its tests
# start a throw-away PostgreSQL server: Debian's packages, as root.
# SwiftPM finds libpq's headers through pkg-config (libpq.pc). Building
# and installing the relay needs the client library only; its tests and
# the benchmarks need the server too.
deps-libpq: ## Install libpq-dev and pkg-config with apt-get if they are missing
	@if ! pkg-config --exists libpq 2>/dev/null; then \
	  echo "installing libpq-dev pkgconf"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y libpq-dev pkgconf; \
	fi
deps-postgres: deps-libpq ## Install PostgreSQL (and libpq-dev) with apt-get if they are missing
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "installing postgresql"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; \
	fi

# The terminal tests (query --live, status --watch) drive a real terminal
# through tmux; the relay's network tests put hosts in network namespaces
# with iproute2's `ip`; the TLS test makes its certificate authority with
# the openssl tool; the poll transport's tests put a PgBouncer in front of
# their servers. Without them those tests would be skipped.
deps-test: deps-postgres ## Install tmux, iproute2, openssl and PgBouncer (and PostgreSQL) for the tests if missing
	@if [ ! -x /usr/bin/tmux ] || [ ! -x /usr/sbin/ip ] || [ ! -x /usr/bin/openssl ] || [ ! -x /usr/sbin/pgbouncer ]; then \
	  echo "installing tmux iproute2 openssl pgbouncer"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tmux iproute2 openssl pgbouncer; \
	fi
	@# Every listener and relay process holds an inotify instance (libuv's
	@# fs-events); the tests run hundreds side by side, and two runs at once
	@# pass the kernel's default of 128 per user ("Too many open files").
	@if [ "$$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)" -lt 1024 ]; then \
	  echo "raising fs.inotify.max_user_instances to 1024 for the tests"; \
	  sysctl -q -w fs.inotify.max_user_instances=1024 || echo "could not (not root?): tests may run out of inotify instances"; \
	fi

build: deps deps-libpq ## Build the library, the groupsync tool and the relay
	$(SWIFT) build -c $(CONFIG)

# The relay of the commit before log formats were versioned: the
# rolling-upgrade tests run it beside the new one (GROUPSYNC_LEGACY_RELAY).
# Built (debug) from that commit's tree in .build-legacy, once: the stamp
# names the commit it was built from. A shallow clone fetches the commit.
# Nobody edits or debugs it: no index and no debug info (a quarter of its
# CPU).
LEGACY_RELAY_COMMIT = 7c456f44c9bd93105a6b3a859475504031791c88
LEGACY = .build-legacy
LEGACY_RELAY = $(CURDIR)/$(LEGACY)/bin/groupsync-relay
legacy-relay: deps deps-libpq ## Build the relay of LEGACY_RELAY_COMMIT from git history into .build-legacy/bin
	@if [ -x $(LEGACY_RELAY) ] && [ "$$(cat $(LEGACY)/commit 2>/dev/null)" = $(LEGACY_RELAY_COMMIT) ]; then \
	  echo "legacy-relay: up to date ($(LEGACY)/bin/groupsync-relay of $(LEGACY_RELAY_COMMIT))"; exit 0; \
	fi; \
	if ! git cat-file -e '$(LEGACY_RELAY_COMMIT)^{commit}' 2>/dev/null && \
	  ! git fetch --depth=1 origin $(LEGACY_RELAY_COMMIT); then \
	  echo "legacy-relay: the legacy relay's commit $(LEGACY_RELAY_COMMIT) is missing from this clone" \
	    "(a shallow clone?) and could not be fetched: run 'git fetch --unshallow' and make again" >&2; \
	  exit 1; \
	fi; \
	set -ex; rm -rf $(LEGACY)/src $(LEGACY)/commit; mkdir -p $(LEGACY)/src $(LEGACY)/bin; \
	git archive $(LEGACY_RELAY_COMMIT) | tar -x -C $(LEGACY)/src; \
	$(SWIFT) build -c debug --product groupsync-relay --package-path $(LEGACY)/src --scratch-path $(LEGACY)/build \
	  --disable-index-store -Xswiftc -gnone; \
	cp $(LEGACY)/build/debug/groupsync-relay $(LEGACY_RELAY); \
	echo $(LEGACY_RELAY_COMMIT) >$(LEGACY)/commit


# The DocC catalogs of every library product (GroupSync, GroupSyncServices,
# GroupSyncRelay; Sources/TARGET/TARGET.docc) and every symbol's
# documentation, built with swift-docc-plugin; a broken link or a wrong
# parameter name is an error. Open .build/docs/TARGET/index.html through a
# web server, or `docc preview` a catalog.
DOCS = .build/docs
DOC_TARGETS = GroupSync GroupSyncServices GroupSyncRelay
docs: deps deps-libpq ## Build the DocC documentation of every product into .build/docs/TARGET (warnings are errors)
	@mkdir -p $(DOCS)
	@for target in $(DOC_TARGETS); do \
	  echo "documentation: $$target"; \
	  $(SWIFT) package --allow-writing-to-directory $(DOCS) generate-documentation --target $$target \
	    --warnings-as-errors --output-path $(DOCS)/$$target --transform-for-static-hosting \
	    --hosting-base-path $$target || exit 1; \
	done

# The Swift tests, in two test processes per pass: the core's suites (the
# library, the CLI across real processes) and the relay's (across hosts,
# against throw-away PostgreSQL servers). In each, tests run side by side:
# every test has folders, servers, ports and namespaces of its own. Two
# processes, so that neither's waits starve the other's few threads. The
# test bundle runs by itself, as `swift test --skip-build` runs it: two
# `swift test` at once in one build folder trip over its database.
# `make check` runs them plain; `make test` plain, under AddressSanitizer
# and under ThreadSanitizer.
RELAY_TESTS = GroupSyncRelayTests
# The tests need their bundle and the two programs they start, nothing
# else of `swift build --build-tests` (the benchmarks, the plugins' tools:
# 15% of a build's CPU). The sanitizer builds keep line tables only for
# their reports' stacks, which saves another 5%.
TEST_PRODUCTS = groupsync groupsync-relay GroupSyncPackageTests
build_tests = for product in $(TEST_PRODUCTS); do $(SWIFT) build $(1) --product $$product || exit 1; done
LINE_TABLES = -Xswiftc -gline-tables-only -Xcc -gline-tables-only
BUILD_TESTS = $(call build_tests,)
TEST_BUNDLE = debug/GroupSyncPackageTests.xctest --testing-library swift-testing
RUN_TESTS = env NO_COLOR=1 GROUPSYNC_LEGACY_RELAY=$(LEGACY_RELAY) .build/$(TEST_BUNDLE)
# The relay's suites of delivery, catch-up, conflicts, rules, references,
# formats, upgrades, failover and network faults once more with every
# relay on the poll transport, through a PgBouncer in transaction mode in
# front of each test's server (GROUPSYNC_TEST_TRANSPORT=poll; the
# transports' own suite runs in every pass).
POLL_RELAY_SUITES = GroupSyncRelayTests\.(RelayTests|RelayMergeTests|RelayFailoverTests|RelayNetworkTests|RelayFailureTests|RelayUpgradeTests|RelayFleetUpgradeTests|RelayRuleTests|RelayReferenceTests|RelayFormatTests)/
RUN_POLL_TESTS = env GROUPSYNC_TEST_TRANSPORT=poll $(RUN_TESTS) --filter '$(POLL_RELAY_SUITES)'
check: deps deps-test legacy-relay ## The edit-test loop: the Swift tests, plain (no sanitizer, no docs, no install; ~3 min warm)
	$(BUILD_TESTS)
	$(RUN_TESTS) --skip $(RELAY_TESTS)
	$(RUN_TESTS) --filter $(RELAY_TESTS)
test-swift: check
check-poll: deps deps-test legacy-relay ## The relay's suites once more on the poll transport, through PgBouncer (~2 min)
	$(BUILD_TESTS)
	$(RUN_POLL_TESTS)

# The sanitizer passes make their tests' folders (stores, inboxes, hosts,
# PostgreSQL data directories) on a tmpfs where there is one: what they
# check is memory and threads, and on a disk a file's creation and removal
# cost system time (0.1 ms each on ext4 here; the core suites' CPU halves
# on a tmpfs). The plain passes use /tmp, the disk, where users' group
# folders are. Tests/GroupSyncTestSupport/ScratchFolder.swift reads it.
# A folder per clone, which `make test` empties before and after: what a
# crashed test leaves there takes memory, not disk.
SANITIZER_SCRATCH = /dev/shm/groupsync-tests
SANITIZER_TMPDIR := $(shell if [ -w /dev/shm ] && [ "$$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; \
  then echo $(SANITIZER_SCRATCH)/$$(echo '$(CURDIR)' | md5sum | cut -c1-8); else echo /tmp; fi)

# The Swift tests again, built with AddressSanitizer in a build folder of
# their own; the CLI they start is the ASan build too. LeakSanitizer is off:
# Swift reports the weak-reference side tables of process-wide singletons
# still alive at exit, which are not leaks.
ASAN_BUILD = $(call build_tests,--sanitize=address $(LINE_TABLES) --scratch-path .build-asan)
ASAN_TESTS = env NO_COLOR=1 TMPDIR=$(SANITIZER_TMPDIR) GROUPSYNC_LEGACY_RELAY=$(LEGACY_RELAY) GROUPSYNC_BIN=$(CURDIR)/.build-asan/debug/groupsync GROUPSYNC_SANITIZER=address \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 .build-asan/$(TEST_BUNDLE)
test-asan: deps deps-test legacy-relay ## Run the Swift tests under AddressSanitizer (.build-asan)
	$(ASAN_BUILD)
	$(ASAN_TESTS) --skip $(RELAY_TESTS)
	$(ASAN_TESTS) --filter $(RELAY_TESTS)

# ThreadSanitizer sees the library's locks (pthread mutexes, see
# Support/Locked.swift); Synchronization.Mutex's futex it could not. A
# TSan process sleeps a second at exit by default (atexit_sleep_ms), for
# threads still running to report: the tests start hundreds of processes,
# whose races are reported when they happen, not at exit.
# Under TSan every core suite and every relay suite runs but these, which
# exercise the server and the network more than the relay's threads (the
# same code runs under TSan in the other relay suites); plain and ASan run
# them:
# - RelayNetworkTests: network faults (links cut, silent, healed) in
#   network namespaces, and how fast the relay notices them;
# - RelayTLSTests: a TLS server, certificates and sslmode=verify-full;
# - RelayAccessTests: least-privilege roles, grants and row-level security.
TSAN_RELAY_EXCEPTIONS = RelayNetworkTests|RelayTLSTests|RelayAccessTests
TSAN_BUILD = $(call build_tests,--sanitize=thread $(LINE_TABLES) --scratch-path .build-tsan)
TSAN_TESTS = env NO_COLOR=1 TMPDIR=$(SANITIZER_TMPDIR) GROUPSYNC_LEGACY_RELAY=$(LEGACY_RELAY) GROUPSYNC_BIN=$(CURDIR)/.build-tsan/debug/groupsync GROUPSYNC_SANITIZER=thread \
	TSAN_OPTIONS=atexit_sleep_ms=0 .build-tsan/$(TEST_BUNDLE)
test-tsan: deps deps-test legacy-relay ## Run the Swift tests under ThreadSanitizer (.build-tsan)
	$(TSAN_BUILD)
	$(TSAN_TESTS) --skip $(RELAY_TESTS)
	$(TSAN_TESTS) --filter $(RELAY_TESTS) --skip '$(TSAN_RELAY_EXCEPTIONS)'

# `make test` runs its phases side by side where nothing orders them
# (TEST_JOBS at once), and runs them all even if one fails: the three
# builds start together, each in a folder of its own, and each pass's
# tests start once its build is done; the docs and then the install check
# reuse the plain build beside the plain tests (SwiftPM lets one command
# at a time use a build folder; the tests run the bundle and the programs
# it built, which the docs' and the install's builds, with the same
# flags, find up to date and leave as they are). Each phase's output goes
# to the console once it ends, in one piece, and, as it runs, to
# $(TEST_REPORT)/PHASE.log; at the end Scripts/test-summary.sh prints each
# phase's time, the tests each pass ran and the ten slowest tests.
TEST_REPORT = .build/test-report
TIMED = TEST_REPORT=$(TEST_REPORT) TEST_SLOTS=$(TEST_JOBS) Scripts/timed.sh
TEST_JOBS ?= 6
test: deps deps-test ## Run every test: the docs (warnings are errors), C under ASan, Swift (plain, the relay on the poll transport, ASan, TSan), install
	@rm -rf $(TEST_REPORT) $(filter $(SANITIZER_SCRATCH)/%,$(SANITIZER_TMPDIR)) && mkdir -p $(TEST_REPORT)
	@status=0; $(MAKE) --no-print-directory -j$(TEST_JOBS) -k --output-sync=target test-phases || status=$$?; \
	  rm -rf $(filter $(SANITIZER_SCRATCH)/%,$(SANITIZER_TMPDIR)); Scripts/test-summary.sh $(TEST_REPORT); exit $$status

PHASES = build legacy plain-core plain-relay poll-relay docs c install asan-build asan-core asan-relay tsan-build tsan-core tsan-relay
.PHONY: test-phases $(addprefix phase-,$(PHASES))
test-phases: phase-plain-core phase-plain-relay phase-poll-relay phase-tsan-core phase-tsan-relay phase-asan-core phase-asan-relay phase-install phase-c
phase-build:
	@$(TIMED) build bash -c '$(BUILD_TESTS)'
phase-plain-core: phase-build
	@$(TIMED) plain-core $(RUN_TESTS) --skip $(RELAY_TESTS)
phase-plain-relay: phase-build phase-legacy
	@$(TIMED) plain-relay $(RUN_TESTS) --filter $(RELAY_TESTS)
phase-poll-relay: phase-build phase-legacy
	@$(TIMED) poll-relay $(RUN_POLL_TESTS)
phase-docs: phase-build
	@$(TIMED) docs $(MAKE) --no-print-directory docs
phase-install: phase-docs
	@$(TIMED) install $(MAKE) --no-print-directory install-check INSTALL_CONFIG=debug
phase-c:
	@$(TIMED) c $(MAKE) --no-print-directory test-c
# The legacy relay, for the three relay passes, starts beside the builds:
# ~100 CPU-s, a third of one, it is done long before the first of them.
# Started after phase-build it would take the same CPU from the sanitizer
# builds and hold plain-relay up.
phase-legacy:
	@$(TIMED) legacy $(MAKE) --no-print-directory legacy-relay
phase-asan-build:
	@$(TIMED) asan-build bash -c '$(ASAN_BUILD)'
phase-asan-core: phase-asan-build
	@$(TIMED) asan-core $(ASAN_TESTS) --skip $(RELAY_TESTS)
phase-asan-relay: phase-asan-build phase-legacy
	@$(TIMED) asan-relay $(ASAN_TESTS) --filter $(RELAY_TESTS)
phase-tsan-build:
	@$(TIMED) tsan-build bash -c '$(TSAN_BUILD)'
phase-tsan-core: phase-tsan-build
	@$(TIMED) tsan-core $(TSAN_TESTS) --skip $(RELAY_TESTS)
phase-tsan-relay: phase-tsan-build phase-legacy
	@$(TIMED) tsan-relay $(TSAN_TESTS) --filter $(RELAY_TESTS) --skip '$(TSAN_RELAY_EXCEPTIONS)'

test-c: deps ## Run the C capture's test and the watcher's stress test under AddressSanitizer
	@mkdir -p .build
	cc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -g \
	  -I CSupport/include CSupport/capture.c CSupport/walindex.c CSupport/errors.c Tests/c/capture_test.c \
	  -lsqlite3 -o .build/capture_test
	./.build/capture_test
	cc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -g \
	  -I CSupport/include CSupport/watcher.c CSupport/folder_watch.c CSupport/errors.c Tests/c/watcher_test.c \
	  -luv -lpthread -o .build/watcher_test
	./.build/watcher_test

# The capture's randomized differential test, long form (the short seeded
# form runs in test-swift): random schemas and transactions, each checked
# against the whole store read before and after it. GROUPSYNC_FUZZ_SECONDS
# (600), GROUPSYNC_FUZZ_SEED (the first seed; random and printed if unset),
# GROUPSYNC_FUZZ_TRANSACTIONS (per seed, 300); failures, each with a
# minimal reproducer, are printed and written to GROUPSYNC_FUZZ_OUT.
.PHONY: fuzz-capture
fuzz-capture: deps ## Randomized differential test of the capture (GROUPSYNC_FUZZ_SECONDS=600, GROUPSYNC_FUZZ_SEED=N)
	$(SWIFT) build --build-tests --scratch-path .build-fuzz
	GROUPSYNC_FUZZ_SECONDS=$${GROUPSYNC_FUZZ_SECONDS:-600} \
	  $(SWIFT) test --skip-build --scratch-path .build-fuzz --filter 'CaptureDifferentialTests/longRun'

demo: deps ## The main job: listener and writer processes on a fresh group folder
	$(SWIFT) build -c release --product groupsync
	.build/release/groupsync demo --listeners 4 --writers 2 --transactions 100

# Hosts kept in step through PostgreSQL: a throw-away server, three group
# folders with a relay each, writers on each (Scripts/demo-hosts.sh).
demo-hosts: deps deps-postgres ## Three hosts, a relay each, writers on each, through a throw-away PostgreSQL: converged?
	$(SWIFT) build -c release --product groupsync
	$(SWIFT) build -c release --product groupsync-relay
	Scripts/demo-hosts.sh .build/release

# INSTALL_CONFIG (release) is the configuration `make lib` and `make
# install` build and install.
INSTALL_CONFIG ?= release
lib: deps ## Build libGroupSyncShared.so (release)
	$(SWIFT) build -c $(INSTALL_CONFIG) --product GroupSyncShared

# `groupsync relay` runs the groupsync-relay beside it: both are installed.
install: lib deps-libpq ## Install the shared library, its modules (GroupSync, GRDB, swift-log, swift-metrics), the CLI and the relay under PREFIX
	$(SWIFT) build -c $(INSTALL_CONFIG) --product groupsync
	$(SWIFT) build -c $(INSTALL_CONFIG) --product groupsync-relay
	install -d $(PREFIX)/lib $(PREFIX)/bin $(PREFIX)/include/CGroupSync $(PREFIX)/include/GRDBSQLite $(PREFIX)/lib/swift/linux
	install -m 755 .build/$(INSTALL_CONFIG)/libGroupSyncShared.so $(PREFIX)/lib/
	install -m 755 .build/$(INSTALL_CONFIG)/groupsync .build/$(INSTALL_CONFIG)/groupsync-relay $(PREFIX)/bin/
	# The library links GRDB, swift-log and swift-metrics in; their modules are needed to
	# import GroupSync and to use GRDB's API on its store.
	cp -R .build/$(INSTALL_CONFIG)/Modules/GroupSync.swiftmodule .build/$(INSTALL_CONFIG)/Modules/GRDB.swiftmodule \
	  .build/$(INSTALL_CONFIG)/Modules/CoreMetrics.swiftmodule .build/$(INSTALL_CONFIG)/Modules/Metrics.swiftmodule \
	  .build/$(INSTALL_CONFIG)/Modules/Logging.swiftmodule $(PREFIX)/lib/swift/linux/
	install -m 644 .build/checkouts/GRDB.swift/Sources/GRDBSQLite/shim.h \
	  .build/checkouts/GRDB.swift/Sources/GRDBSQLite/module.modulemap $(PREFIX)/include/GRDBSQLite/
	install -m 644 CSupport/include/CGroupSync.h $(PREFIX)/include/CGroupSync/
	printf 'module CGroupSync {\n  header "CGroupSync.h"\n  link "sqlite3"\n  link "uv"\n  export *\n}\n' \
	  > $(PREFIX)/include/CGroupSync/module.modulemap

# `make test` checks the install of the plain debug build it made already
# (INSTALL_CONFIG=debug): the same steps, without a release build of its own.
CHECK = .build/install-check
install-check: deps ## Install into .build/install-check, then build and run a program against it, and the installed relay
	@rm -rf $(CHECK) && mkdir -p $(CHECK)
	$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(CHECK)/prefix INSTALL_CONFIG=$(INSTALL_CONFIG)
	swiftc Tests/install/main.swift -I $(CHECK)/prefix/lib/swift/linux -I $(CHECK)/prefix/include \
	  -I $(CHECK)/prefix/include/GRDBSQLite \
	  -L $(CHECK)/prefix/lib -lGroupSyncShared -Xlinker -rpath -Xlinker $(CURDIR)/$(CHECK)/prefix/lib \
	  -o $(CHECK)/client
	$(CHECK)/client $(CHECK)/group
	$(CHECK)/prefix/bin/groupsync relay --help | grep -q 'USAGE: groupsync-relay'

clean: ## Remove build products (also the sanitizer, bench and legacy relay build folders)
	rm -rf .build .build-asan .build-tsan .build-fuzz .build-bench $(LEGACY)

# The benchmarks: groupsync-bench, an executable of the package in no
# product (so `make install` ships none of it), built in BENCH_BUILD
# (.build), e.g. BENCH_BUILD=.build-bench to keep clear of another build.
BENCH_BUILD ?= .build
BENCH = $(BENCH_BUILD)/release/groupsync-bench
bench-tools: deps-postgres
	$(SWIFT) build -c release --product groupsync-bench --scratch-path $(BENCH_BUILD)
	$(SWIFT) build -c release --product groupsync-relay --scratch-path $(BENCH_BUILD)
	@mkdir -p bench/out
	cc -O2 -Wall -Wextra -o bench/out/floor Benchmarks/floor.c

# The PostgreSQL peer: a throw-away server (Benchmarks/postgres.sh: Debian's
# packages installed if missing, initdb in bench/out/pg, a unix socket there
# and no TCP, run as the user postgres), stopped and removed afterwards.
PG_FOLDER = $(CURDIR)/bench/out/pg
PG_PORT ?= 54329
PG_CONNINFO = host=$(PG_FOLDER) port=$(PG_PORT) user=postgres dbname=postgres
PGNOTIFY_CC = cc -O2 -Wall -Wextra -I/usr/include/postgresql -o bench/out/pgnotify Benchmarks/pgnotify.c -lpq
pg-start:
	Benchmarks/postgres.sh start $(PG_FOLDER) $(PG_PORT)
	$(PGNOTIFY_CC)

# Without a PostgreSQL server (no root, no apt), `make bench` runs the rest
# and notes that the peers phase was skipped.
# The scale phase (32-128 hosts, notify and poll through PgBouncer:
# Benchmarks/pgbouncer.sh, installed if missing) raises the inotify instance
# limit and the server's max_connections for its run, as root, and restores
# them.
bench: deps bench-tools ## Benchmarks vs the floor, PostgreSQL NOTIFY, hosts through relays (2 to 128), polling, raw SQLite and plain GRDB (12-14 min here, < 20): bench/results.json
	cc -O2 -Wall -Wextra -shared -fPIC -o bench/out/vgshim.so Benchmarks/vgshim.c
	@if Benchmarks/postgres.sh start $(PG_FOLDER) $(PG_PORT) && $(PGNOTIFY_CC); then \
	  set -- --pgnotify bench/out/pgnotify --postgres-conninfo "$(PG_CONNINFO)"; \
	else echo "bench: no PostgreSQL server: the peers phase is skipped"; set --; fi; \
	$(BENCH) run --floor bench/out/floor --valgrind-shim bench/out/vgshim.so \
	  --work-folder bench/out --output bench/results.json "$$@"; \
	status=$$?; Benchmarks/postgres.sh stop $(PG_FOLDER); exit $$status

bench-peers: deps bench-tools pg-start ## GroupSync beside PostgreSQL LISTEN/NOTIFY, data_version polling and inotify on -wal (N=1,4,16; ~2 min)
	$(BENCH) run --phases peers,polling --listener-counts 1,4,16 --floor bench/out/floor \
	  --work-folder bench/out --output bench/results-peers.json \
	  --pgnotify bench/out/pgnotify --postgres-conninfo "$(PG_CONNINFO)"; \
	  status=$$?; Benchmarks/postgres.sh stop $(PG_FOLDER); exit $$status

bench-scale: deps bench-tools pg-start ## Only the scale phase: 32, 64, 128 hosts, notify and poll (PgBouncer), fsync off and on (~4 min): bench/results-scale.json
	$(BENCH) run --phases scale --floor bench/out/floor --work-folder bench/out --output bench/results-scale.json \
	  --pgnotify bench/out/pgnotify --postgres-conninfo "$(PG_CONNINFO)"; \
	  status=$$?; Benchmarks/postgres.sh stop $(PG_FOLDER); exit $$status

bench-quick: deps bench-tools ## The same benchmarks with fewer samples (< 1 min): bench/results-quick.json
	$(BENCH) run --quick --floor bench/out/floor --work-folder bench/out \
	  --output bench/results-quick.json
