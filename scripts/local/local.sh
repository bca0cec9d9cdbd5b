#!/usr/bin/env bash
# `make local`: the whole loop on one machine, everything on 127.0.0.1.
#   Kafka (Tansu, or KAFKA=external for a broker you run, e.g. docker compose)
#   -> the ingest function under `cargo lambda watch` (rebuilt when the code changes)
#   <- `icestream esm` (the event source mapping, invoking it over the Lambda invoke API)
#   <- `icestream produce` (telemetry, with warts)
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:?BIN = the icestream binary}
VENV=${VENV:-$HOME/.cache/icestream-venv}
KAFKA=${KAFKA:-tansu}
KAFKA_PORT=${KAFKA_PORT:-9092}
LAMBDA_PORT=${LAMBDA_PORT:-9000}
TOPIC=${TOPIC:-vehicle-telemetry}
FORMAT=${FORMAT:-proto}
RATE=${RATE:-2000}
COUNT=${COUNT:-0}
mkdir -p "${WAREHOUSE:=./warehouse}"
WAREHOUSE=$(cd "$WAREHOUSE" && pwd)
export STATE_DIR=${STATE_DIR:-.local} KAFKA_PORT VENV TOPICS=$TOPIC
mkdir -p "$STATE_DIR"

pids=()
stop_all() {
  trap - EXIT INT TERM
  echo; echo "local: stopping"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  [[ $KAFKA == tansu ]] && scripts/local/kafka-broker.sh stop
  exit 0
}
trap stop_all EXIT INT TERM

[[ $KAFKA == tansu ]] && scripts/local/kafka-broker.sh start

# Built as `cargo lambda watch` runs it (`cargo run --bin ingest`), so the first batch does not wait.
cargo build --manifest-path Cargo.toml --bin ingest

# The function reads its configuration from ICESTREAM_* in its environment, as on AWS.
# --timeout: the first invocation waits while the function builds.
PATH=$VENV/bin:$PATH cargo lambda watch -A 127.0.0.1 -P "$LAMBDA_PORT" --timeout 900 \
  --env-var "ICESTREAM_WAREHOUSE=$WAREHOUSE" --env-var "ICESTREAM_SOURCE=$FORMAT" \
  >"$STATE_DIR/lambda-watch.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$LAMBDA_PORT") 2>/dev/null && break; sleep 0.1; done

# Tansu holds a new group's join for half the session timeout; other brokers refuse below 6 s.
session_timeout_ms=6000
[[ $KAFKA == tansu ]] && session_timeout_ms=2000
"$BIN" esm bootstrap="127.0.0.1:$KAFKA_PORT" topic="$TOPIC" group=icestream-local \
  invoke="http://127.0.0.1:$LAMBDA_PORT" batch_size=10000 batching_window_ms=1000 session_timeout_ms=$session_timeout_ms \
  on_failure_dir="$STATE_DIR/esm-failures" &
pids+=($!)
"$BIN" produce bootstrap="127.0.0.1:$KAFKA_PORT" topic="$TOPIC" format="$FORMAT" rate="$RATE" count="$COUNT" corrupt=true &
pids+=($!)

cat <<MSG
local: kafka 127.0.0.1:$KAFKA_PORT ($KAFKA), function under cargo lambda watch on 127.0.0.1:$LAMBDA_PORT
       (log: $STATE_DIR/lambda-watch.log; the first batch waits for it to build), producing $FORMAT at $RATE records/s.
The table: $WAREHOUSE (SQL catalog $WAREHOUSE/catalog.db, catalog icestream, namespace bigdata,
           tables vehicle_telemetry and vehicle_telemetry_dead_letter). Query it with
  $BIN report vehicle_telemetry warehouse=$WAREHOUSE
  $VENV/bin/python -c "from pyiceberg.catalog.sql import SqlCatalog; \\
    c = SqlCatalog('icestream', uri='sqlite:///$WAREHOUSE/catalog.db', warehouse='file://$WAREHOUSE'); \\
    print(c.load_table('bigdata.vehicle_telemetry').scan().to_arrow().group_by('model').aggregate([('speed_kmh', 'mean')]))"
Ctrl-C stops everything.
MSG
wait "${pids[@]}"
