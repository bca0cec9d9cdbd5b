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
        if isinstance(v, dict) and k == "kafka_headers":
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


# Five topics of schemaless JSON (`schema = "infer"`) through one pattern: each topic's columns come
# from its values. Orders and sensors gain fields (nested ones too) in the second event; refunds mix
# integers and fractions within the first batch (double from the start); the sensors' `reading` is
# a long column that later meets fractions: Iceberg cannot promote long to double, so the commit of
# those rows replaces the column (a double under a new field id) and rewrites the rows before them
# with their values as doubles, every value exact; an integer beyond 2^53 cannot be a double
# exactly, and is a dead letter naming the field (docs/pipelines.md).
INFER_TOPICS = {
    "shop.Orders": "raw_shop_orders",
    "shop.refunds-eu": "raw_shop_refunds_eu",
    "shop.clicks": "raw_shop_clicks",
    "iot.Sensors": "raw_iot_sensors",
    "iot.gps": "raw_iot_gps",
}
BASE_MS = 1714564800000


def iso(ms: int, offset_hours: int = 0) -> str:
    zone = dt.timezone(dt.timedelta(hours=offset_hours))
    return dt.datetime.fromtimestamp(ms / 1000, zone).isoformat()


def schemaless(topic: str, o: int) -> dict:
    """What the producer of `topic` sent at offset `o` (offsets 0-3: first event; 4-9: second)."""
    ms = BASE_MS + 3_600_000 * o
    later = o >= 4
    if topic == "shop.Orders":
        value = {"id": o, "note": f"order {o}", "ts": iso(ms, 2), "customer": {"id": 100 + o, "country": "DE" if o % 2 else "FR"}}
        if later:
            value["coupon"] = None if o == 5 else f"C{o}"
            value["customer"]["vip"] = o % 3 == 0
        return value
    if topic == "shop.refunds-eu":
        return {"id": o, "amount": o if o % 2 == 0 else o + 0.25, "ts": ms}
    if topic == "shop.clicks":
        return {"id": o, "tags": [f"t{i}" for i in range(o % 3)], "ts": ms, "page": None}
    if topic == "iot.Sensors":
        value: dict[str, Any] = {"id": o, "reading": 10 * o, "ts": ms}
        if later:
            value["unit"] = "mV"
            value["dims"] = [o, o + 1]
            if o in (6, 9):
                value["reading"] = o + 0.5
            if o == 8:
                value["reading"] = 2**53 + 1
        return value
    return {"id": o, "lat": 48.1 + o / 100, "lon": 11.5, "fix": o % 2 == 0, "alt": None if o % 2 else 500 + o}


def dead_lettered(topic: str, o: int) -> bool:
    return topic == "iot.Sensors" and o == 8


def infer_event(offsets: range) -> dict:
    records: dict[str, list[dict]] = {}
    for topic in INFER_TOPICS:
        items = []
        for o in offsets:
            r = record(topic, o)
            items.append({
                "topic": topic, "partition": 0, "offset": o, "timestamp": r["timestamp"], "timestampType": r["timestampType"],
                "key": None if r["key"] is None else base64.b64encode(r["key"]).decode(),
                "value": base64.b64encode(json.dumps(schemaless(topic, o)).encode()).decode(),
                "headers": [{name: [b - 256 if b > 127 else b for b in value]} for name, value in r["headers"].items()],
            })
        records[f"{topic}-0"] = items
    return {"eventSource": "aws:kafka", "records": records}


def as_read(value: Any, read: Any) -> Any:
    """The producer's `value` as a reader returns it: fields it lacks (or sent null) read as null, `ts` as a UTC time."""
    if isinstance(read, dict) and (value is None or isinstance(value, dict)):
        value = value or {}
        return {k: as_read(value.get(k), read[k]) for k in read} if value or any(v is not None for v in read.values()) else None
    return value


def infer_expected(topic: str, o: int) -> dict:
    r = record(topic, o)
    value = dict(schemaless(topic, o))
    if "ts" in value:
        value["ts"] = dt.datetime.fromtimestamp(BASE_MS / 1000 + 3600 * o, UTC)
    return value | {
        "kafka_topic": topic, "kafka_partition": 0, "kafka_offset": o,
        "kafka_timestamp": dt.datetime.fromtimestamp(r["timestamp"] / 1000, UTC), "kafka_key": r["key"], "kafka_headers": r["headers"],
    }


def check_rows(rows: list[dict], topic: str, reader: str) -> None:
    want_offsets = [o for o in range(10) if not dead_lettered(topic, o)]
    assert [r["kafka_offset"] for r in rows] == want_offsets, (reader, topic, [r["kafka_offset"] for r in rows])
    # `ts` is declared (event_time, partition source): there from the start; `page` is only ever null.
    columns = set().union(*(schemaless(topic, o).keys() for o in want_offsets)) - {"page"} | {"ts"}
    for row in rows:
        want = infer_expected(topic, row["kafka_offset"])
        assert set(row) == columns | {"kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers"}, (reader, topic, set(row))
        for name, read in row.items():
            assert as_read(want.get(name), read) == read, (reader, topic, row["kafka_offset"], name, want.get(name), read)
            if name in want and not isinstance(read, dict):
                assert read == want[name], (reader, topic, row["kafka_offset"], name, want[name], read)


def test_one_pattern_of_schemaless_json_writes_five_tables_whose_columns_come_from_the_values(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "raw_{{topic}}"\ntopic_pattern = "(shop|iot)\\\\..+"\nformat = "json"\n'
        'schema = "infer"\nevent_time = "ts"\npartition_by = ["day(ts)"]\nkafka_columns = ["timestamp", "key", "headers"]\n'
    )
    args = [f"warehouse={wh}", f"pipelines={pipelines}"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(infer_event(range(0, 4))))
    second.write_text(json.dumps(infer_event(range(4, 10))))

    summary = icestream("ingest", str(first), *args)
    assert (summary["written"], summary["dead_letter"], summary["tables"]) == (20, 0, 5), summary
    summary = icestream("ingest", str(second), *args)
    assert (summary["written"], summary["dead_letter"], summary["tables"]) == (29, 1, 5), summary
    # Orders (coupon, customer.vip) and sensors (unit, dims) gained columns with their rows.
    assert summary["schema_changes"] == 2, summary

    for topic, table in INFER_TOPICS.items():
        loaded = readers.pyiceberg_sql_table(wh, NAMESPACE, table)
        py = sorted((normalize(r) for r in loaded.scan().to_arrow().to_pylist()), key=lambda r: r["kafka_offset"])
        duck = sorted((normalize(r) for r in readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, table)).to_pylist()), key=lambda r: r["kafka_offset"])
        check_rows(py, topic, "pyiceberg")
        check_rows(duck, topic, "duckdb")
        types = {f.name: str(f.field_type) for f in loaded.schema().fields}
        assert types["ts"] == "timestamptz", types
        assert [f.name for f in loaded.spec().fields] == ["ts_day"]
    types = {f.name: str(f.field_type) for f in readers.pyiceberg_sql_table(wh, NAMESPACE, "raw_shop_refunds_eu").schema().fields}
    assert types["amount"] == "double", "integers and fractions in one batch: double from the start"
    # The long column became a double in the commit of the rows that needed it: one snapshot per
    # batch, the second an overwrite of every file before it; the old field id is gone.
    sensors = readers.pyiceberg_sql_table(wh, NAMESPACE, "raw_iot_sensors")
    reading = sensors.schema().find_field("reading")
    assert str(reading.field_type) == "double", sensors.schema()
    old_ids = {f.field_id for schema in sensors.metadata.schemas for f in schema.fields if f.name == "reading" and str(f.field_type) == "long"}
    assert old_ids and reading.field_id not in old_ids, sensors.metadata.schemas
    current = sensors.current_snapshot()
    assert len(sensors.metadata.snapshots) == 2 and current.summary.operation.value == "overwrite", sensors.metadata.snapshots
    assert current.summary["icestream.replaced-columns"] == "reading"

    # The integer beyond 2^53 met the double column: a dead letter naming the field and the value.
    dead = readers.pyiceberg_sql_table(wh, NAMESPACE, "raw_iot_sensors_dead_letter").scan().to_arrow().to_pylist()
    assert [d["kafka_offset"] for d in dead] == [8], dead
    assert "field `reading`" in dead[0]["error"] and str(2**53 + 1) in dead[0]["error"] and "double" in dead[0]["error"], dead[0]["error"]
    assert json.loads(dead[0]["raw_value"]) == schemaless("iot.Sensors", 8)

    # A replay of both events adds nothing.
    for path in (first, second):
        summary = icestream("ingest", str(path), *args)
        assert summary["written"] == 0 and summary["dead_letter"] == 0 and summary["skipped_replay"] == summary["records"], summary

    check = subprocess.run([BIN, "pipelines", "check", str(pipelines), "topics=shop.a,iot.b"], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")})
    assert check.returncode == 0, check.stderr
    assert "inferred from the values" in check.stdout, check.stdout


def test_recover_routes_a_patterns_topics_to_their_tables_once(tmp_path: Path) -> None:
    """A batch the mapping discarded to its on-failure destination, recovered from a local copy of
    the bucket: each topic's records go to the table the template gives it, once."""
    wh = tmp_path / "wh"
    (tmp_path / "event.schema.json").write_text(json.dumps(SCHEMA))
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "raw_{{topic}}"\ntopic_pattern = "shop\\\\..+"\nformat = "json"\nschema = "event.schema.json"\n')
    args = [f"warehouse={wh}", f"pipelines={pipelines}"]
    for name, offsets in (("before", range(0, 3)), ("after", range(6, 10))):
        (tmp_path / f"{name}.json").write_text(json.dumps(event(offsets)))
        icestream("ingest", str(tmp_path / f"{name}.json"), *args)
    failures = tmp_path / "failures" / "aws" / "lambda" / "mapping"
    failures.mkdir(parents=True)
    (failures / "discarded").write_text(json.dumps({
        "requestContext": {"condition": "RetryAttemptsExhausted"}, "KafkaBatchInfo": {"batchSize": 9},
        "payload": json.dumps(event(range(3, 6))),
    }))

    report = icestream("recover", str(tmp_path / "failures"), *args)
    assert report["unrouted"] == {}, report
    assert sorted((t["table"].split(".")[-1], t["recovered"]) for t in report["tables"]) == sorted((t, 3) for t in TOPICS.values()), report
    for topic, table in TOPICS.items():
        rows = readers.pyiceberg_sql_table(wh, NAMESPACE, table).scan().to_arrow().to_pylist()
        assert sorted(r["kafka_offset"] for r in rows) == list(range(10)), table
        assert all(r["id"] == r["kafka_offset"] and r["note"] == f"{topic} #{r['id']}" for r in rows)
    again = icestream("recover", str(tmp_path / "failures"), *args)
    assert [(t["recovered"], t["already_held"]) for t in again["tables"]] == [(0, 3)] * 3, again


def test_queued_writers_evolve_an_inferred_table_and_keep_a_long_column_long(moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    """commit_mode=queued: a writer's staged files could land after a column replacement and read
    null there, so a queued pipeline never replaces a column: the fractions that meet the long
    column are dead letters naming the field, its type and the value; new fields still evolve the
    table, and every other value lands exact (2^53 + 1 in the long column too)."""
    from test_queued_commits import Setup

    setup = Setup(moto_endpoint, aws_client, tmp_path, "local")
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text('[[pipeline]]\ntable = "raw_{topic}"\ntopic_pattern = "iot\\\\..+"\nformat = "json"\nschema = "infer"\n')
    setup.queued.append(f"pipelines={pipelines}")
    for name, offsets in (("first", range(0, 4)), ("second", range(4, 10))):
        event = infer_event(offsets)
        event["records"] = {k: v for k, v in event["records"].items() if k.startswith("iot.Sensors")}
        (tmp_path / f"{name}.json").write_text(json.dumps(event))
        setup.ingest(tmp_path / f"{name}.json")
        setup.drain()
    table = setup.table("raw_iot_sensors")
    assert str(table.schema().find_field("reading").field_type) == "long"
    rows = {r["kafka_offset"]: r for r in table.scan().to_arrow().to_pylist()}
    assert sorted(rows) == [0, 1, 2, 3, 4, 5, 7, 8], sorted(rows)
    for o, row in rows.items():
        value = schemaless("iot.Sensors", o)
        assert (row["reading"], row["unit"], row["dims"]) == (value["reading"], value.get("unit"), value.get("dims")), (o, row)
    dead = {d["kafka_offset"]: d["error"] for d in setup.table("raw_iot_sensors_dead_letter").scan().to_arrow().to_pylist()}
    assert sorted(dead) == [6, 9], dead
    for o, error in dead.items():
        assert "field `reading`" in error and f"{o}.5" in error and "long" in error, error
