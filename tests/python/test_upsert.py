"""Upsert pipelines end to end: change streams from the independent generator
(cdc_generator.py: Debezium, DMS and keyed-row envelopes over a composite string + long key,
shuffled over 4 partitions, 2% re-sent, stale re-deliveries after deletes, random batch cuts
and replays) ingested by `icestream ingest`; the table read by PyIceberg and DuckDB equals the
source table (the oracle), no deleted key comes back, and the changelog holds each distinct
change once. Decimals (each of Debezium's decimal modes), dates, times, timestamps (with and
without zone) and uuids, as keys and values, round-trip exactly.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import random
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import cdc_generator as gen
import readers

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
NAMESPACE = "cdc"
TOPIC = "db.shop.orders"
COLUMNS = ["tenant", "order_id", "note", "amount", "updated_at", "born", "uid"]


def schema(extra: dict[str, Any] | None = None) -> str:
    props: dict[str, Any] = {
        "tenant": {"type": "string"}, "order_id": {"type": "integer"},
        "note": {"type": ["string", "null"]}, "amount": {"type": ["integer", "null"]},
        "updated_at": {"type": ["string", "null"], "format": "date-time"},
        "born": {"type": ["string", "null"], "format": "date"},
        "uid": {"type": ["string", "null"], "format": "uuid"},
    }
    props.update(extra or {})
    return json.dumps({"type": "object", "required": ["tenant", "order_id"], "properties": props})


def icestream(*args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, f"icestream {' '.join(args)} failed ({out.returncode}): {out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(tmp_path: Path, envelope: str, order_by: str | None, extra_schema: dict | None, seed: int,
        truncates: int = 0, allow_truncate: bool = False) -> tuple[Path, gen.Source, list[dict]]:
    rng = random.Random(seed)
    source = gen.Source(rng)
    source.run(keys=60, changes=240, truncates=truncates)
    msgs = gen.messages(source, envelope, rng)
    (tmp_path / "orders.json").write_text(schema(extra_schema))
    lines = [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]', 'format = "json"',
             'schema = "orders.json"', 'partition_by = ["bucket(4, order_id)"]', 'key = ["tenant", "order_id"]',
             'mode = "upsert"', f'envelope = "{envelope}"', "changelog = true"]
    if order_by:
        lines.append(f'order_by = "{order_by}"')
    if allow_truncate:
        lines.append("allow_truncate = true")
    wh, summaries = ingest_all(tmp_path, lines, msgs, rng)
    return wh, source, summaries


def ingest_all(tmp_path: Path, pipeline_lines: list[str], msgs: list[gen.Message], rng: random.Random) -> tuple[Path, list[dict]]:
    """Write the pipeline file, then `icestream ingest` each event over `msgs` (event-N.json)."""
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join(pipeline_lines) + "\n")
    wh = tmp_path / "wh"
    summaries = []
    for i, event in enumerate(gen.events(msgs, TOPIC, rng)):
        path = tmp_path / f"event-{i}.json"
        path.write_text(json.dumps(event))
        summaries.append(icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}"))
    return wh, summaries


def normalized(rows: list[dict], columns: list[str] = COLUMNS) -> dict[tuple, dict]:
    """Reader rows by (tenant, order_id), uuids and zone-less timestamps as the oracle has them."""
    out = {}
    for r in rows:
        v = {c: r.get(c) for c in columns}
        if isinstance(v["uid"], bytes):
            v["uid"] = uuid.UUID(bytes=v["uid"])
        elif isinstance(v["uid"], str):
            v["uid"] = uuid.UUID(v["uid"])
        if isinstance(v["updated_at"], dt.datetime) and v["updated_at"].tzinfo is None:
            v["updated_at"] = v["updated_at"].replace(tzinfo=dt.timezone.utc)
        key = (v["tenant"], v["order_id"])
        assert key not in out, f"two live rows for {key}"
        out[key] = v
    return out


def check_readers(wh: Path, source: gen.Source) -> None:
    expected = gen.oracle(source)
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    by_pyiceberg = normalized(table.scan().to_arrow().to_pylist())
    by_duckdb = normalized(readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, "orders")).to_pylist())
    deleted = {c.key for c in source.changes} - set(expected)
    assert deleted, "the stream deletes some keys"
    for name, got in [("pyiceberg", by_pyiceberg), ("duckdb", by_duckdb)]:
        assert not deleted & set(got), f"{name}: resurrected keys {sorted(deleted & set(got))[:5]}"
        assert got == expected, f"{name}: mirror differs from the oracle"


def changelog_ids(wh: Path, order_column: str) -> set[tuple]:
    """(operation, tenant, order_id, order value) of the changelog's rows, asserting each Kafka
    record is there once (a change its producer sent again is another record: kept)."""
    rows = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog").scan().to_arrow().to_pylist()
    records = [(r["kafka_partition"], r["kafka_offset"]) for r in rows]
    assert len(records) == len(set(records)), "a record twice in the changelog"
    return {(r["operation"], r["tenant"], r["order_id"], r[order_column]) for r in rows}


def test_debezium_composite_key_mirror_equals_the_oracle(tmp_path: Path) -> None:
    wh, source, summaries = run(tmp_path, "debezium", "source.lsn", None, seed=16)
    check_readers(wh, source)
    assert sum(s["upsert_stale"] for s in summaries) > 0, "stale re-deliveries were seen and refused"
    # Each change: snapshot reads and inserts are I, updates U, deletes D.
    ids = changelog_ids(wh, "source_position")
    code = {"r": "I", "c": "I", "u": "U", "d": "D"}
    distinct = {(code[c.op], c.key[0], c.key[1], c.lsn) for c in source.changes}
    assert set(ids) == distinct

    # The table rebuilt from its changelog alone is the same mirror, deletes kept as tombstones:
    # every event delivered again after it changes nothing.
    pipelines = f"pipelines={tmp_path / 'pipelines.toml'}"
    report = icestream("cdc-rebuild", "orders", pipelines, f"warehouse={wh}")
    assert report["live_rows"] == len(gen.oracle(source)) and report["tombstones"] > 0, report
    rebuilt = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    assert rebuilt.current_snapshot().summary["icestream.cdc"] == "rebuild", "the rebuild committed"
    assert not [t for t in rebuilt.scan().plan_files() if t.delete_files], "a rebuilt table has no deletes to merge"
    check_readers(wh, source)
    for event in sorted(tmp_path.glob("event-*.json")):
        assert icestream("ingest", str(event), pipelines, f"warehouse={wh}")["upsert_applied"] == 0
    check_readers(wh, source)


def test_an_upsert_table_is_audited_through_its_changelog(tmp_path: Path) -> None:
    """An upsert table keeps one row per key: its audit reads the changelog (each record once)
    against the pipeline's dead-letter table; without a changelog the audit says it cannot."""
    wh, _source, _summaries = run(tmp_path, "debezium", "source.lsn", None, seed=16)
    pipelines = f"pipelines={tmp_path / 'pipelines.toml'}"
    report = icestream("audit", "orders", pipelines, f"warehouse={wh}")
    assert report["verdict"] == "pass" and report["duplicate_offsets"] == 0, report
    assert report["table"].endswith(".orders_changelog") and report["dead_letter_table"].endswith(".orders_dead_letter"), report
    changelog = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog").scan().to_arrow()
    assert report["rows"] == changelog.num_rows > 0, report
    assert icestream("audit", "orders_changelog", pipelines, f"warehouse={wh}")["table"] == report["table"]
    maintained = icestream("maintain", "action=audit", pipelines, f"warehouse={wh}")
    by_table = {t["table"].split(".")[-1]: t for t in maintained["tables"]}
    assert by_table["orders"]["audit"]["table"] == report["table"], by_table["orders"]
    assert any("audited with its upsert table orders" in s for s in by_table["orders_changelog"]["skipped"]), by_table

    without = tmp_path / "no-changelog.toml"
    without.write_text((tmp_path / "pipelines.toml").read_text().replace("changelog = true\n", ""))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    out = subprocess.run([BIN, "audit", "orders", f"pipelines={without}", f"warehouse={wh}"], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "upsert table" in out.stderr and "changelog = true" in out.stderr, out.stderr


def test_debezium_truncates_empty_the_mirror_as_of_their_source_position(tmp_path: Path) -> None:
    """Two TRUNCATEs mid-stream, each followed by stale re-deliveries of changes it emptied,
    shuffled over the partitions like every other change: the mirror equals the source table,
    none of the emptied rows comes back, the changelog keeps every keyed change once and the
    newest truncate's position, and a rebuild from the changelog alone gives the same mirror."""
    wh, source, summaries = run(tmp_path, "debezium", "source.lsn", None, seed=23, truncates=2, allow_truncate=True)
    truncates = [c.lsn for c in source.changes if c.op == "t"]
    assert len(truncates) == 2
    check_readers(wh, source)
    assert sum(s["upsert_truncated"] for s in summaries) > 0 and sum(s["dead_letter"] for s in summaries) == 0, summaries
    emptied = {c.key for c in source.changes if c.key is not None and c.lsn < truncates[-1]}
    assert emptied - set(gen.oracle(source)), "keys the last truncate emptied stay gone"
    code = {"r": "I", "c": "I", "u": "U", "d": "D"}
    ids = changelog_ids(wh, "source_position")
    assert set(ids) == {(code[c.op], c.key[0], c.key[1], c.lsn) for c in source.changes if c.op != "t"}
    for table in ["orders", "orders_changelog"]:
        props = readers.pyiceberg_sql_table(wh, NAMESPACE, table).properties
        assert props.get("icestream.cdc.truncated-at") == str(truncates[-1]), (table, props)

    pipelines = f"pipelines={tmp_path / 'pipelines.toml'}"
    report = icestream("cdc-rebuild", "orders", pipelines, f"warehouse={wh}")
    assert report["live_rows"] == len(gen.oracle(source)), report
    check_readers(wh, source)
    for event in sorted(tmp_path.glob("event-*.json")):
        assert icestream("ingest", str(event), pipelines, f"warehouse={wh}")["upsert_applied"] == 0
    check_readers(wh, source)


def test_a_truncate_the_pipeline_does_not_allow_is_a_dead_letter(tmp_path: Path) -> None:
    wh, source, summaries = run(tmp_path, "debezium", "source.lsn", None, seed=24, truncates=1)
    assert sum(s["dead_letter"] for s in summaries) == 1 and sum(s["upsert_truncated"] for s in summaries) == 0
    letters = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    assert [r["error"] for r in letters] == ['Debezium op "t" (truncate) is not applied: the pipeline does not set allow_truncate = true']
    got = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders").scan().to_arrow().to_pylist()
    before = {c.key for c in source.changes[: [c.op for c in source.changes].index("t")] if c.key is not None}
    assert before & {(r["tenant"], r["order_id"]) for r in got}, "rows from before the refused truncate stay"


def test_dms_mirror_equals_the_oracle(tmp_path: Path) -> None:
    wh, source, _ = run(tmp_path, "dms", "seq", {"seq": {"type": "integer"}}, seed=17)
    check_readers(wh, source)
    ids = changelog_ids(wh, "seq")
    assert {i[1:] for i in ids} == {(c.key[0], c.key[1], c.lsn) for c in source.changes}


def test_keyed_row_topic_with_null_deletes(tmp_path: Path) -> None:
    wh, source, summaries = run(tmp_path, "row", None, None, seed=18)
    check_readers(wh, source)
    assert sum(s["upsert_applied"] for s in summaries) > 0


def test_four_concurrent_writers_and_compaction_racing_them(tmp_path: Path) -> None:
    """One writer per partition, as the event source mapping runs them, and compaction
    rewriting the files they delete from: the mirror still equals the oracle."""
    import threading

    rng = random.Random(19)
    source = gen.Source(rng)
    source.run(keys=60, changes=240)
    msgs = gen.messages(source, "debezium", rng)
    (tmp_path / "orders.json").write_text(schema())
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join([f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]',
                                    'format = "json"', 'schema = "orders.json"', 'partition_by = ["bucket(4, order_id)"]',
                                    'key = ["tenant", "order_id"]', 'mode = "upsert"', 'envelope = "debezium"',
                                    'order_by = "source.lsn"']) + "\n")
    wh = tmp_path / "wh"
    # Each event split into one event per partition: partition p's writer gets those in order.
    per_partition: dict[int, list[Path]] = {p: [] for p in range(gen.PARTITIONS)}
    for i, event in enumerate(gen.events(msgs, TOPIC, rng)):
        for name, records in event["records"].items():
            p = int(name.rsplit("-", 1)[1])
            path = tmp_path / f"event-{i}-{p}.json"
            path.write_text(json.dumps(dict(event, records={name: records})))
            per_partition[p].append(path)
    common = [f"pipelines={pipelines}", f"warehouse={wh}"]
    first = per_partition[0].pop(0)
    icestream("ingest", str(first), *common)  # creates the tables before the race
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(f) -> Any:
        def run() -> None:
            try:
                f()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return run

    def writer(paths: list[Path]) -> None:
        for path in paths:
            icestream("ingest", str(path), *common)

    compactions: list[dict] = []

    def compactor() -> None:
        while not done.is_set():
            compactions.append(icestream("maintain", "action=compact", *common))

    writers = [threading.Thread(target=guarded(lambda ps=ps: writer(ps))) for ps in per_partition.values()]
    compaction = threading.Thread(target=guarded(compactor))
    compaction.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    compaction.join()
    assert not errors, errors
    icestream("maintain", "action=compact", *common)
    check_readers(wh, source)
    committed = [t["compact"]["groups_committed"] for c in compactions for t in c["tables"] if t["table"] == "orders"]
    assert sum(committed) > 0, "compaction rewrote files while the writers ran"


def test_uuid_and_date_keys_with_timestamps_round_trip(tmp_path: Path) -> None:
    """A keyed topic whose key is a uuid and a date: values and keys come back exactly, a
    null value deletes by a JSON record key."""
    rng = random.Random(20)
    (tmp_path / "orders.json").write_text(schema({"uid": {"type": "string", "format": "uuid"}, "born": {"type": "string", "format": "date"}})
                                          .replace('"required": ["tenant", "order_id"]', '"required": ["uid", "born"]'))
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join([f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]',
                                    'format = "json"', 'schema = "orders.json"', 'partition_by = ["bucket(4, uid)"]',
                                    'key = ["uid", "born"]', 'mode = "upsert"', 'envelope = "row"']) + "\n")
    source = gen.Source(rng)
    keys = [(uuid.UUID(int=rng.getrandbits(128)), gen.EPOCH + dt.timedelta(days=rng.randrange(-5000, 30000))) for _ in range(30)]
    expected: dict[tuple, dict] = {}
    records = []
    for i in range(120):
        uid, born = rng.choice(keys)
        key = json.dumps({"uid": str(uid), "born": born.isoformat()}).encode()
        if (uid, born) in expected and rng.random() < 0.3:
            del expected[(uid, born)]
            records.append((key, None))
            continue
        row = source.new_row(("t", i))
        row.update(uid=uid, born=born)
        expected[(uid, born)] = row
        records.append((key, gen.row_value(gen.Change(("t", i), row, i, "c"))))
    event = {"eventSource": "aws:kafka", "records": {f"{TOPIC}-0": [
        {"topic": TOPIC, "partition": 0, "offset": o, "timestamp": 1764460800000, "timestampType": "CREATE_TIME",
         "key": base64.b64encode(k).decode(), "value": None if v is None else base64.b64encode(v).decode(), "headers": []}
        for o, (k, v) in enumerate(records)]}}
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    wh = tmp_path / "wh"
    summary = icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}")
    assert summary["dead_letter"] == 0, summary
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    for name, rows in [("pyiceberg", table.scan().to_arrow().to_pylist()),
                       ("duckdb", readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, "orders")).to_pylist())]:
        got = {}
        for r in rows:
            v = normalized([r])
            (only,) = v.values()
            got[(only["uid"], only["born"])] = only
        want = {k: {c: row[c] for c in COLUMNS} for k, row in expected.items()}
        assert got == want, name


TYPED_COLUMNS = ["ref", "at", "amount", "born", "opens", "local", "seen", "uid"]


def typed_schema() -> str:
    def decimal(precision: int, scale: int, optional: bool) -> dict:
        return {"type": ["string", "null"] if optional else "string", "format": "decimal", "precision": precision, "scale": scale}
    props = {
        "ref": decimal(12, 3, False), "at": {"type": "string", "format": "local-date-time"},
        "amount": decimal(10, 2, True), "born": {"type": ["string", "null"], "format": "date"},
        "opens": {"type": ["string", "null"], "format": "time"},
        "local": {"type": ["string", "null"], "format": "local-date-time"},
        "seen": {"type": ["string", "null"], "format": "date-time"},
        "uid": {"type": ["string", "null"], "format": "uuid"},
    }
    return json.dumps({"type": "object", "required": ["ref", "at"], "properties": props})


@pytest.mark.parametrize("mode,micros,with_schema", [
    ("precise", True, True), ("precise", False, False), ("string", True, True), ("string", False, False), ("double", False, False),
])
def test_debezium_decimal_date_timestamp_and_uuid_keys_and_values_round_trip_exactly(tmp_path: Path, mode: str, micros: bool, with_schema: bool) -> None:
    """A Debezium JSON topic keyed by a decimal and a timestamp, its values in each of
    Debezium's decimal modes (precise base64, string, double), time precisions (µs types with
    the embedded schema, Connect's ms types without it), ZonedTimestamp with offsets and uuid
    text: PyIceberg and DuckDB read the source table back exactly, decimals as Decimals."""
    import decimal as dec

    rng = random.Random(21)
    changes, rows = gen.typed_changes(rng, keys=40, changes=160, micros=micros)
    msgs = gen.typed_messages(changes, mode, micros, with_schema, rng)
    (tmp_path / "prices.json").write_text(typed_schema())
    lines = [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "prices"', 'topics = ["db.public.prices"]', 'format = "json"',
             'schema = "prices.json"', 'partition_by = ["bucket(4, ref)"]', 'key = ["ref", "at"]', 'mode = "upsert"',
             'envelope = "debezium"', 'order_by = "source.lsn"']
    if mode != "precise":
        lines.append(f'decimal_handling = "{mode}"')
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join(lines) + "\n")
    wh = tmp_path / "wh"
    for i, event in enumerate(gen.events(msgs, "db.public.prices", rng)):
        path = tmp_path / f"event-{i}.json"
        path.write_text(json.dumps(event))
        summary = icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}")
        assert summary["dead_letter"] == 0, summary
    assert any(c.op == "d" for c in changes) and rows
    want = {k: {c: r[c] for c in TYPED_COLUMNS} for k, r in rows.items()}
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "prices")
    for name, got_rows in [("pyiceberg", table.scan().to_arrow().to_pylist()),
                           ("duckdb", readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, "prices")).to_pylist())]:
        got = {}
        for r in got_rows:
            v = {c: r[c] for c in TYPED_COLUMNS}
            for column, scale in gen.TYPED_SCALES.items():
                assert isinstance(v[column], dec.Decimal) and v[column].as_tuple().exponent == -scale, (name, column, v[column])
            if isinstance(v["uid"], bytes):
                v["uid"] = uuid.UUID(bytes=v["uid"])
            elif isinstance(v["uid"], str):
                v["uid"] = uuid.UUID(v["uid"])
            assert v["seen"].utcoffset() is not None and v["local"].tzinfo is None, (name, v)
            assert (v["ref"], v["at"]) not in got, f"{name}: two live rows for a key"
            got[(v["ref"], v["at"])] = v
        assert got == want, f"{name}: the table differs from the source"

    # What a column cannot hold exactly is a dead letter naming the field, never rounded: a
    # finer scale than the column's (declared, as text or as a double), or more digits.
    late = gen.Change(next(iter(rows)), dict(next(iter(rows.values()))), changes[-1].lsn + 1, "u")
    record = json.loads(gen.typed_debezium(late, mode, micros, with_schema))
    too_many_digits = base64.b64encode((10**10).to_bytes(5, "big", signed=True)).decode()
    bad = {"precise": "AQ==" if with_schema else too_many_digits, "string": "0.001", "double": 0.001}[mode]
    (record["payload"] if with_schema else record)["after"]["amount"] = bad
    if with_schema:
        record["schema"]["fields"][1]["fields"][2]["parameters"] = {"scale": "3"}
    offset = sum(m.partition == 0 for m in msgs)
    event = {"eventSource": "aws:kafka", "records": {"db.public.prices-0": [
        {"topic": "db.public.prices", "partition": 0, "offset": offset, "timestamp": 1764460800000, "timestampType": "CREATE_TIME",
         "key": None, "value": base64.b64encode(json.dumps(record).encode()).decode(), "headers": []}]}}
    path = tmp_path / "late.json"
    path.write_text(json.dumps(event))
    assert icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}")["dead_letter"] == 1
    (reason,) = readers.pyiceberg_sql_table(wh, NAMESPACE, "prices_dead_letter").scan().to_arrow().column("error").to_pylist()
    assert "field `amount`" in reason and ("scale" in reason or "does not fit" in reason), reason


def test_an_upsert_table_evolves_with_its_pipeline_schema_and_is_sorted_by_key(tmp_path: Path) -> None:
    """A new optional field in the pipeline's schema lands in the upsert table and its
    changelog before the first batch that carries it; rows from before read it as null. The
    table is created with its key as sort order, and its data files are in that order."""
    fields = {"tenant": {"type": "string"}, "order_id": {"type": "integer"}, "note": {"type": ["string", "null"]}}

    def write_schema(extra: dict) -> None:
        (tmp_path / "orders.json").write_text(json.dumps({"type": "object", "required": ["tenant", "order_id"], "properties": {**fields, **extra}}))

    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join([
        f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]', 'format = "json"',
        'schema = "orders.json"', 'partition_by = ["bucket(4, order_id)"]', 'key = ["tenant", "order_id"]',
        'mode = "upsert"', 'envelope = "debezium"', 'order_by = "source.lsn"', "changelog = true"]) + "\n")
    wh = tmp_path / "wh"
    offset = 0

    def ingest(changes: list[tuple[str, dict]]) -> dict:
        nonlocal offset
        records = []
        for op, row in changes:
            offset += 1
            value = {"before": None, "after": row, "source": {"lsn": offset}, "op": op}
            records.append({"topic": TOPIC, "partition": 0, "offset": offset, "timestamp": 1764460800000, "timestampType": "CREATE_TIME",
                            "key": None, "value": base64.b64encode(json.dumps(value).encode()).decode(), "headers": []})
        path = tmp_path / f"event-{offset}.json"
        path.write_text(json.dumps({"eventSource": "aws:kafka", "records": {f"{TOPIC}-0": records}}))
        return icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}")

    write_schema({})
    # Out of key order on purpose: the files come out sorted.
    ingest([("c", {"tenant": "b", "order_id": i, "note": f"b{i}"}) for i in (9, 3, 7)]
           + [("c", {"tenant": "a", "order_id": i, "note": f"a{i}"}) for i in (5, 1)])
    write_schema({"amount": {"type": ["integer", "null"]}})
    summary = ingest([("u", {"tenant": "a", "order_id": 1, "note": "a1*", "amount": 10}),
                      ("c", {"tenant": "c", "order_id": 2, "note": "c2", "amount": 20})])
    assert summary["dead_letter"] == 0, summary
    assert summary["key_files_read"] > 0 and summary["key_bytes_read"] > 0, f"the update's read cost is reported: {summary}"

    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    schema = table.schema()
    key_ids = [schema.find_field(n).field_id for n in ("tenant", "order_id")]
    assert [f.source_id for f in table.sort_order().fields] == key_ids, "sorted by the key, in key order"
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as f:
            keys = [(r["tenant"], r["order_id"]) for r in pq.read_table(f, columns=["tenant", "order_id"]).to_pylist()]
        assert keys == sorted(keys), f"{task.file.file_path} is not in key order: {keys}"
    expected = {("a", 1): ("a1*", 10), ("a", 5): ("a5", None), ("b", 3): ("b3", None), ("b", 7): ("b7", None),
                ("b", 9): ("b9", None), ("c", 2): ("c2", 20)}
    by_pyiceberg = {(r["tenant"], r["order_id"]): (r["note"], r["amount"]) for r in table.scan().to_arrow().to_pylist()}
    by_duckdb = {(r["tenant"], r["order_id"]): (r["note"], r["amount"])
                 for r in readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, "orders")).to_pylist()}
    assert by_pyiceberg == expected and by_duckdb == expected
    changelog = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog").scan().to_arrow().to_pylist()
    assert sorted((r["operation"], r["tenant"], r["order_id"], r["amount"]) for r in changelog if r["amount"] is not None) == [
        ("I", "c", 2, 20), ("U", "a", 1, 10)]
