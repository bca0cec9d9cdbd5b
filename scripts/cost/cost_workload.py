#!/usr/bin/env python3
"""A workload for the cost model (docs/cost.md, "Cost model") beside the telemetry events: a steady topic
of JSON click events of about RECORD_BYTES each, as a full MSK event (up to the 6 MB payload cap
or the mapping's 10,000-record batch), and two pipeline files for it that differ only in their
partition spec: `day(event_time)` and `hour(event_time)` × `bucket(16, user_id)`.

    scripts/cost/cost_workload.py OUT_DIR [RECORD_BYTES=1024] [UNSET_FIELDS=0]

Writes OUT_DIR/event.json, OUT_DIR/clicks.schema.json, OUT_DIR/day.toml, OUT_DIR/hour_bucket.toml.
The records' event times span ten seconds (a batching window of a 1 MB/s topic). UNSET_FIELDS
adds that many optional fields to the schema that no record sets, as a wide schema's rarely used
fields are (each a column of nulls in every file).
"""

from __future__ import annotations

import base64
import datetime
import json
import random
import sys
from pathlib import Path

MSK_PAYLOAD_CAP = 6_000_000
BATCH_SIZE = 10_000
PARTITIONS = 4
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "A click event",
    "type": "object",
    "required": ["event_time", "user_id", "page"],
    "properties": {
        "event_time": {"type": "string", "format": "date-time"},
        "user_id": {"type": "integer"},
        "session_id": {"type": "string"},
        "page": {"type": "string"},
        "referrer": {"type": ["string", "null"]},
        "user_agent": {"type": "string"},
        "duration_ms": {"type": "integer"},
        "attributes": {"type": "string", "description": "free text that brings a record to its size"},
    },
}

PIPELINE = """namespace = "cost"

[[pipeline]]
table = "clicks"
topics = ["clicks"]
format = "json"
schema = "clicks.schema.json"
partition_by = {spec}
event_time = "event_time"
"""


def record(rng: random.Random, i: int, size: int) -> bytes:
    ms = START_MS + i * 10_000 // BATCH_SIZE
    seconds, millis = divmod(ms, 1000)
    when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
    row = {
        "event_time": when,
        "user_id": rng.randrange(1_000_000),
        "session_id": f"{rng.getrandbits(64):016x}",
        "page": f"/products/{rng.randrange(5000)}",
        "referrer": rng.choice([None, "https://example.com/search", "https://example.org/"]),
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)",
        "duration_ms": rng.randrange(60_000),
        "attributes": "",
    }
    short = len(json.dumps(row).encode())
    words = []
    while short + sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(["color=red", "size=m", "ab=b", "cart=3", "promo=none", "lang=en"]))
    row["attributes"] = " ".join(words)
    return json.dumps(row).encode()


def main(args: list[str]) -> None:
    if not args:
        sys.exit(__doc__)
    out = Path(args[0])
    size = int(args[1]) if len(args) > 1 else 1024
    unset = int(args[2]) if len(args) > 2 else 0
    schema = json.loads(json.dumps(SCHEMA))
    for i in range(unset):
        schema["properties"][f"extra_{i:03d}"] = {"type": ["string", "integer", "number"][i % 3]}
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    records: dict[str, list[dict]] = {f"clicks-{p}": [] for p in range(PARTITIONS)}
    # The event's JSON without records, then each record's share, until the cap.
    total = 200
    for i in range(BATCH_SIZE):
        value = base64.b64encode(record(rng, i, size)).decode()
        p = i % PARTITIONS
        entry = {"topic": "clicks", "partition": p, "offset": len(records[f"clicks-{p}"]), "timestamp": START_MS,
                 "timestampType": "CREATE_TIME", "value": value, "headers": []}
        cost = len(json.dumps(entry)) + 2
        if total + cost > MSK_PAYLOAD_CAP:
            break
        total += cost
        records[f"clicks-{p}"].append(entry)
    event = {"eventSource": "aws:kafka", "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/c/1",
             "bootstrapServers": "127.0.0.1:9092", "records": records}
    (out / "event.json").write_text(json.dumps(event))
    (out / "clicks.schema.json").write_text(json.dumps(schema, indent=2))
    (out / "day.toml").write_text(PIPELINE.format(spec='["day(event_time)"]'))
    (out / "hour_bucket.toml").write_text(PIPELINE.format(spec='["hour(event_time)", "bucket(16, user_id)"]'))
    count = sum(len(v) for v in records.values())
    print(f"{count} records of ~{size} B, event {len(json.dumps(event)):,} bytes", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
