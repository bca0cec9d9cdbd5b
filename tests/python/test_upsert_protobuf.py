"""Debezium change events in Protobuf through the Confluent and Glue registries (upsert pipelines).

The independent generator's change stream (cdc_generator.py: composite key, snapshot reads,
inserts, updates, deletes with Kafka tombstones, stale re-deliveries, 4 partitions, 2% re-sent,
random cuts and replays) is written the way Confluent's ProtobufConverter writes Debezium's
records (with `optional.for.nullables = true`): an `Envelope` message with the row message
`Value` nested in it, `before`/`after`/`source`/`op`/`ts_ms`/`transaction` numbered in Connect's
field order; the Connect Decimal as `confluent.type.Decimal` with its precision and scale in
`confluent.field_meta`; Debezium's own semantic types as the scalars they are written in
(ZonedTimestamp and Uuid text, Date int32 days). The messages are compiled by grpcio-tools'
protoc and serialized and framed by confluent-kafka's ProtobufSerializer against the registry
stand-in, or registered in moto's Glue Schema Registry and framed by its documented header; the
record keys are the Debezium key struct, framed the same way. Halfway the connector's schema
gains a column (writer v2). The table's row is declared as Debezium's AvroConverter would
register it (`order.avsc`: Protobuf cannot say date, uuid or a ZonedTimestamp), or made from the
registry's latest envelope (then those columns hold the converter's scalars).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any, Callable

import pytest

import cdc_generator as gen
import readers
from confluent_registry import ConfluentRegistry
from conftest import AWS_ENV
from registry_writers import glue_frame
from test_upsert import BIN, TOPIC, ingest_all
from test_upsert_avro import NAMESPACE, ROW_AVSC, channel, check_mirror, expected

pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")

# Confluent's built-in imports, as its converter and serializers know them (never registered).
META_PROTO = """syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta { string doc = 1; map<string, string> params = 2; repeated string tags = 3; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
"""
DECIMAL_PROTO = """syntax = "proto3";
package confluent.type;
message Decimal { bytes value = 1; uint32 precision = 2; int32 scale = 3; }
"""


def envelope_proto(version: str) -> str:
    """The envelope the ProtobufConverter registers for Debezium's PostgreSQL `orders` table."""
    v2 = "  optional string channel = 8;\n" if version == "v2" else ""
    return f"""syntax = "proto3";
package db.shop.orders;
import "confluent/meta.proto";
import "confluent/type/decimal.proto";

message Envelope {{
  Value before = 1;
  Value after = 2;
  Source source = 3;
  string op = 4;
  optional int64 ts_ms = 5;
  block transaction = 6;

  message Value {{
    string tenant = 1;
    int64 order_id = 2;
    optional string note = 3;
    confluent.type.Decimal amount = 4 [(confluent.field_meta) = {{ params: [ {{ key: "precision", value: "16" }}, {{ key: "scale", value: "2" }} ] }}];
    optional string updated_at = 5;
    optional int32 born = 6;
    optional string uid = 7;
{v2}  }}
  message Source {{
    string version = 1;
    string connector = 2;
    string name = 3;
    int64 ts_ms = 4;
    optional string snapshot = 5;
    string db = 6;
    string schema = 7;
    string table = 8;
    optional int64 txId = 9;
    optional int64 lsn = 10;
  }}
  message block {{
    string id = 1;
    int64 total_order = 2;
    int64 data_collection_order = 3;
  }}
}}

message Key {{
  string tenant = 1;
  int64 order_id = 2;
}}
"""


def compile_envelope(version: str, tmp: Path) -> tuple[Any, Any]:
    """protoc (grpcio-tools) compiles `version` into a descriptor set, loaded into a pool of its
    own (v1 and v2 share their message names): the Envelope and Key message classes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    src = tmp / f"proto-{version}"
    (src / "confluent" / "type").mkdir(parents=True, exist_ok=True)
    (src / "confluent" / "meta.proto").write_text(META_PROTO)
    (src / "confluent" / "type" / "decimal.proto").write_text(DECIMAL_PROTO)
    (src / "orders.proto").write_text(envelope_proto(version))
    out = src / "orders.desc"
    include = Path(protoc.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{src}", f"-I{include}", "--include_imports", f"--descriptor_set_out={out}", str(src / "orders.proto")]) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    envelope = message_factory.GetMessageClass(pool.FindMessageTypeByName("db.shop.orders.Envelope"))
    key = message_factory.GetMessageClass(pool.FindMessageTypeByName("db.shop.orders.Key"))
    return envelope, key


def unscaled_bytes(n: int) -> bytes:
    """A BigInteger's toByteArray: the shortest big-endian two's complement."""
    return n.to_bytes(max(1, (n + (n < 0)).bit_length() // 8 + 1), "big", signed=True)


def fill_row(value: Any, row: dict[str, Any], version: str) -> None:
    """The converter's row message: Connect Decimal as confluent.type.Decimal; Debezium's
    ZonedTimestamp, Date and Uuid as text, int32 days and text; nulls left unset."""
    value.tenant = row["tenant"]
    value.order_id = row["order_id"]
    if row["note"] is not None:
        value.note = row["note"]
    value.amount.value = unscaled_bytes(row["amount"])
    value.amount.precision = 16
    value.amount.scale = 2
    value.updated_at = row["updated_at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    value.born = (row["born"] - gen.EPOCH).days
    value.uid = str(row["uid"])
    if version == "v2":
        value.channel = channel((row["tenant"], row["order_id"]))


Frame = Callable[[str, Any, str], bytes]  # (version, message, "value" | "key") -> framed bytes


def confluent_framing(registry: ConfluentRegistry, classes: dict[str, tuple[Any, Any]]) -> Frame:
    """confluent-kafka's ProtobufSerializer, registering each writer in the registry stand-in."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry.url})
    conf = {"auto.register.schemas": True, "use.deprecated.format": False}
    serializers = {(v, "value"): ProtobufSerializer(classes[v][0], client, conf=conf) for v in classes}
    serializers[("v1", "key")] = ProtobufSerializer(classes["v1"][1], client, conf=conf)
    ctx = {"value": SerializationContext(TOPIC, MessageField.VALUE), "key": SerializationContext(TOPIC, MessageField.KEY)}
    return lambda v, m, field: serializers[(v, field)](m, ctx[field])


def glue_framing(glue: Any, name: str) -> Frame:
    """The writers registered in Glue registry `name` (schema `orders`, .proto text); a frame is the Glue header
    and the message's index among the file's messages sorted by full name (Envelope 0, Key 4)."""
    ids = {}
    for version in ("v1", "v2"):
        definition = envelope_proto(version)
        if not ids:
            glue.create_registry(RegistryName=name)
            out = glue.create_schema(RegistryId={"RegistryName": name}, SchemaName="orders", DataFormat="PROTOBUF",
                                     Compatibility="NONE", SchemaDefinition=definition)
        else:
            out = glue.register_schema_version(SchemaId={"RegistryName": name, "SchemaName": "orders"}, SchemaDefinition=definition)
        ids[version] = out["SchemaVersionId"]
    index = {"value": b"\x00", "key": b"\x04"}
    return lambda v, m, field: glue_frame(ids[v], index[field] + m.SerializeToString(), zlib_compressed=m.ByteSize() % 2 == 1)


def encoder(frame: Frame, classes: dict[str, tuple[Any, Any]], source: gen.Source) -> tuple[Callable[[gen.Change, dict | None], bytes], Callable[[tuple], bytes], dict[int, str]]:
    """Debezium through the ProtobufConverter: v1 for the first half of the changes, v2 after;
    the record key is Debezium's key struct through the converter too."""
    version = {id(c): ("v1" if i < len(source.changes) // 2 else "v2") for i, c in enumerate(source.changes)}

    def encode(change: gen.Change, before: dict | None) -> bytes:
        v = version[id(change)]
        m = classes[v][0]()
        if change.op == "d":
            # Default REPLICA IDENTITY: `before` holds the key columns only.
            m.before.tenant, m.before.order_id = change.key
        elif before is not None:
            fill_row(m.before, before, v)
        if change.row is not None:
            fill_row(m.after, change.row, v)
        s = m.source
        s.version, s.connector, s.name, s.ts_ms = "2.7.0.Final", "postgresql", "db", 1764460800000
        s.snapshot = "true" if change.op == "r" else "false"
        s.db, s.schema, s.table, s.txId, s.lsn = "shop", "public", "orders", change.lsn // 10, change.lsn
        m.op = change.op
        m.ts_ms = 1764460800000
        return frame(v, m, "value")

    def encode_key(key: tuple) -> bytes:
        k = classes["v1"][1]()
        k.tenant, k.order_id = key
        return frame("v1", k, "key")

    return encode, encode_key, version


def registry_lines(kind: str, url: str | None, glue_name: str) -> list[str]:
    if kind == "glue":
        return ['registry = "glue"', f'registry_name = "{glue_name}"', 'registry_schema = "orders"']
    return ['registry = "confluent"', f'registry_url = "{url}"']


def converter_scalars(want: dict[tuple, dict]) -> dict[tuple, dict]:
    """The source table as a table made from the registry's envelope holds it: Debezium's
    ZonedTimestamp text and Date days as the converter wrote them (uuids compare as UUIDs)."""
    return {k: {**v, "updated_at": v["updated_at"].astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "born": (v["born"] - gen.EPOCH).days} for k, v in want.items()}


@pytest.mark.parametrize("kind", ["confluent", "glue"])
@pytest.mark.parametrize("table_schema", ["row-file", "registry"])
def test_debezium_protobuf_through_a_registry_mirrors_the_source_exactly(
    tmp_path: Path, kind: str, table_schema: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(53)
    source = gen.Source(rng)
    source.run(keys=60, changes=240)
    classes = {v: compile_envelope(v, tmp_path) for v in ("v1", "v2")}
    registry = None
    glue_name = f"cdc_{table_schema.replace('-', '_')}"
    if kind == "glue":
        endpoint = request.getfixturevalue("moto_endpoint")
        for name, value in {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(name, value)
        frame = glue_framing(request.getfixturevalue("aws_client")("glue"), glue_name)
    else:
        registry = ConfluentRegistry().start()
        frame = confluent_framing(registry, classes)
    try:
        encode, encode_key, versions = encoder(frame, classes, source)
        msgs = gen.messages(source, "debezium", rng, encode=encode, encode_key=encode_key)
        assert all(m.value is None or m.value[0] == (3 if kind == "glue" else 0) for m in msgs), "every value is framed"
        lines = [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]', 'format = "protobuf"',
                 *registry_lines(kind, registry.url if registry else None, glue_name), 'partition_by = ["bucket(4, order_id)"]',
                 'key = ["tenant", "order_id"]', 'mode = "upsert"', "changelog = true", 'envelope = "debezium"', 'order_by = "source.lsn"']
        if table_schema == "row-file":
            (tmp_path / "order.avsc").write_text(json.dumps(ROW_AVSC))
            lines.append('schema = "order.avsc"')
        wh, summaries = ingest_all(tmp_path, lines, msgs, rng)
    finally:
        if registry:
            registry.stop()

    assert sum(s["dead_letter"] for s in summaries) == 0, summaries
    assert sum(s["upsert_stale"] for s in summaries) > 0, "stale re-deliveries were seen and refused"
    want = expected(source, versions)
    assert any(v["channel"] for v in want.values()) and any(v["channel"] is None for v in want.values())
    assert {c.key for c in source.changes} - set(want), "the stream deletes some keys"
    if table_schema == "row-file":
        check_mirror(wh, want, table_schema)
    else:
        types = {"amount": "decimal(16, 2)", "updated_at": "string", "born": "int", "uid": "string", "channel": "string"}
        check_mirror(wh, converter_scalars(want), table_schema, types)
    changelog = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders_changelog")
    rows = changelog.scan().to_arrow().to_pylist()
    records = [(r["kafka_partition"], r["kafka_offset"]) for r in rows]
    assert len(records) == len(set(records)), "each record once in the changelog (a producer's retry is another record)"
    ids = {(r["operation"], r["tenant"], r["order_id"], r["source_position"]) for r in rows}
    code = {"r": "I", "c": "I", "u": "U", "d": "D"}
    assert sorted(ids) == sorted({(code[c.op], c.key[0], c.key[1], c.lsn) for c in source.changes}), "each change once"
