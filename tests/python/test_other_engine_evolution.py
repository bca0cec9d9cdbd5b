"""A table another engine (PyIceberg) evolved: icestream's maintenance keeps it whole.

PyIceberg changes the partition spec of `vehicle_telemetry` (bucket(16) -> bucket(8) of
vehicle_id) and adds a column; icestream ingests more under the new spec, then runs every
maintenance action. Each manifest must still name its own entries' spec (else PyIceberg prunes
a filtered scan with the wrong transform and rows vanish), and compaction must read the files
written before the column existed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from readers import pyiceberg_sql_table
from test_local_readers import BIN, icestream

pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")


def ingest(tmp: Path, warehouse: Path, first: int, count: int) -> None:
    for i in range(first, first + count):
        event = tmp / f"e{i}.json"
        icestream("gen-event", "records=200", "partitions=2", f"seed={i}", f"start_offset={i * 200}", f"out={event}")
        icestream("ingest", str(event), f"warehouse={warehouse}")


def test_maintenance_after_pyiceberg_evolved_the_spec_and_schema(tmp_path: Path) -> None:
    from pyiceberg.expressions import In
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import StringType

    warehouse = tmp_path / "wh"
    ingest(tmp_path, warehouse, 0, 4)
    table = pyiceberg_sql_table(warehouse, "bigdata", "vehicle_telemetry")
    with table.update_spec() as spec:
        spec.remove_field("vehicle_id_bucket")
        spec.add_field("vehicle_id", BucketTransform(8), "vehicle_id_bucket_8")
    with table.update_schema() as schema:
        schema.add_column("note", StringType())
    ingest(tmp_path, warehouse, 4, 4)

    table = pyiceberg_sql_table(warehouse, "bigdata", "vehicle_telemetry")
    before = table.scan().to_arrow()
    report = json.loads(icestream("maintain", "table=vehicle_telemetry", f"warehouse={warehouse}"))
    done = report["tables"][0]
    assert done.get("error") is None, done
    assert done["compact"]["groups_committed"] > 0, done
    assert done["rewrite_manifests"]["committed"], done

    table = pyiceberg_sql_table(warehouse, "bigdata", "vehicle_telemetry")
    after = table.scan().to_arrow()
    lineage = lambda t: sorted(zip(t.column("kafka_partition").to_pylist(), t.column("kafka_offset").to_pylist()))
    assert lineage(after) == lineage(before)
    assert set(after.column("note").to_pylist()) == {None}
    # Every manifest is read under its own spec: a filtered scan prunes by that spec's
    # transform and finds each vehicle's rows.
    per_vehicle = sorted(Counter(after.column("vehicle_id").to_pylist()).items())
    for start in range(0, len(per_vehicle), 20):
        chunk = dict(per_vehicle[start : start + 20])
        found = Counter(table.scan(row_filter=In("vehicle_id", set(chunk))).to_arrow().column("vehicle_id").to_pylist())
        assert found == chunk, sorted(set(found.items()) ^ set(chunk.items()))
    specs = {m.partition_spec_id for m in table.current_snapshot().manifests(table.io)}
    assert specs == {0, 1}, specs
