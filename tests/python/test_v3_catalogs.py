"""format_version = 3 on the AWS catalogs (the patched moto on 127.0.0.1): Glue and S3 Tables
create v3 tables with row lineage, and a Debezium upsert pipeline on Glue keeps its deletes as
deletion vectors on S3 (ranged reads of Puffin files), read back by PyIceberg as the oracle.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import cdc_generator as cdc
from readers import pyiceberg_glue_table
from test_aws_catalogs import gen, glue_warehouse, run, summary, table_bucket, pytestmark  # noqa: F401
from test_upsert import TOPIC, normalized, schema


@pytest.mark.parametrize("catalog", ["glue", "s3tables"])
def test_a_v3_table_is_created_with_row_lineage(catalog: str, moto_endpoint: str, glue_warehouse, table_bucket, tmp_path: Path) -> None:
    warehouse, ns = glue_warehouse if catalog == "glue" else table_bucket
    knobs = [f"catalog={catalog}", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    event, exp = gen(tmp_path, "e", "records=500", "seed=5")
    s = summary(run(moto_endpoint, "ingest", str(event), *knobs, "format_version=3"))
    assert s["written"] == exp["valid"], s
    report = json.loads(run(moto_endpoint, "report", "vehicle_telemetry", *knobs).stdout)
    assert (report["format_version"], report["next_row_id"]) == (3, exp["valid"]), report
    # The dead-letter table was not declared: v2. A v2 declaration of the v3 table is refused.
    assert json.loads(run(moto_endpoint, "report", "vehicle_telemetry_dead_letter", *knobs).stdout)["format_version"] == 2
    refused = run(moto_endpoint, "ingest", str(event), *knobs, "format_version=2", check=False)
    assert refused.returncode != 0 and "format_version = 2 is declared, the table is format version 3" in refused.stderr, refused.stderr


def test_glue_debezium_upsert_on_v3_keeps_deletion_vectors_on_s3(moto_endpoint: str, glue_warehouse, tmp_path: Path) -> None:
    warehouse, ns = glue_warehouse
    rng = random.Random(7)
    source = cdc.Source(rng)
    source.run(keys=40, changes=160)
    msgs = cdc.messages(source, "debezium", rng)
    (tmp_path / "orders.json").write_text(schema())
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join([
        f'namespace = "{ns}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]', 'format = "json"',
        'schema = "orders.json"', 'partition_by = ["bucket(4, order_id)"]', 'key = ["tenant", "order_id"]',
        'mode = "upsert"', 'envelope = "debezium"', 'order_by = "source.lsn"', "format_version = 3"]) + "\n")
    knobs = ["catalog=glue", f"warehouse={warehouse}", "s3_path_style=true", f"pipelines={pipelines}"]
    for i, event in enumerate(cdc.events(msgs, TOPIC, rng)):
        path = tmp_path / f"event-{i}.json"
        path.write_text(json.dumps(event))
        run(moto_endpoint, "ingest", str(path), *knobs)
    table = pyiceberg_glue_table(moto_endpoint, ns, "orders")
    assert table.metadata.format_version == 3
    assert normalized(table.scan().to_arrow().to_pylist()) == cdc.oracle(source)
    report = json.loads(run(moto_endpoint, "report", "orders", *knobs).stdout)
    assert report["deletion_vectors"] > 0 and report["deletion_vectors"] == report["delete_files"], report
    assert report["live_rows"] == len(cdc.oracle(source)), report


def test_queued_commits_give_a_v3_table_one_row_id_per_row(moto_endpoint: str, aws_client, tmp_path: Path) -> None:
    """Writers stage files, the committer commits many requests per snapshot: every row gets its
    own id, in the range of the snapshot that added it (DuckDB's `_row_id`)."""
    from concurrent.futures import ThreadPoolExecutor

    import readers
    from test_queued_commits import Setup, cut, generate, last_offsets

    s = Setup(moto_endpoint, aws_client, tmp_path, "local")
    s.queued.append("format_version=3")
    full, exp = generate(s.tmp, "records=1200", "partitions=4", "seed=93")
    lasts = last_offsets(full)
    for lo_share, hi_share in [(0, 2), (2, 4)]:  # two rounds, each committed in one batch
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda p: s.ingest(cut(full, p, lasts[p] * lo_share // 4 + (lo_share > 0), lasts[p] * hi_share // 4,
                                                 s.tmp / f"p{p}-{lo_share}.json")), lasts))
        s.drain("max_messages=40")
    location = readers.metadata_location_sql(s.warehouse, "bigdata", "vehicle_telemetry")
    rows = readers.duckdb_connect().sql(f"SELECT _row_id, _last_updated_sequence_number FROM iceberg_scan('{location}')").fetchall()
    assert len(rows) == exp["valid"]
    assert sorted(r for r, _ in rows) == list(range(exp["valid"])), "one id per row, none skipped or given twice"
    table = readers.pyiceberg_sql_table(s.warehouse, "bigdata", "vehicle_telemetry")
    snapshots = sorted(table.snapshots(), key=lambda snap: snap.sequence_number)
    assert [snap.first_row_id for snap in snapshots] == [0, snapshots[1].first_row_id] and snapshots[1].first_row_id > 0
    for _, seq in rows:
        assert seq in {snap.sequence_number for snap in snapshots}
