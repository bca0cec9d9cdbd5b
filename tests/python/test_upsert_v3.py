"""Upsert pipelines on Iceberg v3 tables: deletes are deletion vectors (Puffin files), at most one
per data file, read by PyIceberg and DuckDB as the oracle says, before and after compaction; a v2
table upgraded mid-stream keeps every row.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import cdc_generator as gen
import readers
from test_upsert import BIN, NAMESPACE, TOPIC, check_readers, icestream, ingest_all, schema, pytestmark  # noqa: F401


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=env)


def check_reports(tmp_path: Path, wh: Path, live_rows: int, dvs: int) -> None:
    """`report`, `status` and `audit` read the DVs: the rows a reader sees, the DVs counted."""
    common = [f"pipelines={tmp_path / 'pipelines.toml'}", f"warehouse={wh}"]
    out = run_cli("report", "orders", *common)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["format_version"], report["deletion_vectors"], report["delete_files"]) == (3, dvs, dvs), report
    assert report["live_rows"] == live_rows and report["next_row_id"] >= report["records"], report
    status = run_cli("status", *common)
    assert status.returncode == 0 and (f"{dvs} deletion vectors" in status.stdout or dvs == 0), status.stdout + status.stderr
    # An upsert pipeline without a changelog cannot be audited (its table keeps one row per key).
    refused = run_cli("audit", "orders", *common)
    assert refused.returncode != 0 and "changelog = true" in refused.stderr, refused.stderr
    # Read as a plain table (no pipeline file), its deleted rows are gaps: the verdict is not the
    # point here, the rows it finds are (the live ones, deletion vectors applied).
    audit = run_cli("audit", "orders", f"warehouse={wh}", f"namespace={NAMESPACE}")
    assert audit.stdout.strip(), audit.stderr
    assert json.loads(audit.stdout.strip().splitlines()[-1])["rows"] == live_rows


def pipeline_lines(extra: list[str]) -> list[str]:
    return [f'namespace = "{NAMESPACE}"', "[[pipeline]]", 'table = "orders"', f'topics = ["{TOPIC}"]', 'format = "json"',
            'schema = "orders.json"', 'partition_by = ["bucket(4, order_id)"]', 'key = ["tenant", "order_id"]',
            'mode = "upsert"', 'envelope = "debezium"', 'order_by = "source.lsn"', *extra]


def live_deletes(wh: Path) -> list:
    """Every live delete file entry of `orders`, with the data file it applies to."""
    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    return [entry.data_file for m in table.current_snapshot().manifests(table.io)
            for entry in m.fetch_manifest_entry(table.io, discard_deleted=True) if entry.data_file.content != 0]


def check_dvs(wh: Path) -> int:
    """Every live delete is a DV (its Puffin file read by PyIceberg's reader) of one live data
    file, at most one a data file; how many."""
    from pyiceberg.table.puffin import PuffinFile

    table = readers.pyiceberg_sql_table(wh, NAMESPACE, "orders")
    assert table.metadata.format_version == 3
    deletes = live_deletes(wh)
    data = {t.file.file_path for t in table.scan().plan_files()}
    assert all(d.file_format == "PUFFIN" for d in deletes), [d.file_format for d in deletes]
    targets = []
    for d in deletes:
        with table.io.new_input(d.file_path).open() as f:
            blobs = PuffinFile(f.read()).footer.blobs
        assert [b.type for b in blobs] == ["deletion-vector-v1"]
        assert int(blobs[0].properties["cardinality"]) == d.record_count > 0
        targets.append(blobs[0].properties["referenced-data-file"])
    assert len(targets) == len(set(targets)), "two deletion vectors for one data file"
    assert set(targets) <= data, "a deletion vector of a file no longer live"
    return len(deletes)


def keyed_lineage(wh: Path) -> dict[tuple, tuple]:
    """(tenant, order_id) -> (_row_id, _last_updated_sequence_number) of `orders` as DuckDB reads them."""
    location = readers.metadata_location_sql(wh, NAMESPACE, "orders")
    rows = readers.duckdb_connect().sql(
        f"SELECT tenant, order_id, _row_id, _last_updated_sequence_number FROM iceberg_scan('{location}')").fetchall()
    return {(t, o): (r, s) for t, o, r, s in rows}


def test_debezium_composite_key_on_a_v3_table_is_the_oracle_with_one_dv_per_data_file(tmp_path: Path) -> None:
    rng = random.Random(16)
    source = gen.Source(rng)
    source.run(keys=60, changes=240)
    msgs = gen.messages(source, "debezium", rng)
    (tmp_path / "orders.json").write_text(schema())
    wh, summaries = ingest_all(tmp_path, pipeline_lines(["format_version = 3"]), msgs, rng)
    assert sum(s["upsert_stale"] for s in summaries) > 0
    check_readers(wh, source)
    dvs = check_dvs(wh)
    assert dvs > 0, "the stream deleted rows of files it kept"
    check_reports(tmp_path, wh, len(gen.oracle(source)), dvs)
    pipelines = f"pipelines={tmp_path / 'pipelines.toml'}"
    lineage = keyed_lineage(wh)
    assert len({r for r, _ in lineage.values()}) == len(lineage), "each live row its own _row_id"
    compacted = icestream("maintain", "action=compact", pipelines, f"warehouse={wh}")
    assert sum(t["compact"]["files_with_deletes"] for t in compacted["tables"] if t["table"] == "orders") > 0, compacted
    check_readers(wh, source)
    assert keyed_lineage(wh) == lineage, "compaction moves rows with their _row_id and _last_updated_sequence_number"
    check_reports(tmp_path, wh, len(gen.oracle(source)), check_dvs(wh))
    # Every event again: nothing applies, the table reads the same.
    for event in sorted(tmp_path.glob("event-*.json")):
        assert icestream("ingest", str(event), pipelines, f"warehouse={wh}")["upsert_applied"] == 0
    check_readers(wh, source)


def test_a_v2_table_refuses_a_v3_pipeline_naming_both_versions(tmp_path: Path) -> None:
    rng = random.Random(3)
    source = gen.Source(rng)
    source.run(keys=10, changes=20)
    msgs = gen.messages(source, "debezium", rng)
    (tmp_path / "orders.json").write_text(schema())
    wh, _ = ingest_all(tmp_path, pipeline_lines([]), msgs, rng)
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join(pipeline_lines(["format_version = 3"])) + "\n")
    event = sorted(tmp_path.glob("event-*.json"))[0]
    out = run_cli("ingest", str(event), f"pipelines={pipelines}", f"warehouse={wh}")
    assert out.returncode != 0
    assert "format_version = 3 is declared, the table is format version 2" in out.stderr, out.stderr


def test_a_v2_table_upgraded_mid_stream_keeps_every_row(tmp_path: Path) -> None:
    """Half the stream into a v2 table (position delete files), compaction and the upgrade, the
    rest (deletion vectors from then on, the pipeline file unchanged): the oracle, every row."""
    rng = random.Random(21)
    source = gen.Source(rng)
    source.run(keys=60, changes=240)
    msgs = gen.messages(source, "debezium", rng)
    (tmp_path / "orders.json").write_text(schema())
    events = gen.events(msgs, TOPIC, rng)
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("\n".join(pipeline_lines([])) + "\n")
    wh = tmp_path / "wh"
    common = [f"pipelines={pipelines}", f"warehouse={wh}"]
    half = len(events) // 2
    for i, event in enumerate(events):
        if i == half:
            assert live_deletes(wh) and all(d.file_format == "PARQUET" for d in live_deletes(wh)), "v2 deletes before the upgrade"
            refused = run_cli("maintain", "action=upgrade", "table=orders", "format_version=3", *common)
            assert refused.returncode != 0 and "action=compact" in refused.stderr + refused.stdout, refused.stderr
            done = icestream("maintain", "action=compact,upgrade", "table=orders", "format_version=3", *common)
            assert done["tables"][0]["upgrade"]["committed"], done
            assert readers.pyiceberg_sql_table(wh, NAMESPACE, "orders").metadata.format_version == 3
        path = tmp_path / f"event-{i}.json"
        path.write_text(json.dumps(event))
        icestream("ingest", str(path), *common)
    check_readers(wh, source)
    assert check_dvs(wh) > 0, "deletes after the upgrade are deletion vectors"


def row_lineage(wh: Path, table: str) -> dict[tuple, tuple]:
    """(partition, offset) -> (_row_id, _last_updated_sequence_number) as DuckDB reads them."""
    location = readers.metadata_location_sql(wh, "bigdata", table)
    rows = readers.duckdb_connect().sql(
        f"SELECT kafka_partition, kafka_offset, _row_id, _last_updated_sequence_number FROM iceberg_scan('{location}')").fetchall()
    return {(p, o): (r, s) for p, o, r, s in rows}


def test_row_ids_are_given_out_once_and_kept_when_manifests_are_rewritten(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    common = [f"warehouse={wh}", "format_version=3"]
    total = 0
    for i in range(6):
        event = tmp_path / f"e{i}.json"
        out = run_cli("gen-event", f"out={event}", "records=40", f"seed={i}", f"start_offset={total}")
        assert out.returncode == 0, out.stderr
        total += json.loads(out.stdout)["records"]
        icestream("ingest", str(event), *common)
    before = row_lineage(wh, "vehicle_telemetry")
    ids = [r for r, _ in before.values()]
    assert sorted(ids) == list(range(len(ids))), "each row its own id, none skipped"
    assert {s for _, s in before.values()} == set(range(1, 7)), "each row the sequence number of the commit that added it"
    rewritten = icestream("maintain", "action=rewrite-manifests", "table=vehicle_telemetry", *common)
    assert rewritten["tables"][0]["rewrite_manifests"]["committed"], rewritten
    assert row_lineage(wh, "vehicle_telemetry") == before, "rewritten manifests keep every row's id"
