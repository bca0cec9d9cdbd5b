"""The accounts feed through the generic upsert path (the reference file's `accounts`
pipeline, its changes as CSV lines), read by independent Iceberg readers, equals a pure Python
oracle.

Three generated CDC events (unkeyed round-robin; each on its own topic, so its offsets are not
replays of another's) are applied oldest, newest, middle: the newest replaces rows through position deletes, and much of
the middle one arrives after newer changes of the same account. The oracle
applies every change in `seq` order per account, keeping deleted accounts' seq (tombstones).
PyIceberg and DuckDB must see exactly the oracle's live rows (position deletes applied),
before and after compaction folds the deletes into new files.
"""

from __future__ import annotations

import base64
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


def changes_of(event_path: Path) -> list[tuple[str, int, int | None, int]]:
    """(operation, account_id, balance, seq) of every CSV record of an MSK event."""
    event = json.loads(event_path.read_text())
    out = []
    for records in event["records"].values():
        for r in records:
            op, account, balance, _, seq = base64.b64decode(r["value"]).decode().split(",")
            out.append((op, int(account), int(balance) if balance else None, int(seq)))
    return out


def oracle(changes: list[tuple[str, int, int | None, int]]) -> dict[int, tuple[int, int]]:
    """account -> (balance, seq) of the live accounts."""
    current: dict[int, int] = {}
    live: dict[int, tuple[int, int]] = {}
    for op, account, balance, seq in sorted(set(changes), key=lambda c: (c[1], c[3])):
        if account in current and seq < current[account]:
            continue
        current[account] = seq
        if op == "D":
            live.pop(account, None)
        else:
            live[account] = (balance, seq)
    return live


REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "pipelines" / "reference.toml"
ACCOUNT_SCHEMA = REFERENCE.parents[1] / "json" / "account.schema.json"


def csv_accounts_pipeline(tmp: Path, topics: list[str], namespace: str = "bigdata") -> str:
    """The reference `accounts` pipeline on `topics` with the CSV envelope: `pipelines=FILE`."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "pipelines.toml"
    path.write_text(f"""namespace = {json.dumps(namespace)}
[[pipeline]]
table = "accounts"
topics = {json.dumps(topics)}
format = "json"
schema = {json.dumps(str(ACCOUNT_SCHEMA))}
partition_by = ["bucket(16, account_id)"]
mode = "upsert"
key = ["account_id"]
envelope = "csv"
order_by = "seq"
changelog = true
""")
    return f"pipelines={path}"


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("cdc")
    warehouse = tmp / "wh"
    pipelines = csv_accounts_pipeline(tmp, [f"accounts-{i}" for i in range(3)])
    events = []
    for i in range(3):
        path = tmp / f"cdc{i}.json"
        icestream("gen-event", "domain=cdc", "records=3000", "accounts=1000", f"seed={i}",
                  f"first_seq={1 + i * 3000}", f"topic=accounts-{i}", f"out={path}")
        events.append(path)
    stale = 0
    for path in [events[0], events[2], events[1]]:
        summary = json.loads(icestream("ingest", str(path), pipelines, f"warehouse={warehouse}").splitlines()[-1])
        stale += summary["upsert_stale"]
    assert stale > 0, "the middle feed, applied last, must be partly stale"
    report = json.loads(icestream("report", "accounts", f"warehouse={warehouse}"))
    assert report["delete_files"] > 0, "the readers must have position deletes to apply"
    return {"warehouse": warehouse, "pipelines": pipelines, "expected": oracle([c for e in events for c in changes_of(e)])}


def pyiceberg_rows(warehouse: Path, table: str = "accounts") -> dict[int, tuple[int, int]]:
    arrow = pyiceberg_sql_table(warehouse, "bigdata", table).scan().to_arrow()
    ids = arrow.column("account_id").to_pylist()
    assert len(ids) == len(set(ids)), "one live row per account"
    return dict(zip(ids, zip(arrow.column("balance").to_pylist(), arrow.column("seq").to_pylist())))


def duckdb_rows(warehouse: Path, table: str = "accounts") -> dict[int, tuple[int, int]]:
    path = metadata_location_sql(warehouse, "bigdata", table).removeprefix("file://").replace("'", "''")
    con = duckdb_connect()
    try:
        rows = con.execute(f"SELECT account_id, balance, seq FROM iceberg_scan('{path}')").fetchall()
    finally:
        con.close()
    assert len(rows) == len({r[0] for r in rows}), "one live row per account"
    return {r[0]: (r[1], r[2]) for r in rows}


def test_pyiceberg_and_duckdb_read_exactly_the_oracle(mirrored: dict) -> None:
    expected = mirrored["expected"]
    assert pyiceberg_rows(mirrored["warehouse"]) == expected
    assert duckdb_rows(mirrored["warehouse"]) == expected
    assert sum(b for b, _ in expected.values()) == sum(b for b, _ in duckdb_rows(mirrored["warehouse"]).values())


def test_after_compaction_and_rebuild_the_readers_still_read_the_oracle(mirrored: dict) -> None:
    warehouse = mirrored["warehouse"]
    report = json.loads(icestream("maintain", "action=compact", "table=accounts", f"warehouse={warehouse}"))
    compact = report["tables"][0]["compact"]
    assert compact["files_with_deletes"] > 0 and compact["groups_committed"] > 0, compact
    assert json.loads(icestream("report", "accounts", f"warehouse={warehouse}"))["delete_files"] == 0
    assert pyiceberg_rows(warehouse) == mirrored["expected"]
    assert duckdb_rows(warehouse) == mirrored["expected"]
    icestream("cdc-rebuild", "accounts", mirrored["pipelines"], f"warehouse={warehouse}")
    assert pyiceberg_rows(warehouse) == mirrored["expected"]
    assert duckdb_rows(warehouse) == mirrored["expected"]




def dms_changes(event: dict) -> list[tuple[str, int, int | None, int]]:
    """(operation, account_id, balance, seq) of every DMS record of an MSK event."""
    code = {"insert": "I", "load": "I", "update": "U", "delete": "D"}
    out = []
    for records in event["records"].values():
        for r in records:
            doc = json.loads(base64.b64decode(r["value"]))
            d = doc["data"]
            out.append((code[doc["metadata"]["operation"]], d["account_id"], d["balance"], d["seq"]))
    return out


def test_the_reference_accounts_pipeline_keeps_every_change_once_and_rebuilds_from_its_changelog(tmp_path: Path) -> None:
    """The accounts mirror as the reference file's upsert pipeline (`accounts`, DMS on
    accounts-cdc), fed in two halves of every partition by `icestream ingest` with
    shared/pipelines/reference.toml. The changelog then holds every change once, and the table
    rebuilt from it equals the oracle of the whole feed, read by PyIceberg and DuckDB;
    redelivery changes nothing."""
    warehouse = tmp_path / "wh"
    feed = tmp_path / "feed.json"
    icestream("gen-event", "domain=cdc", "format=dms", "records=6000", "accounts=800", "seed=5", "topic=accounts-cdc", f"out={feed}")
    event = json.loads(feed.read_text())
    halves = []
    for i in range(2):
        part = {k: v[: len(v) // 2] if i == 0 else v[len(v) // 2:] for k, v in event["records"].items()}
        path = tmp_path / f"half{i}.json"
        path.write_text(json.dumps({**event, "records": part}))
        halves.append(path)
    pipelines = f"pipelines={REFERENCE}"
    icestream("ingest", str(halves[0]), pipelines, f"warehouse={warehouse}")
    first = json.loads(icestream("ingest", str(halves[1]), pipelines, f"warehouse={warehouse}").splitlines()[-1])
    assert first["dead_letter"] == 0 and first["upsert_applied"] > 0, first

    changes = dms_changes(event)
    logged = pyiceberg_sql_table(warehouse, "bigdata", "accounts_changelog").scan().to_arrow()
    ids = list(zip(logged.column("operation").to_pylist(), logged.column("account_id").to_pylist(), logged.column("seq").to_pylist()))
    assert sorted(ids) == sorted({(op, a, seq) for op, a, _, seq in changes}), "every change once, from both halves"

    report = json.loads(icestream("cdc-rebuild", "accounts", pipelines, f"warehouse={warehouse}"))
    expected = oracle(changes)
    assert report["live_rows"] == len(expected), report
    assert pyiceberg_rows(warehouse, "accounts") == expected
    assert duckdb_rows(warehouse, "accounts") == expected
    again = json.loads(icestream("ingest", str(halves[1]), pipelines, f"warehouse={warehouse}").splitlines()[-1])
    assert again["upsert_applied"] == 0 and again["changelog_written"] == 0, again
    assert pyiceberg_rows(warehouse, "accounts") == expected
