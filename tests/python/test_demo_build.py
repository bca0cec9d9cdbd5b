"""The demo's build (`make demo`): the CLI without the AWS clients and the Kafka client
(`cargo build -p icestream-cli --bin icestream --no-default-features`).

- Every dependency it shares with the workspace's build (`make test`: `cargo build --workspace
  --all-targets`, `cargo test --workspace`) resolves the same features, so `make test` after
  `make demo` compiles none of them again; only the two crates whose features differ do.
- `icestream demo` prints the same on both builds (timings aside).
- What the demo's build leaves out fails at once, naming the cargo feature and the build that
  has it (the default build's side of each is what the other tests run).

ICESTREAM_BIN is the default build, ICESTREAM_DEMO_BIN the demo's (make test sets both).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ICESTREAM_BIN", "")
DEMO_BIN = os.environ.get("ICESTREAM_DEMO_BIN", "")
need_bins = pytest.mark.skipif(not (BIN and DEMO_BIN), reason="set ICESTREAM_BIN and ICESTREAM_DEMO_BIN (make test does)")

# The crates whose features the demo's build changes on purpose, compiled once per build: the
# workspace's two, and OpenDAL's S3 service (the library's `aws` feature) in two small crates.
DIFFERENT_ON_PURPOSE = {"icestream", "icestream-cli", "opendal", "iceberg-storage-opendal"}


def features_by_package(*args: str) -> dict[str, set[str]]:
    """Each package of a `cargo tree` to the feature sets it is built with (host and target may differ)."""
    out = subprocess.run(
        ["cargo", "tree", "-f", "{p} [{f}]", "--prefix", "none", *args],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout
    found: dict[str, set[str]] = defaultdict(set)
    for line in out.splitlines():
        m = re.match(r"(\S+ v\S+)(?: \([^)]*\))? \[(.*?)\]", line)
        if m:
            found[m.group(1)].add(m.group(2))
    return found


def test_the_demo_build_shares_every_dependency_with_the_test_build():
    demo = features_by_package("-p", "icestream-cli", "--no-default-features", "-e", "normal,build")
    workspace = features_by_package("--workspace", "-e", "normal,build,dev")
    assert "rdkafka-sys v" not in " ".join(demo), "the demo's build has the Kafka client"
    assert not [p for p in demo if p.startswith("aws-sdk-") or p.startswith("aws-config ")], "the demo's build has AWS SDKs"
    differ = {
        package: (sets, workspace.get(package, set()))
        for package, sets in demo.items()
        if package.split(" ")[0] not in DIFFERENT_ON_PURPOSE and not sets <= workspace.get(package, set())
    }
    # A crate listed here compiles twice, once per build, and so does everything above it: pin its
    # features in tools/Cargo.toml (the block "Not for the CLI's own use").
    assert not differ, "features (demo build, workspace build) of shared dependencies: " + "; ".join(f"{p}: {d} vs {w}" for p, (d, w) in sorted(differ.items()))


def run(bin_path: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_") and not k.startswith("AWS_")}
    env["RUST_LOG"] = "warn"
    out = subprocess.run([bin_path, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    if check and out.returncode != 0:
        raise AssertionError(f"{bin_path} {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


def shape(text: str) -> str:
    """The demo's output with its numbers blanked: what it prints, not what it measured (the
    records are generated around the current time, so even counts of partitions may differ)."""
    text = re.sub(r"warehouse: .*", "warehouse: W", text)
    return re.sub(r"[0-9][0-9.]*(?:ns|µs|ms|s)?", "N", text)


@need_bins
def test_the_demo_prints_the_same_on_both_builds(tmp_path):
    outputs = {}
    for name, bin_path in (("default", BIN), ("demo", DEMO_BIN)):
        warehouse = tmp_path / name
        out = run(bin_path, "demo", f"warehouse={warehouse}", "pipelines=shared/pipelines/reference.toml")
        assert "vehicle_telemetry: " in out.stdout and "avg speed km/h" in out.stdout, out.stdout
        assert "accounts: 5000 DMS changes applied" in out.stdout, out.stdout
        assert (warehouse / "catalog.db").exists()
        outputs[name] = shape(out.stdout)
    assert outputs["demo"] == outputs["default"]


@need_bins
@pytest.mark.parametrize(
    "args, feature, what",
    [
        (["produce", "records=1"], "kafka", "`icestream produce`"),
        (["simulate-cdc"], "kafka", "`icestream simulate-cdc`"),
        (["esm"], "kafka", "`icestream esm`"),
        (["help", "esm"], "kafka", "`icestream esm`"),
        (["audit", "vehicle_telemetry", "bootstrap=127.0.0.1:9"], "kafka", "`audit bootstrap=`"),
        (["report", "t", "catalog=glue", "warehouse=s3://bucket/w"], "aws", "catalog=glue"),
        (["report", "t", "catalog=s3tables", "warehouse=arn:aws:s3tables:us-east-1:111122223333:bucket/b"], "aws", "catalog=s3tables"),
        (["status", "commit_mode=queued", "commit_queue_url=https://sqs.us-east-1.amazonaws.com/1/q"], "aws", "commit_mode=queued"),
        (["pipelines", "check", "s3://bucket/dir/pipelines.toml"], "aws", "pipelines=s3://bucket/dir/pipelines.toml"),
    ],
)
def test_what_the_demo_build_leaves_out_fails_naming_its_feature(tmp_path, args, feature, what):
    if args[0] in ("audit", "status"):
        args.append(f"warehouse={tmp_path}")
    out = run(DEMO_BIN, *args, check=False)
    assert out.returncode != 0, out.stdout
    assert what in out.stderr and f"`{feature}` cargo feature" in out.stderr and "cargo build --bin icestream" in out.stderr, out.stderr
