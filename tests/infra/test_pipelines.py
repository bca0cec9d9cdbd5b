"""The module reads pipeline files with regular expressions (infra/terraform/pipelines.tf:
Terraform has no TOML parser). For every pipeline file shipped in infra/terraform, what the
module derives (tables and topics per [[pipeline]] block, namespace) must equal what a TOML
parser reads, and the tables it covers (grants, schedules, alarms) are exactly those the code
says the file implies (`icestream pipelines tables FILE`: dead-letter and changelog tables
too). Also: the example's schema is the project's own proto, not a stale copy.

Needs terraform + the offline provider mirror (scripts/check/infra-check.sh) and ICESTREAM_BIN;
skipped, saying why, without them. The proto check needs nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import uuid
from pathlib import Path

import pytest

from tfrun import ROOT, TF_DIR, skip_reason, terraform_test

BIN = os.environ.get("ICESTREAM_BIN", "")
PIPELINE_FILES = sorted(p for p in TF_DIR.rglob("pipelines*.toml") if ".terraform" not in p.parts)


def test_pipeline_files_are_shipped():
    shipped = {p.relative_to(TF_DIR).as_posix() for p in PIPELINE_FILES}
    assert "examples/complete/pipelines/pipelines.toml" in shipped, shipped


def test_example_schema_is_the_projects_proto():
    copy = TF_DIR / "examples/complete/pipelines/schemas/vehicle_telemetry.proto"
    assert copy.read_text() == (ROOT / "shared/proto/vehicle_telemetry.proto").read_text(), (
        f"{copy} differs from shared/proto/vehicle_telemetry.proto: copy it again"
    )


def expected(path: Path) -> dict:
    parsed = tomllib.loads(path.read_text())
    return {
        "namespace": parsed.get("namespace", "bigdata"),
        "pipelines": [
            {"table": p["table"], "topics": p["topics"], "registry": p.get("registry"),
             "registry_name": p.get("registry_name", "default-registry"), "registry_secret": p.get("registry_secret"),
             "upsert": p.get("mode") == "upsert", "changelog": p.get("changelog", False)}
            for p in parsed["pipeline"]
        ],
    }


def code_tables(path: Path) -> list[str]:
    """The tables the code says the file implies (`icestream pipelines tables FILE`: offline)."""
    out = subprocess.run([BIN, "pipelines", "tables", str(path)], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")})
    assert out.returncode == 0, f"{path}: {out.stderr}"
    return json.loads(out.stdout)["tables"]


@pytest.mark.skipif(skip_reason() is not None or not BIN, reason=skip_reason() or "set ICESTREAM_BIN to the icestream binary (make test does)")
def test_module_reads_what_toml_says_and_covers_the_tables_the_code_lists():
    runs_hcl = "\n".join(
        f'''
run "file_{i}" {{
  command = plan
  variables {{
    pipeline_file = "{path.as_posix()}"
    namespace     = "{expected(path)["namespace"]}"
  }}
}}'''
        for i, path in enumerate(PIPELINE_FILES)
    )
    name = f"tests/generated_pipelines_{uuid.uuid4().hex[:8]}.tftest.hcl"
    test_file = TF_DIR / name
    test_file.write_text(
        'mock_provider "aws" {\n  source = "./tests/mocks"\n}\n\n'
        'variables {\n  artifacts_dir = "tests/fixtures/lambda"\n  vpc_id = "vpc-1"\n  subnet_ids = ["subnet-a", "subnet-b"]\n}\n' + runs_hcl
    )
    try:
        runs = terraform_test(name)
    finally:
        test_file.unlink()
    for i, path in enumerate(PIPELINE_FILES):
        want = expected(path)
        got = runs[f"file_{i}"].outputs["pipelines"]
        assert got == want["pipelines"], f"{path}: the module read {got}, TOML says {want['pipelines']}"
        tables = runs[f"file_{i}"].outputs["ingest_tables"]
        assert sorted(tables) == sorted(code_tables(path)), f"{path}: the module covers {tables}, the code writes {code_tables(path)}"


@pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
def test_the_examples_pipeline_files_pass_the_codes_check():
    """What an example deploys, the functions accept (the complete example's file once lacked
    the `event_time` its window dedup needs, which only the code's check knows)."""
    for path in (p for p in PIPELINE_FILES if "examples" in p.parts):
        out = subprocess.run([BIN, "pipelines", "check", str(path)], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")})
        assert out.returncode == 0, f"{path}: {out.stderr}"
