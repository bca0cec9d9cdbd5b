"""The moto harness closes moto's gaps; each test here fails against plain moto 5.2.5
(run with ICESTREAM_MOTO_UNPATCHED=1 to see that)."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

import pytest
from botocore.exceptions import ClientError

import readers

NAMESPACE = "bigdata"


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _error_code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


@pytest.fixture
def glue_table(aws_client: Callable[[str], Any]) -> tuple[Any, str, str]:
    glue = aws_client("glue")
    database, table = _unique("db"), _unique("t")
    glue.create_database(DatabaseInput={"Name": database})
    glue.create_table(
        DatabaseName=database,
        TableInput={"Name": table, "Parameters": {"metadata_location": "s3://b/m0.json"}},
    )
    return glue, database, table


def _update(glue: Any, database: str, table: str, location: str, version_id: str | None) -> None:
    kwargs = {"VersionId": version_id} if version_id is not None else {}
    glue.update_table(
        DatabaseName=database,
        TableInput={"Name": table, "Parameters": {"metadata_location": location}},
        **kwargs,
    )


def _current(glue: Any, database: str, table: str) -> tuple[str, str]:
    found = glue.get_table(DatabaseName=database, Name=table)["Table"]
    return found["VersionId"], found["Parameters"]["metadata_location"]


def test_glue_update_table_checks_version_id(glue_table: tuple[Any, str, str]) -> None:
    glue, database, table = glue_table
    v1, _ = _current(glue, database, table)

    _update(glue, database, table, "s3://b/m1.json", v1)  # current version: accepted
    v2, location = _current(glue, database, table)
    assert (location, int(v2)) == ("s3://b/m1.json", int(v1) + 1)

    with pytest.raises(ClientError) as stale:  # v1 is stale now
        _update(glue, database, table, "s3://b/lost.json", v1)
    assert _error_code(stale.value) == "ConcurrentModificationException"
    assert _current(glue, database, table) == (v2, "s3://b/m1.json")

    _update(glue, database, table, "s3://b/m2.json", None)  # no VersionId: unconditional, as on AWS
    assert _current(glue, database, table) == (str(int(v2) + 1), "s3://b/m2.json")


def test_glue_racing_updates_exactly_one_wins(glue_table: tuple[Any, str, str], aws_client) -> None:
    glue, database, table = glue_table
    writers = 8
    clients = [aws_client("glue") for _ in range(writers)]  # one connection pool per writer
    for round_no in range(5):
        base_version, _ = _current(glue, database, table)
        barrier = threading.Barrier(writers)
        outcomes: list[str] = [""] * writers

        def commit(i: int) -> None:
            barrier.wait()
            try:
                _update(clients[i], database, table, f"s3://b/r{round_no}w{i}.json", base_version)
                outcomes[i] = "won"
            except ClientError as exc:
                outcomes[i] = _error_code(exc)

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert outcomes.count("won") == 1, outcomes
        assert outcomes.count("ConcurrentModificationException") == writers - 1, outcomes
        version, location = _current(glue, database, table)
        assert int(version) == int(base_version) + 1
        assert location == f"s3://b/r{round_no}w{outcomes.index('won')}.json"


def test_pyiceberg_glue_commit_loses_no_snapshot(moto_endpoint: str, aws_client) -> None:
    """End to end: a Glue commit whose VersionId went stale mid-commit must not win.

    PyIceberg retries a rejected commit on fresh metadata, so both appends survive; plain
    moto accepts the stale UpdateTable and A's snapshot silently disappears.
    """
    import pyarrow as pa

    bucket, database = _unique("wh").replace("_", "-"), _unique("ns")
    aws_client("s3").create_bucket(Bucket=bucket)
    writer_a = readers.pyiceberg_glue_catalog(moto_endpoint)
    writer_a.create_namespace(database, {"location": f"s3://{bucket}/{database}"})
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    writer_a.create_table((database, "events"), schema=schema)
    table_a = writer_a.load_table((database, "events"))
    writer_b = readers.pyiceberg_glue_catalog(moto_endpoint)
    table_b = writer_b.load_table((database, "events"))
    a_committed = []

    # B has read the Glue table (and its VersionId); A commits just before B's UpdateTable.
    def a_commits_first(**_: Any) -> None:
        writer_b.glue.meta.events.unregister("before-call.glue.UpdateTable", a_commits_first)
        table_a.append(pa.table({"id": [1]}, schema=schema))
        a_committed.append(True)

    writer_b.glue.meta.events.register("before-call.glue.UpdateTable", a_commits_first)
    table_b.append(pa.table({"id": [2]}, schema=schema))
    assert a_committed

    final = readers.pyiceberg_glue_table(moto_endpoint, database, "events")
    assert sorted(final.scan().to_arrow().column("id").to_pylist()) == [1, 2]
    assert len(final.metadata.snapshots) == 2


@pytest.fixture
def s3tables_table(aws_client: Callable[[str], Any]) -> tuple[Any, str, str]:
    s3tables = aws_client("s3tables")
    bucket_arn = s3tables.create_table_bucket(name=_unique("tb").replace("_", "-"))["arn"]
    s3tables.create_namespace(tableBucketARN=bucket_arn, namespace=[NAMESPACE])
    s3tables.create_table(
        tableBucketARN=bucket_arn, namespace=NAMESPACE, name="events", format="ICEBERG"
    )
    return s3tables, bucket_arn, "events"


def test_s3tables_get_table_managed_by_service_is_a_string(s3tables_table) -> None:
    s3tables, bucket_arn, name = s3tables_table
    found = s3tables.get_table(tableBucketARN=bucket_arn, namespace=NAMESPACE, name=name)
    assert found["name"] == name and found["namespace"] == [NAMESPACE]
    assert found["tableARN"] == f"{bucket_arn}/table/{name}"
    # The model says String; botocore passes a JSON boolean through, the Rust SDK rejects it.
    # A table nobody manages has no managing service: the field is absent.
    assert isinstance(found.get("managedByService", ""), str), found.get("managedByService")
    assert "managedByService" not in found


def test_s3tables_table_maintenance_round_trip(s3tables_table) -> None:
    s3tables, bucket_arn, name = s3tables_table
    where = {"tableBucketARN": bucket_arn, "namespace": NAMESPACE, "name": name}

    config = s3tables.get_table_maintenance_configuration(**where)
    assert config["tableARN"] == f"{bucket_arn}/table/{name}"
    assert config["configuration"]["icebergSnapshotManagement"] == {  # AWS defaults
        "status": "enabled",
        "settings": {"icebergSnapshotManagement": {"minSnapshotsToKeep": 1, "maxSnapshotAgeHours": 120}},
    }

    compaction = {"status": "disabled", "settings": {"icebergCompaction": {"targetFileSizeMB": 128}}}
    snapshots = {
        "status": "enabled",
        "settings": {"icebergSnapshotManagement": {"minSnapshotsToKeep": 5, "maxSnapshotAgeHours": 48}},
    }
    s3tables.put_table_maintenance_configuration(**where, type="icebergCompaction", value=compaction)
    s3tables.put_table_maintenance_configuration(**where, type="icebergSnapshotManagement", value=snapshots)

    got = s3tables.get_table_maintenance_configuration(**where)["configuration"]
    assert got["icebergCompaction"]["status"] == "disabled"
    assert got["icebergCompaction"]["settings"]["icebergCompaction"]["targetFileSizeMB"] == 128
    assert got["icebergSnapshotManagement"] == snapshots

    with pytest.raises(ClientError) as bad:  # AWS allows 64..512 MB
        s3tables.put_table_maintenance_configuration(
            **where, type="icebergCompaction",
            value={"status": "enabled", "settings": {"icebergCompaction": {"targetFileSizeMB": 1}}},
        )
    assert _error_code(bad.value) == "BadRequestException"
    with pytest.raises(ClientError) as missing:
        s3tables.get_table_maintenance_configuration(**{**where, "name": "no_such_table"})
    assert _error_code(missing.value) == "NotFoundException"


def test_s3tables_bucket_maintenance_round_trip(s3tables_table) -> None:
    s3tables, bucket_arn, _ = s3tables_table

    config = s3tables.get_table_bucket_maintenance_configuration(tableBucketARN=bucket_arn)
    assert config["tableBucketARN"] == bucket_arn
    assert config["configuration"] == {  # AWS defaults
        "icebergUnreferencedFileRemoval": {
            "status": "enabled",
            "settings": {"icebergUnreferencedFileRemoval": {"unreferencedDays": 3, "nonCurrentDays": 10}},
        }
    }

    value = {
        "status": "enabled",
        "settings": {"icebergUnreferencedFileRemoval": {"unreferencedDays": 7, "nonCurrentDays": 14}},
    }
    s3tables.put_table_bucket_maintenance_configuration(
        tableBucketARN=bucket_arn, type="icebergUnreferencedFileRemoval", value=value
    )
    got = s3tables.get_table_bucket_maintenance_configuration(tableBucketARN=bucket_arn)
    assert got["configuration"]["icebergUnreferencedFileRemoval"] == value


def test_glue_table_optimizers_are_stored_per_table_and_type(glue_table: tuple[Any, str, str]) -> None:
    """Our emulation (moto_glue_optimizers.py): Create, Get, Update with AWS's errors."""
    glue, database, table = glue_table
    catalog = glue.get_table(DatabaseName=database, Name=table)["Table"]["CatalogId"]
    where = {"CatalogId": catalog, "DatabaseName": database, "TableName": table}
    role = "arn:aws:iam::123456789012:role/optimizer"
    retention = {"roleArn": role, "enabled": True,
                 "retentionConfiguration": {"icebergConfiguration": {"snapshotRetentionPeriodInDays": 2}}}

    with pytest.raises(ClientError) as missing:
        glue.get_table_optimizer(**where, Type="retention")
    assert _error_code(missing.value) == "EntityNotFoundException"
    with pytest.raises(ClientError) as missing:
        glue.update_table_optimizer(**where, Type="retention", TableOptimizerConfiguration=retention)
    assert _error_code(missing.value) == "EntityNotFoundException"

    glue.create_table_optimizer(**where, Type="retention", TableOptimizerConfiguration=retention)
    with pytest.raises(ClientError) as again:
        glue.create_table_optimizer(**where, Type="retention", TableOptimizerConfiguration=retention)
    assert _error_code(again.value) == "AlreadyExistsException"
    got = glue.get_table_optimizer(**where, Type="retention")["TableOptimizer"]
    assert (got["type"], got["configuration"]) == ("retention", retention)
    # Per type: the retention optimizer is not the compaction one.
    with pytest.raises(ClientError) as other:
        glue.get_table_optimizer(**where, Type="compaction")
    assert _error_code(other.value) == "EntityNotFoundException"

    changed = {**retention, "enabled": False}
    glue.update_table_optimizer(**where, Type="retention", TableOptimizerConfiguration=changed)
    assert glue.get_table_optimizer(**where, Type="retention")["TableOptimizer"]["configuration"] == changed

    with pytest.raises(ClientError) as no_table:
        glue.create_table_optimizer(**{**where, "TableName": "nope"}, Type="compaction",
                                    TableOptimizerConfiguration={"roleArn": role, "enabled": True})
    assert _error_code(no_table.value) == "EntityNotFoundException"
