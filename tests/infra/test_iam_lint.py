"""Every IAM policy the module and its examples render, linted by parliament (pinned in
scripts/setup/requirements.txt) against AWS's service authorization data: an action AWS does not know,
a resource of a type the action does not take (`s3tables:ListTableBuckets` on a bucket ARN), a
condition key the action does not support (a `StringEquals` on a key the request never carries
denies the call) fail the test. What the contract test (test_contract.py) cannot see: it only
compares the actions the code calls with the actions granted.

The policies are read from the applied runs of the module's tests/setups.tftest.hcl and of each
example's tests (mock AWS provider, offline): the JSON a plan would send to IAM. Documents built
by `aws_iam_policy_document` data sources are the mock's, not rendered: the checks of
test_terraform.py cover those statically.

Needs terraform + the offline provider mirror (scripts/check/infra-check.sh); skipped, saying why,
without them.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import types

import pytest

from tfrun import TF_DIR, Run, skip_reason, terraform_test

REASON = skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

# parliament 1.6 finds its data files with pkg_resources, which setuptools 81+ no longer ships:
# the one function it calls, on importlib's resolution (the same file).
if "pkg_resources" not in sys.modules:
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pkg_resources")
        shim.resource_filename = lambda package, name: os.path.join(os.path.dirname(importlib.util.find_spec(package).origin), name)
        sys.modules["pkg_resources"] = shim
import parliament  # noqa: E402

# Findings that mean IAM would refuse the policy or deny the call it was written for.
FAILING = {
    "EXCEPTION", "MALFORMED_JSON", "MALFORMED", "DUPLICATE_SID", "INVALID_SID", "NO_VERSION", "INVALID_VERSION",
    "UNKNOWN_ACTION", "UNKNOWN_PREFIX", "UNKNOWN_CONDITION_FOR_ACTION", "UNKNOWN_OPERATOR", "MISMATCHED_TYPE",
    "INVALID_ARN", "RESOURCE_MISMATCH",
}


def lint(policy: dict | str) -> list[str]:
    """parliament's failing findings on one identity policy, each as `ISSUE: detail`."""
    text = policy if isinstance(policy, str) else json.dumps(policy)
    analyzed = parliament.analyze_policy_string(text, ignore_private_auditors=True)
    return sorted(f"{f.issue}: {f.detail} {f.location}" for f in analyzed.findings if f.issue in FAILING)


def rendered_policies(run: Run) -> dict[str, str]:
    """{where: policy JSON} of every identity policy a run renders (a plan leaves some unknown)."""
    out = {}
    for kind in ("aws_iam_role_policy", "aws_iam_policy"):
        for address, values in run.of_type(kind).items():
            if isinstance(values.get("policy"), str):
                out[address] = values["policy"]
    for name, value in run.outputs.items():
        if name.endswith("policy_json") and isinstance(value, str):
            out[f"output.{name}"] = value
    return out


@pytest.fixture(scope="module")
def policies() -> dict[str, str]:
    runs = {f"module/{k}": v for k, v in terraform_test("tests/setups.tftest.hcl").items()}
    for example in sorted((TF_DIR / "examples").iterdir()):
        for test in sorted((example / "tests").glob("*.tftest.hcl")) if (example / "tests").is_dir() else []:
            runs.update({f"examples/{example.name}/{k}": v for k, v in terraform_test(f"tests/{test.name}", cwd=example).items()})
    out = {f"{run}: {where}": policy for run, r in runs.items() for where, policy in rendered_policies(r).items()}
    assert len(out) > 20, f"too few rendered policies to lint: {sorted(out)}"
    return out


def test_every_rendered_policy_passes_the_iam_linter(policies):
    problems = {where: found for where, policy in policies.items() if (found := lint(policy))}
    assert not problems, json.dumps(problems, indent=1)


def test_the_linter_catches_what_the_contract_cannot(policies):
    """The defects the linter is here for, put back into a rendered policy, are reported."""
    where, text = next((w, p) for w, p in policies.items() if w.endswith('aws_iam_role_policy.function["ingest"]'))
    base = json.loads(text)

    def with_statement(statement: dict) -> dict:
        policy = copy.deepcopy(base)
        policy["Statement"].append(statement)
        return policy

    cases = {
        # A resource type the action does not take: ListTableBuckets has none.
        "RESOURCE_MISMATCH": {"Sid": "X", "Effect": "Allow", "Action": ["s3tables:ListTableBuckets"],
                              "Resource": ["arn:aws:s3tables:eu-west-1:123456789012:bucket/b"]},
        "UNKNOWN_ACTION": {"Sid": "Y", "Effect": "Allow", "Action": ["glue:GetSchemaVersions"], "Resource": ["*"]},
        # CreateTable presents no s3tables:tableName: this condition would deny every call.
        "UNKNOWN_CONDITION_FOR_ACTION": {"Sid": "Z", "Effect": "Allow", "Action": ["s3tables:CreateTable"],
                                         "Resource": ["arn:aws:s3tables:eu-west-1:123456789012:bucket/b"],
                                         "Condition": {"StringEquals": {"s3tables:tableName": ["t"]}}},
    }
    assert not lint(base), where
    for issue, statement in cases.items():
        assert any(f.startswith(issue) for f in lint(with_statement(statement))), (issue, lint(with_statement(statement)))
