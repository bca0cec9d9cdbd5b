"""The zips `make build` hands to Terraform, run the way Lambda runs them.

Each function's `target/lambda/<name>/bootstrap.zip` must hold one executable `bootstrap` for
the architecture Terraform deploys (arm64; x86_64 only when `make build` had to fall back),
needing no newer glibc than Amazon Linux 2023 has. Then the bootstraps themselves run against
the Lambda runtime API that `cargo lambda watch --only-lambda-apis` serves on 127.0.0.1 (arm64
under qemu-user with the Debian arm64 glibc, both installed by scripts/setup/system-deps.sh), wired
as in the cloud: Glue catalog and S3 on moto, ingest in commit_mode=queued sending its
requests to an SQS queue the committer's SQS event is built from, CDC, then the scheduler's
maintenance input. What they write is read back with PyIceberg.

Prerequisites: `make build` (make test runs it first) and ICESTREAM_BIN (the CLI, for events
and for the reference CDC run). Missing either, every test here fails.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import stat
import subprocess
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from conftest import AWS_ENV, free_loopback_port
from readers import pyiceberg_glue_table

ROOT = Path(__file__).resolve().parents[2]
ZIPS = ROOT / "target" / "lambda"
FUNCTIONS = sorted(p.name for p in (ROOT / "functions").iterdir() if (p / "Cargo.toml").is_file())
BIN = os.environ.get("ICESTREAM_BIN", "")
VENV_BIN = Path(os.environ.get("VENV", Path.home() / ".cache" / "icestream-venv")) / "bin"
# Amazon Linux 2023, the provided.al2023 runtime, ships glibc 2.34.
AL2023_GLIBC = (2, 34)
# ELF e_machine values.
MACHINES = {183: "aarch64", 62: "x86_64"}
ARM64_SYSROOT = Path("/usr/aarch64-linux-gnu")
INVOKE_TIMEOUT_S = 300


def bootstrap_bytes(function: str) -> bytes:
    path = ZIPS / function / "bootstrap.zip"
    assert path.is_file(), f"{path} is missing: run `make build` (make test does, before these tests)"
    with zipfile.ZipFile(path) as z:
        return z.read("bootstrap")


def machine(elf: bytes) -> str:
    assert elf[:4] == b"\x7fELF", "bootstrap is not an ELF executable"
    assert elf[4] == 2, "bootstrap is not a 64-bit ELF"
    return MACHINES.get(int.from_bytes(elf[18:20], "little"), "unknown")


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each function's bootstrap, extracted with its zip's permissions."""
    out = {}
    for function in FUNCTIONS:
        target = tmp_path_factory.mktemp(function) / "bootstrap"
        target.write_bytes(bootstrap_bytes(function))
        target.chmod(0o755)
        out[function] = target
    return out


def test_every_workspace_function_has_a_zip_with_one_executable_bootstrap() -> None:
    assert set(FUNCTIONS) == {"ingest", "maintenance", "committer"}, FUNCTIONS
    for function in FUNCTIONS:
        path = ZIPS / function / "bootstrap.zip"
        assert path.is_file(), f"{path} is missing: run `make build`"
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
        assert [i.filename for i in infos] == ["bootstrap"], f"{path}: {[i.filename for i in infos]}"
        mode = infos[0].external_attr >> 16
        assert mode & stat.S_IXUSR, f"{path}: bootstrap is not executable (mode {oct(mode)}); Lambda could not start it"


def test_bootstraps_are_arm64_unless_the_build_said_otherwise() -> None:
    want = "x86_64" if os.environ.get("ARCH") == "x86_64" else "aarch64"
    for function in FUNCTIONS:
        built = machine(bootstrap_bytes(function))
        assert built == want, f"{function}: built for {built}, Terraform deploys {want}"


def test_bootstraps_need_no_newer_glibc_than_amazon_linux_2023(unpacked: dict[str, Path]) -> None:
    for function, path in unpacked.items():
        # The version-needs section lists every GLIBC_x.y the dynamic loader will demand.
        out = subprocess.run(["readelf", "--version-info", "--wide", str(path)], capture_output=True, text=True, check=True).stdout
        needs = out.split("Version needs section", 1)
        assert len(needs) == 2, f"{function}: no version-needs section; is it linked against glibc at all?"
        versions = {tuple(int(n) for n in m.groups()) for m in re.finditer(r"Name: GLIBC_(\d+)\.(\d+)", needs[1])}
        assert versions, f"{function}: no GLIBC versions needed"
        assert max(versions) <= AL2023_GLIBC, f"{function} needs GLIBC_{'.'.join(map(str, max(versions)))}; provided.al2023 has 2.34"


# --------------------------------------------------------------------------- running them


def runner(path: Path) -> list[str]:
    """How to execute a bootstrap here: directly, or under qemu-user for the other architecture."""
    arch = machine(path.read_bytes()[:64])
    if arch == platform.machine() or (arch == "aarch64" and platform.machine() == "arm64"):
        return [str(path)]
    qemu = shutil.which(f"qemu-{arch}")
    assert qemu, f"qemu-{arch} is missing: scripts/setup/system-deps.sh installs qemu-user"
    assert (ARM64_SYSROOT / "lib").is_dir(), f"{ARM64_SYSROOT} is missing: scripts/setup/system-deps.sh installs libc6-arm64-cross"
    return [qemu, "-L", str(ARM64_SYSROOT), str(path)]


def icestream(endpoint: str, *args: str) -> str:
    assert BIN and Path(BIN).is_file(), "set ICESTREAM_BIN to the icestream binary (make test does)"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESTREAM_", "AWS_"))}
    env.update(AWS_ENV, AWS_ENDPOINT_URL=endpoint, AWS_EC2_METADATA_DISABLED="true", RUST_LOG="warn")
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=INVOKE_TIMEOUT_S)
    assert out.returncode == 0, f"icestream {' '.join(args)}: {out.stderr}"
    return out.stdout


class RuntimeApi:
    """`cargo lambda watch --only-lambda-apis` on a loopback port: the runtime API a bootstrap
    polls, and the invoke API the test calls."""

    def __init__(self, log: Path) -> None:
        cargo_lambda = Path(os.environ.get("CARGO_LAMBDA_BIN", VENV_BIN / "cargo-lambda"))
        assert cargo_lambda.is_file(), f"{cargo_lambda} is missing: run `make venv` (pinned in scripts/setup/requirements.txt)"
        self.port = free_loopback_port()
        self.log = open(log, "w")
        env = {**os.environ, "PATH": f"{cargo_lambda.parent}:{os.environ['PATH']}"}
        # It reads the workspace's metadata, so it runs in the checkout.
        self.proc = subprocess.Popen(
            [str(cargo_lambda), "lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1", "-P", str(self.port),
             "--timeout", str(INVOKE_TIMEOUT_S)],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"cargo lambda watch exited: {log.read_text()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"cargo lambda watch did not listen on {self.port}: {log.read_text()[-2000:]}")

    def invoke(self, function: Path, env: dict[str, str], event: Any, log: Path) -> tuple[int, Any]:
        """Start the bootstrap as Lambda would (its runtime env plus the function's), invoke it
        once, stop it. Returns the HTTP status and the function's response."""
        # With --only-lambda-apis, the runtime serves the function named `_`.
        lambda_env = {
            "PATH": os.environ["PATH"],
            "AWS_LAMBDA_RUNTIME_API": f"http://127.0.0.1:{self.port}/.rt",
            "AWS_LAMBDA_FUNCTION_NAME": "_",
            "AWS_LAMBDA_FUNCTION_VERSION": "1",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
            "AWS_EC2_METADATA_DISABLED": "true",
            "RUST_BACKTRACE": "1",
            **AWS_ENV,
            **env,
        }
        with open(log, "a") as out:
            proc = subprocess.Popen(runner(function), env=lambda_env, stdout=out, stderr=subprocess.STDOUT)
            try:
                response = requests.post(f"http://127.0.0.1:{self.port}/2015-03-31/functions/_/invocations",
                                         data=json.dumps(event), timeout=INVOKE_TIMEOUT_S)
                assert proc.poll() is None, f"{function} exited: {log.read_text()[-3000:]}"
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        return response.status_code, response.json() if response.content else None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def runtime_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeApi]:
    api = RuntimeApi(tmp_path_factory.mktemp("watch") / "cargo-lambda-watch.log")
    yield api
    api.close()


def sqs_event(messages: list[dict], queue_arn: str) -> dict:
    """The SQS event a Lambda event source mapping hands the committer, from received messages."""
    return {"Records": [{
        "messageId": m["MessageId"],
        "receiptHandle": m["ReceiptHandle"],
        "body": m["Body"],
        "attributes": {k: str(v) for k, v in m.get("Attributes", {}).items()},
        "messageAttributes": {},
        "md5OfBody": m["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": AWS_ENV["AWS_REGION"],
    } for m in messages]}


def sorted_rows(table: Any, columns: list[str]) -> list[tuple]:
    return sorted(zip(*(table.scan(selected_fields=tuple(columns)).to_arrow().column(c).to_pylist() for c in columns)))


def test_the_three_zips_run_as_lambda_runs_them_and_their_tables_read_back(
        unpacked: dict[str, Path], runtime_api: RuntimeApi, moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    bucket, namespace = f"wh-{uuid.uuid4().hex[:10]}", f"zips_{uuid.uuid4().hex[:8]}"
    aws_client("s3").create_bucket(Bucket=bucket)
    sqs = aws_client("sqs")
    queue_url = sqs.create_queue(QueueName=f"commit-{uuid.uuid4().hex[:10]}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    knobs = {"catalog": "glue", "warehouse": f"s3://{bucket}/warehouse", "namespace": namespace, "s3_path_style": "true"}
    env = {f"ICESTREAM_{k.upper()}": v for k, v in knobs.items()}
    env.update(AWS_ENDPOINT_URL=moto_endpoint, ICESTREAM_LOG_FORMAT="json")
    queued = {**env, "ICESTREAM_COMMIT_MODE": "queued", "ICESTREAM_COMMIT_QUEUE_URL": queue_url}
    log = tmp_path / "functions.log"

    # ingest (queued): the rows are written and one commit request per table goes to the queue.
    event_path = tmp_path / "telemetry.json"
    expected = json.loads(icestream(moto_endpoint, "gen-event", "records=3000", "format=proto", "corrupt=true", "seed=7", f"out={event_path}"))
    assert expected["corrupt"] > 0, expected
    status, reply = runtime_api.invoke(unpacked["ingest"], queued, json.loads(event_path.read_text()), log)
    assert status == 200, f"ingest: {status} {reply}; log: {log.read_text()[-3000:]}"
    assert reply["written"] == expected["valid"] and reply["dead_letter"] == expected["corrupt"], reply
    assert reply["commit_requests"] >= 1 and reply["snapshot_id"] is None, reply

    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"],
                                   VisibilityTimeout=120)["Messages"]
    assert len(messages) == reply["commit_requests"], messages

    # committer: the SQS batch commits; nothing is reported back for redelivery.
    status, reply = runtime_api.invoke(unpacked["committer"], queued, sqs_event(messages, queue_arn), log)
    assert status == 200 and reply == {"batchItemFailures": []}, f"committer: {status} {reply}; log: {log.read_text()[-3000:]}"
    telemetry = pyiceberg_glue_table(moto_endpoint, namespace, "vehicle_telemetry")
    speeds = telemetry.scan(selected_fields=("speed_kmh",)).to_arrow().column("speed_kmh").to_pylist()
    assert (len(speeds), sum(speeds)) == (expected["valid"], expected["speed_sum"])
    dead = pyiceberg_glue_table(moto_endpoint, namespace, "vehicle_telemetry_dead_letter").scan().to_arrow()
    assert dead.num_rows == expected["corrupt"]

    # ingest over an upsert pipeline (the accounts feed as CSV lines): the table equals what the
    # CLI makes of the same event in another namespace.
    from test_cdc_readers import csv_accounts_pipeline
    cdc_path = tmp_path / "cdc.json"
    icestream(moto_endpoint, "gen-event", "domain=cdc", "records=400", "accounts=60", "seed=3", f"out={cdc_path}")
    reference = f"{namespace}_cli"
    files = {ns: csv_accounts_pipeline(tmp_path / ns, ["bank-accounts-cdc"], ns) for ns in (namespace, reference)}
    upsert_env = {**env, "ICESTREAM_PIPELINES": files[namespace].removeprefix("pipelines=")}
    status, reply = runtime_api.invoke(unpacked["ingest"], upsert_env, json.loads(cdc_path.read_text()), log)
    assert status == 200 and reply["upsert_applied"] > 0, f"ingest (upsert): {status} {reply}; log: {log.read_text()[-3000:]}"
    icestream(moto_endpoint, "ingest", str(cdc_path), files[reference], *(f"{k}={v}" for k, v in {**knobs, "namespace": reference}.items()))
    columns = ["account_id", "balance", "seq"]
    mirror = sorted_rows(pyiceberg_glue_table(moto_endpoint, namespace, "accounts"), columns)
    assert mirror and mirror == sorted_rows(pyiceberg_glue_table(moto_endpoint, reference, "accounts"), columns)

    # maintenance: a second batch (the CLI, direct) gives each partition a second file; then the
    # scheduler's input for one action and table compacts them, and the rows stay as they were.
    second = tmp_path / "telemetry-2.json"
    icestream(moto_endpoint, "gen-event", "records=3000", "format=proto", "seed=8", "start_offset=3000", f"out={second}")
    icestream(moto_endpoint, "ingest", str(second), *(f"{k}={v}" for k, v in knobs.items()))
    telemetry = pyiceberg_glue_table(moto_endpoint, namespace, "vehicle_telemetry")
    before = sorted_rows(telemetry, ["vehicle_id", "event_time", "speed_kmh"])
    status, reply = runtime_api.invoke(unpacked["maintenance"], env, {"action": "compact", "table": "vehicle_telemetry"}, log)
    assert status == 200, f"maintenance: {status} {reply}; log: {log.read_text()[-3000:]}"
    assert [t["table"] for t in reply["tables"]] == ["vehicle_telemetry"] and not reply["tables"][0].get("error"), reply
    after = pyiceberg_glue_table(moto_endpoint, namespace, "vehicle_telemetry")
    assert after.current_snapshot().snapshot_id != telemetry.current_snapshot().snapshot_id, "compaction committed nothing"
    assert sorted_rows(after, ["vehicle_id", "event_time", "speed_kmh"]) == before
