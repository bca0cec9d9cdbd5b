"""Run `terraform test` on infra/terraform (mock AWS provider, offline) and return what each
run planned or applied: {run name: Run(resources, outputs)}.

`terraform test -verbose -json` prints, per run block, the plan (command = plan) or the state
(command = apply) as JSON; that is the only way to see a module's values under the mock
provider, which `terraform plan` does not support.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"


@dataclass
class Run:
    name: str
    resources: dict[str, dict] = field(default_factory=dict)  # address -> attribute values
    outputs: dict[str, object] = field(default_factory=dict)

    def of_type(self, type_name: str) -> dict[str, dict]:
        prefix = type_name + "."
        return {a: v for a, v in self.resources.items() if a.startswith(prefix)}


def skip_reason() -> str | None:
    """Why the Terraform-backed checks cannot run here, or None."""
    if os.environ.get("ICESTREAM_TF_SKIP"):
        return f"terraform checks skipped by infra-check.sh: {os.environ['ICESTREAM_TF_SKIP']}"
    if not shutil.which("terraform"):
        return "no terraform binary on PATH"
    if not os.environ.get("TF_CLI_CONFIG_FILE"):
        return "TF_CLI_CONFIG_FILE is not set (scripts/check/infra-check.sh generates it for the offline provider mirror)"
    return None


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["terraform", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def terraform_test(test_file: str, cwd: Path = TF_DIR) -> dict[str, Run]:
    """`terraform test -filter=<test_file>` in `cwd`; fails with terraform's own messages."""
    if not (cwd / ".terraform").is_dir():
        init = _run(["init", "-backend=false", "-input=false", "-no-color"], cwd)
        assert init.returncode == 0, f"terraform init in {cwd} failed:\n{init.stdout}\n{init.stderr}"
    proc = _run(["test", "-no-color", "-verbose", "-json", f"-filter={test_file}"], cwd)
    runs: dict[str, Run] = {}
    errors: list[str] = []
    for line in proc.stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        name = event.get("@testrun")
        if event.get("type") == "diagnostic" and event.get("@level") == "error":
            errors.append(f"{name}: {event.get('@message')}")
        if event.get("type") == "test_state":
            runs[name] = _from_state(name, event["test_state"])
        elif event.get("type") == "test_plan":
            runs[name] = _from_plan(name, event["test_plan"])
    assert proc.returncode == 0, f"terraform test {test_file} failed:\n" + "\n".join(errors or [proc.stderr])
    return runs


def _from_state(name: str, state: dict) -> Run:
    run = Run(name)
    stack = [state.get("root_module", {})]
    while stack:
        module = stack.pop()
        for r in module.get("resources", []):
            run.resources[r["address"]] = r.get("values", {})
        stack.extend(module.get("child_modules", []))
    run.outputs = {k: v.get("value") for k, v in state.get("outputs", {}).items()}
    return run


def _from_plan(name: str, plan: dict) -> Run:
    run = Run(name)
    for change in plan.get("resource_changes", []):
        run.resources[change["address"]] = change.get("change", {}).get("after") or {}
    run.outputs = {k: v.get("after") for k, v in plan.get("output_changes", {}).items()}
    return run
