"""README's five-minute tour runs as written: its shell blocks, in order, in an empty directory
with the CLI on PATH, then its Python block against what they wrote. A tour that no longer runs
(a renamed key, a changed summary, a CLI spelling that went) fails here, not for a newcomer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ICESTREAM_BIN")


def tour_blocks() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## A five-minute tour")
    end = readme.index("\n## ", start + 1)
    return re.findall(r"```(\w+)\n(.*?)```", readme[start:end], re.S)


@pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN (make test does)")
def test_the_readme_tour_runs_as_written(tmp_path):
    blocks = tour_blocks()
    assert [lang for lang, _ in blocks] == ["sh", "sh", "sh", "python"], blocks
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "icestream").symlink_to(Path(BIN).resolve())
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env.update(PATH=f"{bindir}:{Path(sys.executable).parent}:{env['PATH']}", RUST_LOG="warn")
    script = "set -euo pipefail\n" + "\n".join(code for lang, code in blocks if lang == "sh")
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summaries = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"records"')]
    assert [(s["written"], s["dead_letter"], s["skipped_replay"]) for s in summaries] == [(6, 1, 0), (0, 0, 7)], out.stdout
    assert "audit bigdata.orders: PASS — 6 rows, 1 dead letters" in out.stdout, out.stdout

    tour = tmp_path / "tour"
    code = blocks[3][1]
    *setup, query = code.strip().splitlines()
    cwd = os.getcwd()
    os.chdir(tour)
    try:
        scope: dict = {}
        exec("\n".join(setup), scope)
        rows = eval(query, scope).to_pylist()
    finally:
        os.chdir(cwd)
    assert sorted(r["order_id"] for r in rows) == [1, 4], rows
