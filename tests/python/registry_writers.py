"""Four versions of one `orders` schema in each format, and producers for them.

v1: id, name, qty (int), ship {city}
v2: + note (optional), + ship.zip (optional)         -> the table gains two columns
v3: qty widened to long                              -> the table's qty becomes long
v4: name becomes a number                            -> refused: its records are dead letters

Values are serialized by independent encoders: confluent-kafka's own Avro, Protobuf (classes
compiled by grpcio-tools' protoc) and JSON Schema serializers for a Confluent registry, and
fastavro plus the documented Glue frame for the Glue Schema Registry.
"""

from __future__ import annotations

import io
import json
import sys
import uuid
import zlib
from pathlib import Path
from typing import Any, Callable

VERSIONS = ("v1", "v2", "v3", "v4")


def avro_schema(version: str) -> str:
    ship = [{"name": "city", "type": "string"}]
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "long" if version == "v4" else "string"},
        {"name": "qty", "type": "long" if version in ("v3", "v4") else "int"},
    ]
    if version != "v1":
        ship.append({"name": "zip", "type": ["null", "string"], "default": None})
        fields.append({"name": "note", "type": ["null", "string"], "default": None})
    fields.insert(3, {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": ship}})
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": fields})


def json_schema(version: str) -> str:
    ship: dict[str, Any] = {"city": {"type": "string"}}
    props: dict[str, Any] = {
        "id": {"type": "integer"},
        "name": {"type": "integer"} if version == "v4" else {"type": "string"},
        "qty": {"type": "integer"} if version in ("v3", "v4") else {"type": "integer", "format": "int32"},
    }
    if version != "v1":
        ship["zip"] = {"type": "string"}
        props["note"] = {"type": "string"}
    props["ship"] = {"type": "object", "properties": ship, "required": ["city"]}
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                       "properties": props, "required": ["id", "name", "qty", "ship"]})


def proto_source(version: str) -> str:
    name = "int64 name = 2;" if version == "v4" else "string name = 2;"
    qty = "int64 qty = 3;" if version in ("v3", "v4") else "int32 qty = 3;"
    extra_ship = "string zip = 2;" if version != "v1" else ""
    extra = "optional string note = 5;" if version != "v1" else ""
    return (f'syntax = "proto3";\npackage shop.{version};\n'
            f"message Order {{ int64 id = 1; {name} {qty} Ship ship = 4; {extra}\n"
            f"  message Ship {{ string city = 1; {extra_ship} }} }}\n")


def record(version: str, i: int) -> dict[str, Any]:
    """The value a producer of `version` sends as its i-th record."""
    value: dict[str, Any] = {"id": i, "name": 1000 + i if version == "v4" else f"n{i}",
                             "qty": (1 << 40) + i if version in ("v3", "v4") else i, "ship": {"city": f"c{i}"}}
    if version != "v1":
        value["ship"]["zip"] = f"z{i}"
        value["note"] = f"note {i}"
    return value


def expected_row(version: str, i: int) -> dict[str, Any]:
    """The row the evolved table holds for that record: older writers leave the new columns null."""
    r = record(version, i)
    return {"id": r["id"], "name": r["name"], "qty": r["qty"], "note": r.get("note"),
            "ship": {"city": r["ship"]["city"], "zip": r["ship"].get("zip")}}


def schema_file(fmt: str, version: str, tmp: Path) -> tuple[Path, str | None]:
    """`version` as a schema file a pipeline's `schema` key names, and its `message`."""
    if fmt == "avro":
        path = tmp / f"orders_{version}.avsc"
        path.write_text(avro_schema(version))
        return path, None
    if fmt == "json":
        path = tmp / f"orders_{version}.schema.json"
        path.write_text(json_schema(version))
        return path, None
    path = tmp / f"orders_{version}.proto"
    path.write_text(proto_source(version))
    return path, f"shop.{version}.Order"


def proto_modules(tmp: Path) -> dict[str, Any]:
    from grpc_tools import protoc

    modules = {}
    for version in VERSIONS:
        path = tmp / f"orders_{version}.proto"
        path.write_text(proto_source(version))
        assert protoc.main(["protoc", f"-I{tmp}", f"--python_out={tmp}", str(path)]) == 0
    sys.path.insert(0, str(tmp))
    try:
        for version in VERSIONS:
            modules[version] = __import__(f"orders_{version}_pb2")
    finally:
        sys.path.remove(str(tmp))
    return modules


def proto_message(module: Any, value: dict[str, Any]) -> Any:
    m = module.Order(id=value["id"], name=value["name"], qty=value["qty"])
    m.ship.city = value["ship"]["city"]
    if "zip" in value["ship"]:
        m.ship.zip = value["ship"]["zip"]
    if "note" in value:
        m.note = value["note"]
    return m


def confluent_producers(fmt: str, registry_url: str, auth: str | None, topic: str, tmp: Path) -> dict[str, Callable[[int], bytes]]:
    """Per version, a function i -> framed value, by confluent-kafka's serializers."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url, **({"basic.auth.user.info": auth} if auth else {})})
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"auto.register.schemas": True}
    producers: dict[str, Callable[[int], bytes]] = {}
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        for v in VERSIONS:
            s = AvroSerializer(client, avro_schema(v), conf=conf)
            producers[v] = lambda i, s=s, v=v: s(record(v, i), ctx)
    elif fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        for v in VERSIONS:
            s = JSONSerializer(json_schema(v), client, conf=conf)
            producers[v] = lambda i, s=s, v=v: s(record(v, i), ctx)
    else:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        modules = proto_modules(tmp)
        for v in VERSIONS:
            s = ProtobufSerializer(modules[v].Order, client, conf={**conf, "use.deprecated.format": False})
            producers[v] = lambda i, s=s, v=v: s(proto_message(modules[v], record(v, i)), ctx)
    return producers


def glue_frame(version_id: str, payload: bytes, zlib_compressed: bool = False) -> bytes:
    """The Glue Schema Registry wire format: version 3, compression (0 none / 5 zlib), the
    schema version UUID, then the payload."""
    body = zlib.compress(payload) if zlib_compressed else payload
    return bytes([3, 5 if zlib_compressed else 0]) + uuid.UUID(version_id).bytes + body


def avro_datum(version: str, value: dict[str, Any]) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(avro_schema(version))), value)
    return buf.getvalue()
