"""Static checks of infra/terraform, from a python-hcl2 parse of the .tf files.

No cloud, no terraform binary. What is asserted:
  * every ICESTREAM_* environment variable the module sets is a key of the Rust
    config (read from the `Knob { key: "..." }` literals of the `const *KNOBS`
    arrays in shared/src/**/*.rs: the lists functions read their environment with),
    and every value a variable's validation admits is one the knob allows;
  * every function zip is `<artifacts>/<binary>/bootstrap.zip` for a binary the
    Cargo workspace builds (members' [[bin]] targets and auto-discovered bins);
  * every Kafka mapping retries until success unless bounded with an S3 on-failure
    destination (validation), and the commit queue's mapping has a bounded redrive to a DLQ;
  * every IAM policy statement is scoped: no wildcard action, no "*" resource
    except for actions AWS cannot scope (explicit allow-list below);
  * variables are documented and typed, and the README lists every input/output.

Nothing here is skipped: a missing source (no Knob literals yet, a function crate
not in the workspace) fails with a message naming it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import hcl2
import pytest
from hcl2 import SerializationOptions

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"
OPTIONS = SerializationOptions(strip_string_quotes=True)

# Actions AWS does not allow to scope to a resource, so "*" is the only valid
# resource for them:
#  - the ENI family Lambda uses for the Kafka pollers and VPC-attached functions
#    (ec2:Create/Delete/DescribeNetworkInterface(s) etc. have no resource-level
#    permissions for this use);
#  - X-Ray trace upload;
#  - Glue Schema Registry lookups by SchemaVersionId (authorised against "*": the id names no
#    registry or schema; awslabs/aws-glue-schema-registry#68);
#  - s3tables:ListTableBuckets and kafka:GetBootstrapBrokers (no resource type);
#  - CloudWatch PutMetricData (not used: metrics go out as EMF log lines).
UNSCOPABLE_ACTIONS = {
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "cloudwatch:PutMetricData",
    "glue:GetSchemaVersion",
    "s3tables:ListTableBuckets",
    "kafka:GetBootstrapBrokers",
}

# KMS key policies are resource policies: their Resource "*" means "this key".
# Allowed only for policy documents that are attached as a key policy.
KEY_POLICY_DOCUMENTS = {"kms"}


# --------------------------------------------------------------------------- parsing


def parse_dir(directory: Path) -> dict[str, list]:
    """Merge the top-level blocks of every .tf file of one directory."""
    merged: dict[str, list] = {}
    files = sorted(directory.glob("*.tf"))
    assert files, f"no .tf files in {directory}"
    for path in files:
        parsed = hcl2.loads(path.read_text(), serialization_options=OPTIONS)
        for block_type, blocks in parsed.items():
            merged.setdefault(block_type, []).extend(blocks)
    return merged


MODULE = parse_dir(TF_DIR)
EXAMPLE_DIRS = sorted(p for p in (TF_DIR / "examples").iterdir() if p.is_dir())
ALL_CONFIGS = {"module": MODULE} | {f"examples/{p.name}": parse_dir(p) for p in EXAMPLE_DIRS}


def blocks_of(config: dict, kind: str, type_name: str) -> dict[str, dict]:
    """{name: body} of every `<kind> "<type_name>" "<name>"` block."""
    out: dict[str, dict] = {}
    for entry in config.get(kind, []):
        for name, body in entry.get(type_name, {}).items():
            out[name] = body
    return out


def locals_of(config: dict) -> dict:
    merged: dict = {}
    for entry in config.get("locals", []):
        merged.update({k: v for k, v in entry.items() if not k.startswith("__")})
    return merged


def variables_of(config: dict) -> dict[str, dict]:
    return {name: body for entry in config.get("variable", []) for name, body in entry.items()}


def outputs_of(config: dict) -> dict[str, dict]:
    return {name: body for entry in config.get("output", []) for name, body in entry.items()}


def walk_strings(node):
    """Every string (keys included) in a parsed structure."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield key
            yield from walk_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_strings(item)
    elif isinstance(node, str):
        yield node


def string_list(value) -> list[str]:
    """Literal strings of a list attribute, or the quoted literals inside an expression."""
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out.extend(string_list(item))
        return out
    if isinstance(value, str):
        if value.startswith("${") and value.endswith("}"):
            return re.findall(r'"([^"]*)"', value)
        return [value]
    return []


# --------------------------------------------------------------------------- Rust side


def _skip_literal(src: str, i: int) -> int:
    """Index after the string/char literal or comment starting at i, else i."""
    if src.startswith("//", i):
        end = src.find("\n", i)
        return len(src) if end < 0 else end
    if src.startswith("/*", i):
        end = src.find("*/", i + 2)
        return len(src) if end < 0 else end + 2
    raw = re.match(r'r(#*)"', src[i:])
    if raw:
        closing = '"' + raw.group(1)
        end = src.find(closing, i + raw.end())
        return len(src) if end < 0 else end + len(closing)
    if src[i] == '"':
        j = i + 1
        while j < len(src) and src[j] != '"':
            j += 2 if src[j] == "\\" else 1
        return j + 1
    char = re.match(r"'(\\.|[^\\'])'", src[i:])
    if char:
        return i + char.end()
    return i


def knob_literals(src: str) -> list[str]:
    """Bodies of `Knob { ... }` struct literals (brace-matched, literals skipped)."""
    bodies = []
    for match in re.finditer(r"\bKnob\s*\{", src):
        start = match.end()
        depth, i = 1, start
        while i < len(src) and depth:
            nxt = _skip_literal(src, i)
            if nxt != i:
                i = nxt
                continue
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        bodies.append(src[start : i - 1])
    return bodies


def config_knob_arrays(src: str) -> list[str]:
    """Bodies of `const *KNOBS: &[Knob] = &[ ... ];` arrays (bracket-matched).

    Functions apply their environment over these lists only (`Settings::default()`),
    and reject any other ICESTREAM_* name; knob lists of command options that are
    not configuration (e.g. `GENERATOR_OPTIONS`) do not count.
    """
    bodies = []
    for match in re.finditer(r"\bconst\s+\w*KNOBS\s*:\s*&\[\s*Knob\s*\]\s*=\s*&\[", src):
        start = match.end()
        depth, i = 1, start
        while i < len(src) and depth:
            nxt = _skip_literal(src, i)
            if nxt != i:
                i = nxt
                continue
            depth += {"[": 1, "]": -1}.get(src[i], 0)
            i += 1
        bodies.append(src[start : i - 1])
    return bodies


def rust_knobs() -> dict[str, list[str] | None]:
    """{key: allowed words (Allowed::OneOf) or None} of the Knob literals of the config knob arrays under shared/src."""
    knobs: dict[str, list[str] | None] = {}
    for path in sorted((ROOT / "shared" / "src").rglob("*.rs")):
        for body in (b for array in config_knob_arrays(path.read_text()) for b in knob_literals(array)):
            key = re.search(r'\bkey\s*:\s*"([^"]+)"', body)
            if not key:
                continue
            one_of = re.search(r"Allowed::OneOf\(\s*&\[(.*?)\]\s*\)", body, re.S)
            knobs[key.group(1)] = re.findall(r'"([^"]*)"', one_of.group(1)) if one_of else None
    return knobs


def rust_config_keys() -> set[str]:
    return set(rust_knobs())


def workspace_binaries() -> dict[str, str]:
    """{binary name: member} of every binary target of the Cargo workspace."""
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
    members = workspace.get("workspace", {}).get("members", [])
    binaries: dict[str, str] = {}
    for pattern in members:
        for member_dir in sorted(ROOT.glob(pattern)):
            manifest_path = member_dir / "Cargo.toml"
            if not manifest_path.is_file():
                continue
            manifest = tomllib.loads(manifest_path.read_text())
            package = manifest.get("package", {})
            explicit = manifest.get("bin", [])
            for target in explicit:
                binaries[target["name"]] = pattern
            if package.get("autobins", True):
                explicit_paths = {t.get("path") for t in explicit}
                if (member_dir / "src/main.rs").is_file() and "src/main.rs" not in explicit_paths:
                    binaries[package["name"]] = pattern
                bin_dir = member_dir / "src/bin"
                if bin_dir.is_dir():
                    for entry in bin_dir.iterdir():
                        if entry.suffix == ".rs" or (entry / "main.rs").is_file():
                            binaries[entry.stem] = pattern
    return binaries


# --------------------------------------------------------------------------- environment


def icestream_env_names() -> list[str]:
    names = {m for s in walk_strings(MODULE) for m in re.findall(r"\bICESTREAM_[A-Z0-9_]+\b", s)}
    return sorted(names)


ENV_NAMES = icestream_env_names()


def test_module_sets_icestream_environment():
    assert ENV_NAMES, "no ICESTREAM_* variable found in infra/terraform"
    functions = blocks_of(MODULE, "resource", "aws_lambda_function")
    assert functions, "no aws_lambda_function in infra/terraform"
    for name, body in functions.items():
        variables = body["environment"][0]["variables"]
        # RUST_LOG is the functions' own log filter (not a knob; see functions.tf).
        assert variables == "${merge(local.function_environment[each.key], {RUST_LOG = local.rust_log})}", (
            f"aws_lambda_function.{name} must take its environment from local.function_environment"
        )
    env = locals_of(MODULE)["function_environment"]
    assert set(env) == set(locals_of(MODULE)["function_catalog"]), "one environment per function"


def test_rust_config_declares_knobs():
    keys = rust_config_keys()
    assert keys, (
        'no `Knob { key: "..." }` literal in a `const *KNOBS: &[Knob]` array under shared/src: '
        "the config module (shared/src/model/config/knobs.rs) is not written yet or declares knobs differently"
    )


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_env_var_is_a_rust_config_key(env_name):
    key = env_name.removeprefix("ICESTREAM_").lower()
    keys = rust_config_keys()
    assert key in keys, (
        f"{env_name} is set by Terraform but `{key}` is not a key of the Rust config "
        f"(keys found in shared/src: {sorted(keys) or 'none'})"
    )


def env_variables() -> dict[str, str]:
    """{ICESTREAM_* name: Terraform variable it is set from}, from the module's locals."""
    mapping: dict[str, str] = {}

    def visit(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and key.startswith("ICESTREAM_") and isinstance(value, str):
                    var = re.search(r"\bvar\.(\w+)", value)
                    if var:
                        mapping[key] = var.group(1)
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)
        elif isinstance(node, str):
            for name, var in re.findall(r"\b(ICESTREAM_[A-Z0-9_]+)\s*=\s*(?:tostring\()?var\.(\w+)", node):
                mapping[name] = var

    visit(locals_of(MODULE))
    return mapping


def one_of_validation(variable: dict, name: str) -> list[str] | None:
    for validation in variable.get("validation", []):
        match = re.search(rf"contains\(\[(.*?)\],\s*var\.{name}\)", validation["condition"])
        if match:
            return re.findall(r'"([^"]*)"', match.group(1))
    return None


ENV_ONE_OF = sorted(
    (env, var)
    for env, var in env_variables().items()
    if one_of_validation(variables_of(MODULE)[var], var) is not None
)


def test_enumerated_knobs_are_mapped():
    assert {"ICESTREAM_CATALOG", "ICESTREAM_SOURCE", "ICESTREAM_COMPRESSION"} <= {e for e, _ in ENV_ONE_OF}


@pytest.mark.parametrize("env_name,variable", ENV_ONE_OF)
def test_variable_values_are_allowed_by_rust_knob(env_name, variable):
    """A value the variable's validation accepts must be one the function accepts."""
    key = env_name.removeprefix("ICESTREAM_").lower()
    knobs = rust_knobs()
    assert key in knobs, f"{env_name}: `{key}` is not a Rust knob (see test_env_var_is_a_rust_config_key)"
    assert knobs[key] is not None, f"{env_name}: Rust knob `{key}` is not an enumeration, var.{variable} is"
    terraform_values = one_of_validation(variables_of(MODULE)[variable], variable)
    extra = sorted(set(terraform_values) - set(knobs[key]))
    assert not extra, f"var.{variable} accepts {extra}, which the Rust knob `{key}` rejects (allowed: {knobs[key]})"


# --------------------------------------------------------------------------- function zips

FUNCTION_CATALOG = locals_of(MODULE)["function_catalog"]


def test_functions_deploy_workspace_zips():
    functions = blocks_of(MODULE, "resource", "aws_lambda_function")
    for name, body in functions.items():
        assert body["filename"] == "${local.artifacts_dir}/${each.value.binary}/bootstrap.zip", (
            f"aws_lambda_function.{name}: zip must be <artifacts_dir>/<binary>/bootstrap.zip (cargo lambda layout)"
        )
        assert body["for_each"] == "${local.functions}"
        assert body["handler"] == "bootstrap"
        assert body["runtime"] == "provided.al2023"
        assert body["architectures"] == ["${var.architecture}"]
        assert body["logging_config"][0]["log_format"] == "JSON"
    assert locals_of(MODULE)["artifacts_dir"] == '${coalesce(var.artifacts_dir, "${path.module}/../../target/lambda")}'
    # `make build` builds arm64 unless ARCH=x86_64: the module's default must be what it builds.
    assert variables_of(MODULE)["architecture"]["default"] == "arm64"
    assert one_of_validation(variables_of(MODULE)["architecture"], "architecture") == ["arm64", "x86_64"]
    build = (ROOT / "scripts" / "build" / "build-lambdas.sh").read_text()
    assert 'arch="${ARCH:-arm64}"' in build and "--arm64" in build and "--x86-64" in build


def test_function_catalog_lists_every_function():
    # Guards the parametrized test below against an empty (silently skipped) parameter set.
    assert set(FUNCTION_CATALOG) == {"ingest", "maintenance", "committer"}


@pytest.mark.parametrize("function", sorted(FUNCTION_CATALOG))
def test_function_binary_is_built_by_workspace(function):
    binary = FUNCTION_CATALOG[function]["binary"]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", binary), f"{function}: binary must be a literal name, got {binary!r}"
    binaries = workspace_binaries()
    assert binary in binaries, (
        f"function {function} deploys target/lambda/{binary}/bootstrap.zip, but the Cargo workspace "
        f"builds no binary `{binary}` (workspace binaries: {sorted(binaries)})"
    )


# --------------------------------------------------------------------------- event source mappings

ESMS = blocks_of(MODULE, "resource", "aws_lambda_event_source_mapping")
VARIABLES = variables_of(MODULE)


def _bounded_variable(expression: str, var_name: str, lower: str):
    """The expression uses var.<var_name>, whose validation rejects values below `lower`."""
    assert f"var.{var_name}" in expression, f"expected var.{var_name} in {expression!r}"
    variable = VARIABLES[var_name]
    conditions = " ".join(v["condition"] for v in variable.get("validation", []))
    assert f"var.{var_name} >= {lower}" in conditions, f"var.{var_name} must be validated >= {lower} (no -1)"
    assert variable["default"] >= int(lower)


def is_kafka_mapping(body: dict) -> bool:
    return "topics" in body


def consumer_groups(body: dict) -> list[str]:
    """consumer_group_id of the MSK and the self-managed Kafka config blocks (dynamic or not)."""
    blocks = [body.get(k, [{}])[0] for k in ("amazon_managed_kafka_event_source_config", "self_managed_kafka_event_source_config")]
    blocks += [d[k]["content"][0] for d in body.get("dynamic", []) for k in d
               if k in ("amazon_managed_kafka_event_source_config", "self_managed_kafka_event_source_config")]
    return [b["consumer_group_id"] for b in blocks if b.get("consumer_group_id")]


def test_there_are_kafka_and_queue_mappings():
    assert any(is_kafka_mapping(b) for b in ESMS.values())
    assert any("aws_sqs_queue." in b.get("event_source_arn", "") for b in ESMS.values())


@pytest.mark.parametrize("name", sorted(ESMS))
def test_mapping_has_bounded_retry_and_failure_destination(name):
    body = ESMS[name]
    if is_kafka_mapping(body):
        # One consumer group per mapping, for MSK and for a self-managed cluster alike.
        assert len(consumer_groups(body)) == 2, f"{name}: consumer_group_id must be set for both sources: {consumer_groups(body)}"
        destination = body["destination_config"][0]["on_failure"][0]["destination_arn"]
        assert destination, f"{name}: on-failure destination missing"
        retry = body["maximum_retry_attempts"]
        age = body["maximum_record_age_in_seconds"]
        # A skipped Kafka batch is lost for good (later batches raise the watermark past it):
        # retries are unbounded by default, and a bound needs the S3 destination, which keeps
        # the discarded event whole for `icestream recover`.
        for expression, var_name in ((retry, "maximum_retry_attempts"), (age, "maximum_record_age_in_seconds")):
            assert f"var.{var_name}" in expression, f"{name}: expected var.{var_name} in {expression!r}"
            variable = VARIABLES[var_name]
            assert variable["default"] == -1, f"var.{var_name} must default to -1 (retry until success)"
            conditions = [v["condition"] for v in variable.get("validation", [])]
            assert any(f"var.{var_name} == -1 || var.on_failure_destination == \"s3\"" in c for c in conditions), (
                f"var.{var_name}: a bound must require on_failure_destination = \"s3\" (validation)"
            )
        # AWS honours bounds only in provisioned mode: when the expression is conditional on
        # that mode, a precondition must refuse bounds in the other branch unless acknowledged.
        for expression in (retry, age):
            if "?" in expression:
                predicate = expression.removeprefix("${").split("?")[0].strip()
                conditions = [p["condition"] for lc in body.get("lifecycle", []) for p in lc.get("precondition", [])]
                assert any(predicate in c and "allow_unbounded_kafka_retries" in c for c in conditions), (
                    f"{name}: {expression} can drop the bound, but no precondition guards {predicate}"
                )
    else:
        # SQS source: retries are bounded by the queue's redrive policy and the
        # dead-letter queue is the on-failure destination.
        queue_ref = re.search(r"aws_sqs_queue\.(\w+)", body["event_source_arn"])
        assert queue_ref, f"{name}: unknown event source {body['event_source_arn']}"
        queue = blocks_of(MODULE, "resource", "aws_sqs_queue")[queue_ref.group(1)]
        redrive = queue.get("redrive_policy", "")
        dlq = re.search(r"deadLetterTargetArn\s*=\s*aws_sqs_queue\.(\w+)", redrive)
        assert dlq, f"{name}: source queue has no dead-letter queue"
        assert dlq.group(1) in blocks_of(MODULE, "resource", "aws_sqs_queue")
        max_receive = re.search(r"maxReceiveCount\s*=\s*var\.(\w+)", redrive)
        assert max_receive, f"{name}: source queue has no maxReceiveCount"
        _bounded_variable(f"var.{max_receive.group(1)}", max_receive.group(1), "1")
        assert "ReportBatchItemFailures" in body.get("function_response_types", [])


# --------------------------------------------------------------------------- IAM


def policy_statements():
    """(config, document, statement) for static and dynamic statements of every policy document."""
    for config_name, config in ALL_CONFIGS.items():
        for doc_name, doc in blocks_of(config, "data", "aws_iam_policy_document").items():
            for statement in doc.get("statement", []):
                yield config_name, doc_name, statement
            for dynamic in doc.get("dynamic", []):
                for statement in dynamic.get("statement", {}).get("content", []):
                    yield config_name, doc_name, statement


STATEMENTS = list(policy_statements())


# Policies built as plain JSON (jsonencode) so a plan shows them in full; tests/infra/
# test_contract.py checks their scoping on the planned JSON instead of here.
JSON_POLICIES = {
    ("aws_iam_role_policy", "function"),
    ("aws_iam_role_policy", "s3tables_lakeformation"),
    ("aws_iam_role", "scheduler"),
    ("aws_iam_role_policy", "flow_logs"),
    ("aws_iam_role_policy", "glue_optimizer"),
    ("aws_iam_role", "glue_optimizer"),
}


def test_policies_come_from_policy_documents():
    assert STATEMENTS, "no aws_iam_policy_document statements found"
    for config_name, config in ALL_CONFIGS.items():
        for kind in ("aws_iam_role_policy", "aws_iam_policy", "aws_s3_bucket_policy"):
            for name, body in blocks_of(config, "resource", kind).items():
                if (kind, name) in JSON_POLICIES:
                    assert body["policy"].startswith("${jsonencode("), name
                    continue
                assert re.fullmatch(r"\$\{data\.aws_iam_policy_document\.\w+(\[[\w.]+\])?\.json\}", body["policy"]), (
                    f"{config_name}: {kind}.{name} must use an aws_iam_policy_document (checked here)"
                )
        for name, body in blocks_of(config, "resource", "aws_iam_role").items():
            if ("aws_iam_role", name) in JSON_POLICIES:
                assert body["assume_role_policy"].startswith("${jsonencode("), name
                continue
            assert body["assume_role_policy"].startswith("${data.aws_iam_policy_document."), name
        for name, body in blocks_of(config, "resource", "aws_kms_key").items():
            document = re.fullmatch(r"\$\{data\.aws_iam_policy_document\.(\w+)\.json\}", body["policy"])
            assert document and document.group(1) in KEY_POLICY_DOCUMENTS, name


@pytest.mark.parametrize(
    "config_name,doc_name,statement",
    STATEMENTS,
    ids=[f"{c}:{d}:{s.get('sid', i)}" for i, (c, d, s) in enumerate(STATEMENTS)],
)
def test_statement_is_scoped(config_name, doc_name, statement):
    effect = statement.get("effect", "Allow")
    assert "not_actions" not in statement and "not_resources" not in statement
    actions = string_list(statement.get("actions", []))
    assert actions, f"{doc_name}: statement without literal actions"
    resources = string_list(statement.get("resources", [])) or [statement.get("resources")]
    if effect == "Deny":
        # Guardrails (TLS-only bucket policy) deny every action under a condition.
        assert statement.get("condition"), f"{doc_name}: a Deny statement must be conditional"
        return
    for action in actions:
        assert action != "*" and not action.endswith(":*"), f"{doc_name}: wildcard action {action}"
        assert "*" not in action, f"{doc_name}: wildcard in action {action}"
    if "*" in resources:
        if doc_name in KEY_POLICY_DOCUMENTS:
            principals = [i for p in statement.get("principals", []) for i in string_list(p["identifiers"])]
            assert principals and "*" not in principals, f"{doc_name}: key policy statement needs a named principal"
        else:
            unscopable = set(actions) - UNSCOPABLE_ACTIONS
            assert not unscopable, f"{doc_name}: resource '*' for scopable actions {sorted(unscopable)}"
    if any(a.startswith("kafka-cluster:") for a in actions):
        for resource in resources:
            assert re.search(r"msk_cluster_arn|function_(topic|group)_arns", str(resource)), (
                f"{doc_name}: kafka-cluster actions must be scoped to cluster/topic/group ARNs, got {resource}"
            )


def test_scheduler_role_only_invokes_maintenance():
    """Invoke the maintenance function; and dead-letter failed invocations to its own queue."""
    document = blocks_of(MODULE, "data", "aws_iam_policy_document")["scheduler"]
    statements = document["statement"]
    assert "dynamic" not in document
    assert [string_list(s["actions"]) for s in statements] == [
        ["lambda:InvokeFunction"], ["sqs:SendMessage"], ["kms:Decrypt", "kms:GenerateDataKey"]
    ]
    for resource in statements[0]["resources"]:
        assert 'aws_lambda_function.this["maintenance"].arn' in resource
    assert statements[1]["resources"] == ["${aws_sqs_queue.schedule_dlq.arn}"]


# --------------------------------------------------------------------------- docs


def test_variables_are_documented_and_typed():
    for name, body in VARIABLES.items():
        assert body.get("description"), f"variable {name} has no description"
        assert body.get("type"), f"variable {name} has no type"


def test_readme_lists_inputs_and_outputs():
    readme = (TF_DIR / "README.md").read_text()
    for name in VARIABLES:
        assert f"| `{name}` |" in readme or f"| <a name=\"input_{name}\">" in readme, f"README misses input {name}"
    for name in outputs_of(MODULE):
        assert f"| `{name}` |" in readme or f"| <a name=\"output_{name}\">" in readme, f"README misses output {name}"
