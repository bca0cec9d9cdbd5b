#!/usr/bin/env bash
# `make bench-local`: the local end-to-end rate. A Tansu broker on 127.0.0.1 takes RECORDS proto
# telemetry records (`icestream produce`, as fast as it goes), then `icestream esm` with the
# pipeline in process (invoke=inprocess) drains the topic in batches of up to 10,000 into the
# embedded catalog, with a 2 s session (Tansu answers a new group's join after half of it).
# Prints records/s of the drain (broker poll -> event -> ingest -> commit) and of the producer
# alone, for scale. Then freshness end to end (scripts/bench/bench_freshness.py): produce timestamp to
# the moment a reader polling the table first reads each record, p50/p99/max, direct and queued,
# at MSK's default batching and the cost-optimal one. Figures are printed, never asserted.
#
# Usage: scripts/bench/bench_local.sh ICESTREAM_BIN   (env: RECORDS=200000, WINDOW_MS=500, SESSION_TIMEOUT_MS=2000, KAFKA_PORT=random, PARTITIONS=4,
#        FRESH_RATE=1000 records/s, FRESH_SECONDS=30 per case, FRESHNESS=0 to skip it)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:?usage: scripts/bench/bench_local.sh ICESTREAM_BIN}
RECORDS=${RECORDS:-200000}
# A port of its own per run: a broker just stopped on the same port may still reset connections.
BENCH_TOPIC=bench-telemetry FRESH_TOPICS=fresh-direct-default,fresh-direct-optimal,fresh-queued-default,fresh-queued-optimal
export KAFKA_PORT=${KAFKA_PORT:-$((19100 + RANDOM % 800))} TOPICS="$BENCH_TOPIC ${FRESH_TOPICS//,/ }" PARTITIONS=${PARTITIONS:-4}
export STATE_DIR=$(mktemp -d)
trap 'scripts/local/kafka-broker.sh stop >/dev/null 2>&1 || true; [[ -n ${KEEP:-} ]] || rm -rf "$STATE_DIR"' EXIT
scripts/local/kafka-broker.sh start >/dev/null
now() { date +%s.%N; }

t0=$(now)
RUST_LOG=warn "$BIN" produce bootstrap="127.0.0.1:$KAFKA_PORT" topic=$BENCH_TOPIC format=proto count="$RECORDS" >/dev/null
t1=$(now)
RUST_LOG=${RUST_LOG:-warn} "$BIN" esm bootstrap="127.0.0.1:$KAFKA_PORT" topic=$BENCH_TOPIC group=bench invoke=inprocess drain=true \
  batch_size=10000 batching_window_ms=${WINDOW_MS:-500} session_timeout_ms=${SESSION_TIMEOUT_MS:-2000} on_failure_dir="$STATE_DIR/failures" \
  warehouse="$STATE_DIR/wh" source=proto >"$STATE_DIR/esm.out" 2>"$STATE_DIR/esm.log" || { tail -20 "$STATE_DIR/esm.log"; exit 1; }
cat "$STATE_DIR/esm.out" >&2
t2=$(now)
echo "produce: $RECORDS records in $(printf %.2f "$(echo "$t1 - $t0" | bc)") s ($(echo "$RECORDS / ($t1 - $t0)" | bc) records/s)"
echo "esm (in process) -> ingest -> commit: $RECORDS records in $(printf %.2f "$(echo "$t2 - $t1" | bc)") s" \
  "($(echo "$RECORDS / ($t2 - $t1)" | bc) records/s)"

if [[ ${FRESHNESS:-1} != 0 ]]; then
  "${VENV:-$HOME/.cache/icestream-venv}/bin/python" scripts/bench/bench_freshness.py "$BIN" --bootstrap "127.0.0.1:$KAFKA_PORT" \
    --state "$STATE_DIR/freshness" --topics "$FRESH_TOPICS" --rate "${FRESH_RATE:-1000}" --seconds "${FRESH_SECONDS:-30}"
fi
