"""Schema registries and schema evolution end to end.

Producers of four schema versions (see registry_writers.py) write through a Confluent-compatible
registry (the stand-in in confluent_registry.py, frames by confluent-kafka's serializers) and
the AWS Glue Schema Registry (moto; frames built from its documented format). `icestream
ingest` decodes every record with its writer's schema; the table evolves in the data commit;
PyIceberg and DuckDB read the evolved schema with nulls where older writers had no value.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

import readers
from conftest import AWS_ENV
from confluent_registry import ConfluentRegistry
from registry_writers import avro_datum, avro_schema, confluent_producers, expected_row, glue_frame, record, schema_file

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
NAMESPACE = "reg"
AUTH = "icestream:s3cret"

# (partition, version, i): batch 1 has v1 and v2 interleaved on two partitions; batch 2 adds v3
# and the incompatible v4 among v1/v2 records.
BATCH1 = [(0, "v1", 0), (0, "v2", 1), (1, "v2", 10), (0, "v1", 2), (1, "v1", 11), (0, "v2", 3), (1, "v2", 12)]
BATCH2 = [(0, "v3", 4), (1, "v4", 13), (0, "v1", 5), (1, "v3", 14), (0, "v4", 6), (0, "v2", 7), (1, "v1", 15), (0, "v3", 8)]
Placed = list[tuple[int, int, str, int]]  # (partition, offset, version, i)


def icestream(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env={**base, "RUST_LOG": "warn", **(env or {})})
    if check and out.returncode != 0:
        raise AssertionError(f"icestream {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


def summary(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.strip().splitlines()[-1])


def place(batch: list[tuple[int, str, int]], next_offset: dict[int, int]) -> Placed:
    """Give each record the next offset of its partition."""
    out = []
    for partition, version, i in batch:
        out.append((partition, next_offset.get(partition, 0), version, i))
        next_offset[partition] = next_offset.get(partition, 0) + 1
    return out


def write_event(path: Path, topic: str, placed: Placed, produce: Callable[[str, int], bytes],
                metadata: Callable[[str, int], dict] | None = None) -> Path:
    records: dict[str, list[dict]] = {}
    for partition, offset, version, i in placed:
        record = {"topic": topic, "partition": partition, "offset": offset, "timestamp": 1714564800000 + offset,
                  "timestampType": "CREATE_TIME", "value": base64.b64encode(produce(version, i)).decode(), "headers": []}
        if metadata is not None:
            record["valueSchemaMetadata"] = metadata(version, i)
        records.setdefault(f"{topic}-{partition}", []).append(record)
    path.write_text(json.dumps({"eventSource": "aws:kafka", "eventSourceArn": "arn:aws:kafka:us-east-1:1:cluster/c/1",
                                "bootstrapServers": "127.0.0.1:9092", "records": records}))
    return path


def read_rows(warehouse: Path, table: str) -> list[tuple[str, list[dict]]]:
    key = lambda r: (r["kafka_partition"], r["kafka_offset"])  # noqa: E731
    py = readers.pyiceberg_sql_table(warehouse, NAMESPACE, table).scan().to_arrow().to_pylist()
    duck = readers.duckdb_scan(readers.metadata_location_sql(warehouse, NAMESPACE, table)).to_pylist()
    return [("pyiceberg", sorted(py, key=key)), ("duckdb", sorted(duck, key=key))]


def assert_evolved(warehouse: Path, placed: Placed) -> None:
    """Every v1–v3 record once, as its writer wrote it, in the v3 shape; v4 nowhere."""
    want = sorted(((p, o), expected_row(v, i)) for p, o, v, i in placed if v != "v4")
    for reader, rows in read_rows(warehouse, "orders"):
        got = [((r["kafka_partition"], r["kafka_offset"]), {k: r[k] for k in ("id", "name", "qty", "note", "ship")}) for r in rows]
        assert got == want, f"{reader} rows differ"
    schema = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders").schema()
    assert [f.name for f in schema.fields] == ["id", "name", "qty", "ship", "kafka_topic", "kafka_partition", "kafka_offset", "note"]
    assert str(schema.find_field("qty").field_type) == "long"
    assert schema.find_field("ship.zip").optional and schema.find_field("note").optional


def assert_v4_dead_letters(warehouse: Path, placed: Placed) -> None:
    dead = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    assert sorted((d["kafka_partition"], d["kafka_offset"]) for d in dead) == sorted((p, o) for p, o, v, _ in placed if v == "v4")
    for d in dead:
        assert "field `name`" in d["error"] and "long" in d["error"] and "string" in d["error"], d["error"]


def confluent_pipeline(tmp: Path, fmt: str, topic: str, url: str, initial: str | None) -> Path:
    lines = [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{topic}"]', f'format = "{fmt}"',
             'registry = "confluent"', f'registry_url = "{url}"']
    if initial:
        path, message = schema_file(fmt, initial, tmp)
        lines.append(f'schema = "{path}"')
        if message:
            lines.append(f'message = "{message}"')
    pipeline = tmp / "pipelines.toml"
    pipeline.write_text("\n".join(lines) + "\n")
    return pipeline


def glue_schema(glue: Any, registry: str, data_format: str, versions: dict[str, str]) -> dict[str, str]:
    """Register `versions` in order as schema `orders` of Glue registry `registry` (registry and
    schema created with the first one the registry sees); returns each version's SchemaVersionId."""
    ids = {}
    for version, definition in versions.items():
        if registry not in [r["RegistryName"] for r in glue.list_registries()["Registries"]]:
            glue.create_registry(RegistryName=registry)
            out = glue.create_schema(RegistryId={"RegistryName": registry}, SchemaName="orders", DataFormat=data_format,
                                     Compatibility="NONE", SchemaDefinition=definition)
        else:
            out = glue.register_schema_version(SchemaId={"RegistryName": registry, "SchemaName": "orders"}, SchemaDefinition=definition)
        ids[version] = out["SchemaVersionId"]
    return ids


def glue_pipeline(tmp: Path, registry: str, topic: str, fmt: str) -> Path:
    """A pipeline file: table `orders` takes `topic` through Glue registry `registry`, no `schema`."""
    pipeline = tmp / "pipelines.toml"
    pipeline.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "orders"\ntopics = ["{topic}"]\nformat = "{fmt}"\n'
                        f'registry = "glue"\nregistry_name = "{registry}"\nregistry_schema = "orders"\n')
    return pipeline


@pytest.fixture(scope="module")
def registry() -> Any:
    r = ConfluentRegistry(auth=AUTH).start()
    yield r
    r.stop()


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json"])
def test_confluent_writers_v1_to_v4_interleaved_evolve_the_table(fmt: str, tmp_path: Path, registry: ConfluentRegistry) -> None:
    topic = f"shop.orders.{fmt}"
    producers = confluent_producers(fmt, registry.url, AUTH, topic, tmp_path)
    produce = lambda v, i: producers[v](i)  # noqa: E731
    pipeline = confluent_pipeline(tmp_path, fmt, topic, registry.url, initial="v1")
    warehouse = tmp_path / "wh"
    knobs = (f"pipelines={pipeline}", f"warehouse={warehouse}", f"registry_auth={AUTH}")
    next_offset: dict[int, int] = {}
    first, second = place(BATCH1, next_offset), place(BATCH2, next_offset)
    # Split batch 1 in two events handled by one warm instance: the second asks the registry nothing.
    e1a = write_event(tmp_path / "e1a.json", topic, first[:4], produce)
    e1b = write_event(tmp_path / "e1b.json", topic, first[4:], produce)
    out = icestream("ingest", str(e1a), str(e1b), *knobs)
    s1a, s1b = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    assert (s1a["written"] + s1b["written"], s1a["dead_letter"] + s1b["dead_letter"]) == (len(first), 0), (s1a, s1b)
    assert s1a["schema_changes"] == 1 and s1b["schema_changes"] == 0, (s1a, s1b)
    # Two calls per writer schema: the schema and the subjects it is registered under.
    assert (s1a["registry_calls"], s1b["registry_calls"]) == (4, 0), f"one fetch per writer schema (v1, v2), then cached: {s1a} {s1b}"
    e2 = write_event(tmp_path / "e2.json", topic, second, produce)
    s2 = summary(icestream("ingest", str(e2), *knobs))
    assert (s2["written"], s2["dead_letter"], s2["schema_rejects"], s2["schema_changes"]) == (6, 2, 2, 1), s2
    assert s2["registry_calls"] == 8, f"a cold instance fetches each of v1..v4 once: {s2}"
    # A redelivery adds nothing; the table and its dead letters hold each record once.
    s3 = summary(icestream("ingest", str(e2), *knobs))
    assert (s3["written"], s3["dead_letter"], s3["skipped_replay"]) == (0, 0, len(second)), s3
    assert_evolved(warehouse, first + second)
    assert_v4_dead_letters(warehouse, first + second)


def test_pipelines_check_shows_the_latest_registered_schema_and_the_verdict(tmp_path: Path, registry: ConfluentRegistry) -> None:
    topic = "shop.orders.checked"
    producers = confluent_producers("avro", registry.url, AUTH, topic, tmp_path)
    producers["v1"](0)
    pipeline = confluent_pipeline(tmp_path, "avro", topic, registry.url, initial=None)
    knobs = (f"warehouse={tmp_path / 'wh'}", f"registry_auth={AUTH}")
    checked = json.loads(icestream("pipelines", "check", str(pipeline), "output=json", *knobs).stdout)["pipelines"][0]
    assert checked["registry"]["verdict"] == "fits" and checked["registry"]["subject"] == f"{topic}-value"
    assert [f["name"] for f in checked["schema"]][:4] == ["id", "name", "qty", "ship"], "no `schema`: the latest version is the table's"
    # The table is created with v1; then a producer registers v2.
    empty = write_event(tmp_path / "empty.json", topic, [], lambda v, i: b"")
    icestream("ingest", str(empty), f"pipelines={pipeline}", *knobs)
    producers["v2"](1)
    checked = json.loads(icestream("pipelines", "check", str(pipeline), "output=json", *knobs).stdout)["pipelines"][0]["registry"]
    assert checked["against"] == "table" and checked["verdict"] == "evolves", checked
    assert "note" in [f["name"] for f in checked["evolved_schema"]], checked
    producers["v4"](2)
    text = icestream("pipelines", "check", str(pipeline), *knobs).stdout
    assert "refused" in text and "field `name`" in text, text
    wrong = icestream("pipelines", "check", str(pipeline), f"warehouse={tmp_path / 'wh'}", "registry_auth=icestream:wrong", check=False)
    assert wrong.returncode != 0 and "401" in wrong.stderr, wrong.stderr


def test_registry_down_fails_the_invocation_an_unknown_id_is_a_dead_letter_and_the_redelivery_lands_once(tmp_path: Path) -> None:
    registry = ConfluentRegistry().start()
    try:
        topic = "shop.orders.flaky"
        producers = confluent_producers("avro", registry.url, None, topic, tmp_path)
        produce = lambda v, i: producers[v](i)  # noqa: E731
        pipeline = confluent_pipeline(tmp_path, "avro", topic, registry.url, initial="v1")
        warehouse = tmp_path / "wh"
        knobs = (f"pipelines={pipeline}", f"warehouse={warehouse}")
        placed = place(BATCH1, {})
        ev = write_event(tmp_path / "e.json", topic, placed, produce)
        icestream("ingest", str(write_event(tmp_path / "none.json", topic, [], produce)), *knobs)  # creates the tables
        registry.stop()
        down = icestream("ingest", str(ev), *knobs, check=False)
        assert down.returncode != 0 and "schema registry" in down.stderr, down.stderr
        for table in ("orders", "orders_dead_letter"):
            assert readers.pyiceberg_sql_table(warehouse, NAMESPACE, table).current_snapshot() is None, f"{table} was written"
        registry.start()
        assert summary(icestream("ingest", str(ev), *knobs))["written"] == len(placed)
        # The registry answers 404 for id 999: a permanent answer, so that record is a dead
        # letter naming the id (issue 46), not an invocation failing until the mapping gives up.
        last = max(o for p, o, _, _ in placed if p == 0)
        unknown = write_event(tmp_path / "u.json", topic, [(0, last + 1, "v1", 0)], lambda v, i: b"\x00\x00\x00\x03\xe7" + avro_datum(v, record(v, i)))
        assert summary(icestream("ingest", str(unknown), *knobs))["dead_letter"] == 1
        dead = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
        assert len(dead) == 1 and "the registry has no schema id 999" in dead[0]["error"] and "404" in dead[0]["error"], dead
        assert summary(icestream("ingest", str(ev), *knobs))["written"] == 0
        rows = read_rows(warehouse, "orders")[0][1]
        assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows) == sorted((p, o) for p, o, _, _ in placed)
    finally:
        registry.stop()


def test_glue_registry_frames_plain_and_zlib_with_the_latest_version_as_initial_schema(
    tmp_path: Path, aws_client: Callable[[str], Any], moto_endpoint: str
) -> None:
    glue = aws_client("glue")
    versions = glue_schema(glue, "shop", "AVRO", {"v1": avro_schema("v1")})
    pipeline = glue_pipeline(tmp_path, "shop", "shop.orders", "avro")
    env = {**AWS_ENV, "AWS_ENDPOINT_URL": moto_endpoint}
    warehouse = tmp_path / "wh"
    knobs = (f"pipelines={pipeline}", f"warehouse={warehouse}")
    next_offset: dict[int, int] = {}
    produce = lambda v, i: glue_frame(versions[v], avro_datum(v, record(v, i)), zlib_compressed=i % 2 == 1)  # noqa: E731
    first = place([r for r in BATCH1 if r[1] == "v1"], next_offset)
    assert summary(icestream("ingest", str(write_event(tmp_path / "e1.json", "shop.orders", first, produce)), *knobs, env=env))["written"] == len(first)
    versions.update(glue_schema(glue, "shop", "AVRO", {v: avro_schema(v) for v in ("v2", "v3", "v4")}))
    rest = place([r for r in BATCH1 if r[1] != "v1"] + BATCH2, next_offset)
    bad_frame = (0, next_offset[0], "v1", 99)
    ev = write_event(tmp_path / "e2.json", "shop.orders", rest + [bad_frame],
                     lambda v, i: b"\x02garbage" if i == 99 else produce(v, i))
    s = summary(icestream("ingest", str(ev), *knobs, env=env))
    assert (s["dead_letter"], s["schema_rejects"]) == (3, 2), s
    assert_evolved(warehouse, first + rest)
    dead = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    frame_error = [d["error"] for d in dead if d["kafka_offset"] == bad_frame[1] and d["kafka_partition"] == 0]
    assert frame_error and "header version byte is 2" in frame_error[0], frame_error
    # A schema version the registry does not have (EntityNotFoundException) is that record's
    # dead letter naming the version, not a failed invocation (issue 46).
    missing = uuid.UUID(int=46)
    gone = (0, next_offset[0] + 1, "v1", 0)
    ev = write_event(tmp_path / "e3.json", "shop.orders", [gone], lambda v, i: glue_frame(str(missing), avro_datum(v, record(v, i))))
    s = summary(icestream("ingest", str(ev), *knobs, env=env))
    assert (s["written"], s["dead_letter"]) == (0, 1), s
    dead = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    reason = [d["error"] for d in dead if d["kafka_offset"] == gone[1]]
    assert reason and f"the registry has no schema version {missing}" in reason[0], reason


def test_glue_protobuf_frames_name_the_message_by_its_sorted_index(
    tmp_path: Path, aws_client: Callable[[str], Any], moto_endpoint: str
) -> None:
    from registry_writers import proto_modules, proto_message, proto_source

    ids = glue_schema(aws_client("glue"), "shop_pb", "PROTOBUF", {v: proto_source(v) for v in ("v1", "v2")})
    modules = proto_modules(tmp_path)
    # Messages sorted by full name: shop.vN.Order = 0, shop.vN.Order.Ship = 1.
    produce = lambda v, i: glue_frame(ids[v], b"\x00" + proto_message(modules[v], record(v, i)).SerializeToString())  # noqa: E731
    pipeline = glue_pipeline(tmp_path, "shop_pb", "shop.pb", "protobuf")
    env = {**AWS_ENV, "AWS_ENDPOINT_URL": moto_endpoint}
    warehouse = tmp_path / "wh"
    placed = place([r for r in BATCH1], {})
    s = summary(icestream("ingest", str(write_event(tmp_path / "e.json", "shop.pb", placed, produce)),
                          f"pipelines={pipeline}", f"warehouse={warehouse}", env=env))
    assert (s["written"], s["dead_letter"]) == (len(placed), 0), s
    for reader, rows in read_rows(warehouse, "orders"):
        got = [((r["kafka_partition"], r["kafka_offset"]), r["note"], r["ship"]) for r in rows]
        want = sorted(((p, o), expected_row(v, i)["note"], expected_row(v, i)["ship"]) for p, o, v, i in placed)
        assert got == want, reader


def test_records_the_mapping_validated_arrive_as_json_or_source_with_value_schema_metadata(tmp_path: Path) -> None:
    """The event source mapping's own registry support: no frame; `valueSchemaMetadata` names the
    writer schema; the value is the record as JSON (EventRecordFormat JSON) or the bare Avro
    datum (SOURCE). Both evolve the table like framed records."""
    registry = ConfluentRegistry().start()
    try:
        topic = "shop.orders.esm"
        ids = {v: registry.register(f"{topic}-value", avro_schema(v)) for v in ("v1", "v2")}
        pipeline = confluent_pipeline(tmp_path, "avro", topic, registry.url, initial="v1")
        warehouse = tmp_path / "wh"
        placed = place(BATCH1, {})
        as_json = lambda i: i % 2 == 0  # noqa: E731
        produce = lambda v, i: json.dumps(record(v, i)).encode() if as_json(i) else avro_datum(v, record(v, i))  # noqa: E731
        meta = lambda v, i: {"dataFormat": "AVRO", "schemaId": str(ids[v])}  # noqa: E731
        ev = write_event(tmp_path / "e.json", topic, placed, produce, metadata=meta)
        s = summary(icestream("ingest", str(ev), f"pipelines={pipeline}", f"warehouse={warehouse}"))
        assert (s["written"], s["dead_letter"], s["schema_changes"]) == (len(placed), 0, 1), s
        want = sorted(((p, o), expected_row(v, i)) for p, o, v, i in placed)
        for reader, rows in read_rows(warehouse, "orders"):
            got = [((r["kafka_partition"], r["kafka_offset"]), {k: r[k] for k in ("id", "name", "qty", "note", "ship")}) for r in rows]
            assert got == want, f"{reader} rows differ"
        # An id that is neither a Confluent id nor a Glue version id is a dead letter naming it.
        bad = write_event(tmp_path / "bad.json", topic, [(0, 100, "v1", 100)], produce, metadata=lambda v, i: {"dataFormat": "AVRO", "schemaId": "x1"})
        assert summary(icestream("ingest", str(bad), f"pipelines={pipeline}", f"warehouse={warehouse}"))["dead_letter"] == 1
    finally:
        registry.stop()


def assert_refused_as_another_subjects(warehouse: Path, offset: int, *names: str) -> None:
    """The record at `offset` of partition 0 is a dead letter naming each of `names`; the table
    kept its v1 columns (the other subject's `note` was not added)."""
    dead = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    reason = [d["error"] for d in dead if (d["kafka_partition"], d["kafka_offset"]) == (0, offset)]
    assert reason and all(n in reason[0] for n in names), (reason, names)
    schema = readers.pyiceberg_sql_table(warehouse, NAMESPACE, "orders").schema()
    assert "note" not in [f.name for f in schema.fields], f"another subject's schema evolved the table: {schema}"
    rows = read_rows(warehouse, "orders")[0][1]
    assert [(r["kafka_partition"], r["kafka_offset"]) for r in rows] == [(0, 0)], rows


def test_a_confluent_id_of_another_subject_is_a_dead_letter_not_a_table_change(tmp_path: Path) -> None:
    """Issue 52: an id is read only under the pipeline's subject (`<topic>-value` here). A
    producer framing its record with the id of `payments-value` (a schema with an extra column)
    gets a dead letter naming the id, its subject and the pipeline's; the table is unchanged."""
    registry = ConfluentRegistry().start()
    try:
        topic = "shop.orders.bound"
        own = registry.register(f"{topic}-value", avro_schema("v1"))
        foreign = registry.register("payments-value", avro_schema("v2"))
        frame = lambda schema_id, v, i: b"\x00" + schema_id.to_bytes(4, "big") + avro_datum(v, record(v, i))  # noqa: E731
        produce = lambda v, i: frame(own, v, i) if v == "v1" else frame(foreign, v, i)  # noqa: E731
        pipeline = confluent_pipeline(tmp_path, "avro", topic, registry.url, initial="v1")
        warehouse = tmp_path / "wh"
        ev = write_event(tmp_path / "e.json", topic, [(0, 0, "v1", 0), (0, 1, "v2", 1)], produce)
        s = summary(icestream("ingest", str(ev), f"pipelines={pipeline}", f"warehouse={warehouse}"))
        assert (s["written"], s["dead_letter"], s["schema_changes"]) == (1, 1, 0), s
        assert_refused_as_another_subjects(warehouse, 1, f"schema id {foreign}", "payments-value", f"{topic}-value")
    finally:
        registry.stop()


def test_a_glue_version_of_another_schema_is_a_dead_letter_not_a_table_change(
    tmp_path: Path, aws_client: Callable[[str], Any], moto_endpoint: str
) -> None:
    """Issue 52, Glue: a schema version id belongs to one schema of one registry; the pipeline
    reads `registry_schema = "orders"` of registry `shop_bound`. A version of schema `payments`
    (same registry) and one of a schema `orders` in another registry are both refused."""
    glue = aws_client("glue")
    own = glue_schema(glue, "shop_bound", "AVRO", {"v1": avro_schema("v1")})["v1"]
    foreign = glue.create_schema(RegistryId={"RegistryName": "shop_bound"}, SchemaName="payments", DataFormat="AVRO",
                                 Compatibility="NONE", SchemaDefinition=avro_schema("v2"))["SchemaVersionId"]
    elsewhere = glue_schema(glue, "elsewhere", "AVRO", {"v2": avro_schema("v2")})["v2"]
    ids = {0: own, 1: foreign, 2: elsewhere}
    produce = lambda v, i: glue_frame(ids[i], avro_datum(v, record(v, i)))  # noqa: E731
    pipeline = glue_pipeline(tmp_path, "shop_bound", "shop.orders", "avro")
    env = {**AWS_ENV, "AWS_ENDPOINT_URL": moto_endpoint}
    warehouse = tmp_path / "wh"
    ev = write_event(tmp_path / "e.json", "shop.orders", [(0, 0, "v1", 0), (0, 1, "v2", 1), (0, 2, "v2", 2)], produce)
    s = summary(icestream("ingest", str(ev), f"pipelines={pipeline}", f"warehouse={warehouse}", env=env))
    assert (s["written"], s["dead_letter"], s["schema_changes"]) == (1, 2, 0), s
    assert_refused_as_another_subjects(warehouse, 1, f"schema version {foreign}", "shop_bound/payments", "shop_bound/orders")
    assert_refused_as_another_subjects(warehouse, 2, f"schema version {elsewhere}", "elsewhere/orders", "shop_bound/orders")


def test_zlib_frames_past_the_batch_inflation_budget_are_dead_letters_and_memory_stays_bounded(
    tmp_path: Path, aws_client: Callable[[str], Any], moto_endpoint: str
) -> None:
    """Issue 52: Glue-framed zlib payloads of ~60 KB that inflate to 60 MiB each (a v1 record
    whose `name` is 60 MiB of text). 24 of them in one event took the ingest process to ~3 GB
    peak RSS (the issue: 2.17 GB for 16; every payload inflated and decoded). Now a batch
    inflates at most 256 MiB: four records land, the rest are dead letters without being
    inflated, and the peak stays near what those four take (~550 MB in a debug build)."""
    versions = glue_schema(aws_client("glue"), "shop_zlib", "AVRO", {"v1": avro_schema("v1")})
    inflated = 60 << 20
    datum = avro_datum("v1", {**record("v1", 0), "name": "a" * (inflated - 100)})
    bomb = glue_frame(versions["v1"], datum, zlib_compressed=True)
    assert len(bomb) < 100_000, len(bomb)
    count = 24
    ev = write_event(tmp_path / "bombs.json", "shop.orders", [(0, o, "v1", o) for o in range(count)], lambda v, i: bomb)
    pipeline = glue_pipeline(tmp_path, "shop_zlib", "shop.orders", "avro")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env.update(AWS_ENV, AWS_ENDPOINT_URL=moto_endpoint, RUST_LOG="warn")
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        child = subprocess.Popen([BIN, "ingest", str(ev), f"pipelines={pipeline}", f"warehouse={tmp_path / 'wh'}"],
                                 stdout=out, stderr=err, env=env)
        # This child's own figures (getrusage(RUSAGE_CHILDREN) would fold in earlier tests').
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, (tmp_path / "err").read_text()
    peak_mb = usage.ru_maxrss / 1024  # kilobytes on Linux
    # Generous: twice what the budget admits takes, a third of what holding them all took.
    assert peak_mb < 1024, f"peak RSS {peak_mb:.0f} MB for {count} records of {inflated >> 20} MiB inflated each"
    s = json.loads((tmp_path / "out").read_text().strip().splitlines()[-1])
    within = (256 << 20) // inflated
    assert (s["written"], s["dead_letter"]) == (within, count - within), s
    dead = readers.pyiceberg_sql_table(tmp_path / "wh", NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    assert all("inflation budget" in d["error"] for d in dead), sorted({d["error"][:160] for d in dead})
    assert sorted(d["kafka_offset"] for d in dead) == list(range(within, count)), "the first records inflated are the ones that land"
    assert all(d["raw_value"] == bomb for d in dead), "the dead letter keeps the value as it came, not inflated"
