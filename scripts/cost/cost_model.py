#!/usr/bin/env python3
"""The cost model of docs/cost.md: dollars per GB of Kafka payload and per million records, from what one
`icestream ingest` invocation measured (its summary line: records, payload bytes, files, round
trips) and its CPU seconds on one core.

    scripts/cost/cost_model.py CPU_SECONDS SUMMARY.json [CPU_SECONDS SUMMARY.json ...]
    scripts/cost/cost_model.py curve [PARTITION_MB_S=1] [RECORD_BYTES=1024] [MEMORY_MB=512]
    scripts/cost/cost_model.py capacity [RECORD_BYTES=1024] [MEMORY_MB=512]

`curve` prices the batching window: for one partition of PARTITION_MB_S, how many records each
invocation gets at each window (up to the mapping's 10,000 records or 6 MB), the $/GB that gives
in each mode, and the freshness it costs (a record waits for its batch to close, then for the
invocation; queued, for the committer too). Its per-invocation inputs are the click workload's
(README "Cost model": 1 KiB JSON, `day` partitions): CPU_PER_RECORD_S a record, one data file,
DIRECT_ROUND_TRIPS sequential round trips; CPU_FIXED_S is assumed.

Prices: us-east-1, on demand, no free tier (sources in docs/cost.md, "Cost model"). Assumed, not
measured: 40 ms per sequential round trip to S3, Glue or SQS; Lambda's CPU share grows linearly
with memory to one vCPU at 1,769 MB; a queued committer folds 10 writer requests into one commit.
"""

from __future__ import annotations

import json
import sys

LAMBDA_ARM_GB_S = 0.0000133334  # $ per GB-second, arm64
LAMBDA_REQUEST = 0.20 / 1e6
S3_PUT = 0.005 / 1000  # PUT, COPY, POST, LIST
S3_GET = 0.0004 / 1000
GLUE_REQUEST = 1.00 / 1e6  # Data Catalog requests past the free million
SQS_REQUEST = 0.40 / 1e6  # standard queue, 64 KB chunks
ROUND_TRIP_S = 0.040
FULL_VCPU_MB = 1769
COMMITTER_BATCH = 10
MEMORY_MB = (128, 256, 512, 1024)
# The mapping's limits on one invocation (MSK event source mapping).
MAX_BATCH_RECORDS = 10_000
MAX_PAYLOAD_BYTES = 6_000_000
# A record's share of the event JSON besides its base64 value (topic, offsets, timestamp, headers).
RECORD_ENVELOPE_BYTES = 130
CPU_PER_RECORD_S = 0.07 / 3973  # the click workload: 0.07 s for 3,973 records of 1 KiB
CPU_FIXED_S = 0.005  # a warm invocation's own work besides its records (assumed)
DIRECT_ROUND_TRIPS = 6
WINDOWS_S = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
# Queued: the committer's SQS mapping waits up to this long to gather requests (its default 0;
# the Terraform module's), then commits in one swap.
COMMITTER_WINDOW_S = 1.0
COMMIT_WALL_S = 4 * ROUND_TRIP_S + 0.02


def invocation_cost(cpu_s: float, summary: dict, memory_mb: int, mode: str) -> float:
    """Dollars of one ingest invocation (and its share of the committer's, queued)."""
    rt = summary["round_trips"]
    files = summary["files"]
    share = min(1.0, memory_mb / FULL_VCPU_MB)
    if mode == "direct":
        sequential = rt["sequential"]
        puts = files + 3  # data files, manifest, manifest list, metadata
        gets = rt["storage_reads"]
        glue = rt["loads"] + rt["swaps"]
        sqs = 0
        committer = 0.0
    else:
        # The writer: loads, data files, staged manifest, SQS send.
        sequential = rt["sequential"] - 1
        puts = files + 1
        gets = rt["storage_reads"]
        glue = rt["loads"]
        sqs = 1
        # Its share of one committer commit (load, manifest list + metadata, swap; receive/delete).
        committer_s = 4 * ROUND_TRIP_S + 0.02
        committer = (
            committer_s * 0.125 * LAMBDA_ARM_GB_S
            + LAMBDA_REQUEST
            + 3 * S3_PUT
            + S3_GET
            + 2 * GLUE_REQUEST
            + 2 * SQS_REQUEST
        ) / COMMITTER_BATCH
    wall = cpu_s / share + sequential * ROUND_TRIP_S
    compute = wall * memory_mb / 1024 * LAMBDA_ARM_GB_S + LAMBDA_REQUEST
    return compute + puts * S3_PUT + gets * S3_GET + glue * GLUE_REQUEST + sqs * SQS_REQUEST + committer


def batch_records(partition_mb_s: float, record_bytes: int, window_s: float) -> int:
    """Records one invocation gets from a partition at a batching window: the window's worth,
    capped by the mapping's record count and payload size."""
    by_payload = MAX_PAYLOAD_BYTES // (record_bytes * 4 // 3 + RECORD_ENVELOPE_BYTES)
    by_window = int(partition_mb_s * 1e6 / record_bytes * window_s)
    return max(1, min(MAX_BATCH_RECORDS, by_payload, by_window))


def batch_cost(records: int, record_bytes: int, memory_mb: int, mode: str) -> float:
    """Dollars per GB of payload at `records` records an invocation (the click workload's inputs)."""
    summary = {"records": records, "payload_bytes": records * record_bytes, "files": 1,
               "round_trips": {"sequential": DIRECT_ROUND_TRIPS, "storage_reads": 2, "loads": 1, "swaps": 1}}
    cpu = CPU_FIXED_S + records * CPU_PER_RECORD_S
    return invocation_cost(cpu, summary, memory_mb, mode) * 1e9 / summary["payload_bytes"]


def curve(partition_mb_s: float, record_bytes: int, memory_mb: int) -> None:
    """The trade-off: $/GB against freshness, by batching window."""
    rate = partition_mb_s * 1e6 / record_bytes
    share = min(1.0, memory_mb / FULL_VCPU_MB)
    print(f"one partition of {partition_mb_s:g} MB/s ({rate:,.0f} records/s of {record_bytes} B), {memory_mb} MB functions")
    print("| batching window s | records / invocation | invocations / h | $ / GB direct | $ / GB queued | freshness p50 ≈ s | p99 ≈ s (direct) | p99 ≈ s (queued) |")
    print("|---|---|---|---|---|---|---|---|")
    for window in WINDOWS_S:
        n = batch_records(partition_mb_s, record_bytes, window)
        fill = n / rate  # the batch closes when full or at the window, whichever first
        wall = (CPU_FIXED_S + n * CPU_PER_RECORD_S) / share + DIRECT_ROUND_TRIPS * ROUND_TRIP_S
        queued = COMMITTER_WINDOW_S + COMMIT_WALL_S
        print(f"| {window:g} | {n:,} | {3600 / fill:,.0f} | {batch_cost(n, record_bytes, memory_mb, 'direct'):.4f} | "
              f"{batch_cost(n, record_bytes, memory_mb, 'queued'):.4f} | {fill / 2 + wall:.1f} | {fill + wall:.1f} | {fill + wall + queued:.1f} |")


# Capacity planning (docs/scale.md): a partition carries PARTITION_MB_S; an event poller reads up
# to POLLER_MB_S (Lambda, "Apache Kafka event poller scaling modes"); one table's commits are
# serial: `make bench-contention` levels off at MAX_TABLE_COMMITS_S with 40 ms a call, however
# many writers race.
PARTITION_MB_S = 1.0
POLLER_MB_S = 5.0
TOPICS_MB_S = (10, 100, 1000)
MAX_TABLE_COMMITS_S = 3.0
# What one commit writes under metadata/ (its manifest, the manifest list, the metadata file):
# a base plus a share per snapshot the table holds, since the list names every manifest and the
# metadata file every snapshot (SQL catalog, `make bench-contention`: 35 KB a commit at 16
# snapshots, 93 KB at 64, 283 KB at 256). Maintenance (expire, rewrite-manifests) every
# MAINTENANCE_INTERVAL_H hours brings the count back down.
METADATA_BASE_BYTES = 29_000
METADATA_BYTES_PER_SNAPSHOT = 1_000
MAINTENANCE_INTERVAL_H = 1.0
PARQUET_RATIO = 0.25  # Parquet zstd bytes per payload byte, the click workload (assumed for others)


def metadata_gb_h(commits_s: float) -> float:
    """Metadata bytes written per hour at `commits_s`, snapshots growing between maintenance runs
    (on average half an interval's commits held)."""
    held = commits_s * 3600 * MAINTENANCE_INTERVAL_H / 2
    return commits_s * 3600 * (METADATA_BASE_BYTES + METADATA_BYTES_PER_SNAPSHOT * held) / 1e9


def capacity(record_bytes: int, memory_mb: int) -> None:
    """Per topic rate: partitions, invocations, commits, files, metadata, compaction, dollars."""
    n = batch_records(PARTITION_MB_S, record_bytes, 300)
    share = min(1.0, memory_mb / FULL_VCPU_MB)
    wall = (CPU_FIXED_S + n * CPU_PER_RECORD_S) / share + DIRECT_ROUND_TRIPS * ROUND_TRIP_S
    fill = n * record_bytes / (PARTITION_MB_S * 1e6)
    max_commits = MAX_TABLE_COMMITS_S
    print(f"records of {record_bytes} B, {PARTITION_MB_S:g} MB/s a partition, full batches of {n:,} records "
          f"(a batch fills in {fill:.1f} s, its invocation takes {wall:.2f} s at {memory_mb} MB), one table")
    print("| topic | partitions | pollers | concurrent invocations | commits/s direct | commits/s queued | "
          "data files / h | metadata GB / h direct / queued | compaction GB / h | $ / h direct | $ / h queued | $ / GB direct | $ / GB queued |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mb_s in TOPICS_MB_S:
        partitions = int(mb_s / PARTITION_MB_S)
        invocations_s = partitions / fill
        gb_h = mb_s * 3600 / 1000
        direct, queued = (batch_cost(n, record_bytes, memory_mb, m) for m in ("direct", "queued"))
        committer = invocations_s / COMMITTER_BATCH
        flag = lambda rate: f"{rate:,.1f}" + (" (over)" if rate > max_commits else "")  # noqa: E731
        print(f"| {mb_s:g} MB/s | {partitions:,} | {max(1, round(mb_s / POLLER_MB_S)):,} | {partitions * wall / fill:,.0f} | "
              f"{flag(invocations_s)} | {flag(committer)} | {invocations_s * 3600:,.0f} | "
              f"{metadata_gb_h(invocations_s):,.1f} / {metadata_gb_h(committer):,.1f} | {gb_h * PARQUET_RATIO * 2:,.0f} | "
              f"{direct * gb_h:,.2f} | {queued * gb_h:,.2f} | {direct:.4f} | {queued:.4f} |")
    print(f"(over) = more than one table takes: {max_commits:.1f} commits/s (measured, 40 ms a call); metadata: direct / queued, "
          f"maintenance every {MAINTENANCE_INTERVAL_H:g} h")


def main(args: list[str]) -> None:
    if args[:1] == ["capacity"]:
        rest = [int(a) for a in args[1:]]
        capacity(rest[0] if rest else 1024, rest[1] if len(rest) > 1 else 512)
        return
    if args[:1] == ["curve"]:
        rest = [float(a) for a in args[1:]]
        curve(rest[0] if rest else 1.0, int(rest[1]) if len(rest) > 1 else 1024, int(rest[2]) if len(rest) > 2 else 512)
        return
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__)
    print("| event | mode | memory | $ / GB payload | $ / M records | files / GB |")
    print("|---|---|---|---|---|---|")
    for cpu, path in zip(args[::2], args[1::2]):
        with open(path) as f:
            summary = json.loads(f.read().strip().splitlines()[-1])
        per_gb = 1e9 / summary["payload_bytes"]
        per_m = 1e6 / summary["records"]
        label = f'{summary["records"]:,} records, {summary["payload_bytes"] / 1e6:.2f} MB payload, {summary["files"]} data files'
        for mode in ("direct", "queued"):
            for memory in MEMORY_MB:
                cost = invocation_cost(float(cpu), summary, memory, mode)
                print(f"| {label} | {mode} | {memory} MB | {cost * per_gb:.3f} | {cost * per_m:.4f} | {summary['files'] * per_gb:,.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
