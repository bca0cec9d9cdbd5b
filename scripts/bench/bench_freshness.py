#!/usr/bin/env python3
"""Freshness end to end, as a reader sees it (`make bench-local`, after the throughput run).

For each case (direct or queued commits; MSK's default batching or the cost-optimal one): a
producer sends RATE telemetry records/s for SECONDS into its own topic of the running broker,
`icestream esm` (the pipeline in process) delivers them, and a reader polls the table through
its catalog every POLL_S with PyIceberg: each new snapshot's added data files are read, and each
record (partition, offset) is stamped with the moment the read of its file returned. After the
run the topic is read back from the broker for each record's produce timestamp (CreateTime, set
by the producer at send), and the freshness of a record is seen - produced. Printed per case:
p50, p99 and max, and how many records the reader saw. Queued mode runs the committer as
`icestream committer poll` back to back, on a queue of the patched moto server (SQS only: the
tables stay in the local catalog).

    scripts/bench/bench_freshness.py BIN --bootstrap 127.0.0.1:PORT --state DIR --topics T1,T2,T3,T4
        [--rate 1000] [--seconds 30] [--poll-s 0.25] [--cases direct-default,...]

Figures are printed, never asserted (targets on the bench machine: p99 <= 10 s direct, <= 30 s
queued; docs/scale.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "python"))

from readers import pyiceberg_sql_catalog  # noqa: E402

NAMESPACE, TABLE = "bigdata", "vehicle_telemetry"
# The batching of each setting: MSK's defaults (100 records, 500 ms), and the cost-optimal one:
# full batches (scripts/cost/cost_model.py `curve`: past ~5,000 records an invocation the $/GB is
# within a few per cent of its floor), with the window that fills them at this rate.
SETTINGS = {
    "default": {"batch_size": 100, "batching_window_ms": 500},
    "cost-optimal": {"batch_size": 10000, "batching_window_ms": 5000},
}
# The committer function's own batching, queued: its SQS mapping's (10 messages, no window).
COMMITTER_MAX_MESSAGES = 10
AWS_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Moto:
    """The patched moto server (tests/python/moto_harness.py) for the commit queue."""

    def __init__(self, state: Path) -> None:
        self.port = free_port()
        state.mkdir(parents=True, exist_ok=True)
        log = open(state / "moto.log", "w")
        self.proc = subprocess.Popen([sys.executable, str(HERE.parent / "tests" / "python" / "moto_harness.py"),
                                      "--port", str(self.port)], stdout=subprocess.PIPE, stderr=log, text=True,
                                     env={**os.environ, **AWS_ENV})
        line = self.proc.stdout.readline().strip()
        if not line.startswith("ready "):
            raise SystemExit(f"moto did not start: {line!r} (see {state / 'moto.log'})")
        self.endpoint = line.split(" ", 1)[1]

    def queue(self, name: str) -> str:
        import boto3
        sqs = boto3.client("sqs", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
        return sqs.create_queue(QueueName=name)["QueueUrl"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


class Reader(threading.Thread):
    """Polls the table; stamps each record with when the read of its data file returned."""

    def __init__(self, warehouse: Path, poll_s: float) -> None:
        super().__init__(daemon=True)
        self.warehouse, self.poll_s = warehouse, poll_s
        self.seen: dict[tuple[int, int], float] = {}
        self.snapshots: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        import pyarrow.parquet as pq

        table = None
        while not self.stop.is_set():
            try:
                if table is None:
                    table = pyiceberg_sql_catalog(self.warehouse).load_table((NAMESPACE, TABLE))
                else:
                    table = table.refresh()
            except Exception:  # noqa: BLE001 - the table does not exist until the first commit
                time.sleep(self.poll_s)
                continue
            for snapshot in table.snapshots():
                if snapshot.snapshot_id in self.snapshots:
                    continue
                self.snapshots.add(snapshot.snapshot_id)
                for manifest in snapshot.manifests(table.io):
                    if manifest.added_snapshot_id != snapshot.snapshot_id:
                        continue
                    for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                        if entry.snapshot_id != snapshot.snapshot_id:
                            continue
                        path = unquote(urlparse(entry.data_file.file_path).path)
                        rows = pq.read_table(path, columns=["kafka_partition", "kafka_offset"])
                        now = time.time()
                        for key in zip(rows.column(0).to_pylist(), rows.column(1).to_pylist()):
                            self.seen.setdefault(key, now)
            self.stop.wait(self.poll_s)


def produce_timestamps(bootstrap: str, topic: str, expected: int) -> dict[tuple[int, int], float]:
    """Each record's CreateTime, read back from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fresh-read-{topic}", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: dict[tuple[int, int], float] = {}
    deadline = time.time() + 60
    while len(out) < expected and time.time() < deadline:
        for message in consumer.consume(1000, timeout=1.0):
            if message.error() is None:
                out[(message.partition(), message.offset())] = message.timestamp()[1] / 1000
    consumer.close()
    return out


def run_case(args: argparse.Namespace, case: str, topic: str, moto: Moto | None) -> dict:
    mode, setting = case.split("-", 1)
    state = Path(args.state) / case
    warehouse = state / "wh"
    state.mkdir(parents=True, exist_ok=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}, **AWS_ENV, "RUST_LOG": "warn"}
    knobs = [f"warehouse={warehouse}", "source=proto"]
    if mode == "queued":
        assert moto is not None
        env["AWS_ENDPOINT_URL"] = moto.endpoint
        knobs += ["commit_mode=queued", f"commit_queue_url={moto.queue(f'fresh-{setting}')}"]
    batching = [f"{k}={v}" for k, v in SETTINGS[setting].items()]
    esm = subprocess.Popen([args.bin, "esm", f"bootstrap={args.bootstrap}", f"topic={topic}", f"group=fresh-{case}",
                            "invoke=inprocess", "session_timeout_ms=2000", f"on_failure_dir={state / 'failures'}",
                            *batching, *knobs], stdout=open(state / "esm.out", "w"), stderr=open(state / "esm.log", "w"), env=env)
    stop = threading.Event()
    committer_runs = []

    def committer_loop() -> None:
        while not stop.is_set():
            out = subprocess.run([args.bin, "committer", "poll", *knobs, f"max_messages={COMMITTER_MAX_MESSAGES}",
                                  "visibility_timeout_s=30"], capture_output=True, text=True, env=env)
            committer_runs.append(out.returncode)
            if out.returncode != 0:
                print(f"{case}: committer: {out.stderr.strip()[-300:]}", file=sys.stderr)
                stop.wait(1)

    committer = threading.Thread(target=committer_loop, daemon=True)
    if mode == "queued":
        committer.start()
    reader = Reader(warehouse, args.poll_s)
    reader.start()
    time.sleep(3)  # the esm joins its group (Tansu answers after half the 2 s session)
    count = args.rate * args.seconds
    subprocess.run([args.bin, "produce", f"bootstrap={args.bootstrap}", f"topic={topic}", "format=proto",
                    f"count={count}", f"rate={args.rate}"], check=True, capture_output=True, env=env)
    deadline = time.time() + 120
    while len(reader.seen) < count and time.time() < deadline:
        time.sleep(0.5)
    reader.stop.set()
    stop.set()
    esm.send_signal(signal.SIGINT)
    try:
        esm.wait(timeout=20)
    except subprocess.TimeoutExpired:
        esm.kill()
    reader.join(timeout=30)
    if mode == "queued":
        committer.join(timeout=60)
    produced = produce_timestamps(args.bootstrap, topic, count)
    ages = [seen - produced[key] for key, seen in reader.seen.items() if key in produced]
    result = {"case": case, **SETTINGS[setting], "produced": len(produced), "seen": len(ages),
              "snapshots": len(reader.snapshots)}
    if ages:
        result.update(p50_s=round(statistics.median(ages), 2), p99_s=round(percentile(ages, 99), 2), max_s=round(max(ages), 2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--topics", required=True, help="one empty topic per case, comma-separated")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--poll-s", type=float, default=0.25)
    parser.add_argument("--cases", default="direct-default,direct-cost-optimal,queued-default,queued-cost-optimal")
    args = parser.parse_args()
    cases, topics = args.cases.split(","), args.topics.split(",")
    if len(topics) < len(cases):
        raise SystemExit(f"{len(cases)} cases need as many topics, got {len(topics)}")
    moto = Moto(Path(args.state)) if any(c.startswith("queued") for c in cases) else None
    try:
        print(f"freshness: {args.rate} records/s for {args.seconds} s per case, reader polls every {args.poll_s} s")
        print("| case | batch_size | batching_window_ms | records seen | snapshots | p50 s | p99 s | max s |")
        print("|---|---|---|---|---|---|---|---|")
        for case, topic in zip(cases, topics):
            r = run_case(args, case, topic, moto)
            print(f"| {r['case']} | {r['batch_size']} | {r['batching_window_ms']} | {r['seen']:,} of {r['produced']:,} | "
                  f"{r['snapshots']} | {r.get('p50_s', '-')} | {r.get('p99_s', '-')} | {r.get('max_s', '-')} |", flush=True)
    finally:
        if moto:
            moto.stop()


if __name__ == "__main__":
    main()
