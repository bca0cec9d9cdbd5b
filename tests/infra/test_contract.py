"""The Terraform module checked against what the code does (`icestream contract`), on the
main setups of infra/terraform/tests/setups.tftest.hcl (mock AWS provider, offline):

  * every AWS action each function's code can call is granted to its role, on the resources it
    touches, with conditions the call satisfies;
  * every knob a function reads is set on it, and it gets no knob it ignores;
  * every alarm and dashboard metric outside AWS/* namespaces is one the code emits, with the
    dimensions the code emits;
  * the committer's queue, mapping and concurrency serialise one table's commits.

Each check is also run on a copy of a deployment with the defect it guards put back, and must
report it (test_*_catches_*): the checks cannot pass vacuously.

Needs terraform + the offline provider mirror (scripts/check/infra-check.sh sets TF_CLI_CONFIG_FILE)
and ICESTREAM_BIN; skipped, saying why, without them.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest

import contract_checks as checks
from tfrun import TF_DIR, skip_reason, terraform_test

BIN = os.environ.get("ICESTREAM_BIN", "")
REASON = skip_reason() or (None if BIN else "set ICESTREAM_BIN to the icestream binary (make test does)")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

PIPELINE_FILE = TF_DIR / "tests" / "fixtures" / "pipelines" / "pipelines.toml"
UPSERT_FILE = TF_DIR / "tests" / "fixtures" / "upsert" / "pipelines.toml"
# Applied runs of setups.tftest.hcl, and the pipeline file each uses.
SETUPS = {
    "defaults": None,
    "queued": None,
    "s3tables_existing_cluster_and_vpc_with_pipelines": PIPELINE_FILE,
    "upsert_changelog_and_registries": UPSERT_FILE,
    "bounded_retries_keep_discarded_batches_in_s3_and_alarm": None,
    "glue_table_optimizers": PIPELINE_FILE,
}


@pytest.fixture(scope="module")
def contract() -> dict:
    out = subprocess.run([BIN, "contract"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def runs() -> dict:
    runs = terraform_test("tests/setups.tftest.hcl")
    missing = set(SETUPS) - set(runs)
    assert not missing, f"setups.tftest.hcl has no applied run {sorted(missing)}"
    return runs


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_iam_grants_every_call_the_code_makes(runs, contract, setup):
    assert checks.iam_problems(runs[setup], contract, SETUPS[setup]) == []


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_each_function_gets_exactly_the_knobs_it_reads(runs, contract, setup):
    assert checks.knob_problems(runs[setup], contract) == []


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_alarms_and_dashboard_use_metrics_the_code_emits(runs, contract, setup):
    assert checks.metric_problems(runs[setup], contract) == []


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_planned_function_policies_are_scoped(runs, setup):
    from test_terraform import UNSCOPABLE_ACTIONS

    assert checks.scoping_problems(runs[setup], UNSCOPABLE_ACTIONS) == []


def test_committer_serialises_each_table(runs, contract):
    assert runs["queued"].outputs["commit_queue_url"], "the queued setup must deploy the committer"
    assert checks.serialisation_problems(runs["queued"], contract) == []


# --------------------------------------------------------------------------- the checks bite


def mutated(run, address: str, change) -> object:
    broken = copy.deepcopy(run)
    change(broken.resources[address])
    return broken


def drop_statement(sid: str):
    def change(values):
        policy = json.loads(values["policy"])
        policy["Statement"] = [s for s in policy["Statement"] if s.get("Sid") != sid]
        values["policy"] = json.dumps(policy)
    return change


def test_iam_check_catches_the_missing_headbucket_grant(runs, contract):
    broken = mutated(runs["defaults"], 'aws_iam_role_policy.function["ingest"]', drop_statement("WarehouseBucketExists"))
    problems = checks.iam_problems(broken, contract)
    assert any(p.startswith("ingest: s3:ListBucket on arn:aws:s3:::") for p in problems), problems


def test_iam_check_catches_a_listing_condition_headbucket_cannot_meet(runs, contract):
    """The original defect: ListBucket only under an s3:prefix condition, which HeadBucket
    never supplies (the orphan listing, which does supply one, stays granted)."""
    def prefix_only(values):
        policy = json.loads(values["policy"])
        for s in policy["Statement"]:
            if s["Sid"] == "WarehouseBucketExists":
                s["Condition"] = {"StringLike": {"s3:prefix": ["warehouse/bigdata.db/*"]}}
        values["policy"] = json.dumps(policy)
    broken = mutated(runs["defaults"], 'aws_iam_role_policy.function["maintenance"]', prefix_only)
    problems = checks.iam_problems(broken, contract)
    assert any(p.startswith("maintenance: s3:ListBucket on arn:aws:s3:::") for p in problems), problems
    assert not any("s3:prefix" in p for p in problems), problems


def test_iam_check_catches_tables_outside_the_pipeline_scope(runs, contract):
    setup = "s3tables_existing_cluster_and_vpc_with_pipelines"
    def only_first_table(values):
        policy = json.loads(values["policy"])
        for s in policy["Statement"]:
            if s["Sid"] == "S3TablesOwnTables":
                s["Condition"]["StringEquals"]["s3tables:tableName"] = ["orders"]
        values["policy"] = json.dumps(policy)
    broken = mutated(runs[setup], 'aws_iam_role_policy.function["ingest"]', only_first_table)
    problems = checks.iam_problems(broken, contract, PIPELINE_FILE)
    assert any("vehicle_telemetry" in p and "s3tables:GetTable" in p for p in problems), problems


def test_registry_grants_are_the_decoders_alone_and_the_check_catches_a_missing_or_scoped_one(runs, contract):
    """Ingest and maintenance (dead-letter replay, recover) decode records; nothing else reads
    registries. A Glue lookup by version id is authorised on "*": scoping it to the registry's
    ARNs (the original defect) denies every lookup."""
    setup = "s3tables_existing_cluster_and_vpc_with_pipelines"
    run = runs[setup]
    for role in checks.functions_of(run):
        actions = {a for st in checks.policy_of(run, role)["Statement"] for a in st["Action"]}
        has = {"glue:GetSchemaVersion", "secretsmanager:GetSecretValue"} & actions
        want = {"glue:GetSchemaVersion", "secretsmanager:GetSecretValue"} if role in ("ingest", "maintenance") else set()
        assert has == want, (role, has)
    for sid, needle in [("ReadGlueSchemaVersions", "glue:GetSchemaVersion on *"), ("ReadSchemaRegistryCredentials", "secret:icestream/schema-registry")]:
        def drop(values, sid=sid):
            policy = json.loads(values["policy"])
            policy["Statement"] = [st for st in policy["Statement"] if st["Sid"] != sid]
            values["policy"] = json.dumps(policy)
        for role in ("ingest", "maintenance"):
            problems = checks.iam_problems(mutated(run, f'aws_iam_role_policy.function["{role}"]', drop), contract, PIPELINE_FILE)
            assert any(needle in p and p.startswith(role) for p in problems), (sid, role, problems)

    def scoped_to_registry(values):
        policy = json.loads(values["policy"])
        for st in policy["Statement"]:
            if st["Sid"] == "ReadGlueSchemaVersions":
                st["Resource"] = ["arn:aws:glue:eu-west-1:123456789012:registry/shop", "arn:aws:glue:eu-west-1:123456789012:schema/shop/*"]
        values["policy"] = json.dumps(policy)
    problems = checks.iam_problems(mutated(run, 'aws_iam_role_policy.function["ingest"]', scoped_to_registry), contract, PIPELINE_FILE)
    assert any("glue:GetSchemaVersion on *" in p for p in problems), problems


def test_maintenance_reads_the_discarded_batches_and_the_check_catches_a_missing_grant(runs, contract):
    run = runs["defaults"]
    assert run.outputs["recover_uri"], "the defaults discard to an S3 bucket"
    for sid, needle in [("ListDiscardedBatches", "s3:ListBucket on arn:aws:s3:::"), ("ReadDiscardedBatches", "s3:GetObject on arn:aws:s3:::")]:
        problems = checks.iam_problems(mutated(run, 'aws_iam_role_policy.function["maintenance"]', drop_statement(sid)), contract)
        assert any(p.startswith(f"maintenance: {needle}") for p in problems), (sid, problems)


def test_knob_check_catches_tombstone_retention_on_the_wrong_function(runs, contract):
    def move(run):
        ingest = run.resources['aws_lambda_function.this["ingest"]']["environment"][0]["variables"]
        maintenance = run.resources['aws_lambda_function.this["maintenance"]']["environment"][0]["variables"]
        ingest["ICESTREAM_TOMBSTONE_RETENTION_DAYS"] = maintenance.pop("ICESTREAM_TOMBSTONE_RETENTION_DAYS")
    broken = copy.deepcopy(runs["defaults"])
    move(broken)
    problems = checks.knob_problems(broken, contract)
    assert "ingest: gets ICESTREAM_TOMBSTONE_RETENTION_DAYS, which its code never reads" in problems, problems
    assert "maintenance: reads knob `tombstone_retention_days` but the module does not set ICESTREAM_TOMBSTONE_RETENTION_DAYS" in problems


def test_metric_check_catches_a_dimension_the_code_does_not_emit(runs, contract):
    def short_name(values):
        values["dimensions"] = {"Function": "ingest"}
    broken = mutated(runs["defaults"], 'aws_cloudwatch_metric_alarm.dead_lettered["ingest"]', short_name)
    problems = checks.metric_problems(broken, contract)
    assert any("Function = 'ingest' is no deployed function name" in p for p in problems), problems

    def unknown_metric(values):
        values["metric_name"] = "DeadLetters"
    broken = mutated(runs["defaults"], 'aws_cloudwatch_metric_alarm.dead_lettered["ingest"]', unknown_metric)
    assert any("emits no metric 'DeadLetters'" in p for p in checks.metric_problems(broken, contract))


def test_metric_check_catches_a_per_table_alarm_on_a_metric_emitted_only_per_function(runs, contract):
    address = 'aws_cloudwatch_metric_alarm.table["vehicle_telemetry-freshness"]'
    assert not checks.metric_problems(runs["defaults"], contract)
    broken = mutated(runs["defaults"], address, lambda values: values.update(metric_name="MaxRecordAge"))
    assert any("emits no metric 'MaxRecordAge' per table" in p for p in checks.metric_problems(broken, contract))


def test_serialisation_check_catches_a_standard_queue_and_a_throttling_reservation(runs, contract):
    queue = 'aws_sqs_queue.commit[0]'
    broken = mutated(runs["queued"], queue, lambda q: q.update(fifo_queue=False))
    assert any("is not FIFO" in p for p in checks.serialisation_problems(broken, contract))

    broken = mutated(runs["queued"], 'aws_lambda_function.this["committer"]', lambda f: f.update(reserved_concurrent_executions=1))
    assert any("throttles spend deliveries" in p for p in checks.serialisation_problems(broken, contract))

    broken = mutated(runs["queued"], 'aws_sqs_queue.commit_dlq[0]', lambda q: q.update(message_retention_seconds=60))
    assert any("expire at once" in p for p in checks.serialisation_problems(broken, contract))


def test_glue_optimizer_grants_are_checked(runs, contract):
    """glue_maintenance = "glue": maintenance sets up the optimizers on its tables and passes their
    role to Glue; a missing grant, or PassRole on another role, is reported."""
    run = runs["glue_table_optimizers"]
    assert checks.iam_problems(run, contract, PIPELINE_FILE) == []
    for sid, needle in [("GlueTableOptimizers", "glue:CreateTableOptimizer on arn:aws:glue:"), ("PassGlueOptimizerRole", "iam:PassRole on ")]:
        broken = mutated(run, 'aws_iam_role_policy.function["maintenance"]', drop_statement(sid))
        problems = checks.iam_problems(broken, contract, PIPELINE_FILE)
        assert any(p.startswith(f"maintenance: {needle}") for p in problems), (sid, problems)

    def another_role(values):
        policy = json.loads(values["policy"])
        for st in policy["Statement"]:
            if st["Sid"] == "PassGlueOptimizerRole":
                st["Resource"] = ["arn:aws:iam::123456789012:role/mock"]
        values["policy"] = json.dumps(policy)
    problems = checks.iam_problems(mutated(run, 'aws_iam_role_policy.function["maintenance"]', another_role), contract, PIPELINE_FILE)
    assert any("iam:PassRole on arn:aws:iam::123456789012:role/icestream-glue-optimizer-1" in p for p in problems), problems
    # No other deployment grants any of it.
    assert not any(s["Sid"] in ("GlueTableOptimizers", "PassGlueOptimizerRole")
                   for s in checks.policy_of(runs["defaults"], "maintenance")["Statement"])
