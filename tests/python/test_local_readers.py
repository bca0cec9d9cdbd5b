"""What icestream writes on the embedded default is readable by independent Iceberg readers.

The `icestream` binary (ICESTREAM_BIN, built by `make test`) generates and ingests events into a
temporary warehouse; PyIceberg's SqlCatalog (catalog name `icestream`) and DuckDB's
`iceberg_scan` then read the tables and must agree with what was sent.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from readers import duckdb_connect, metadata_location_sql, pyiceberg_sql_table

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")


def icestream(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("local")
    warehouse = tmp / "wh"
    expectations = []
    for i, fmt in enumerate(["proto", "avro", "json"]):
        event = tmp / f"{fmt}.json"
        exp = json.loads(icestream("gen-event", f"format={fmt}", "records=6000", "corrupt=true",
                                   f"seed={i + 1}", f"start_offset={i * 6000}", f"out={event}"))
        summary = json.loads(icestream("ingest", str(event), f"warehouse={warehouse}", f"source={fmt}").splitlines()[-1])
        assert summary["written"] == exp["valid"] and summary["dead_letter"] == exp["corrupt"], (summary, exp)
        expectations.append(exp)
    return {
        "warehouse": warehouse,
        "valid": sum(e["valid"] for e in expectations),
        "corrupt": sum(e["corrupt"] for e in expectations),
        "speed_sum": sum(e["speed_sum"] for e in expectations),
    }


def test_pyiceberg_reads_counts_sums_and_partition_spec(ingested: dict) -> None:
    table = pyiceberg_sql_table(ingested["warehouse"], "bigdata", "vehicle_telemetry")
    arrow = table.scan().to_arrow()
    assert arrow.num_rows == ingested["valid"]
    assert sum(arrow.column("speed_kmh").to_pylist()) == ingested["speed_sum"]
    spec = [(f.name, str(f.transform)) for f in table.spec().fields]
    assert spec == [("event_time_hour", "hour"), ("vehicle_id_bucket", "bucket[16]")]
    # Lineage is unique: every Kafka record at most once.
    lineage = set(zip(arrow.column("kafka_partition").to_pylist(), arrow.column("kafka_offset").to_pylist()))
    assert len(lineage) == arrow.num_rows
    dead = pyiceberg_sql_table(ingested["warehouse"], "bigdata", "vehicle_telemetry_dead_letter").scan().to_arrow()
    assert dead.num_rows == ingested["corrupt"]
    assert all(e.startswith(("json:", "protobuf:", "avro:")) for e in dead.column("error").to_pylist())


def duckdb_query(metadata_location: str, select: str) -> list[tuple]:
    path = metadata_location.removeprefix("file://").replace("'", "''")
    con = duckdb_connect()
    try:
        return con.execute(f"SELECT {select} FROM iceberg_scan('{path}')").fetchall()
    finally:
        con.close()


def test_duckdb_iceberg_scan_agrees(ingested: dict) -> None:
    metadata = metadata_location_sql(ingested["warehouse"], "bigdata", "vehicle_telemetry")
    rows = duckdb_query(metadata, "count(*), sum(speed_kmh), count(DISTINCT (kafka_partition, kafka_offset))")
    assert rows == [(ingested["valid"], ingested["speed_sum"], ingested["valid"])]
    dl_metadata = metadata_location_sql(ingested["warehouse"], "bigdata", "vehicle_telemetry_dead_letter")
    assert duckdb_query(dl_metadata, "count(*)") == [(ingested["corrupt"],)]


def test_pyiceberg_partition_pruning_sees_hours(ingested: dict) -> None:
    table = pyiceberg_sql_table(ingested["warehouse"], "bigdata", "vehicle_telemetry")
    hours = {p["event_time_hour"] for p in table.inspect.partitions().column("partition").to_pylist()}
    assert len(hours) >= 2  # the generator's two hours plus late readings


def test_compaction_keeps_rows_for_pyiceberg_and_duckdb(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    for i in range(30):
        event = tmp_path / f"e{i}.json"
        icestream("gen-event", "records=300", "partitions=2", f"seed={i}", f"start_offset={i * 300}", f"out={event}")
        icestream("ingest", str(event), f"warehouse={warehouse}")
    before = pyiceberg_sql_table(warehouse, "bigdata", "vehicle_telemetry")
    rows_before = before.scan().to_arrow()
    files_before = len(before.inspect.files())
    report = json.loads(icestream("maintain", "action=compact", "table=vehicle_telemetry", f"warehouse={warehouse}"))
    after = pyiceberg_sql_table(warehouse, "bigdata", "vehicle_telemetry")
    rows_after = after.scan().to_arrow()
    assert len(after.inspect.files()) < files_before / 2, report
    key = lambda t: sorted(zip(t.column("kafka_partition").to_pylist(), t.column("kafka_offset").to_pylist(),
                              t.column("speed_kmh").to_pylist()))
    assert key(rows_after) == key(rows_before)
    metadata = metadata_location_sql(warehouse, "bigdata", "vehicle_telemetry")
    assert duckdb_query(metadata, "count(*), sum(speed_kmh)") == [(rows_before.num_rows, sum(rows_before.column("speed_kmh").to_pylist()))]
