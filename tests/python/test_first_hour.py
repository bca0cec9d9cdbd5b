"""A new user's first hour (issue 46): the surprises that were removed, each as documented.

- Kafka tombstones (null values) in an append pipeline are skipped and counted (`tombstones` in
  the summary, `Tombstones` in the EMF line), never dead letters; their offsets are held.
- One header byte outside the signed range makes that record a dead letter naming it; the rest
  of the event is written.
- `dedup = "batch"` keeps the first copy of a key (the lowest offset).
- Read-only commands (`report`, `status`, `audit`) never create a warehouse or its catalog; a
  missing table is a sentence naming namespace, table and warehouse; `namespace.table` is read
  as such.
- A closed stdout (`icestream audit ... | head -1`) ends the command quietly.
- Values that need a registry say so in their dead letter (a registry frame where none is set,
  raw Avro written with another schema version).
- `pipelines check` prints the field ids the created table gets; a failed routing creates
  nothing; `timestamp_precision` (reject by default, or truncate) is one rule for the pipeline.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

import readers

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
NAMESPACE = "firsthour"
AVSC = {"type": "record", "name": "Payment", "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}


def icestream(*args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    return subprocess.run([BIN, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=300)


def avro(id_: int, amount: float) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVSC), {"id": id_, "amount": amount})
    return buf.getvalue()


def event(values: list[bytes | None], headers: list[list[dict]] | None = None, topic: str = "payments") -> dict:
    records = [{"topic": topic, "partition": 0, "offset": i, "timestamp": 1714564800000 + i, "timestampType": "CREATE_TIME",
                "key": None, "value": None if v is None else base64.b64encode(v).decode(),
                "headers": headers[i] if headers else []} for i, v in enumerate(values)]
    return {"eventSource": "aws:kafka", "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/c/1",
            "bootstrapServers": "127.0.0.1:9092", "records": {f"{topic}-0": records}}


def setup(tmp: Path, extra: str = "") -> Path:
    (tmp / "payment.avsc").write_text(json.dumps(AVSC))
    pipelines = tmp / "pipelines.toml"
    pipelines.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "payments"\ntopics = ["payments"]\n'
                         f'format = "avro"\nschema = "payment.avsc"\nkey = ["id"]\n{extra}')
    return pipelines


def ingest(tmp: Path, pipelines: Path, ev: dict, name: str = "event.json") -> tuple[dict, str]:
    path = tmp / name
    path.write_text(json.dumps(ev))
    out = icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={tmp / 'wh'}")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def rows(tmp: Path, table: str) -> list[dict]:
    got = readers.pyiceberg_sql_table(tmp / "wh", NAMESPACE, table).scan().to_arrow().to_pylist()
    return sorted(got, key=lambda r: r["kafka_offset"])


def test_tombstones_are_skipped_and_counted_never_dead_letters(tmp_path: Path) -> None:
    pipelines = setup(tmp_path)
    ev = event([avro(1, 1.5), None, avro(2, 2.5), None])
    summary, stderr = ingest(tmp_path, pipelines, ev)
    assert (summary["written"], summary["dead_letter"], summary["tombstones"]) == (2, 0, 2), summary
    emf = [json.loads(line) for line in stderr.splitlines() if line.startswith("{") and '"_aws"' in line]
    assert any(line.get("Tombstones") == 2 for line in emf), stderr
    assert [r["kafka_offset"] for r in rows(tmp_path, "payments")] == [0, 2]
    # Their offsets are held: the same event again adds nothing and counts them as replays.
    again, _ = ingest(tmp_path, pipelines, ev)
    assert (again["written"], again["tombstones"], again["skipped_replay"]) == (0, 0, 4), again


def test_a_header_byte_out_of_range_is_a_dead_letter_not_a_failed_batch(tmp_path: Path) -> None:
    pipelines = setup(tmp_path)
    headers = [[{"trace": [1, 2]}], [{"trace": [1, 300]}], [{"trace": [-128, 127]}]]
    summary, _ = ingest(tmp_path, pipelines, event([avro(1, 1.0), avro(2, 2.0), avro(3, 3.0)], headers))
    assert (summary["written"], summary["dead_letter"]) == (2, 1), summary
    dead = rows(tmp_path, "payments_dead_letter")
    assert [d["kafka_offset"] for d in dead] == [1]
    assert "header `trace`: 300 is not a signed byte (-128 to 127)" in dead[0]["error"], dead[0]["error"]
    assert dead[0]["raw_value"] == avro(2, 2.0)


def test_batch_dedup_keeps_the_first_copy(tmp_path: Path) -> None:
    pipelines = setup(tmp_path, 'dedup = "batch"\n')
    summary, _ = ingest(tmp_path, pipelines, event([avro(7, 1.0), avro(8, 1.0), avro(7, 2.0), avro(7, 3.0)]))
    assert (summary["written"], summary["duplicates"]) == (2, 2), summary
    assert [(r["id"], r["amount"], r["kafka_offset"]) for r in rows(tmp_path, "payments")] == [(7, 1.0, 0), (8, 1.0, 1)]


@pytest.mark.parametrize("mode", ["direct", "queued"])
def test_the_audit_lists_what_batch_dedup_dropped_without_a_broker(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    """The writer records the offsets its dedup dropped with the commit (direct, or the queued
    committer's commit of the request carrying them): `audit` with no `bootstrap=` lists them
    as `deduplicated`, not as unexplained gaps, and passes."""
    import uuid

    from conftest import AWS_ENV

    pipelines = setup(tmp_path, 'dedup = "batch"\n')
    knobs = [f"pipelines={pipelines}", f"warehouse={tmp_path / 'wh'}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    if mode == "queued":
        endpoint = request.getfixturevalue("moto_endpoint")
        url = request.getfixturevalue("aws_client")("sqs").create_queue(QueueName=f"dedup-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        knobs += ["commit_mode=queued", f"commit_queue_url={url}"]
        env.update(AWS_ENV, AWS_ENDPOINT_URL=endpoint, AWS_EC2_METADATA_DISABLED="true")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=300)

    # Offsets 0-3 then 4-7: keys 7 7 7 at 0, 2, 3 and 9 9 at 4, 5 (7 again at 7: another batch,
    # so kept). Dropped: 2, 3, 5.
    first = event([avro(7, 1.0), avro(8, 1.0), avro(7, 2.0), avro(7, 3.0)])
    second = event([avro(9, 1.0), avro(9, 2.0), avro(10, 1.0), avro(7, 4.0)])
    for records in second["records"].values():
        for r in records:
            r["offset"] += 4
    for n, ev in enumerate([first, second]):
        path = tmp_path / f"event-{n}.json"
        path.write_text(json.dumps(ev))
        out = run("ingest", str(path), *knobs)
        assert out.returncode == 0, out.stderr
        if mode == "queued":
            out = run("committer", "poll", *knobs, "visibility_timeout_s=5")
            assert out.returncode == 0, out.stderr
    assert [r["kafka_offset"] for r in rows(tmp_path, "payments")] == [0, 1, 4, 6, 7]
    out = run("audit", "payments", *knobs)
    assert out.returncode == 0, (out.stdout, out.stderr)
    verdict, report = out.stdout.splitlines()[0], json.loads(out.stdout.splitlines()[1])
    assert "PASS" in verdict and "3 deduplicated" in verdict and "unexplained" not in verdict, verdict
    assert [(g["from"], g["to"], g.get("cause")) for g in report["gaps"]] == [(2, 3, "deduplicated"), (5, 5, "deduplicated")], report


def test_read_only_commands_create_nothing_and_name_what_is_missing(tmp_path: Path) -> None:
    pipelines = setup(tmp_path)
    ingest(tmp_path, pipelines, event([avro(1, 1.0)]))
    typo = tmp_path / "whh"
    for command in (["report", "payments"], ["status"], ["audit", "payments"]):
        out = icestream(*command, f"pipelines={pipelines}", f"warehouse={typo}")
        assert out.returncode != 0, (command, out.stdout)
        assert str(typo) in out.stderr and "catalog.db" in out.stderr and "warehouse=" in out.stderr, (command, out.stderr)
        assert not typo.exists(), f"{command} created {typo}"
    wh = tmp_path / "wh"
    out = icestream("report", "nope", f"pipelines={pipelines}", f"warehouse={wh}")
    assert out.returncode != 0
    assert f"table `nope` not found: the catalog has no table `nope` in namespace `{NAMESPACE}` of warehouse {wh}" in out.stderr, out.stderr
    assert "TableNotFound" not in out.stderr and "=>" not in out.stderr, out.stderr
    out = icestream("audit", "elsewhere.payments", f"warehouse={wh}")
    assert "namespace `elsewhere`" in out.stderr, out.stderr
    # `namespace.table` reads the table of that namespace, whatever the configured one.
    out = icestream("report", f"{NAMESPACE}.payments", f"warehouse={wh}")
    assert out.returncode == 0 and "snapshot" in out.stdout, out.stderr


def test_a_closed_stdout_ends_a_command_quietly(tmp_path: Path) -> None:
    pipelines = setup(tmp_path)
    ingest(tmp_path, pipelines, event([avro(1, 1.0), avro(2, 2.0)]))
    for command in (["audit", "payments"], ["report", "payments"]):
        read, write = os.pipe()
        os.close(read)  # `| head -1` gone before the first line
        try:
            out = icestream(*command, f"pipelines={pipelines}", f"warehouse={tmp_path / 'wh'}", stdout=write)
        finally:
            os.close(write)
        assert "panicked" not in out.stderr and "Broken pipe" not in out.stderr, (command, out.stderr)
        assert out.returncode in (0, -signal.SIGPIPE), (command, out.returncode, out.stderr)


def test_values_that_need_a_registry_say_so_in_their_dead_letter(tmp_path: Path) -> None:
    import fastavro

    pipelines = setup(tmp_path)
    v2 = {**AVSC, "fields": [*AVSC["fields"], {"name": "note", "type": "string", "default": ""}]}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v2), {"id": 2, "amount": 2.0, "note": "new"})
    framed = b"\x00\x00\x00\x00\x07" + avro(3, 3.0)  # a Confluent serializer's frame, schema id 7
    summary, _ = ingest(tmp_path, pipelines, event([avro(1, 1.0), buf.getvalue(), framed]))
    assert (summary["written"], summary["dead_letter"]) == (1, 2), summary
    reasons = {d["kafka_offset"]: d["error"] for d in rows(tmp_path, "payments_dead_letter")}
    assert "raw Avro carries no writer schema" in reasons[1] and "schema registry" in reasons[1], reasons
    assert "Confluent schema-registry frame (magic byte 0, schema id 7)" in reasons[2] and 'registry = "confluent"' in reasons[2], reasons


def test_check_prints_the_field_ids_the_created_table_gets(tmp_path: Path) -> None:
    nested = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "record", "name": "In", "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": "string"}]}},
        {"name": "b", "type": "long"},
        {"name": "c", "type": {"type": "array", "items": "long"}},
        {"name": "d", "type": {"type": "map", "values": "string"}}]}
    (tmp_path / "r.avsc").write_text(json.dumps(nested))
    pipelines = tmp_path / "p.toml"
    pipelines.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "nested"\ntopics = ["n"]\nformat = "avro"\nschema = "r.avsc"\n'
                         'partition_by = ["bucket(4, b)"]\n')
    check = icestream("pipelines", "check", str(pipelines), "output=json")
    assert check.returncode == 0, check.stderr
    printed: dict[str, int] = {}

    def walk(field: dict, path: str) -> None:
        printed[path] = field["id"]
        for child in field.get("fields", []):
            walk(child, f"{path}.{child['name']}")
        for part in ("element", "key", "value"):
            if part in field:
                walk(field[part], f"{path}.{part}")

    described = json.loads(check.stdout)["pipelines"][0]
    for field in described["schema"]:
        walk(field, field["name"])
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(nested), {"a": {"x": 1, "y": "y"}, "b": 2, "c": [3], "d": {"k": "v"}})
    ingest(tmp_path, pipelines, event([buf.getvalue()], topic="n"))
    schema = readers.pyiceberg_sql_table(tmp_path / "wh", NAMESPACE, "nested").schema()
    actual = {path: schema.find_field(path).field_id for path in printed}
    assert printed == actual, (printed, actual)
    spec = readers.pyiceberg_sql_table(tmp_path / "wh", NAMESPACE, "nested").spec()
    assert [(f["source"], f["source_id"]) for f in described["partition_spec"]] == [("b", spec.fields[0].source_id)]


def test_an_ingest_that_fails_its_routing_creates_nothing(tmp_path: Path) -> None:
    pipelines = setup(tmp_path)
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event([avro(1, 1.0)], topic="payments.typo")))
    out = icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={tmp_path / 'wh'}")
    assert out.returncode != 0 and '"payments.typo"' in out.stderr, out.stderr
    assert not (tmp_path / "wh").exists(), "no warehouse, catalog or table metadata before the checks pass"


@pytest.mark.parametrize("precision", [None, "reject", "truncate"])
def test_timestamp_precision_is_one_rule_for_the_pipeline(tmp_path: Path, precision: str | None) -> None:
    schema = {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}, "t": {"type": "string", "format": "time"}}}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    pipelines = tmp_path / "p.toml"
    extra = f'timestamp_precision = "{precision}"\n' if precision else ""
    pipelines.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "stamps"\ntopics = ["s"]\nformat = "json"\nschema = "s.json"\n{extra}')
    values = [{"id": 1, "at": "1969-12-31T23:59:59.999999999Z", "t": "10:00:00.0000019"}, {"id": 2, "at": "2024-05-01T00:00:00.5Z"}]
    summary, _ = ingest(tmp_path, pipelines, event([json.dumps(v).encode() for v in values], topic="s"))
    if precision == "truncate":
        assert (summary["written"], summary["dead_letter"]) == (2, 0), summary
        import pyarrow as pa

        table = readers.pyiceberg_sql_table(tmp_path / "wh", NAMESPACE, "stamps").scan().to_arrow()
        got = {r["id"]: (r["at"], r["t"]) for r in table.select(["id", "at", "t"]).cast(
            pa.schema([("id", pa.int64()), ("at", pa.int64()), ("t", pa.int64())])).to_pylist()}
        assert got[1] == (-1, 36_000_000_001), got  # the microsecond at or before, also before 1970
    else:
        assert (summary["written"], summary["dead_letter"]) == (1, 1), summary
        dead = rows(tmp_path, "stamps_dead_letter")
        assert "finer than the column's microseconds" in dead[0]["error"] and "timestamp_precision" in dead[0]["error"], dead
