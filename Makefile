# EntityStore: make demo | test | lint | bench | fuzz | docs | gtk-demo | gtk-test | gtk-bench
#
# `make demo`, `make test` and `make bench` install what they need (liblmdb-dev; lmdb-utils for the tests that
# check that Debian's own tools read our stores; libsqlite3-dev for the benchmarks' SQLite side; sqlite3 and python3
# for the tests that load store-inspect's CSV as those tools read it; libpq-dev and postgresql for the sync module
# and its tests, which start a scratch PostgreSQL cluster of their own) with apt-get
# when it is missing, through sudo when not root.

SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := liblmdb-dev lmdb-utils

.PHONY: all deps build demo test doc-snippets test-under-load lint format bench bench-quick bench-build fuzz fuzz-build docs \
	share stress tsan asan clean gtk-deps gtk-demo gtk-test gtk-bench

all: build

deps:
	@missing=""; \
	pkg-config --exists lmdb 2>/dev/null || missing="$$missing liblmdb-dev"; \
	command -v mdb_stat >/dev/null 2>&1 || missing="$$missing lmdb-utils"; \
	pkg-config --exists sqlite3 2>/dev/null || missing="$$missing libsqlite3-dev"; \
	command -v sqlite3 >/dev/null 2>&1 || missing="$$missing sqlite3"; \
	command -v python3 >/dev/null 2>&1 || missing="$$missing python3"; \
	pkg-config --exists libpq 2>/dev/null || missing="$$missing libpq-dev"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	$(SWIFT) build

demo: deps
	$(SWIFT) run store-demo

# The tests at their reduced size (TestScale; `make stress` runs them in full), then every Swift code block of the
# README, the DocC articles and the documentation comments compiled as written.
test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test
	python3 scripts/check-doc-snippets.py

doc-snippets: deps
	$(SWIFT) build
	python3 scripts/check-doc-snippets.py

# `make test` beside one CPU burner per core, then on a single core (RUNS rounds of both, 1 by default).
test-under-load: deps
	bash scripts/test-under-load.sh $(RUNS)

# store-inspect's man page and bash/zsh completions, generated from its help (a test checks they are current).
share:
	$(SWIFT) build --product store-inspect
	mkdir -p share/man/man1 share/completions
	.build/debug/store-inspect manpage > share/man/man1/store-inspect.1
	.build/debug/store-inspect completion bash > share/completions/store-inspect.bash
	.build/debug/store-inspect completion zsh > share/completions/_store-inspect

LINTED := Package.swift Sources Tools Tests Fuzz Benchmarks/Package.swift Benchmarks/Sources Examples/GTKDemo/Package.swift \
	Examples/GTKDemo/Sources/entitystore-gtk

lint:
	$(SWIFT) format lint --strict --recursive $(LINTED)

format:
	$(SWIFT) format --in-place --recursive $(LINTED)

# The GTK 4 example (Examples/GTKDemo, a package of its own: the library keeps no GTK dependency). GTK's headers, and
# for the checks an X server without a screen (Xvfb), xwd and ImageMagick for the screenshots, xdotool for keys.
gtk-deps: deps
	@missing=""; \
	pkg-config --exists gtk4 2>/dev/null || missing="$$missing libgtk-4-dev"; \
	command -v Xvfb >/dev/null 2>&1 || missing="$$missing xvfb"; \
	command -v xwd >/dev/null 2>&1 || missing="$$missing x11-apps"; \
	command -v convert >/dev/null 2>&1 || missing="$$missing imagemagick"; \
	command -v xdotool >/dev/null 2>&1 || missing="$$missing xdotool"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# The demo window on a store of 200 books (GTK_DEMO_STORE to choose another): needs a display.
gtk-demo: gtk-deps
	@if [ -z "$${DISPLAY:-}$${WAYLAND_DISPLAY:-}" ]; then \
		echo "make gtk-demo opens a window: run it in a desktop session (no DISPLAY or WAYLAND_DISPLAY is set)"; exit 1; fi
	cd Examples/GTKDemo && $(SWIFT) build && .build/debug/entitystore-gtk $(if $(GTK_DEMO_STORE),--store $(GTK_DEMO_STORE))

# The example's scripted checks under Xvfb (SAVES saves of another process, 1,000 by default).
gtk-test: gtk-deps
	bash scripts/gtk-test.sh

# The example's speed at 100,000 books: the first frame after launch, and a batch of 1% of them applied and drawn.
gtk-bench: gtk-deps
	bash scripts/gtk-bench.sh

bench: deps
	cd Benchmarks && $(SWIFT) build -c release && .build/release/entitystore-bench $(BENCH_ARGS)

bench-quick: deps
	cd Benchmarks && $(SWIFT) build -c release && .build/release/entitystore-bench --quick

# libFuzzer on the record decoder, the history decoder, the predicate parser and the CLI's argument parser:
# RUNS executions each (1,000,000 by default; FUZZ_SECONDS caps each target's time, as CI does); crashing inputs are
# kept in Fuzz/crashers and replayed by the tests.
fuzz: deps
	bash scripts/fuzz.sh

# The fuzz targets built, not run (CI builds them beside the benchmarks: each release build is mostly one compiler
# process at a time, so the two share the machine's cores).
fuzz-build: deps
	bash scripts/fuzz.sh build

bench-build: deps
	cd Benchmarks && $(SWIFT) build -c release

# The whole suite at full size (TestScale): every randomized, kill, crash and multi-process test runs its full
# number of rounds, seeds, kills and copies; `make test` runs the same tests at a reduced size.
stress: deps
	$(SWIFT) build --build-tests
	ENTITYSTORE_STRESS=1 $(SWIFT) test

# The concurrency, multi-context and multi-process tests under ThreadSanitizer.
tsan: deps
	$(SWIFT) test --scratch-path .build-tsan --sanitize=thread --filter 'EnvironmentTests|HandleTests|MultiProcessTests|MergeTests|CrossProcessTests|ObservationTests|PublisherTests|EngineCorrectnessTests|ControllerTests|ConcurrencyTests|IdentityCacheTests|PropertyLevelRaceTests|ToOneRaceTests|EndOfTurnTests'

# The whole suite under AddressSanitizer (helpers and CLIs the tests start are built with it too). Leak reports are
# off: the runtime's and Foundation's caches live until exit, and a report would fail each child process.
asan: deps
	ASAN_OPTIONS=detect_leaks=0 $(SWIFT) test --scratch-path .build-asan --sanitize=address

docs:
	bash scripts/docs.sh

clean:
	$(SWIFT) package clean
