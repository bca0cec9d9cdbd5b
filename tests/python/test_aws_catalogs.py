"""catalog=glue and catalog=s3tables against a real AWS API server (the patched moto on 127.0.0.1).

The `icestream` binary runs unchanged: only the standard AWS_ENDPOINT_URL and credentials in its
environment point it at the local server. PyIceberg reads the Glue-catalogued table back.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import AWS_ENV
from readers import pyiceberg_glue_table

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")


def run(endpoint: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
    env.update(AWS_ENV, AWS_ENDPOINT_URL=endpoint, RUST_LOG="warn", AWS_EC2_METADATA_DISABLED="true")
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def summary(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.splitlines()[-1])


def gen(tmp: Path, name: str, *args: str) -> tuple[Path, dict]:
    path = tmp / f"{name}.json"
    exp = json.loads(run("http://127.0.0.1:1", "gen-event", f"out={path}", *args).stdout)
    return path, exp


@pytest.fixture()
def glue_warehouse(aws_client: Any) -> tuple[str, str]:
    bucket = f"wh-{uuid.uuid4().hex[:10]}"
    aws_client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/warehouse", f"ns_{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def table_bucket(aws_client: Any) -> tuple[str, str]:
    arn = aws_client("s3tables").create_table_bucket(name=f"tb-{uuid.uuid4().hex[:10]}")["arn"]
    return arn, f"ns_{uuid.uuid4().hex[:8]}"


def test_glue_end_to_end_replay_and_pyiceberg_agrees(moto_endpoint: str, glue_warehouse, tmp_path: Path) -> None:
    warehouse, ns = glue_warehouse
    knobs = ["catalog=glue", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true", "source=json"]
    event, exp = gen(tmp_path, "e", "records=3000", "format=json", "corrupt=true", "seed=21")
    first = summary(run(moto_endpoint, "ingest", str(event), *knobs))
    assert (first["written"], first["dead_letter"]) == (exp["valid"], exp["corrupt"]), first
    again = summary(run(moto_endpoint, "ingest", str(event), *knobs))
    assert (again["written"], again["dead_letter"], again["skipped_replay"]) == (0, 0, exp["records"]), again

    table = pyiceberg_glue_table(moto_endpoint, ns, "vehicle_telemetry").scan().to_arrow()
    assert table.num_rows == exp["valid"]
    assert sum(table.column("speed_kmh").to_pylist()) == exp["speed_sum"]
    dead = pyiceberg_glue_table(moto_endpoint, ns, "vehicle_telemetry_dead_letter").scan().to_arrow()
    assert dead.num_rows == exp["corrupt"]


def concurrent_writers(endpoint: str, knobs: list[str], tmp: Path, writers: int) -> tuple[int, list[dict]]:
    """`writers` processes, one partition each, committing to one table at once."""
    events = []
    total = 0
    for p in range(writers):
        event, exp = gen(tmp, f"w{p}", "records=800", "partitions=1", f"seed={100 + p}",
                         f"topic=telemetry-{p}")
        events.append(event)
        total += exp["valid"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
    env.update(AWS_ENV, AWS_ENDPOINT_URL=endpoint, RUST_LOG="warn", AWS_EC2_METADATA_DISABLED="true")
    procs = [subprocess.Popen([BIN, "ingest", str(e), *knobs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for e in events]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out.splitlines()[-1]))
    return total, results


def test_glue_four_concurrent_writers_lose_nothing(moto_endpoint: str, glue_warehouse, tmp_path: Path) -> None:
    warehouse, ns = glue_warehouse
    knobs = ["catalog=glue", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    # Create the tables before the race, so the writers race on commits.
    event, _ = gen(tmp_path, "seed", "records=1", "topic=warmup")
    run(moto_endpoint, "ingest", str(event), *knobs)
    total, results = concurrent_writers(moto_endpoint, knobs, tmp_path, 4)
    assert sum(r["written"] for r in results) == total
    table = pyiceberg_glue_table(moto_endpoint, ns, "vehicle_telemetry").scan().to_arrow()
    lineage = set(zip(table.column("kafka_topic").to_pylist(), table.column("kafka_offset").to_pylist()))
    assert table.num_rows == total + 1 and len(lineage) == table.num_rows
    report = json.loads(run(moto_endpoint, "report", "vehicle_telemetry", *knobs).stdout)
    assert len(report["watermarks"]) == 5


def test_s3tables_end_to_end_replay_and_concurrent_writers(moto_endpoint: str, table_bucket, tmp_path: Path) -> None:
    arn, ns = table_bucket
    knobs = ["catalog=s3tables", f"warehouse={arn}", f"namespace={ns}", "s3_path_style=true"]
    event, exp = gen(tmp_path, "e", "records=2000", "corrupt=true", "seed=31")
    first = summary(run(moto_endpoint, "ingest", str(event), *knobs))
    assert (first["written"], first["dead_letter"]) == (exp["valid"], exp["corrupt"]), first
    again = summary(run(moto_endpoint, "ingest", str(event), *knobs))
    assert (again["written"], again["skipped_replay"]) == (0, exp["records"]), again
    total, results = concurrent_writers(moto_endpoint, knobs, tmp_path, 4)
    assert sum(r["written"] for r in results) == total
    report = json.loads(run(moto_endpoint, "report", "vehicle_telemetry", *knobs).stdout)
    assert report["records"] == exp["valid"] + total
    assert report["snapshots"] == 1 + 4
    # AWS runs maintenance on S3 Tables: the report shows what is configured.
    managed = report["managed_maintenance"]
    assert managed["icebergCompaction"]["status"] == "enabled", managed
    assert managed["icebergSnapshotManagement"]["status"] == "enabled", managed
    assert managed["icebergUnreferencedFileRemoval"]["status"] == "enabled", managed
    # s3tables_maintenance=set writes the table's AWS-run maintenance from our knobs instead.
    tuned = [*knobs, "s3tables_maintenance=set", "target_file_size_bytes=268435456",
             "min_snapshots_to_keep=3", "snapshot_max_age_hours=48"]
    maintained = json.loads(run(moto_endpoint, "maintain", "table=vehicle_telemetry", *tuned).stdout.splitlines()[-1])
    assert not maintained["tables"][0].get("error"), maintained
    managed = json.loads(run(moto_endpoint, "report", "vehicle_telemetry", *knobs).stdout)["managed_maintenance"]
    compaction, snapshots = managed["icebergCompaction"], managed["icebergSnapshotManagement"]
    assert compaction["status"] == "enabled" and "target_file_size_mb: Some(256)" in compaction["settings"], managed
    assert "min_snapshots_to_keep: Some(3)" in snapshots["settings"], managed
    assert "max_snapshot_age_hours: Some(48)" in snapshots["settings"], managed


@pytest.mark.parametrize("catalog", ["glue", "s3tables"])
def test_a_direct_invocation_counts_its_round_trips(catalog: str, moto_endpoint: str, glue_warehouse,
                                                   table_bucket, tmp_path: Path) -> None:
    """One table, no dead letters, a snapshot to carry: the loads (the lookup, then the metadata
    file: 2, side by side), the data files (1), the manifest with the current manifest list read
    beside it (1), the manifest list with the metadata file (1), and the swap (1): the update
    conditional on the version the load read (Glue's `VersionId`, S3 Tables' version token), not
    read again (2 when it was). The SQL catalog's is one `UPDATE` (`tests/ingest_local.rs`)."""
    warehouse, ns = glue_warehouse if catalog == "glue" else table_bucket
    knobs = [f"catalog={catalog}", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    event, exp = gen(tmp_path, "e", "records=2000", "seed=5")
    # The first run creates the tables; the second is an invocation on tables that exist.
    run(moto_endpoint, "ingest", str(event), *knobs)
    later, _ = gen(tmp_path, "later", "records=2000", "seed=6", f"start_offset={exp['records']}")
    # Calls side by side count once only if they overlap in time: a 200 ms round trip keeps
    # them overlapping on a loaded machine too (the count is structural, not a timing).
    s = summary(run(moto_endpoint, "ingest", str(later), *knobs, "simulated_latency_ms=200"))
    calls = s["round_trips"]
    assert (s["dead_letter"], calls["loads"], calls["swaps"]) == (0, 2, 1), s
    assert calls["sequential"] == 6, s


def test_missing_resources_are_named(moto_endpoint: str, tmp_path: Path) -> None:
    event, _ = gen(tmp_path, "e", "records=10")
    missing = "arn:aws:s3tables:us-east-1:123456789012:bucket/does-not-exist"
    out = run(moto_endpoint, "ingest", str(event), "catalog=s3tables", f"warehouse={missing}", check=False)
    assert out.returncode != 0
    assert "does-not-exist" in out.stderr, out.stderr
    out = run(moto_endpoint, "ingest", str(event), "catalog=glue", "warehouse=s3://no-such-bucket-x/wh",
              "s3_path_style=true", check=False)
    assert out.returncode != 0
    assert "no-such-bucket-x" in out.stderr and "does not exist" in out.stderr, out.stderr


def test_glue_upsert_accounts_on_s3_match_the_oracle_and_orphans_are_listed_on_s3(
    moto_endpoint: str, glue_warehouse, tmp_path: Path
) -> None:
    from test_cdc_readers import changes_of, csv_accounts_pipeline, oracle

    warehouse, ns = glue_warehouse
    knobs = ["catalog=glue", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    events = [gen(tmp_path, f"cdc{i}", "domain=cdc", "records=1500", "accounts=150", f"seed={i}",
                  f"first_seq={1 + i * 1500}", f"topic=accounts-{i}")[0] for i in range(2)]
    pipelines = csv_accounts_pipeline(tmp_path / "pipelines", [f"accounts-{i}" for i in range(2)], ns)
    stale = 0
    for event in reversed(events):  # newest first: position deletes, tombstones and stale changes on S3
        stale += summary(run(moto_endpoint, "ingest", str(event), pipelines, *knobs))["upsert_stale"]
    assert stale > 0
    mirror = pyiceberg_glue_table(moto_endpoint, ns, "accounts").scan().to_arrow()
    ids = mirror.column("account_id").to_pylist()
    assert len(ids) == len(set(ids))
    got = dict(zip(ids, zip(mirror.column("balance").to_pylist(), mirror.column("seq").to_pylist())))
    assert got == oracle([c for e in events for c in changes_of(e)])

    # An ingest that dies after writing its files leaves them unreferenced on S3: orphan
    # removal lists them (too young to delete within the margin).
    event, _ = gen(tmp_path, "t", "records=500", "seed=3")
    crashed = run(moto_endpoint, "ingest", str(event), *knobs, "fail_point=after-write", check=False)
    assert crashed.returncode != 0
    report = summary(run(moto_endpoint, "maintain", "action=remove-orphans", "table=vehicle_telemetry", *knobs))
    orphans = report["tables"][0]["remove_orphans"]
    assert orphans["files_listed"] > 0 and orphans["orphans_found"] > 0, orphans
    assert orphans["orphans_too_young"] == orphans["orphans_found"] and orphans["deleted"] == 0, orphans


def test_a_pipeline_file_on_s3_is_fetched_with_its_schemas_and_feeds_glue(moto_endpoint: str, aws_client: Any, glue_warehouse, tmp_path: Path) -> None:
    """What the Terraform module deploys: the pipeline file and the schemas beside it under one
    S3 prefix, `pipelines=s3://...` on the function; the relative schema path resolves there."""
    warehouse, namespace = glue_warehouse
    bucket = f"cfg-{uuid.uuid4().hex[:10]}"
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=bucket)
    root = Path(__file__).resolve().parents[2]
    s3.put_object(Bucket=bucket, Key="icestream/schemas/vehicle_telemetry.proto", Body=(root / "shared/proto/vehicle_telemetry.proto").read_bytes())
    s3.put_object(Bucket=bucket, Key="icestream/pipelines.toml", Body=(
        f'namespace = "{namespace}"\n[[pipeline]]\ntable = "fleet"\ntopics = ["vehicle-telemetry"]\nformat = "protobuf"\n'
        'schema = "schemas/vehicle_telemetry.proto"\nmessage = "icestream.telemetry.v1.VehicleTelemetry"\n'
        'partition_by = ["hour(event_time)"]\n').encode())
    s3.put_object(Bucket=bucket, Key="elsewhere/ignored.txt", Body=b"not under the prefix")
    uri = f"s3://{bucket}/icestream/pipelines.toml"
    checked = json.loads(run(moto_endpoint, "pipelines", "check", uri, "output=json").stdout)
    assert checked["namespace"] == namespace and [p["table"] for p in checked["pipelines"]] == ["fleet"]
    event, exp = gen(tmp_path, "fleet", "format=proto", "records=300", "corrupt=true")
    out = summary(run(moto_endpoint, "ingest", str(event), "catalog=glue", f"warehouse={warehouse}", "s3_path_style=true", f"pipelines={uri}"))
    assert (out["written"], out["dead_letter"]) == (exp["valid"], exp["corrupt"])
    table = pyiceberg_glue_table(moto_endpoint, namespace, "fleet")
    assert table.scan().to_arrow().num_rows == exp["valid"]
    missing = run(moto_endpoint, "pipelines", "check", f"s3://{bucket}/nope/pipelines.toml", check=False)
    assert missing.returncode != 0 and "does not exist" in missing.stderr
