#!/usr/bin/env python3
"""The cost model of docs/cost.md: dollars per GB of Kafka payload and per million records, from what one
`icestream ingest` invocation measured (its summary line: records, payload bytes, files, round
trips) and its CPU seconds on one core.

    scripts/cost/cost_model.py CPU_SECONDS SUMMARY.json [CPU_SECONDS SUMMARY.json ...]

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


def main(args: list[str]) -> None:
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
