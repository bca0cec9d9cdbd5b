"""Shared fixtures: the patched moto server (moto_harness.py) as a loopback subprocess.

Set ICESTREAM_MOTO_UNPATCHED=1 to serve plain moto instead; every test in
test_moto_harness.py must then fail, which shows each one really exercises a patch.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

HERE = Path(__file__).resolve().parent
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}
READY_TIMEOUT_S = 60


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _first_line(stream: Any, timeout: float) -> str:
    # readline() has no timeout; read on a helper thread so a hung server fails the fixture.
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        return ""


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """http://127.0.0.1:PORT of a patched moto server, alive for the whole session."""
    port = free_loopback_port()
    cmd = [sys.executable, str(HERE / "moto_harness.py"), "--port", str(port)]
    if os.environ.get("ICESTREAM_MOTO_UNPATCHED") == "1":
        cmd.append("--unpatched")
    env = {**os.environ, **AWS_ENV}
    log_path = tmp_path_factory.mktemp("moto") / "moto_harness.log"  # moto logs each request
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = _first_line(proc.stdout, READY_TIMEOUT_S)
        expected = f"ready http://127.0.0.1:{port}"
        if line != expected:
            raise RuntimeError(
                f"moto harness did not start: got {line!r}, want {expected!r};"
                f" log: {log_path.read_text()[-2000:]}"
            )
        yield expected.split(" ", 1)[1]
    finally:
        proc.terminate()
        try:
            returncode = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            returncode = proc.wait()
        log.close()
    # Scripts rely on SIGTERM being a clean stop; a hang (killed) or a crash shows up here.
    assert returncode == 0, f"moto harness exited {returncode} on SIGTERM; log: {log_path}"


@pytest.fixture(scope="session")
def aws_client(moto_endpoint: str) -> Callable[[str], Any]:
    """Factory for boto3 clients bound to the moto endpoint with dummy credentials."""
    import boto3
    from botocore.config import Config

    def make(service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=moto_endpoint,
            region_name=AWS_ENV["AWS_REGION"],
            aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            # No retries: a retried request could hide a lost race or a server error.
            config=Config(retries={"max_attempts": 1, "mode": "standard"}, s3={"addressing_style": "path"}),
        )

    return make
