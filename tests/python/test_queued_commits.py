"""commit_mode=queued end to end: `icestream ingest` writers stage files and send commit requests
to an SQS queue of the (patched) moto server on 127.0.0.1; `icestream committer poll` runs the
committer function's code on one batch at a time, as the Lambda SQS mapping would, and
acknowledges what it committed. Tables live in the embedded catalog (local SQLite) or in Glue
with the files in moto's S3. PyIceberg reads the result back independently.

Prerequisite: ICESTREAM_BIN (make test sets it). Missing, every test here fails.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import AWS_ENV
from readers import pyiceberg_glue_table, pyiceberg_sql_table

BIN = os.environ.get("ICESTREAM_BIN", "")
NAMESPACE = "bigdata"
TELEMETRY = "vehicle_telemetry"
DEAD_LETTER = "vehicle_telemetry_dead_letter"
WRITERS = 16


@pytest.fixture(scope="module", autouse=True)
def icestream_binary() -> None:
    assert BIN and Path(BIN).is_file(), "set ICESTREAM_BIN to the icestream binary (make test does)"


def run(endpoint: str, *args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
    full.update(AWS_ENV, AWS_ENDPOINT_URL=endpoint, RUST_LOG="warn", AWS_EC2_METADATA_DISABLED="true")
    full.update(env or {})
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=full, timeout=300)
    if check:
        assert out.returncode == 0, f"icestream {' '.join(args)}: {out.stderr}"
    return out


def last_json(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.splitlines()[-1])


class Setup:
    """One catalog (local or glue), one commit queue, one workload."""

    def __init__(self, endpoint: str, aws_client: Any, tmp: Path, catalog: str, fifo: bool = False) -> None:
        self.endpoint, self.aws, self.tmp, self.catalog = endpoint, aws_client, tmp, catalog
        # A FIFO queue as the Terraform module deploys it (the writers group by table).
        name, attributes = (f"commit-{uuid.uuid4().hex[:10]}.fifo", {"FifoQueue": "true"}) if fifo else (f"commit-{uuid.uuid4().hex[:10]}", {})
        self.queue_url = aws_client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        if catalog == "local":
            self.warehouse = str(tmp / "wh")
            self.knobs = [f"warehouse={self.warehouse}"]
        else:
            self.bucket = f"wh-{uuid.uuid4().hex[:10]}"
            aws_client("s3").create_bucket(Bucket=self.bucket)
            self.namespace = f"ns_{uuid.uuid4().hex[:8]}"
            self.knobs = ["catalog=glue", f"warehouse=s3://{self.bucket}/warehouse", f"namespace={self.namespace}",
                          "s3_path_style=true"]
        self.queued = [*self.knobs, "commit_mode=queued", f"commit_queue_url={self.queue_url}"]

    def table(self, name: str) -> Any:
        if self.catalog == "local":
            return pyiceberg_sql_table(self.warehouse, NAMESPACE, name)
        return pyiceberg_glue_table(self.endpoint, self.namespace, name)

    def ingest(self, event: Path, queued: bool = True) -> dict:
        return last_json(run(self.endpoint, "ingest", str(event), *(self.queued if queued else self.knobs)))

    def poll(self, *options: str, env: dict[str, str] | None = None, check: bool = True) -> Any:
        out = run(self.endpoint, "committer", "poll", *self.queued, "visibility_timeout_s=5", *options, env=env, check=check)
        return last_json(out) if check else out

    def queue_depth(self) -> int:
        attrs = self.aws("sqs").get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def drain(self, *options: str) -> list[dict]:
        """Poll until the queue holds nothing (deferred requests come back after the visibility timeout)."""
        reports = []
        for _ in range(200):
            report = self.poll(*options)
            if report["messages"]:
                reports.append(report)
            elif self.queue_depth() == 0:
                return reports
            else:
                time.sleep(0.5)
        pytest.fail(f"the commit queue did not drain: {self.queue_depth()} messages left")

    def staged_left(self) -> list[str]:
        if self.catalog == "local":
            return [str(p) for p in Path(self.warehouse).rglob("staged/*")]
        listing = self.aws("s3").list_objects_v2(Bucket=self.bucket).get("Contents", [])
        return [o["Key"] for o in listing if "/staged/" in o["Key"]]


@pytest.fixture(params=["local", "glue"])
def setup(request, moto_endpoint: str, aws_client: Any, tmp_path: Path) -> Setup:
    return Setup(moto_endpoint, aws_client, tmp_path, request.param)


# --------------------------------------------------------------------------- events


def generate(tmp: Path, *args: str) -> tuple[dict, dict]:
    path = tmp / "full.json"
    exp = json.loads(run("http://127.0.0.1:1", "gen-event", f"out={path}", *args).stdout)
    return json.loads(path.read_text()), exp


def cut(full: dict, partition: int, lo: int, hi: int, path: Path) -> Path:
    """The records of one partition with offsets lo..=hi, as an MSK event file."""
    records = {k: [r for r in v if r["partition"] == partition and lo <= r["offset"] <= hi]
               for k, v in full["records"].items()}
    event = {**full, "records": {k: v for k, v in records.items() if v}}
    path.write_text(json.dumps(event))
    return path


def last_offsets(full: dict) -> dict[int, int]:
    out: dict[int, int] = {}
    for records in full["records"].values():
        for r in records:
            out[r["partition"]] = max(out.get(r["partition"], -1), r["offset"])
    return out


def schedule(rng: random.Random, last: int, size: tuple[int, int] = (20, 120)) -> list[tuple[int, int]]:
    """A partition's batches as the mapping delivers them: re-cut overlaps creeping forward,
    and now and then the same batch again (a retried invocation)."""
    batches, nxt = [], 0
    while nxt <= last:
        lo = max(0, nxt - rng.randrange(0, 40))
        hi = min(last, max(nxt + 5, lo + rng.randrange(*size)))
        batches.append((lo, hi))
        if rng.random() < 0.25:
            batches.append((lo, hi))
        nxt = hi + 1
    return batches


def run_writers(s: Setup, full: dict, schedules: dict[int, list[tuple[int, int]]], round_: int, queued: bool = True) -> list[dict]:
    """Round `round_` of every writer's schedule, the 16 writers at once."""
    jobs = [(p, b[round_]) for p, b in schedules.items() if round_ < len(b)]

    def one(job):
        p, (lo, hi) = job
        return s.ingest(cut(full, p, lo, hi, s.tmp / f"p{p}-r{round_}.json"), queued=queued)

    with ThreadPoolExecutor(WRITERS) as pool:
        return list(pool.map(one, jobs))


def lineage(table: Any) -> list[tuple[int, int]]:
    arrow = table.scan(selected_fields=("kafka_partition", "kafka_offset")).to_arrow()
    return list(zip(arrow.column("kafka_partition").to_pylist(), arrow.column("kafka_offset").to_pylist()))


def assert_exactly_once(s: Setup, full: dict, exp: dict, queued: bool = True) -> None:
    rows, dead = lineage(s.table(TELEMETRY)), lineage(s.table(DEAD_LETTER))
    assert len(rows) == len(set(rows)) == exp["valid"], "a telemetry record is missing or landed twice"
    assert len(dead) == len(set(dead)) == exp["corrupt"], "a dead letter is missing or landed twice"
    every = {(r["partition"], r["offset"]) for recs in full["records"].values() for r in recs}
    assert set(rows) | set(dead) == every and not set(rows) & set(dead)
    # Direct mode moves the dead-letter table's watermarks only with dead letters to commit.
    for name in (TELEMETRY, DEAD_LETTER) if queued else (TELEMETRY,):
        report = json.loads(run(s.endpoint, "report", name, *s.knobs).stdout)
        want = {f"vehicle-telemetry-{p}": last for p, last in last_offsets(full).items()}
        assert report["watermarks"] == want, f"{name} watermarks"


# --------------------------------------------------------------------------- tests


def test_sixteen_writers_with_replays_and_recuts_land_exactly_once_one_snapshot_per_batch(setup: Setup) -> None:
    s = setup
    full, exp = generate(s.tmp, f"records={WRITERS * 240}", f"partitions={WRITERS}", "corrupt=true", "seed=91")
    rng = random.Random(7)
    schedules = {p: schedule(rng, last) for p, last in sorted(last_offsets(full).items())}
    reports = []
    for round_ in range(max(map(len, schedules.values()))):
        sent = run_writers(s, full, schedules, round_)
        assert all(r["commit_requests"] in (0, 2) and r["snapshot_id"] is None for r in sent), sent
        # Commit after every other round: some overlaps wait in the queue together (trimmed by
        # the committer), others straddle a commit (the writer drops what the table holds).
        if round_ % 2 == 1:
            reports += s.drain("max_messages=40")
    reports += s.drain("max_messages=40")
    assert_exactly_once(s, full, exp)

    tables = [t for r in reports for t in r["tables"]]
    assert not [r["batch_item_failures"] for r in reports if r["batch_item_failures"]]
    assert sum(t["trimmed"] for t in tables) > 0 and sum(t["dropped"] for t in tables) > 0, tables
    # One snapshot per committer batch and table, holding exactly one new manifest.
    for name in (TELEMETRY, DEAD_LETTER):
        ours = [t for t in tables if t["table"].endswith(f".{name}")]
        snapshot_ids = [t["snapshot_id"] for t in ours if t["snapshot_id"] is not None]
        table = s.table(name)
        assert sorted(snapshot_ids) == sorted(snap.snapshot_id for snap in table.snapshots()), name
        for snap in table.snapshots():
            added = [m for m in snap.manifests(table.io) if m.added_snapshot_id == snap.snapshot_id]
            assert len(added) == 1, f"{name} snapshot {snap.snapshot_id} added {len(added)} manifests"
    telemetry = [t for t in tables if t["table"].endswith(f".{TELEMETRY}")]
    assert sum(t["committed"] for t in telemetry) > 2 * len([t for t in telemetry if t["snapshot_id"]])
    assert s.staged_left() == [], "consumed staged manifests must be removed"


def test_a_committer_crash_between_commit_and_acknowledgement_loses_and_duplicates_nothing(setup: Setup) -> None:
    s = setup
    full, exp = generate(s.tmp, "records=1600", "partitions=4", "corrupt=true", "seed=92")
    lasts = last_offsets(full)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: s.ingest(cut(full, p, 0, lasts[p], s.tmp / f"p{p}.json")), lasts))
    crashed = s.poll("visibility_timeout_s=1", env={"ICESTREAM_FAIL_POINT": "after-commit"}, check=False)
    assert crashed.returncode != 0 and "after-commit" in crashed.stderr, crashed.stderr
    rows = lineage(s.table(TELEMETRY))
    assert len(rows) == exp["valid"], "the commit happened before the crash"

    # The requests come again: the ones committed before the crash are dropped, the rest commit.
    reports = s.drain()
    telemetry = [t for r in reports for t in r["tables"] if t["table"].endswith(f".{TELEMETRY}")]
    assert sum(t["dropped"] for t in telemetry) == 4 and sum(t["committed"] for t in telemetry) == 0, telemetry
    assert all(t["snapshot_id"] is None for t in telemetry)
    assert_exactly_once(s, full, exp)
    assert s.staged_left() == []


def test_partial_batch_failure_reports_bad_and_out_of_order_requests_and_commits_the_rest(setup: Setup) -> None:
    s = setup
    full, exp = generate(s.tmp, "records=900", "partitions=1", "corrupt=true", "seed=93")
    assert last_offsets(full) == {0: 899}
    s.ingest(cut(full, 0, 0, 299, s.tmp / "a.json"))
    first = s.poll()
    assert first["batch_item_failures"] == [] and all(t["committed"] == 1 for t in first["tables"]), first

    # The request for 600..899 arrives before the one for 300..599 (SQS does not keep order),
    # next to a message that is no commit request at all. Received for 300 s, the deferred
    # requests come again after commit_gap_retry_s; the bad one stays hidden.
    s.ingest(cut(full, 0, 600, 899, s.tmp / "c.json"))
    garbage = s.aws("sqs").send_message(QueueUrl=s.queue_url, MessageBody="not a commit request")["MessageId"]
    second = s.poll("visibility_timeout_s=300", "commit_gap_retry_s=1")
    assert second["messages"] == 3 and garbage in second["batch_item_failures"], second
    assert len(second["batch_item_failures"]) == 3 and garbage not in second["deferred"]
    assert [t["deferred"] for t in second["tables"]] == [1, 1], second
    assert max(o for _, o in lineage(s.table(TELEMETRY))) < 300

    s.ingest(cut(full, 0, 300, 599, s.tmp / "b.json"))
    for _ in range(100):
        s.poll("commit_gap_retry_s=1")
        marks = json.loads(run(s.endpoint, "report", TELEMETRY, *s.knobs).stdout)["watermarks"]
        if marks == {"vehicle-telemetry-0": 899}:
            break
        time.sleep(0.3)
    else:
        pytest.fail("the deferred request never committed")
    assert_exactly_once(s, full, exp)
    assert s.queue_depth() == 1, "the bad message waits for its visibility timeout (then the DLQ)"


def test_the_committer_and_compaction_race_without_losing_or_duplicating(moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    """Compaction replaces files while the committer appends: whichever swaps second replans."""
    s = Setup(moto_endpoint, aws_client, tmp_path, "local")
    full, exp = generate(s.tmp, "records=4000", "partitions=4", "corrupt=true", "seed=95")
    schedules = {p: schedule(random.Random(p), last, (40, 80)) for p, last in sorted(last_offsets(full).items())}
    rounds = max(map(len, schedules.values()))
    for round_ in range(rounds // 2):  # small files in a closed partition (the readings are two hours old)
        run_writers(s, full, schedules, round_)
        s.drain()
    for round_ in range(rounds // 2, rounds):
        run_writers(s, full, schedules, round_)

    compactions: list[dict] = []

    def compact_until(done) -> None:
        while not done.done() or not compactions:
            out = run(s.endpoint, "maintain", "action=compact", f"table={TELEMETRY}", "hot_partition_hours=0", *s.knobs)
            compactions.append(last_json(out)["tables"][0]["compact"])

    with ThreadPoolExecutor(2) as pool:
        drained = pool.submit(s.drain, "max_messages=8")
        compacting = pool.submit(compact_until, drained)
        reports = drained.result()
        compacting.result()
    assert sum(c["groups_committed"] for c in compactions) > 0, compactions
    assert not [r for r in reports if r["batch_item_failures"]]
    assert_exactly_once(s, full, exp)
    print("committer attempts", [t["attempts"] for r in reports for t in r["tables"] if t["committed"]])


BATCH = (150, 350)  # records per writer invocation in the figures' workload


def workload_figures(s: Setup, queued: bool) -> dict:
    """The same 16-writer workload (re-cuts and replays included), direct or queued; in queued
    mode the committer takes one batch after every round of writer invocations, as a batching
    window would."""
    full, exp = generate(s.tmp, f"records={WRITERS * 1000}", f"partitions={WRITERS}", "seed=94")
    schedules = {p: schedule(random.Random(p), last, BATCH) for p, last in sorted(last_offsets(full).items())}
    started = time.monotonic()
    invocations = attempts = 0
    for round_ in range(max(map(len, schedules.values()))):
        summaries = run_writers(s, full, schedules, round_, queued=queued)
        invocations += len(summaries)
        attempts += sum(r["commit_attempts"] for r in summaries)
        if queued:
            attempts += sum(t["attempts"] for r in s.drain("max_messages=1000") for t in r["tables"])
    wall = time.monotonic() - started
    assert_exactly_once(s, full, exp, queued)
    table = s.table(TELEMETRY)
    snapshots = table.snapshots()
    manifests = sum(len([m for m in snap.manifests(table.io) if m.added_snapshot_id == snap.snapshot_id]) for snap in snapshots)
    files = len(table.inspect.files())
    per_million = 1e6 / exp["valid"]
    return {
        "mode": "queued" if queued else "direct", "records": exp["valid"], "invocations": invocations,
        "snapshots": len(snapshots), "commit_attempts": attempts, "wall_s": round(wall, 1),
        "snapshots_per_M": round(len(snapshots) * per_million), "manifests_per_M": round(manifests * per_million),
        "files_per_M": round(files * per_million), "commits_per_s": round(len(snapshots) / wall, 2),
    }


def test_direct_and_queued_figures_for_the_same_sixteen_writer_workload(moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    """Prints the figures (run with -s); asserts only what is not timing: queued mode makes at
    most one snapshot per committer batch, direct mode about one per invocation. (Data files
    are the writers' in both modes: queueing does not make them larger; compaction does.)"""
    figures = []
    for queued in (False, True):
        s = Setup(moto_endpoint, aws_client, tmp_path / ("queued" if queued else "direct"), "local")
        s.tmp.mkdir()
        figures.append(workload_figures(s, queued))
    direct, queued = figures
    for f in figures:
        print("FIGURES " + json.dumps(f))
    rounds = max(len(schedule(random.Random(p), 999, BATCH)) for p in range(WRITERS))
    assert queued["snapshots"] <= rounds < direct["snapshots"], figures
    assert queued["manifests_per_M"] < direct["manifests_per_M"], figures


@pytest.mark.parametrize("kind", ["standard", "fifo"])
def test_a_committer_that_dies_holding_a_partitions_first_request_loses_nothing(
        kind: str, moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    """Issue 51: a committer receives a partition's first request and dies (nothing acknowledged,
    the request invisible for its visibility timeout). The next request of that partition is
    delivered again and again meanwhile. On a standard queue it takes the gap after
    `commit_gap_patience` deliveries, recorded in the table (the audit fails on it); when the
    first request comes back it fills the gap instead of being dropped as a replay. On a FIFO
    queue the table's message group stays blocked while the first is in flight: no gap at all."""
    s = Setup(moto_endpoint, aws_client, tmp_path, "local", fifo=kind == "fifo")
    full, exp = generate(s.tmp, "records=600", "partitions=1", "corrupt=true", "seed=94")
    assert last_offsets(full) == {0: 599}
    s.ingest(cut(full, 0, 0, 299, s.tmp / "a.json"))
    # The committer that dies: it received the first request (and its dead-letter twin) and
    # never answered.
    held: list = []
    for _ in range(5):
        held += s.aws("sqs").receive_message(QueueUrl=s.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=12).get("Messages", [])
        if len(held) == 2:
            break
    assert len(held) == 2, held
    dead_at = time.monotonic()
    s.ingest(cut(full, 0, 300, 599, s.tmp / "b.json"))

    # The next request alone, delivered until the committer's patience runs out.
    for _ in range(20):
        s.poll("commit_gap_retry_s=1")
        marks = json.loads(run(s.endpoint, "report", TELEMETRY, *s.knobs).stdout)["watermarks"]
        if marks or time.monotonic() - dead_at > 10:
            break
        time.sleep(1.1)
    audit = run(s.endpoint, "audit", TELEMETRY, *s.knobs, check=False)
    if kind == "standard":
        assert marks == {"vehicle-telemetry-0": 599}, "the later request took the gap"
        assert audit.returncode == 1, f"the audit must fail while offsets are skipped: {audit.stdout}"
        assert "300 skipped-by-committer" in audit.stdout, audit.stdout
        # The mapping delivers everything again meanwhile: the writer must bring the records of
        # the open gap (not skip them as held), and that request fills it.
        s.ingest(cut(full, 0, 0, 599, s.tmp / "again.json"))
        filled = s.poll("commit_gap_retry_s=1")
        assert sum(t["gap_offsets_filled"] for t in filled["tables"] if t["table"].endswith(f".{TELEMETRY}")) == 300, filled
    else:
        assert marks == {}, "a FIFO group stays blocked while its first request is in flight"

    # The dead committer's request comes back after its visibility timeout.
    time.sleep(max(0.0, 12.5 - (time.monotonic() - dead_at)))
    reports = s.drain("commit_gap_retry_s=1")
    telemetry = [t for r in reports for t in r["tables"] if t["table"].endswith(f".{TELEMETRY}")]
    assert_exactly_once(s, full, exp)
    if kind == "standard":
        assert sum(t["dropped"] for t in telemetry) >= 1, "the first request came back after its gap was filled"
    audit = run(s.endpoint, "audit", TELEMETRY, *s.knobs, check=False)
    assert audit.returncode == 0 and "PASS" in audit.stdout, audit.stdout
    assert s.staged_left() == []


def test_a_redelivery_while_a_dead_letter_request_waits_keeps_its_dead_letters(
        moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    """A batch's table request is committed while its dead-letter request waits (held by a
    committer that died). The mapping delivers the batch again: its records are held by the table
    but not yet by the dead-letter table, so the writer must judge them for the dead-letter table
    again, not claim their offsets there without their dead letters (the first request, back
    later, would then be dropped as a replay and the dead letters lost)."""
    s = Setup(moto_endpoint, aws_client, tmp_path, "local")
    full, exp = generate(s.tmp, "records=3000", "partitions=1", "corrupt=true", "seed=96")
    assert exp["corrupt"] > 0
    s.ingest(cut(full, 0, 0, 2999, s.tmp / "a.json"))
    held = []
    for _ in range(5):
        held += s.aws("sqs").receive_message(QueueUrl=s.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=12).get("Messages", [])
        if len(held) == 2:
            break
    assert len(held) == 2, held
    dead_at = time.monotonic()
    # The table's request alone comes back and commits; the dead-letter one stays in flight.
    table_request = next(m for m in held if json.loads(m["Body"])["table"] == TELEMETRY)
    s.aws("sqs").send_message(QueueUrl=s.queue_url, MessageBody=table_request["Body"])
    s.poll()
    assert json.loads(run(s.endpoint, "report", TELEMETRY, *s.knobs).stdout)["watermarks"] == {"vehicle-telemetry-0": 2999}
    s.ingest(cut(full, 0, 0, 2999, s.tmp / "again.json"))
    s.poll()
    time.sleep(max(0.0, 12.5 - (time.monotonic() - dead_at)))
    s.drain()
    assert_exactly_once(s, full, exp)
