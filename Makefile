# GroupSync: `make help` lists the targets.
SWIFT ?= swift
PREFIX ?= /usr/local
CONFIG ?= debug
BIN = .build/$(CONFIG)/groupsync

.PHONY: help deps build test test-c demo lib install install-check bench bench-quick clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## Install libuv and SQLite headers with apt-get if they are missing
	@if [ ! -f /usr/include/uv.h ] || [ ! -f /usr/include/sqlite3.h ]; then \
	  echo "installing libuv1-dev libsqlite3-dev"; \
	  apt-get update && apt-get install -y libuv1-dev libsqlite3-dev; \
	fi

build: deps ## Build the library and the groupsync tool
	$(SWIFT) build -c $(CONFIG)

test: deps test-c install-check ## Run every test (C layer, library, CLI across real processes, install)
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

test-c: deps ## Run the C watcher's stress test under AddressSanitizer
	@mkdir -p .build
	cc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -g \
	  -I CSupport/include CSupport/watcher.c CSupport/errors.c Tests/c/watcher_test.c \
	  -luv -lpthread -o .build/watcher_test
	./.build/watcher_test

demo: deps ## The main job: listener and writer processes on a fresh group folder
	$(SWIFT) build -c release --product groupsync
	.build/release/groupsync demo --listeners 4 --writers 2 --transactions 100

lib: deps ## Build libGroupSyncShared.so (release)
	$(SWIFT) build -c release --product GroupSyncShared

install: lib ## Install the shared library, its modules and the CLI under PREFIX
	$(SWIFT) build -c release --product groupsync
	install -d $(PREFIX)/lib $(PREFIX)/bin $(PREFIX)/include/CGroupSync $(PREFIX)/lib/swift/linux
	install -m 755 .build/release/libGroupSyncShared.so $(PREFIX)/lib/
	install -m 755 .build/release/groupsync $(PREFIX)/bin/
	# The library links swift-log in; its module is needed to import GroupSync.
	cp -R .build/release/Modules/GroupSync.swiftmodule .build/release/Modules/Logging.swiftmodule $(PREFIX)/lib/swift/linux/
	install -m 644 CSupport/include/CGroupSync.h $(PREFIX)/include/CGroupSync/
	printf 'module CGroupSync {\n  header "CGroupSync.h"\n  link "sqlite3"\n  link "uv"\n  export *\n}\n' \
	  > $(PREFIX)/include/CGroupSync/module.modulemap

CHECK = .build/install-check
install-check: deps ## Install into .build/install-check, then build and run a program against it
	@rm -rf $(CHECK) && mkdir -p $(CHECK)
	$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(CHECK)/prefix
	swiftc Tests/install/main.swift -I $(CHECK)/prefix/lib/swift/linux -I $(CHECK)/prefix/include \
	  -L $(CHECK)/prefix/lib -lGroupSyncShared -Xlinker -rpath -Xlinker $(CURDIR)/$(CHECK)/prefix/lib \
	  -o $(CHECK)/client
	$(CHECK)/client $(CHECK)/group

clean: ## Remove build products
	rm -rf .build

bench: deps ## Benchmarks vs the floor, polling and plain SQLite (< 10 min): table, bench/results.json
	$(SWIFT) build -c release
	@mkdir -p bench/out
	cc -O2 -Wall -Wextra -o bench/out/floor bench/floor.c
	cc -O2 -Wall -Wextra -shared -fPIC -o bench/out/vgshim.so bench/vgshim.c
	.build/release/groupsync bench --floor bench/out/floor --valgrind-shim bench/out/vgshim.so \
	  --work-folder bench/out --output bench/results.json

bench-quick: deps ## The same benchmarks with fewer samples (< 1 min): bench/results-quick.json
	$(SWIFT) build -c release
	@mkdir -p bench/out
	cc -O2 -Wall -Wextra -o bench/out/floor bench/floor.c
	.build/release/groupsync bench --quick --floor bench/out/floor --work-folder bench/out \
	  --output bench/results-quick.json
