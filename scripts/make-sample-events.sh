#!/usr/bin/env bash
# Regenerate events/: small deterministic MSK events for `cargo lambda invoke --data-file` and
# the tests. Usage: scripts/make-sample-events.sh PATH-TO-icestream
set -euo pipefail
bin=${1:?path to the icestream binary}
cd "$(dirname "$0")/.."
common=(records=40 partitions=2 seed=2026 start_ms=1767225600000 topic=vehicle-telemetry)
for fmt in proto avro json; do
  "$bin" gen-event format=$fmt "${common[@]}" out=events/msk-$fmt.json >/dev/null
done
# The corrupt sample: three JSON values replaced by the kinds of bad input we dead-letter
# (malformed JSON, a missing required field, an empty value), at known offsets.
python3 - <<'PY'
import base64, json
event = json.load(open("events/msk-json.json"))
bad = [b'{"vehicle_id": 7, "event_time": ', b'{"vehicle_id": 7, "model": "x"}', b""]
records = [r for part in event["records"].values() for r in part]
for record, value in zip(records[::13], bad):
    record["value"] = base64.b64encode(value).decode()
json.dump(event, open("events/msk-json-corrupt.json", "w"), indent=1)
PY
for f in events/msk-*.json; do python3 -m json.tool "$f" > "$f.tmp" && mv "$f.tmp" "$f"; done
