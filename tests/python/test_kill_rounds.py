"""Real processes killed at random instants (issue 45): queued writers (`icestream ingest`, one
lane per partition, a lane moving on only when its invocation succeeded, as the mapping does),
`icestream committer poll` and `icestream maintain` run side by side on one local table and a
moto SQS queue; every round SIGKILLs some of them at a random instant. Then every batch is
delivered again and the queue drained: each record is in the table or its dead-letter table
exactly once (read by PyIceberg), watermarks are each partition's last offset and the audit
passes.

KILL_ROUNDS (default 8) sets the rounds; `make sim` soaks it with more. Prerequisite:
ICESTREAM_BIN (make test sets it).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import AWS_ENV
from test_queued_commits import BIN, TELEMETRY, Setup, assert_exactly_once, cut, generate, last_offsets, run

ROUNDS = int(os.environ.get("KILL_ROUNDS", "8"))


def start(s: Setup, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
    env.update(AWS_ENV, AWS_ENDPOINT_URL=s.endpoint, RUST_LOG=os.environ.get("KILL_RUST_LOG", "error"),
               AWS_EC2_METADATA_DISABLED="true", NO_COLOR="1")
    log = open(s.tmp / f"{args[0]}-{uuid.uuid4().hex[:8]}.log", "w+")
    proc = subprocess.Popen([BIN, *args], env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log = log  # type: ignore[attr-defined]
    return proc


@pytest.mark.parametrize("kind", ["standard", "fifo"])
def test_writers_committer_and_maintenance_killed_at_random_lose_and_duplicate_nothing(
        kind: str, moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    s = Setup(moto_endpoint, aws_client, tmp_path, "local", fifo=kind == "fifo")
    # Enough records that every round still has batches to deliver (about 70 a lane a round).
    full, exp = generate(s.tmp, f"records={max(1200, ROUNDS * 280)}", "partitions=4", "corrupt=true", "seed=95")
    lasts = last_offsets(full)
    rng = random.Random(int(os.environ.get("KILL_SEED", "45")))
    cursor = {p: 0 for p in lasts}
    kills = 0
    errors: list[str] = []
    for round_ in range(ROUNDS):
        lanes = {}
        for p, last in lasts.items():
            if cursor[p] > last:
                continue
            hi = min(last, cursor[p] + rng.randrange(20, 120))
            lanes[p] = (hi, start(s, "ingest", str(cut(full, p, cursor[p], hi, s.tmp / f"r{round_}-p{p}.json")), *s.queued))
        committer = start(s, "committer", "poll", *s.queued, "max_messages=20", "visibility_timeout_s=3",
                          "commit_gap_retry_s=1", "commit_gap_patience=2")
        procs = [proc for _, proc in lanes.values()] + [committer]
        if round_ > 0:  # from the second round on, the table exists
            action = rng.choice(["compact", "rewrite-manifests", "expire", "remove-orphans"])
            procs.append(start(s, "maintain", f"action={action}", f"table={TELEMETRY}", *s.knobs, "hot_partition_hours=0",
                               "snapshot_max_age_hours=0", "orphan_margin_hours=1"))
        time.sleep(rng.uniform(0.0, 0.4))  # processes start in about half a second
        for proc in procs:
            if rng.random() < 0.5 and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        for proc in procs:
            proc.wait(timeout=120)
            if proc.returncode not in (0, -signal.SIGKILL):
                proc.log.seek(0)
                errors.append(f"{' '.join(proc.args[1:3])}: exit {proc.returncode}: {proc.log.read()[-2000:]}")
        for p, (hi, proc) in lanes.items():
            if proc.returncode == 0:
                cursor[p] = hi + 1  # the mapping moves on; a killed or failed lane retries
    # A short run may kill nothing (every process done before its instant); a soak must kill.
    assert kills > 0 or ROUNDS < 50, "no process was killed in a soak"
    assert not errors, "\n".join(errors)

    # Every batch again (the mapping redelivers from the start), then the queue drained.
    for p, last in lasts.items():
        s.ingest(cut(full, p, 0, last, s.tmp / f"all-p{p}.json"))
    for p, last in lasts.items():
        if cursor[p] <= last:
            s.ingest(cut(full, p, cursor[p], last, s.tmp / f"rest-p{p}.json"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        s.poll("commit_gap_retry_s=1", "commit_gap_patience=2")
        if s.queue_depth() == 0:
            break
        time.sleep(0.5)
    assert s.queue_depth() == 0, "the commit queue did not drain"
    assert_exactly_once(s, full, exp)
    audit = run(s.endpoint, "audit", TELEMETRY, *s.knobs, check=False)
    assert audit.returncode == 0 and "PASS" in audit.stdout, audit.stdout
    print(f"FIGURES kill rounds ({kind}): {ROUNDS} rounds, {kills} processes killed")
