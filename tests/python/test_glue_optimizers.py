"""glue_maintenance=glue end to end: the maintenance run sets up Glue's table optimizers (our
emulation of the three calls in moto_glue_optimizers.py) and leaves compaction, expiry and
orphans to them, while rewrite-manifests still runs; `ours` on the same table does them all.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import AWS_ENV
from test_aws_catalogs import BIN, gen, glue_warehouse, run, summary  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")

ROLE = "arn:aws:iam::123456789012:role/icestream-glue-optimizer"
TABLE = "vehicle_telemetry"


def maintain(endpoint: str, knobs: list[str], *extra: str) -> dict:
    out = summary(run(endpoint, "maintain", f"table={TABLE}", *knobs, *extra))
    [table] = out["tables"]
    assert not table.get("error"), table
    return table


def optimizers(glue: Any, ns: str) -> dict[str, dict]:
    catalog = glue.get_table(DatabaseName=ns, Name=TABLE)["Table"]["CatalogId"]
    where = {"CatalogId": catalog, "DatabaseName": ns, "TableName": TABLE}
    return {t: glue.get_table_optimizer(**where, Type=t)["TableOptimizer"]["configuration"]
            for t in ("compaction", "retention", "orphan_file_deletion")}


def snapshots(endpoint: str, knobs: list[str]) -> list[dict]:
    from readers import pyiceberg_glue_table

    ns = next(k.split("=", 1)[1] for k in knobs if k.startswith("namespace="))
    table = pyiceberg_glue_table(endpoint, ns, TABLE)
    return [{"id": s.snapshot_id, **s.summary.additional_properties} for s in table.metadata.snapshots]


def test_glue_optimizers_replace_our_compaction_expiry_and_orphans(moto_endpoint: str, glue_warehouse, aws_client,
                                                                   tmp_path: Path) -> None:
    warehouse, ns = glue_warehouse
    knobs = ["catalog=glue", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    # Six small appends: small files to compact, manifests to merge, snapshots to expire.
    offset = 0
    for i in range(6):
        event, exp = gen(tmp_path, f"e{i}", "records=200", f"seed={40 + i}", f"start_offset={offset}")
        offset += exp["records"]
        run(moto_endpoint, "ingest", str(event), *knobs)
    before = snapshots(moto_endpoint, knobs)
    # Knobs under which ours would expire every snapshot but the current one.
    tuned = ["snapshot_max_age_hours=0", "min_snapshots_to_keep=1", "orphan_margin_hours=1"]
    glue = [*knobs, *tuned, "glue_maintenance=glue", f"glue_optimizer_role_arn={ROLE}"]

    first = maintain(moto_endpoint, glue)
    got = {o["kind"]: o for o in first["glue_optimizers"]["optimizers"]}
    assert {k: o["outcome"] for k, o in got.items()} == dict.fromkeys(["compaction", "retention", "orphan_file_deletion"], "created")
    stored = optimizers(aws_client("glue"), ns)
    assert all(c["roleArn"] == ROLE and c["enabled"] is True for c in stored.values()), stored
    assert stored["retention"]["retentionConfiguration"]["icebergConfiguration"] == {
        "snapshotRetentionPeriodInDays": 1, "numberOfSnapshotsToRetain": 1, "cleanExpiredFiles": True}
    orphans = stored["orphan_file_deletion"]["orphanFileDeletionConfiguration"]["icebergConfiguration"]
    # At least 15 days whatever the margin: staged files of queued requests wait that long.
    assert orphans["orphanFileRetentionPeriodInDays"] == 15 and orphans["location"].endswith(f"/{ns}.db/{TABLE}"), orphans

    # Glue's optimizers run compaction, expiry and orphans; rewrite-manifests is still ours.
    assert "expire: run by Glue's `retention` optimizer" in first["skipped"], first["skipped"]
    assert "remove-orphans: run by Glue's `orphan_file_deletion` optimizer" in first["skipped"], first["skipped"]
    assert "expire" not in first and "remove_orphans" not in first, first
    # Ours only folds delete files under `glue`: an append table has none, so no file is rewritten.
    assert any(s.startswith("compact: small files are bin-packed by Glue's `compaction` optimizer") for s in first["skipped"])
    assert (first["compact"]["candidate_files"], first["compact"]["commits"]) == (0, 0), first["compact"]
    assert first["rewrite_manifests"]["committed"], first["rewrite_manifests"]
    after = snapshots(moto_endpoint, knobs)
    before_ids = {s["id"] for s in before}
    assert before_ids <= {s["id"] for s in after}, "a snapshot was expired"
    added = [s for s in after if s["id"] not in before_ids]
    assert [s.get("icestream.maintenance") for s in added] == ["rewrite-manifests"], added

    # Run again: nothing to change.
    second = maintain(moto_endpoint, glue)
    assert {o["outcome"] for o in second["glue_optimizers"]["optimizers"]} == {"unchanged"}
    assert optimizers(aws_client("glue"), ns) == stored

    # A changed knob: a dry run says so and changes nothing, a run updates that optimizer only.
    changed = [*glue, "min_snapshots_to_keep=3"]
    dry = maintain(moto_endpoint, changed, "dry-run=true")
    assert {o["kind"]: o["outcome"] for o in dry["glue_optimizers"]["optimizers"]} == {
        "compaction": "unchanged", "retention": "would-update", "orphan_file_deletion": "unchanged"}
    assert optimizers(aws_client("glue"), ns) == stored
    third = maintain(moto_endpoint, changed)
    assert {o["kind"]: o["outcome"] for o in third["glue_optimizers"]["optimizers"]} == {
        "compaction": "unchanged", "retention": "updated", "orphan_file_deletion": "unchanged"}
    retention = optimizers(aws_client("glue"), ns)["retention"]["retentionConfiguration"]["icebergConfiguration"]
    assert retention["numberOfSnapshotsToRetain"] == 3, retention

    # Status says who runs what.
    status = json.loads(run(moto_endpoint, "status", "output=json", *glue).stdout)
    by = {s["table"]: s["maintained_by"] for s in status}[TABLE]
    assert by == {"purge-tombstones": "icestream", "compact": "glue-compaction-and-icestream-deletes",
                  "rewrite-manifests": "icestream", "expire": "glue-retention", "remove-orphans": "glue-orphan-file-deletion"}, by

    # The control: `ours` on the same table compacts and expires (so the above did not by choice).
    ours = maintain(moto_endpoint, [*knobs, *tuned])
    assert "glue_optimizers" not in ours and not ours["skipped"], ours
    assert ours["compact"]["commits"] > 0 and ours["expire"]["snapshots_expired"] > 0, (ours["compact"], ours["expire"])


def test_an_upsert_tables_orphans_stay_ours(moto_endpoint: str, glue_warehouse, aws_client, tmp_path: Path) -> None:
    """Its tombstone file is named by a table property, which Glue's orphan deletion does not
    read: that optimizer is created disabled and our remove-orphans runs."""
    from test_cdc_readers import csv_accounts_pipeline

    warehouse, ns = glue_warehouse
    knobs = ["catalog=glue", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    event, _ = gen(tmp_path, "cdc", "domain=cdc", "records=300", "accounts=50", "seed=9", "topic=accounts-0")
    pipelines = csv_accounts_pipeline(tmp_path / "pipelines", ["accounts-0"], ns)
    run(moto_endpoint, "ingest", str(event), pipelines, *knobs)
    # One set up before, otherwise (in the console, say): enabled.
    catalog = aws_client("glue").get_table(DatabaseName=ns, Name="accounts")["Table"]["CatalogId"]
    where = {"CatalogId": catalog, "DatabaseName": ns, "TableName": "accounts", "Type": "orphan_file_deletion"}
    aws_client("glue").create_table_optimizer(**where, TableOptimizerConfiguration={"roleArn": ROLE, "enabled": True})
    glue = [*knobs, pipelines, "glue_maintenance=glue", f"glue_optimizer_role_arn={ROLE}"]
    out = summary(run(moto_endpoint, "maintain", "table=accounts", *glue))
    [table] = out["tables"]
    assert not table.get("error"), table
    enabled = {o["kind"]: (o["enabled"], o["outcome"]) for o in table["glue_optimizers"]["optimizers"]}
    assert enabled == {"compaction": (True, "created"), "retention": (True, "created"),
                       "orphan_file_deletion": (False, "updated")}, enabled
    assert "remove_orphans" in table and not any(s.startswith("remove-orphans") for s in table["skipped"]), table
    assert any(s.startswith("expire: run by Glue") for s in table["skipped"]), table["skipped"]
    stored = aws_client("glue").get_table_optimizer(**where)["TableOptimizer"]["configuration"]
    assert stored["enabled"] is False, stored


def test_maintenance_runs_racing_to_set_up_one_table_create_each_optimizer_once(
        moto_endpoint: str, glue_warehouse, tmp_path: Path) -> None:
    """Schedules of one table fire together: each optimizer is created by one run, the others
    find it (a create that loses the race looks again) and none fails."""
    warehouse, ns = glue_warehouse
    knobs = ["catalog=glue", f"warehouse={warehouse}", f"namespace={ns}", "s3_path_style=true"]
    event, _ = gen(tmp_path, "e", "records=100", "seed=3")
    run(moto_endpoint, "ingest", str(event), *knobs)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
    env.update(AWS_ENV, AWS_ENDPOINT_URL=moto_endpoint, RUST_LOG="warn", AWS_EC2_METADATA_DISABLED="true")
    args = [BIN, "maintain", f"table={TABLE}", "action=rewrite-manifests", *knobs, "glue_maintenance=glue",
            f"glue_optimizer_role_arn={ROLE}"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(6)]
    outcomes: dict[str, list[str]] = {}
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        [table] = json.loads(out.splitlines()[-1])["tables"]
        assert not table.get("error"), table
        for o in table["glue_optimizers"]["optimizers"]:
            outcomes.setdefault(o["kind"], []).append(o["outcome"])
    for kind, seen in outcomes.items():
        assert sorted(seen) == ["created"] + ["unchanged"] * 5, (kind, seen)
