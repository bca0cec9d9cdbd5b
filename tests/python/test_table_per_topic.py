"""A table per topic with Kafka metadata columns, read back by PyIceberg and DuckDB: one
pipeline entry with `topic_pattern` and `table = "raw_{topic}"` ingests an event carrying three
topics into three tables; the second event is ingested after the pipeline asked for
`kafka_columns`, so each table gains them in the commit of its new rows (the older rows read
null there); a replay of both events adds nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import readers

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
NAMESPACE = "cluster"
UTC = dt.timezone.utc
TOPICS = {"shop.Orders": "raw_shop_orders", "shop.refunds-eu": "raw_shop_refunds_eu", "shop.clicks": "raw_shop_clicks"}
SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}}


def icestream(*args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, f"icestream {' '.join(args)} failed ({out.returncode}): {out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def record(topic: str, offset: int) -> dict:
    """What the producer sent for `offset` of `topic`: value, key, timestamp, type, headers."""
    return {
        "value": {"id": offset, "note": f"{topic} #{offset}"},
        "key": None if offset % 3 == 0 else f"k{offset}".encode(),
        "timestamp": 1714564800000 + 1000 * offset,
        "timestampType": "LOG_APPEND_TIME" if offset % 2 else "CREATE_TIME",
        "headers": {"trace": bytes([offset, 255]), "tenant": b"eu"},
    }


def event(offsets: range) -> dict:
    records: dict[str, list[dict]] = {}
    for topic in TOPICS:
        items = []
        for offset in offsets:
            r = record(topic, offset)
            items.append({
                "topic": topic, "partition": 0, "offset": offset, "timestamp": r["timestamp"], "timestampType": r["timestampType"],
                "key": None if r["key"] is None else base64.b64encode(r["key"]).decode(),
                "value": base64.b64encode(json.dumps(r["value"]).encode()).decode(),
                "headers": [{name: [b - 256 if b > 127 else b for b in value]} for name, value in r["headers"].items()],
            })
        records[f"{topic}-0"] = items
    return {"eventSource": "aws:kafka", "records": records}


def normalize(row: dict) -> dict:
    """One shape for PyIceberg's and DuckDB's rows (maps as dicts, timestamps in UTC)."""
    out = dict(row)
    headers = out.get("kafka_headers")
    if isinstance(headers, list):
        out["kafka_headers"] = {k: v for k, v in headers}
    elif isinstance(headers, dict) and set(headers) == {"key", "value"}:
        out["kafka_headers"] = dict(zip(headers["key"], headers["value"]))
    for k, v in list(out.items()):
        if isinstance(v, (bytes, bytearray, memoryview)):
            out[k] = bytes(v)
        if isinstance(v, dict):
            out[k] = {hk: bytes(hv) for hk, hv in v.items()}
        if isinstance(v, dt.datetime):
            out[k] = v.astimezone(UTC)
    return out


def expected(topic: str, offset: int, with_columns: bool) -> dict:
    r = record(topic, offset)
    row = {**r["value"], "kafka_topic": topic, "kafka_partition": 0, "kafka_offset": offset}
    if with_columns:
        row |= {
            "kafka_timestamp": dt.datetime.fromtimestamp(r["timestamp"] / 1000, UTC),
            "kafka_timestamp_type": r["timestampType"],
            "kafka_key": r["key"],
            "kafka_headers": r["headers"],
        }
    else:
        row |= {"kafka_timestamp": None, "kafka_timestamp_type": None, "kafka_key": None, "kafka_headers": None}
    return row


def test_a_pattern_writes_a_table_per_topic_with_its_kafka_columns(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    (tmp_path / "event.schema.json").write_text(json.dumps(SCHEMA))
    pipelines = tmp_path / "pipelines.toml"
    head = f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "raw_{{topic}}"\ntopic_pattern = "shop\\\\..+"\nformat = "json"\nschema = "event.schema.json"\n'
    pipelines.write_text(head)
    args = [f"warehouse={wh}", f"pipelines={pipelines}"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(event(range(0, 4))))
    second.write_text(json.dumps(event(range(4, 10))))

    summary = icestream("ingest", str(first), *args)
    assert (summary["written"], summary["tables"]) == (12, 3), summary
    pipelines.write_text(head + 'kafka_columns = ["timestamp", "timestamp_type", "key", "headers"]\n')
    summary = icestream("ingest", str(second), *args)
    assert (summary["written"], summary["tables"], summary["schema_changes"]) == (18, 3, 3), summary

    for topic, table in TOPICS.items():
        want = [expected(topic, o, o >= 4) for o in range(10)]
        py = sorted((normalize(r) for r in readers.pyiceberg_sql_table(wh, NAMESPACE, table).scan().to_arrow().to_pylist()), key=lambda r: r["kafka_offset"])
        duck = sorted((normalize(r) for r in readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, table)).to_pylist()), key=lambda r: r["kafka_offset"])
        assert py == want, (table, py[:2], want[:2])
        assert duck == want, (table, duck[:2], want[:2])
        snapshots = readers.pyiceberg_sql_table(wh, NAMESPACE, table).metadata.snapshots
        assert len(snapshots) == 2, "the columns came with the second batch's rows, not a commit of their own"

    # A replay of both events adds nothing.
    for path in (first, second):
        summary = icestream("ingest", str(path), *args)
        assert summary["written"] == 0 and summary["skipped_replay"] == summary["records"], summary

    check = subprocess.run([BIN, "pipelines", "check", str(pipelines), "topics=shop.a,other,shop.B-1", "output=json"], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")})
    assert check.returncode == 0, check.stderr
    made = [(t["topic"], t["table"]) for t in json.loads(check.stdout)["topic_tables"]]
    assert made == [("shop.a", "raw_shop_a"), ("shop.B-1", "raw_shop_b_1")], made
