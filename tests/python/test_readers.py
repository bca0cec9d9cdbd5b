"""The reader helpers agree with each other on a table PyIceberg writes, before the Rust
side relies on them to judge its own tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import readers

NAMESPACE, TABLE = "bigdata", "vehicle_telemetry"
SCHEMA = pa.schema(
    [
        pa.field("vehicle_id", pa.string(), nullable=False),
        pa.field("speed_kmh", pa.float64(), nullable=True),
        pa.field("kafka_offset", pa.int64(), nullable=False),
    ]
)
BATCHES = [
    {"vehicle_id": ["v1", "v2"], "speed_kmh": [42.5, None], "kafka_offset": [0, 1]},
    {"vehicle_id": ["v3"], "speed_kmh": [88.0], "kafka_offset": [2]},
]


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A warehouse with one table and two appends, written by PyIceberg's SqlCatalog."""
    catalog = readers.pyiceberg_sql_catalog(tmp_path)
    catalog.create_namespace(NAMESPACE)
    table = catalog.create_table((NAMESPACE, TABLE), schema=SCHEMA)
    for batch in BATCHES:
        table.append(pa.table(batch, schema=SCHEMA))
    return tmp_path


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda row: row["kafka_offset"])


EXPECTED = _rows(pa.concat_tables(pa.table(b, schema=SCHEMA) for b in BATCHES))


def test_metadata_location_sql_is_the_current_metadata(warehouse: Path) -> None:
    location = readers.metadata_location_sql(warehouse, NAMESPACE, TABLE)
    table = readers.pyiceberg_sql_table(warehouse, NAMESPACE, TABLE)
    assert location == table.metadata_location
    assert location.endswith(".metadata.json")
    assert Path(readers._local_path(location)).is_file()
    assert len(table.metadata.snapshots) == len(BATCHES)


def test_pyiceberg_and_duckdb_read_the_same_rows(warehouse: Path) -> None:
    table = readers.pyiceberg_sql_table(warehouse, NAMESPACE, TABLE)
    assert _rows(table.scan().to_arrow()) == EXPECTED

    scanned = readers.duckdb_scan(readers.metadata_location_sql(warehouse, NAMESPACE, TABLE))
    assert scanned.num_rows == len(EXPECTED)
    assert _rows(scanned) == EXPECTED


def test_duckdb_reads_an_older_metadata_file(warehouse: Path) -> None:
    # Time travel by metadata file: the first snapshot's metadata sees the first batch only.
    table = readers.pyiceberg_sql_table(warehouse, NAMESPACE, TABLE)
    first_metadata = table.metadata.metadata_log[1].metadata_file  # [0] is the empty table
    assert _rows(readers.duckdb_scan(first_metadata)) == EXPECTED[: len(BATCHES[0]["kafka_offset"])]


def test_metadata_location_sql_rejects_unknown_table(warehouse: Path) -> None:
    with pytest.raises(KeyError):
        readers.metadata_location_sql(warehouse, NAMESPACE, "no_such_table")
