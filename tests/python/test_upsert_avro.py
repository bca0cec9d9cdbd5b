"""Debezium change events in Avro through a Confluent registry (upsert pipelines).

The independent generator's change stream (cdc_generator.py: composite key, snapshot reads,
inserts, updates, deletes with Kafka tombstones, stale re-deliveries, 4 partitions, 2% re-sent,
random cuts and replays) is written the way Debezium's AvroConverter writes it: an envelope
record registered with `connect.name` semantic types (ZonedTimestamp, Date, Uuid, Connect
Decimal), serialized and framed by confluent-kafka's AvroSerializer against the registry
stand-in. Halfway the connector's schema gains a column (writer v2). The mirror read by
PyIceberg and DuckDB equals the source table, values exactly, whether the table's schema comes
from the registry's latest envelope or from the pipeline's own row schema (then evolved by v2).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

import pytest

import cdc_generator as gen
import readers
from confluent_registry import ConfluentRegistry
from test_upsert import BIN, TOPIC, icestream, ingest_all, normalized

pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
NAMESPACE = "cdc_avro"
COLUMNS = ["tenant", "order_id", "note", "amount", "updated_at", "born", "uid", "channel"]


def envelope_schema(version: str) -> str:
    """The envelope Debezium's AvroConverter registers for a PostgreSQL table."""
    def semantic(avro_type: str, name: str, **extra: Any) -> list[Any]:
        return ["null", {"type": avro_type, "connect.version": 1, "connect.name": name, **extra}]

    row = [
        {"name": "tenant", "type": "string"},
        {"name": "order_id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": semantic("bytes", "org.apache.kafka.connect.data.Decimal", scale=2, precision=16, logicalType="decimal",
                                            **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "16"}}), "default": None},
        {"name": "updated_at", "type": semantic("string", "io.debezium.time.ZonedTimestamp"), "default": None},
        {"name": "born", "type": semantic("int", "io.debezium.time.Date"), "default": None},
        {"name": "uid", "type": semantic("string", "io.debezium.data.Uuid"), "default": None},
    ]
    if version == "v2":
        row.append({"name": "channel", "type": ["null", "string"], "default": None})
    value = {"type": "record", "name": "Value", "namespace": "db.shop.orders", "fields": row, "connect.name": "db.shop.orders.Value"}
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"}, {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"}, {"name": "snapshot", "type": ["null", "string"], "default": None},
        {"name": "db", "type": "string"}, {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": None}, {"name": "lsn", "type": ["null", "long"], "default": None}],
        "connect.name": "io.debezium.connector.postgresql.Source"}
    transaction = {"type": "record", "name": "block", "namespace": "event", "fields": [
        {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"}, {"name": "data_collection_order", "type": "long"}]}
    return json.dumps({"type": "record", "name": "Envelope", "namespace": "db.shop.orders", "connect.name": "db.shop.orders.Envelope", "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": source},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", transaction], "default": None}]})


def channel(key: tuple) -> str:
    return f"web-{key[1] % 3}"


def avro_row(row: dict[str, Any], version: str) -> dict[str, Any]:
    out = {
        "tenant": row["tenant"], "order_id": row["order_id"], "note": row["note"],
        "amount": Decimal(row["amount"]).scaleb(-2),
        "updated_at": row["updated_at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "born": (row["born"] - gen.EPOCH).days,
        "uid": str(row["uid"]),
    }
    if version == "v2":
        out["channel"] = channel((row["tenant"], row["order_id"]))
    return out


def encoder(registry: ConfluentRegistry, source: gen.Source) -> tuple[Callable[[gen.Change, dict | None], bytes], dict[int, str]]:
    """Debezium's AvroConverter: v1 for the first half of the changes, v2 after."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry.url})
    serializers = {v: AvroSerializer(client, envelope_schema(v), conf={"auto.register.schemas": True}) for v in ("v1", "v2")}
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    version = {id(c): ("v1" if i < len(source.changes) // 2 else "v2") for i, c in enumerate(source.changes)}

    def encode(change: gen.Change, before: dict | None) -> bytes:
        v = version[id(change)]
        payload = {
            "before": None if before is None else avro_row(before, v),
            "after": None if change.row is None else avro_row(change.row, v),
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "db", "ts_ms": 1764460800000,
                       "snapshot": "true" if change.op == "r" else "false", "db": "shop", "schema": "public", "table": "orders",
                       "txId": change.lsn // 10, "lsn": change.lsn},
            "op": change.op, "ts_ms": 1764460800000, "transaction": None,
        }
        if change.op == "d":
            # Default REPLICA IDENTITY: `before` holds the key columns only.
            payload["before"] = {"tenant": change.key[0], "order_id": change.key[1], "note": None, "amount": None,
                                 "updated_at": None, "born": None, "uid": None, **({"channel": None} if v == "v2" else {})}
        return serializers[v](payload, ctx)

    return encode, {id(c): version[id(c)] for c in source.changes}


def expected(source: gen.Source, versions: dict[int, str]) -> dict[tuple, dict]:
    """The source table, with `channel` where the key's last change was written by v2."""
    last = {c.key: c for c in source.changes if c.row is not None}
    out = {}
    for key, row in gen.oracle(source).items():
        out[key] = {**{c: row[c] for c in COLUMNS if c != "channel"}, "amount": Decimal(row["amount"]).scaleb(-2),
                    "channel": channel(key) if versions[id(last[key])] == "v2" else None}
    return out


ROW_AVSC = {"type": "record", "name": "Order", "fields": [
    {"name": "tenant", "type": "string"},
    {"name": "order_id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 16, "scale": 2}], "default": None},
    {"name": "updated_at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    {"name": "born", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    {"name": "uid", "type": ["null", {"type": "string", "logicalType": "uuid"}], "default": None}]}


def ingest_through(registry: ConfluentRegistry, tmp_path: Path, envelope: list[str], table_schema: str,
                   msgs: list[gen.Message], rng: random.Random) -> tuple[Path, list[dict]]:
    """Ingest `msgs` through an Avro upsert pipeline reading the registry, with `envelope`'s
    keys; its table made from the registry, or from ROW_AVSC (`row-file`, then evolved)."""
    lines = [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]', 'format = "avro"',
             'registry = "confluent"', f'registry_url = "{registry.url}"', 'partition_by = ["bucket(4, order_id)"]',
             'key = ["tenant", "order_id"]', 'mode = "upsert"', "changelog = true", *envelope]
    if table_schema == "row-file":
        (tmp_path / "order.avsc").write_text(json.dumps(ROW_AVSC))
        lines.append('schema = "order.avsc"')
    return ingest_all(tmp_path, lines, msgs, rng)


TABLE_TYPES = {"amount": "decimal(16, 2)", "updated_at": "timestamptz", "born": "date", "uid": "uuid"}


def check_mirror(wh: Path, want: dict[tuple, dict], table_schema: str, table_types: dict[str, str] = TABLE_TYPES) -> None:
    """PyIceberg and DuckDB read `want` from the table, in its types; v2's column reached the
    table and its changelog."""
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert all(types[name] == ty for name, ty in table_types.items()), types
    assert "channel" in types, "v2's new column reached the table"
    if table_schema == "row-file":
        assert len(table.metadata.schemas) > 1, "the table was made from the row file and evolved by v2"
    by_pyiceberg = normalized(table.scan().to_arrow().to_pylist(), COLUMNS)
    by_duckdb = normalized(readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, "orders")).to_pylist(), COLUMNS)
    for name, got in [("pyiceberg", by_pyiceberg), ("duckdb", by_duckdb)]:
        assert got == want, f"{name}: mirror differs from the source table"
    changelog = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog")
    assert "channel" in {f.name for f in changelog.schema().fields}


@pytest.mark.parametrize("table_schema", ["registry", "row-file"])
def test_debezium_avro_through_a_registry_mirrors_the_source_exactly(tmp_path: Path, table_schema: str) -> None:
    registry = ConfluentRegistry().start()
    try:
        rng = random.Random(31)
        source = gen.Source(rng)
        source.run(keys=60, changes=240)
        encode, versions = encoder(registry, source)
        msgs = gen.messages(source, "debezium", rng, encode=encode)
        wh, summaries = ingest_through(registry, tmp_path, ['envelope = "debezium"', 'order_by = "source.lsn"'], table_schema, msgs, rng)
    finally:
        registry.stop()

    assert sum(s["dead_letter"] for s in summaries) == 0, summaries
    assert sum(s["upsert_stale"] for s in summaries) > 0, "stale re-deliveries were seen and refused"
    want = expected(source, versions)
    assert any(v["channel"] for v in want.values()) and any(v["channel"] is None for v in want.values())
    check_mirror(wh, want, table_schema)
    changelog = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog")
    rows = changelog.scan().to_arrow().to_pylist()
    records = [(r["kafka_partition"], r["kafka_offset"]) for r in rows]
    assert len(records) == len(set(records)), "each record once in the changelog (a producer's retry is another record)"
    ids = {(r["operation"], r["tenant"], r["order_id"], r["source_position"]) for r in rows}
    code = {"r": "I", "c": "I", "u": "U", "d": "D"}
    assert sorted(ids) == sorted({(code[c.op], c.key[0], c.key[1], c.lsn) for c in source.changes})


def plain_row(row: dict[str, Any], version: str) -> dict[str, Any]:
    """A source row as confluent-kafka's AvroSerializer takes it for ROW_AVSC (+ v2's channel)."""
    out = {"tenant": row["tenant"], "order_id": row["order_id"], "note": row["note"],
           "amount": Decimal(row["amount"]).scaleb(-2), "updated_at": row["updated_at"], "born": row["born"], "uid": str(row["uid"])}
    if version == "v2":
        out["channel"] = channel((row["tenant"], row["order_id"]))
    return out


def row_schema(version: str) -> str:
    fields = list(ROW_AVSC["fields"])
    if version == "v2":
        fields.append({"name": "channel", "type": ["null", "string"], "default": None})
    return json.dumps({**ROW_AVSC, "fields": fields})


KEY_AVSC = json.dumps({"type": "record", "name": "OrderKey", "fields": [
    {"name": "tenant", "type": "string"}, {"name": "order_id", "type": "long"}]})


@pytest.mark.parametrize("table_schema", ["registry", "row-file"])
def test_a_keyed_avro_topic_through_a_registry_mirrors_the_source_exactly(tmp_path: Path, table_schema: str) -> None:
    """A compacted topic written by confluent-kafka's AvroSerializer: Avro rows under Avro
    record keys, a null value deleting its key, writer v1 then v2 (a new column) halfway."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = ConfluentRegistry().start()
    try:
        rng = random.Random(47)
        source = gen.Source(rng)
        source.run(keys=60, changes=240)
        client = SchemaRegistryClient({"url": registry.url})
        conf = {"auto.register.schemas": True}
        values = {v: AvroSerializer(client, row_schema(v), conf=conf) for v in ("v1", "v2")}
        keys = AvroSerializer(client, KEY_AVSC, conf=conf)
        value_ctx, key_ctx = SerializationContext(TOPIC, MessageField.VALUE), SerializationContext(TOPIC, MessageField.KEY)
        versions = {id(c): ("v1" if i < len(source.changes) // 2 else "v2") for i, c in enumerate(source.changes)}

        def encode(change: gen.Change, _before: dict | None) -> bytes | None:
            return None if change.row is None else values[versions[id(change)]](plain_row(change.row, versions[id(change)]), value_ctx)

        def encode_key(key: tuple) -> bytes:
            return keys({"tenant": key[0], "order_id": key[1]}, key_ctx)

        msgs = gen.messages(source, "row", rng, encode=encode, encode_key=encode_key)
        assert all(m.key[0] == 0 for m in msgs), "every record key is framed"
        wh, summaries = ingest_through(registry, tmp_path, ['envelope = "row"'], table_schema, msgs, rng)
    finally:
        registry.stop()

    assert sum(s["dead_letter"] for s in summaries) == 0, summaries
    want = expected(source, versions)
    assert {c.key for c in source.changes} - set(want), "the stream deletes some keys"
    check_mirror(wh, want, table_schema)
    changelog = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog")
    # Every record of a keyed topic is a change (a producer's retry too: a newer offset).
    assert changelog.scan().to_arrow().num_rows == len(msgs), "each change once in the changelog"


@pytest.mark.parametrize("envelope", ["debezium", "row"])
def test_an_id_the_registry_does_not_have_is_a_dead_letter_in_an_upsert_pipeline(tmp_path: Path, envelope: str) -> None:
    """A value (Debezium) or a tombstone's record key (keyed topic) framed with schema id 999,
    which the registry answers 404 for: that record is a dead letter naming the id (a permanent
    answer), the rest lands, and the invocation does not fail until the mapping gives up."""
    registry = ConfluentRegistry().start()
    try:
        rng = random.Random(5)
        source = gen.Source(rng)
        source.run(keys=10, changes=30)
        unknown = b"\x00\x00\x00\x03\xe7"
        if envelope == "debezium":
            encode, _ = encoder(registry, source)
            msgs = gen.messages(source, "debezium", rng, encode=encode)
            msgs.append(gen.Message(key=msgs[0].key, value=unknown + b"\x02"))
            lines = ['envelope = "debezium"', 'order_by = "source.lsn"']
        else:
            from confluent_kafka.schema_registry import SchemaRegistryClient
            from confluent_kafka.schema_registry.avro import AvroSerializer
            from confluent_kafka.serialization import MessageField, SerializationContext

            client = SchemaRegistryClient({"url": registry.url})
            value = AvroSerializer(client, row_schema("v1"), conf={"auto.register.schemas": True})
            key = AvroSerializer(client, KEY_AVSC, conf={"auto.register.schemas": True})
            vctx, kctx = SerializationContext(TOPIC, MessageField.VALUE), SerializationContext(TOPIC, MessageField.KEY)
            msgs = gen.messages(source, "row", rng, encode=lambda c, _b: None if c.row is None else value(plain_row(c.row, "v1"), vctx),
                                encode_key=lambda k: key({"tenant": k[0], "order_id": k[1]}, kctx))
            msgs.append(gen.Message(key=unknown + b"\x02", value=None))
            lines = ['envelope = "row"']
        wh, summaries = ingest_through(registry, tmp_path, lines, "registry", msgs, rng)
    finally:
        registry.stop()
    assert sum(s["dead_letter"] for s in summaries) == 1, summaries
    dead = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_dead_letter").scan().to_arrow().to_pylist()
    assert len(dead) == 1 and "the registry has no schema id 999" in dead[0]["error"], dead
    assert dead[0]["kafka_offset"] == sum(1 for m in msgs if m.partition == 0) - 1, dead


def protobuf_key_encoder(client: Any, ctx: Any, tmp: Path) -> Callable[[int], bytes]:
    """Record keys by confluent-kafka's ProtobufSerializer: `OrderKey`, the second message of
    its file (message index [1]), compiled by grpcio-tools' protoc."""
    import sys

    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from grpc_tools import protoc

    (tmp / "order_key.proto").write_text('syntax = "proto3";\npackage shop.keys;\nmessage Unused { string x = 1; }\nmessage OrderKey { int64 id = 1; }\n')
    assert protoc.main(["protoc", f"-I{tmp}", f"--python_out={tmp}", str(tmp / "order_key.proto")]) == 0
    sys.path.insert(0, str(tmp))
    try:
        module = __import__("order_key_pb2")
    finally:
        sys.path.remove(str(tmp))
    serializer = ProtobufSerializer(module.OrderKey, client, conf={"auto.register.schemas": True, "use.deprecated.format": False})
    return lambda i: serializer(module.OrderKey(id=i), ctx)


@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf", "protobuf-framed-keys"])
def test_a_keyed_topic_in_each_registry_format_keeps_the_latest_row_per_key(tmp_path: Path, fmt: str) -> None:
    """Rows of registry_writers' four writers (v2 adds columns, v3 widens qty, v4 is refused)
    by confluent-kafka's serializers, upserted by `id`; deletes are null values under the key a
    serializer of the same format framed (Protobuf keys: the id as text, or a key message the
    ProtobufSerializer framed, the second of its file)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    from registry_writers import confluent_producers, expected_row, schema_file

    topic = "shop.orders"
    framed_protobuf_keys = fmt == "protobuf-framed-keys"
    fmt = "protobuf" if framed_protobuf_keys else fmt
    registry = ConfluentRegistry().start()
    try:
        values = confluent_producers(fmt, registry.url, None, topic, tmp_path)
        client = SchemaRegistryClient({"url": registry.url})
        ctx = SerializationContext(topic, MessageField.KEY)
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer
            key_serializer = AvroSerializer(client, '"long"', conf={"auto.register.schemas": True})
            encode_key: Callable[[int], bytes] = lambda i: key_serializer(i, ctx)
        elif fmt == "json":
            from confluent_kafka.schema_registry.json_schema import JSONSerializer
            json_key = JSONSerializer('{"type": "integer"}', client, conf={"auto.register.schemas": True})
            encode_key = lambda i: json_key(i, ctx)
        elif framed_protobuf_keys:
            encode_key = protobuf_key_encoder(client, ctx, tmp_path)
        else:
            encode_key = lambda i: str(i).encode()
        rng = random.Random(5)
        msgs, want, refused = [], {}, 0
        for step in range(240):
            i = rng.randrange(40)
            version = ("v1", "v2", "v3")[step * 3 // 240]
            if i in want and rng.random() < 0.15:
                msgs.append(gen.Message(encode_key(i), None, i % gen.PARTITIONS))
                del want[i]
            elif rng.random() < 0.05:
                msgs.append(gen.Message(encode_key(i), values["v4"](i), i % gen.PARTITIONS))
                refused += 1
            else:
                msgs.append(gen.Message(encode_key(i), values[version](i), i % gen.PARTITIONS))
                want[i] = expected_row(version, i)
        # The table starts from v1 and evolves batch by batch with the writers it meets.
        v1, message = schema_file(fmt, "v1", tmp_path)
        lines = [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{topic}"]', f'format = "{fmt}"',
                 'registry = "confluent"', f'registry_url = "{registry.url}"', f'schema = "{v1.name}"',
                 'key = ["id"]', 'mode = "upsert"', 'envelope = "row"', *([f'message = "{message}"'] if message else [])]
        pipelines = tmp_path / "pipelines.toml"
        pipelines.write_text("\n".join(lines) + "\n")
        wh, summaries = tmp_path / "wh", []
        for n, event in enumerate(gen.events(msgs, topic, rng)):
            path = tmp_path / f"event-{n}.json"
            path.write_text(json.dumps(event))
            summaries.append(icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}"))
    finally:
        registry.stop()

    assert sum(s["dead_letter"] for s in summaries) == refused > 0, "v4's records and only they are dead letters"
    columns = ["id", "name", "qty", "note", "ship"]
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    by_pyiceberg = {r["id"]: {c: r[c] for c in columns} for r in table.scan().to_arrow().to_pylist()}
    by_duckdb = {r["id"]: {c: r[c] for c in columns} for r in readers.duckdb_scan(readers.metadata_location_sql(wh, NAMESPACE, "orders")).to_pylist()}
    for name, got in [("pyiceberg", by_pyiceberg), ("duckdb", by_duckdb)]:
        assert got == want, f"{name}: the table differs from the latest row per key"
