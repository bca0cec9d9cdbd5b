"""Pipelines end to end: the user's schemas (tests/schemas/rich.*), records encoded by
independent encoders (fastavro, protobuf compiled by grpcio-tools' protoc, json), one MSK
event carrying three topics for three pipelines, ingested by `icestream ingest`, then read
back by PyIceberg and DuckDB with every value equal to what was produced.

Also: bad records of each format become dead letters whose reason names the field; an
existing table created by PyIceberg in another column order is written by name; pipelines
that cannot write an existing table are refused before anything is written.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import readers

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
NAMESPACE = "shop"
UTC = dt.timezone.utc
N = 40  # good records per format


def icestream(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    if check and out.returncode != 0:
        raise AssertionError(f"icestream {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


# ---------- independent encoders ----------

def avro_records() -> list[dict]:
    rows = []
    for i in range(N):
        rows.append({
            "order_id": 1000 + i,
            "id": uuid.UUID(int=(i + 1) * 7919),
            "placed_at": dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC) + dt.timedelta(minutes=i, milliseconds=i),
            "packed_at": None if i % 3 == 0 else dt.datetime(2024, 5, 2, 8, 0, 0, i, tzinfo=UTC),
            "local_time": dt.datetime(2024, 5, 1, 9, 30, 0, i),
            "pickup": dt.time(10, i % 60, 5, 123000),
            "delivery_date": None if i % 4 == 0 else dt.date(2024, 6, 1) + dt.timedelta(days=i),
            "status": ["NEW", "PAID", "SHIPPED"][i % 3],
            "customer": {
                "name": f"customer-{i}",
                "email": None if i % 2 else f"c{i}@example.com",
                "address": None if i % 5 == 0 else {"street": f"{i} Main St", "zip": f"{10000 + i}"},
            },
            "items": [{"sku": f"sku-{i}-{j}", "quantity": j + 1, "unit_price": Decimal(f"{i}.{j:02d}")} for j in range(i % 3)],
            "attributes": {f"a{j}": i * 10 + j for j in range(i % 4)},
            "total": Decimal(f"{i * 100}.{i % 100:02d}"),
            "note": None if i % 2 == 0 else f"note {i}",
            "weight": 0.5 + i,
            "discount": i / 8,
            "gift": i % 2 == 0,
            "payload": bytes([i, 255 - i]),
            "checksum": bytes([i, i, i, i]),
            "tags": ["x", None, f"t{i}"][: i % 4],
        })
    return rows


def encode_avro(rows: list[dict]) -> list[bytes]:
    import fastavro

    schema = fastavro.parse_schema(json.loads((SCHEMAS / "rich.avsc").read_text()))
    out = []
    for row in rows:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, row)
        out.append(buf.getvalue())
    return out


def proto_module(tmp: Path) -> Any:
    from grpc_tools import protoc
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    code = protoc.main(["protoc", f"-I{SCHEMAS}", f"-I{include}", f"--python_out={tmp}", str(SCHEMAS / "rich.proto")])
    assert code == 0, "protoc failed"
    sys.path.insert(0, str(tmp))
    try:
        import rich_pb2  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp))
    return rich_pb2


def proto_records(pb: Any) -> tuple[list[bytes], list[dict]]:
    """Encoded messages and the rows the table must then hold."""
    encoded, expected = [], []
    for i in range(N):
        m = pb.Order(order_id=2000 + i, status=i % 3, loyalty_points=(1 << 62) + i, visits=4_000_000_000 + i,
                     priority=-i, gift=i % 2 == 1, weight=1.25 * i, discount=i / 4, payload=bytes([i]))
        placed = dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=i)
        if i % 5:
            m.placed_at.FromDatetime(placed)
        if i % 3:
            m.customer.name = f"c{i}"
            if i % 2:
                m.customer.email = f"c{i}@x"
            if i % 4:
                m.customer.address.street = f"{i} Side St"
                m.customer.address.zip = f"{20000 + i}"
        for j in range(i % 3):
            m.items.add(sku=f"p{i}-{j}", quantity=j, unit_price=j + 0.5)
        for j in range(i % 2 + 1):
            m.attributes[f"k{j}"] = -j * i
        if i % 3 == 1:
            m.card_last4 = f"{i:04d}"
        elif i % 3 == 2:
            m.voucher_code = f"V{i}"
        if i % 2:
            m.note.value = f"n{i}"
        if i % 4 == 0:
            m.coupon.value = i * 1000
        m.tags.extend([f"t{j}" for j in range(i % 3)])
        encoded.append(m.SerializeToString())
        customer = None
        if i % 3:
            customer = {"name": f"c{i}", "email": f"c{i}@x" if i % 2 else None,
                        "address": {"street": f"{i} Side St", "zip": f"{20000 + i}"} if i % 4 else None}
        expected.append({
            "order_id": 2000 + i,
            "placed_at": placed if i % 5 else None,
            "status": ["NEW", "PAID", "SHIPPED"][i % 3],
            "customer": customer,
            "items": [{"sku": f"p{i}-{j}", "quantity": j, "unit_price": j + 0.5} for j in range(i % 3)],
            "attributes": {f"k{j}": -j * i for j in range(i % 2 + 1)},
            "card_last4": f"{i:04d}" if i % 3 == 1 else None,
            "voucher_code": f"V{i}" if i % 3 == 2 else None,
            "note": f"n{i}" if i % 2 else None,
            "coupon": i * 1000 if i % 4 == 0 else None,
            "loyalty_points": (1 << 62) + i,
            "visits": 4_000_000_000 + i,
            "priority": -i,
            "tags": [f"t{j}" for j in range(i % 3)],
            "gift": i % 2 == 1,
            "weight": 1.25 * i,
            "discount": i / 4,
            "payload": bytes([i]),
        })
    return encoded, expected


def json_records() -> list[dict]:
    rows = []
    for i in range(N):
        row: dict[str, Any] = {
            "order_id": 3000 + i,
            "id": str(uuid.UUID(int=i + 42)),
            "placed_at": (dt.datetime(2024, 5, 3, tzinfo=UTC) + dt.timedelta(seconds=i, milliseconds=i)).isoformat(),
            "status": ["NEW", "PAID", "SHIPPED"][i % 3],
            "customer": {"name": f"j{i}"},
            "items": [{"sku": f"s{j}", "quantity": j, "unit_price": j * 1.5} for j in range(i % 3)],
            "attributes": {f"m{j}": j for j in range(i % 3)},
            "discount": i * 0.25,
            "gift": bool(i % 2),
            "tags": [f"g{j}" for j in range(i % 2)],
            "ignored_extra_field": {"x": 1},
        }
        if i % 2:
            row["customer"]["email"] = f"j{i}@x"
        if i % 3 == 0:
            row["customer"]["address"] = {"street": "S", "zip": str(i)}
        if i % 4:
            row["delivery_date"] = (dt.date(2024, 7, 1) + dt.timedelta(days=i)).isoformat()
        if i % 5 == 0:
            row["note"] = None
        elif i % 5 == 1:
            row["note"] = f"hello {i}"
        rows.append(row)
    return rows


def json_expected(row: dict) -> dict:
    expected = {k: v for k, v in row.items() if k != "ignored_extra_field"}
    expected["id"] = str(uuid.UUID(row["id"]))
    expected["placed_at"] = dt.datetime.fromisoformat(row["placed_at"])
    expected["delivery_date"] = dt.date.fromisoformat(row["delivery_date"]) if "delivery_date" in row else None
    expected["note"] = row.get("note")
    customer = dict(row["customer"])
    customer.setdefault("email", None)
    customer.setdefault("address", None)
    expected["customer"] = customer
    return expected


# ---------- events and readers ----------

def event(topics: dict[str, list[bytes | None]], start_offset: int = 0) -> dict:
    records: dict[str, list[dict]] = {}
    for topic, values in topics.items():
        records[f"{topic}-0"] = [
            {"topic": topic, "partition": 0, "offset": start_offset + i, "timestamp": 1714564800000 + i,
             "timestampType": "CREATE_TIME", "key": None,
             "value": None if v is None else base64.b64encode(v).decode(),
             "headers": [{"trace": [116, 45, i % 128]}]}
            for i, v in enumerate(values)
        ]
    return {"eventSource": "aws:kafka", "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/c/1",
            "bootstrapServers": "127.0.0.1:9092", "records": records}


def normalize(value: Any) -> Any:
    """One Python shape for what PyIceberg and DuckDB hand back (maps, UUIDs, floats)."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return {k: normalize(v) for k, v in value}
        return [normalize(x) for x in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def rows_by_offset(table: Any) -> list[dict]:
    rows = sorted(table.to_pylist(), key=lambda r: r["kafka_offset"])
    return [normalize(r) for r in rows]


def read_both(warehouse: Path, table: str) -> tuple[list[dict], list[dict]]:
    py = rows_by_offset(readers.pyiceberg_sql_table(warehouse, NAMESPACE, table).scan().to_arrow())
    duck = rows_by_offset(readers.duckdb_scan(readers.metadata_location_sql(warehouse, NAMESPACE, table)))
    return py, duck


def assert_rows(actual: list[dict], expected: list[dict], reader: str, uuid_columns: tuple[str, ...] = ()) -> None:
    assert len(actual) == len(expected), f"{reader}: {len(actual)} rows, want {len(expected)}"
    for i, (got, want) in enumerate(zip(actual, expected)):
        for column, value in want.items():
            seen = got[column]
            if column in uuid_columns and isinstance(seen, bytes):
                seen = str(uuid.UUID(bytes=seen))
            if value == {} and seen == []:
                seen = {}  # an empty map reads back as an empty list of entries
            if isinstance(value, float) and isinstance(seen, float):
                assert seen == pytest.approx(value, rel=1e-6), f"{reader} row {i} column {column}: {seen!r} != {value!r}"
            else:
                assert seen == value, f"{reader} row {i} column {column}: {seen!r} != {value!r}"


PIPELINES = f"""
namespace = "{NAMESPACE}"

[[pipeline]]
table = "orders_avro"
topics = ["shop.orders.avro"]
format = "avro"
schema = "{SCHEMAS}/rich.avsc"
partition_by = ["day(placed_at)", "bucket(4, order_id)"]
key = ["order_id"]

[[pipeline]]
table = "orders_proto"
topics = ["shop.orders.proto"]
format = "protobuf"
schema = "{SCHEMAS}/rich.proto"
message = "shop.Order"
partition_by = ["identity(status)"]

[[pipeline]]
table = "orders_json"
topic_pattern = "shop\\\\.orders\\\\.json(\\\\..+)?"
format = "json"
schema = "{SCHEMAS}/rich.schema.json"
partition_by = ["truncate(2, status)"]
"""


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("pipelines")
    pipelines = tmp / "pipelines.toml"
    pipelines.write_text(PIPELINES)
    check = icestream("pipelines", "check", str(pipelines), "output=json")
    described = json.loads(check.stdout)
    avro_rows = avro_records()
    pb = proto_module(tmp)
    proto_values, proto_expected = proto_records(pb)
    json_rows = json_records()
    bad = {
        "avro": encode_avro(avro_rows[3:4])[0][:-1],                # cut inside `tags`, the last field
        "proto": pb.Order(loyalty_points=(1 << 63) + 5).SerializeToString(),  # > i64::MAX
        "json": json.dumps({**json_rows[0], "customer": {"name": 7}}).encode(),  # wrong type, nested
        "json_missing": json.dumps({k: v for k, v in json_rows[0].items() if k != "order_id"}).encode(),
    }
    ev = event({
        "shop.orders.avro": [*encode_avro(avro_rows), bad["avro"]],
        "shop.orders.proto": [*proto_values, bad["proto"]],
        "shop.orders.json": [*(json.dumps(r).encode() for r in json_rows), bad["json"], bad["json_missing"]],
    })
    event_path = tmp / "event.json"
    event_path.write_text(json.dumps(ev))
    warehouse = tmp / "wh"
    out = icestream("ingest", str(event_path), f"pipelines={pipelines}", f"warehouse={warehouse}")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    return {"warehouse": warehouse, "summary": summary, "described": described, "avro": avro_rows,
            "proto": proto_expected, "json": json_rows, "event": event_path, "pipelines": pipelines}


def test_check_describes_each_pipeline(ingested: dict) -> None:
    described = ingested["described"]
    assert described["namespace"] == NAMESPACE
    tables = {p["table"]: p for p in described["pipelines"]}
    assert set(tables) == {"orders_avro", "orders_proto", "orders_json"}
    avro = tables["orders_avro"]
    assert avro["topics"] == ["shop.orders.avro"] and avro["dead_letter_table"] == "orders_avro_dead_letter"
    assert [f["name"] for f in avro["partition_spec"]] == ["placed_at_day", "order_id_bucket"]
    names = [f["name"] for f in avro["schema"]]
    assert names[:3] == ["order_id", "id", "placed_at"] and names[-3:] == ["kafka_topic", "kafka_partition", "kafka_offset"]
    ids = [f["id"] for f in avro["schema"]]
    assert len(set(ids)) == len(ids)
    assert tables["orders_json"]["topic_pattern"]


def test_one_event_three_topics_three_tables(ingested: dict) -> None:
    s = ingested["summary"]
    assert s["records"] == 3 * N + 4
    assert s["written"] == 3 * N and s["dead_letter"] == 4 and s["tables"] == 3


def test_avro_values_read_back_equal_by_pyiceberg_and_duckdb(ingested: dict) -> None:
    expected = []
    for row in ingested["avro"]:
        want = dict(row)
        want["id"] = str(row["id"])
        expected.append(want)
    py, duck = read_both(ingested["warehouse"], "orders_avro")
    assert_rows(py, expected, "pyiceberg", uuid_columns=("id",))
    assert_rows(duck, expected, "duckdb", uuid_columns=("id",))


def test_protobuf_values_read_back_equal_by_pyiceberg_and_duckdb(ingested: dict) -> None:
    py, duck = read_both(ingested["warehouse"], "orders_proto")
    assert_rows(py, ingested["proto"], "pyiceberg")
    assert_rows(duck, ingested["proto"], "duckdb")


def test_json_values_read_back_equal_by_pyiceberg_and_duckdb(ingested: dict) -> None:
    expected = [json_expected(r) for r in ingested["json"]]
    py, duck = read_both(ingested["warehouse"], "orders_json")
    assert_rows(py, expected, "pyiceberg", uuid_columns=("id",))
    assert_rows(duck, expected, "duckdb", uuid_columns=("id",))
    assert "ignored_extra_field" not in py[0]


def test_bad_records_are_dead_letters_naming_the_field(ingested: dict) -> None:
    wh = ingested["warehouse"]
    reasons = {}
    for fmt in ["avro", "proto", "json"]:
        rows = readers.pyiceberg_sql_table(wh, NAMESPACE, f"orders_{fmt}_dead_letter").scan().to_arrow().to_pylist()
        reasons[fmt] = sorted(r["error"] for r in rows)
        for r in rows:
            assert r["raw_value"] and r["kafka_topic"] == f"shop.orders.{fmt}"
            assert dict(r["headers"])["trace"][:2] == b"t-"
    assert len(reasons["avro"]) == 1 and "tags" in reasons["avro"][0], reasons
    assert len(reasons["proto"]) == 1 and "loyalty_points" in reasons["proto"][0], reasons
    assert len(reasons["json"]) == 2, reasons
    assert any("customer.name" in r for r in reasons["json"]), reasons
    assert any("order_id" in r for r in reasons["json"]), reasons


def test_replaying_the_event_adds_nothing(ingested: dict) -> None:
    out = icestream("ingest", str(ingested["event"]), f"pipelines={ingested['pipelines']}", f"warehouse={ingested['warehouse']}")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["written"] == 0 and summary["dead_letter"] == 0 and summary["skipped_replay"] == 3 * N + 4


def test_an_unclaimed_topic_fails_the_invocation_naming_topic_and_file(ingested: dict, tmp_path: Path) -> None:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event({"shop.unknown": [b"{}"]})))
    out = icestream("ingest", str(path), f"pipelines={ingested['pipelines']}", f"warehouse={ingested['warehouse']}", check=False)
    assert out.returncode != 0
    assert '"shop.unknown"' in out.stderr and "pipelines.toml" in out.stderr


# ---------- existing tables ----------

EXISTING_AVSC = json.dumps({"type": "record", "name": "R", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": "string"}, {"name": "c", "type": ["null", "double"], "default": None}]})


def existing_setup(tmp_path: Path, columns: list[Any]) -> tuple[Path, Path]:
    import pyarrow as pa

    wh = tmp_path / "wh"
    wh.mkdir()
    catalog = readers.pyiceberg_sql_catalog(wh)
    catalog.create_namespace(NAMESPACE)
    catalog.create_table((NAMESPACE, "existing"), schema=pa.schema(columns))
    (tmp_path / "r.avsc").write_text(EXISTING_AVSC)
    pipelines = tmp_path / "p.toml"
    pipelines.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "existing"\ntopics = ["t"]\nformat = "avro"\nschema = "r.avsc"\n')
    return wh, pipelines


def lineage() -> list[Any]:
    import pyarrow as pa

    return [pa.field("kafka_offset", pa.int64(), nullable=False), pa.field("kafka_partition", pa.int32(), nullable=False),
            pa.field("kafka_topic", pa.string(), nullable=False)]


def avro_value(a: int, b: str, c: float | None) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(EXISTING_AVSC)), {"a": a, "b": b, "c": c})
    return buf.getvalue()


def test_an_existing_table_in_another_column_order_is_written_by_name(tmp_path: Path) -> None:
    import pyarrow as pa

    wh, pipelines = existing_setup(tmp_path, [*lineage(), pa.field("c", pa.float64()), pa.field("extra", pa.string()),
                                              pa.field("b", pa.string(), nullable=False), pa.field("a", pa.int64(), nullable=False)])
    path = tmp_path / "e.json"
    path.write_text(json.dumps(event({"t": [avro_value(1, "one", 1.5), avro_value(2, "two", None)]})))
    icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}")
    rows = rows_by_offset(readers.pyiceberg_sql_table(wh, NAMESPACE, "existing").scan().to_arrow())
    assert [(r["a"], r["b"], r["c"], r["extra"], r["kafka_topic"]) for r in rows] == [(1, "one", 1.5, None, "t"), (2, "two", None, None, "t")]


@pytest.mark.parametrize("columns, needles", [
    (lambda pa: [pa.field("a", pa.string(), nullable=False), pa.field("b", pa.string(), nullable=False)], ["existing", "a", "string", "long"]),
    (lambda pa: [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string(), nullable=False)], ["existing", "kafka_"]),
], ids=["type-misfit", "no-lineage"])
def test_a_pipeline_that_cannot_write_an_existing_table_is_refused(tmp_path: Path, columns: Any, needles: list[str]) -> None:
    import pyarrow as pa

    cols = columns(pa)
    if needles[-1] != "kafka_":
        cols = [*cols, *lineage()]
    wh, pipelines = existing_setup(tmp_path, cols)
    path = tmp_path / "e.json"
    path.write_text(json.dumps(event({"t": [avro_value(1, "x", None)]})))
    before = readers.metadata_location_sql(wh, NAMESPACE, "existing")
    out = icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}", check=False)
    assert out.returncode != 0
    for needle in needles:
        assert needle in out.stderr, (needle, out.stderr)
    assert readers.metadata_location_sql(wh, NAMESPACE, "existing") == before, "nothing written"


def test_a_required_column_the_schema_lacks_becomes_optional_never_dropped(tmp_path: Path) -> None:
    import pyarrow as pa

    cols = [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string(), nullable=False),
            pa.field("must", pa.string(), nullable=False), *lineage()]
    wh, pipelines = existing_setup(tmp_path, cols)
    path = tmp_path / "e.json"
    path.write_text(json.dumps(event({"t": [avro_value(1, "x", None)]})))
    icestream("ingest", str(path), f"pipelines={pipelines}", f"warehouse={wh}")
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "existing")
    assert table.schema().find_field("must").optional
    assert [(r["a"], r["must"]) for r in table.scan().to_arrow().to_pylist()] == [(1, None)]


def test_check_refuses_a_broken_file_naming_pipeline_key_and_what_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "r.avsc").write_text(EXISTING_AVSC)
    broken = tmp_path / "broken.toml"
    broken.write_text('[[pipeline]]\ntable = "orders"\ntopics = ["t"]\nformat = "avro"\nschema = "r.avsc"\ndedup = "always"\n')
    out = icestream("pipelines", "check", str(broken), check=False)
    assert out.returncode != 0
    assert "pipeline `orders` (#1): key `dedup`" in out.stderr and "none | batch | window" in out.stderr, out.stderr
    good = tmp_path / "good.toml"
    good.write_text('[[pipeline]]\ntable = "orders"\ntopics = ["t"]\nformat = "avro"\nschema = "r.avsc"\n')
    text = icestream("pipelines", "check", str(good)).stdout
    assert "pipeline `orders` (avro): t -> bigdata.orders" in text and "kafka_offset" in text, text


def test_a_schema_file_with_new_fields_evolves_the_table_unless_a_name_is_a_partition_field(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    schema = tmp_path / "r.avsc"
    schema.write_text(EXISTING_AVSC)
    pipelines = tmp_path / "p.toml"
    pipelines.write_text(f'namespace = "{NAMESPACE}"\n[[pipeline]]\ntable = "evolving"\ntopics = ["t"]\nformat = "avro"\n'
                         'schema = "r.avsc"\npartition_by = ["bucket(4, a)"]\n')
    first = tmp_path / "e1.json"
    first.write_text(json.dumps(event({"t": [avro_value(1, "x", None)]})))
    icestream("ingest", str(first), f"pipelines={pipelines}", f"warehouse={wh}")
    # The user's next schema adds `d` (and is deployed): the table gains it in the data commit.
    v2 = json.loads(EXISTING_AVSC)
    v2["fields"].append({"name": "d", "type": ["null", "string"], "default": None})
    schema.write_text(json.dumps(v2))
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v2), {"a": 2, "b": "y", "c": None, "d": "new"})
    second = tmp_path / "e2.json"
    second.write_text(json.dumps(event({"t": [buf.getvalue()]}, start_offset=1)))
    assert json.loads(icestream("ingest", str(second), f"pipelines={pipelines}", f"warehouse={wh}").stdout.splitlines()[-1])["written"] == 1
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "evolving")
    assert table.schema().find_field("d").optional
    assert sorted((r["a"], r["d"]) for r in table.scan().to_arrow().to_pylist()) == [(1, None), (2, "new")]
    # A new field named like the partition field `a_bucket` cannot be a column: refused at start.
    v2["fields"].append({"name": "a_bucket", "type": ["null", "int"], "default": None})
    schema.write_text(json.dumps(v2))
    before = readers.metadata_location_sql(wh, NAMESPACE, "evolving")
    out = icestream("ingest", str(second), f"pipelines={pipelines}", f"warehouse={wh}", check=False)
    assert out.returncode != 0 and "a_bucket" in out.stderr and "partition field" in out.stderr, out.stderr
    assert readers.metadata_location_sql(wh, NAMESPACE, "evolving") == before
