#!/usr/bin/env python3
"""`make bench-contention`: N writer processes committing to one table at once.

For each catalog (the SQL catalog in SQLite; Glue and S3 Tables on the patched moto server,
tests/python/moto_harness.py), each mode (direct; queued: the writers send commit requests, one
committer commits them) and each N (WRITERS): one topic of N partitions, EVENTS events of RECORDS
telemetry records per partition, and N `icestream ingest` processes started together, writer p
ingesting partition p's events one after another (one warm process, as a warm Lambda container
meets its batches). Every catalog, storage and queue call of every process waits LATENCY_MS
before it is sent (the `simulated_latency_ms` knob: a local SQLite catalog and moto answer in
about a millisecond where Glue, S3 and SQS take tens). The table is created before the race.

Printed per run: commits/s, attempts per commit, records/s, p50 and p99 commit latency (direct:
each invocation's commit time, retries included; queued: each of the committer's commits),
for queued the requests folded into one commit, and the invocations that failed (their commit
budget, `commit_timeout_ms`, spent on lost races: the mapping would retry them). Figures are
printed, never asserted.

    scripts/bench/bench_contention.py BIN [--writers 4,16,64] [--catalogs local,glue,s3tables]
        [--modes direct,queued] [--latency-ms 40] [--events 4] [--records 200] [--committer-batch 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_freshness import AWS_ENV, Moto, percentile  # noqa: E402

TOPIC = "contended"


def events_by_writer(bin_: str, tmp: Path, writers: int, events: int, records: int) -> list[list[Path]]:
    """Writer p's event files: partition p's records cut into `events` events, in offset order."""
    full_path = tmp / "full.json"
    subprocess.run([bin_, "gen-event", f"out={full_path}", f"records={writers * events * records}", f"partitions={writers}",
                    "keyed=false", f"topic={TOPIC}", "format=proto", "seed=5"], check=True, capture_output=True)
    full = json.loads(full_path.read_text())
    by_partition: dict[int, list[dict]] = {}
    for group in full["records"].values():
        for r in group:
            by_partition.setdefault(r["partition"], []).append(r)
    out = []
    for p in range(writers):
        rs = sorted(by_partition.get(p, []), key=lambda r: r["offset"])
        files = []
        for e in range(events):
            chunk = rs[e * records:(e + 1) * records]
            if not chunk:
                continue
            path = tmp / f"p{p}-e{e}.json"
            path.write_text(json.dumps({**full, "records": {f"{TOPIC}-{p}": chunk}}))
            files.append(path)
        out.append(files)
    return out


class Target:
    """One catalog's knobs (a fresh table each run) and the environment its processes need."""

    def __init__(self, catalog: str, moto: Moto | None, tmp: Path, latency_ms: int) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
        self.env.update(AWS_ENV, RUST_LOG="warn")
        common = ["source=proto", f"simulated_latency_ms={latency_ms}"]
        if moto:
            import boto3
            self.env["AWS_ENDPOINT_URL"] = moto.endpoint
            client = lambda name: boto3.client(name, endpoint_url=moto.endpoint, region_name="us-east-1",  # noqa: E731
                                               aws_access_key_id="test", aws_secret_access_key="test")
        ns = f"ns_{uuid.uuid4().hex[:8]}"
        if catalog == "local":
            self.knobs = [f"warehouse={tmp / 'wh'}", *common]
        elif catalog == "glue":
            bucket = f"wh-{uuid.uuid4().hex[:10]}"
            client("s3").create_bucket(Bucket=bucket)
            self.knobs = ["catalog=glue", f"warehouse=s3://{bucket}/warehouse", f"namespace={ns}", "s3_path_style=true", *common]
        else:
            arn = client("s3tables").create_table_bucket(name=f"tb-{uuid.uuid4().hex[:10]}")["arn"]
            self.knobs = ["catalog=s3tables", f"warehouse={arn}", f"namespace={ns}", "s3_path_style=true", *common]
        self.queued = None
        if moto:
            url = client("sqs").create_queue(QueueName=f"commit-{uuid.uuid4().hex[:10]}")["QueueUrl"]
            self.queued = [*self.knobs, "commit_mode=queued", f"commit_queue_url={url}"]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        out = subprocess.run([BIN, *args], capture_output=True, text=True, env=self.env, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"icestream {' '.join(args[:2])}: {out.stderr.strip()[-800:]}")
        return out


def metadata_bytes_per_commit(warehouse: Path, commits: int) -> float | None:
    """SQL catalog: what one commit wrote under the table's metadata/ (its manifests and manifest
    list, kept; its metadata file, the newest standing for each: older ones are deleted)."""
    dirs = [d for d in warehouse.rglob("metadata") if d.is_dir() and "dead_letter" not in str(d)]
    if not dirs or not commits:
        return None
    avro = sum(f.stat().st_size for d in dirs for f in d.glob("*.avro"))
    newest = max((f for d in dirs for f in d.glob("*.metadata.json")), key=lambda f: f.stat().st_mtime)
    return avro / commits + newest.stat().st_size


def summaries(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run_once(target: Target, mode: str, files: list[list[Path]], committer_batch: int) -> dict:
    knobs = target.queued if mode == "queued" else target.knobs
    # The tables exist before the race: a one-record event of another topic creates them.
    warm = files[0][0].parent / "warm.json"
    first = json.loads(files[0][0].read_text())
    record = {**next(iter(first["records"].values()))[0], "topic": "warmup", "partition": 0, "offset": 0}
    warm.write_text(json.dumps({**first, "records": {"warmup-0": [record]}}))
    target.run("ingest", str(warm), *target.knobs)

    committed: list[dict] = []
    writers_done = threading.Event()

    def committer() -> None:
        # Back to back, as the committer function's SQS mapping would invoke it under load.
        while True:
            report = summaries(target.run("committer", "poll", *knobs, f"max_messages={committer_batch}",
                                          "visibility_timeout_s=60").stdout)[-1]
            if report.get("messages"):
                committed.append({**report, "at": time.time()})
            elif writers_done.is_set():
                return

    thread = threading.Thread(target=committer, daemon=True)
    started = time.time()
    procs = [subprocess.Popen([BIN, "ingest", *map(str, fs), *knobs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=target.env) for fs in files]
    if mode == "queued":
        thread.start()
    results, failed = [], 0
    for proc, fs in zip(procs, files):
        out, err = proc.communicate(timeout=900)
        done = summaries(out)
        results += done
        if proc.returncode != 0:
            # An invocation that gave up (its commit budget spent on lost races): the mapping
            # would retry the batch; counted, and the writer's later events are not run.
            failed += len(fs) - len(done)
            print(f"a writer failed: {err.strip()[-300:]}", file=sys.stderr)
    writers_end = time.time()
    writers_done.set()
    if mode == "direct":
        wall = writers_end - started
        commits = sum(1 for r in results if r["snapshot_id"] is not None)
        attempts = sum(r["commit_attempts"] for r in results)
        latencies = [r["commit_ms"] / 1000 for r in results]
        return {"commits": commits, "attempts_per_commit": attempts / max(commits, 1), "records": sum(r["written"] for r in results),
                "wall_s": wall, "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99), "requests_per_commit": 1.0,
                "failed": failed}
    thread.join(timeout=900)
    wall = (committed[-1]["at"] if committed else writers_end) - started
    tables = [t for r in committed for t in r["tables"] if t["snapshot_id"] is not None]
    commits, requests = len(tables), sum(t["requests"] for t in tables)
    attempts = sum(t["attempts"] for t in tables)
    latencies = [t["commit_ms"] / 1000 for t in tables] or [0.0]
    return {"commits": commits, "attempts_per_commit": attempts / max(commits, 1), "records": sum(t["rows"] for t in tables),
            "wall_s": wall, "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
            "requests_per_commit": requests / max(commits, 1), "failed": failed}


def main() -> None:
    global BIN
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin")
    parser.add_argument("--writers", default="4,16,64")
    parser.add_argument("--catalogs", default="local,glue,s3tables")
    parser.add_argument("--modes", default="direct,queued")
    parser.add_argument("--latency-ms", type=int, default=40)
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--committer-batch", type=int, default=10,
                        help="queued: most requests one committer batch takes (a FIFO queue's mapping: 10; a standard queue's: up to 10,000)")
    parser.add_argument("--json", help="append each run's figures to this file, one JSON line each")
    args = parser.parse_args()
    BIN = args.bin
    catalogs, modes = args.catalogs.split(","), args.modes.split(",")
    needs_moto = any(c != "local" for c in catalogs) or "queued" in modes
    with tempfile.TemporaryDirectory() as state:
        moto = Moto(Path(state)) if needs_moto else None
        try:
            print(f"contention: {args.events} events of {args.records} records per writer, {args.latency_ms} ms added to every call, "
                  f"queued: up to {args.committer_batch} requests a committer batch")
            print("| catalog | mode | writers | commits/s | attempts/commit | requests/commit | records/s | p50 commit s | p99 commit s | metadata KB/commit | invocations failed |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for catalog in catalogs:
                for mode in modes:
                    for n in map(int, args.writers.split(",")):
                        tmp = Path(state) / f"{catalog}-{mode}-{n}"
                        tmp.mkdir()
                        files = events_by_writer(BIN, tmp, n, args.events, args.records)
                        r = run_once(Target(catalog, moto, tmp, args.latency_ms), mode, files, args.committer_batch)
                        r.update(catalog=catalog, mode=mode, writers=n, latency_ms=args.latency_ms, committer_batch=args.committer_batch)
                        per_commit = metadata_bytes_per_commit(tmp / "wh", r["commits"]) if catalog == "local" else None
                        print(f"| {catalog} | {mode} | {n} | {r['commits'] / r['wall_s']:.1f} | {r['attempts_per_commit']:.2f} | "
                              f"{r['requests_per_commit']:.1f} | {r['records'] / r['wall_s']:,.0f} | {r['p50_s']:.2f} | {r['p99_s']:.2f} | "
                              f"{'-' if per_commit is None else f'{per_commit / 1000:.1f}'} | {r['failed']} |", flush=True)
                        if args.json:
                            with open(args.json, "a") as f:
                                f.write(json.dumps(r) + "\n")
        finally:
            if moto:
                moto.stop()


BIN = ""

if __name__ == "__main__":
    main()
