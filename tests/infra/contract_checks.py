"""Checks of one planned/applied deployment (a tfrun.Run) against `icestream contract`.

Each check returns a list of problems (empty = fine), each naming the function, what the code
needs and what the module gives, so test_contract.py can both assert a real deployment is
clean and show that each check catches the defect it guards (on a mutated copy).
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path

from tfrun import Run

ENV_PREFIX = "ICESTREAM_"
# Environment the functions read that is not an icestream knob.
NON_KNOB_ENV = {"RUST_LOG"}


# --------------------------------------------------------------------------- deployment facts


def functions_of(run: Run) -> dict[str, dict]:
    """{role name: aws_lambda_function values} (role = the for_each key: ingest, committer, ...)."""
    out = {}
    for address, values in run.of_type("aws_lambda_function").items():
        out[address.split('["')[1].rstrip('"]')] = values
    return out


def env_of(function: dict) -> dict[str, str]:
    return dict((function.get("environment") or [{}])[0].get("variables") or {})


def policy_of(run: Run, role: str) -> dict:
    return json.loads(run.resources[f'aws_iam_role_policy.function["{role}"]']["policy"])


def tables_touched(run: Run, role: str, pipeline_file: Path | None) -> list[str]:
    """Tables a function touches, from the code's inputs (env, pipeline file, schedules), not
    from the module's locals."""
    fns = functions_of(run)

    def writer_tables(r: str) -> list[str]:
        env = env_of(fns[r]) if r in fns else {}
        if r == "ingest":
            if pipeline_file is None:
                return [env["ICESTREAM_TABLE"], f"{env['ICESTREAM_TABLE']}_dead_letter"]
            # An upsert pipeline with `changelog = true` also writes `<table>_changelog`.
            return [t for p in tomllib.loads(pipeline_file.read_text())["pipeline"] for t in (
                p["table"], f"{p['table']}_dead_letter", *([f"{p['table']}_changelog"] if p.get("mode") == "upsert" and p.get("changelog") else []))]
        return []

    if role in ("ingest", "committer"):
        return writer_tables("ingest")
    # maintenance: every table a schedule names.
    return sorted({json.loads(s["target"][0]["input"])["table"] for s in run.of_type("aws_scheduler_schedule").values()})


# --------------------------------------------------------------------------- IAM evaluation


def _like(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern)


def _condition_holds(condition: dict, context: dict[str, str]) -> bool:
    for operator, keys in condition.items():
        for key, wanted in keys.items():
            wanted = wanted if isinstance(wanted, list) else [wanted]
            if key not in context:
                return False
            value = context[key]
            if operator in ("StringEquals", "ArnEquals"):
                ok = value in wanted
            elif operator in ("StringLike", "ArnLike"):
                ok = any(_like(w, value) for w in wanted)
            elif operator == "Bool":
                ok = value.lower() in [str(w).lower() for w in wanted]
            else:
                return False  # an operator this evaluator does not know: treat as unmet
            if not ok:
                return False
    return True


def allowed(policy: dict, action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether an identity policy (Allow statements only) allows `action` on `resource`. Every
    call the code makes goes through the AWS SDK, over TLS (`aws:SecureTransport`)."""
    context = {"aws:SecureTransport": "true", **context}
    for statement in policy["Statement"]:
        if statement.get("Effect") != "Allow":
            continue
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if not any(_like(a.lower(), action.lower()) for a in actions):
            continue
        if not any(_like(r, resource) for r in resources):
            continue
        if _condition_holds(statement.get("Condition", {}), context):
            return True
    return False


def _requests(run: Run, role: str, resource_kind: str, condition: dict | None, pipeline_file: Path | None):
    """(resource ARN, request context) of each concrete request a call of this kind makes."""
    fns = functions_of(run)
    env = env_of(fns[role])
    namespace = env["ICESTREAM_NAMESPACE"]
    warehouse = env["ICESTREAM_WAREHOUSE"]
    region, account = "eu-west-1", "123456789012"  # tests/mocks/aws.tfmock.hcl
    tables = tables_touched(run, role, pipeline_file)
    if resource_kind == "glue-tables":
        yield f"arn:aws:glue:{region}:{account}:catalog", {}
        yield f"arn:aws:glue:{region}:{account}:database/{namespace}", {}
        for t in tables:
            yield f"arn:aws:glue:{region}:{account}:table/{namespace}/{t}", {}
        return
    if resource_kind in ("warehouse-bucket", "table-objects", "table-metadata-objects", "table-staged-objects"):
        bucket, _, prefix = warehouse.removeprefix("s3://").partition("/")
        if resource_kind == "warehouse-bucket":
            if condition is None:
                yield f"arn:aws:s3:::{bucket}", {}
            else:
                for t in tables:
                    yield f"arn:aws:s3:::{bucket}", {condition["key"]: f"{prefix}/{namespace}.db/{t}/"}
            return
        sub = {"table-objects": "data/00000-x.parquet", "table-metadata-objects": "metadata/00001-x.metadata.json",
               "table-staged-objects": "staged/x.avro"}[resource_kind]
        for t in tables:
            yield f"arn:aws:s3:::{bucket}/{prefix}/{namespace}.db/{t}/{sub}", {}
        return
    if resource_kind == "table-bucket":
        # CreateNamespace/CreateTable present the namespace the call names.
        yield warehouse, {"s3tables:namespace": namespace}
        return
    if resource_kind == "table-bucket-tables":
        for t in tables:
            yield f"{warehouse}/table/0a1b2c3d-{t}", {"s3tables:namespace": namespace, "s3tables:tableName": t}
        return
    if resource_kind == "commit-queue":
        url = env.get("ICESTREAM_COMMIT_QUEUE_URL")
        queues = [q for q in run.of_type("aws_sqs_queue").values() if q.get("url") == url]
        assert len(queues) == 1, f"{role}: ICESTREAM_COMMIT_QUEUE_URL {url!r} is not the URL of exactly one queue of the deployment"
        yield queues[0]["arn"], {}
        return
    if resource_kind == "deployment-key":
        yield run.outputs["kms_key_arn"], {}
        return
    if resource_kind == "pipeline-bucket":
        bucket, _, key = env["ICESTREAM_PIPELINES"].removeprefix("s3://").partition("/")
        assert condition is not None and condition["value"] == "pipeline-directory", condition
        yield f"arn:aws:s3:::{bucket}", {condition["key"]: key.rpartition("/")[0] + "/"}
        return
    if resource_kind == "pipeline-files":
        bucket, _, key = env["ICESTREAM_PIPELINES"].removeprefix("s3://").partition("/")
        directory = key.rpartition("/")[0]
        yield f"arn:aws:s3:::{bucket}/{key}", {}
        yield f"arn:aws:s3:::{bucket}/{directory}/schemas/x.proto", {}
        return
    if resource_kind == "glue-schema-registries":
        # GetSchemaVersion by SchemaVersionId (the id in a record's frame) names no registry or
        # schema: IAM authorises it against "*" (awslabs/aws-glue-schema-registry#68).
        if _registry_pipelines(pipeline_file, "glue"):
            yield "*", {}
        return
    if resource_kind in ("failure-bucket", "failure-objects"):
        bucket = run.outputs["recover_uri"].removeprefix("s3://").split("/")[0]
        yield (f"arn:aws:s3:::{bucket}" if resource_kind == "failure-bucket" else f"arn:aws:s3:::{bucket}/aws/lambda/x/0/2026/12/04/x"), {}
        return
    if resource_kind == "glue-optimizer-role":
        # The role the maintenance function hands to Glue's optimizers: the one in its environment.
        yield env["ICESTREAM_GLUE_OPTIMIZER_ROLE_ARN"], {condition["key"]: condition["value"]} if condition else {}
        return
    if resource_kind == "registry-secrets":
        for p in _registry_pipelines(pipeline_file, "confluent"):
            if "registry_secret" in p:
                secret = p["registry_secret"]
                yield secret if secret.startswith("arn:") else f"arn:aws:secretsmanager:{region}:{account}:secret:{secret}-AbC123", {}
        return
    raise AssertionError(f"contract names a resource kind the check does not know: {resource_kind}")


def _registry_pipelines(pipeline_file: Path | None, registry: str) -> list[dict]:
    """The pipelines of the file (read by a TOML parser, not the module) with this registry."""
    if pipeline_file is None:
        return []
    return [p for p in tomllib.loads(pipeline_file.read_text())["pipeline"] if p.get("registry") == registry]


def iam_problems(run: Run, contract: dict, pipeline_file: Path | None = None) -> list[str]:
    """Every action each function's code can call in this deployment, granted on what it touches."""
    problems = []
    glue = run.outputs["catalog"] == "glue"
    queued = run.outputs.get("commit_queue_url") is not None
    for role, fn in functions_of(run).items():
        applies = {"always": True, "glue": glue, "s3tables": not glue, "queued": queued,
                   "pipeline-file": env_of(fn).get("ICESTREAM_PIPELINES", "").startswith("s3://"),
                   "glue-registry": bool(_registry_pipelines(pipeline_file, "glue")),
                   "registry-secret": any("registry_secret" in p for p in _registry_pipelines(pipeline_file, "confluent")),
                   "failure-bucket": run.outputs.get("recover_uri") is not None,
                   "glue-optimizers": env_of(fn).get("ICESTREAM_GLUE_MAINTENANCE") == "glue"}
        policy = policy_of(run, role)
        for call in contract["functions"][role]["calls"]:
            if not applies[call["when"]]:
                continue
            for resource, context in _requests(run, role, call["resource"], call.get("condition"), pipeline_file):
                for action in call["actions"]:
                    if not allowed(policy, action, resource, context):
                        problems.append(f"{role}: {action} on {resource} {context or ''} is not granted")
    return problems


# --------------------------------------------------------------------------- knobs


def knob_problems(run: Run, contract: dict) -> list[str]:
    """Each function gets every knob it needs and no knob it ignores."""
    problems = []
    for role, fn in functions_of(run).items():
        declared = contract["functions"][role]
        env = env_of(fn)
        given = {k.removeprefix(ENV_PREFIX).lower() for k in env if k.startswith(ENV_PREFIX)}
        for k in sorted(given - set(declared["knobs"])):
            problems.append(f"{role}: gets {ENV_PREFIX}{k.upper()}, which its code never reads")
        for k in sorted(set(declared["knobs"]) - set(declared["optional_knobs"]) - given):
            problems.append(f"{role}: reads knob `{k}` but the module does not set {ENV_PREFIX}{k.upper()}")
        for k in sorted(k for k in env if not k.startswith(ENV_PREFIX) and k not in NON_KNOB_ENV):
            problems.append(f"{role}: environment variable {k} is neither a knob nor one of {sorted(NON_KNOB_ENV)}")
    return problems


# --------------------------------------------------------------------------- metrics


def _metric_problem(where: str, namespace: str, metric: str, dims: dict[str, str], run: Run, contract: dict) -> str | None:
    emf = contract["metrics"]
    if namespace.startswith("AWS/"):
        return None  # AWS's own metrics, not the code's
    if namespace != emf["namespace"]:
        return f"{where}: namespace {namespace!r} is not the code's ({emf['namespace']!r})"
    if sorted(dims) not in [sorted(d) for d in emf["dimensions"]]:
        return f"{where}: dimensions {sorted(dims)} are not a set the code emits ({emf['dimensions']})"
    names = {v["function_name"]: role for role, v in functions_of(run).items()}
    value = dims.get("Function")
    if value not in names:
        return f"{where}: Function = {value!r} is no deployed function name ({sorted(names)}; the code emits ${emf['dimension_value_env']})"
    per_table = emf.get("table_dimension") in dims
    if metric not in (contract["functions"][names[value]]["table_metrics" if per_table else "metrics"] or []):
        return f"{where}: {names[value]} emits no metric {metric!r}" + (" per table" if per_table else "")
    return None


def metric_problems(run: Run, contract: dict) -> list[str]:
    """Every alarm and dashboard metric in a custom namespace is one the code emits."""
    problems = []
    for address, alarm in run.of_type("aws_cloudwatch_metric_alarm").items():
        p = _metric_problem(address, alarm["namespace"], alarm["metric_name"], alarm.get("dimensions") or {}, run, contract)
        problems += [p] if p else []
    for address, dashboard in run.of_type("aws_cloudwatch_dashboard").items():
        for widget in json.loads(dashboard["dashboard_body"])["widgets"]:
            for metric in widget.get("properties", {}).get("metrics", []):
                parts = [m for m in metric if isinstance(m, str)]
                namespace, name, rest = parts[0], parts[1], parts[2:]
                dims = dict(zip(rest[::2], rest[1::2]))
                p = _metric_problem(f"{address} widget {widget['properties'].get('title')!r}", namespace, name, dims, run, contract)
                problems += [p] if p else []
    return problems


# --------------------------------------------------------------------------- committer


def serialisation_problems(run: Run, contract: dict) -> list[str]:
    """The committer's queue, mapping and concurrency serialise one table's commits, and a
    throttle never spends a delivery."""
    if run.outputs.get("commit_queue_url") is None:
        return []
    problems = []
    committer = functions_of(run)["committer"]
    url = env_of(committer)["ICESTREAM_COMMIT_QUEUE_URL"]
    queue = next((q for q in run.of_type("aws_sqs_queue").values() if q.get("url") == url), None)
    if queue is None:
        return [f"committer: ICESTREAM_COMMIT_QUEUE_URL {url!r} is no queue of the deployment"]
    if contract["commit_queue"]["message_group"] != "table":
        problems.append("the code does not group commit requests by table")
    if not queue.get("fifo_queue") or not queue["name"].endswith(".fifo") or not url.endswith(".fifo"):
        problems.append(f"commit queue {queue['name']} is not FIFO: SQS would hand out two batches of one table at once")
    mappings = [m for m in run.of_type("aws_lambda_event_source_mapping").values() if m.get("event_source_arn") == queue["arn"]]
    if len(mappings) != 1:
        return problems + [f"commit queue has {len(mappings)} mappings, not one"]
    mapping = mappings[0]
    cap = (mapping.get("scaling_config") or [{}])[0].get("maximum_concurrency")
    reserved = committer.get("reserved_concurrent_executions")
    if cap is None:
        problems.append("committer mapping has no maximum_concurrency: invocations beyond the function's capacity are throttled")
    elif reserved not in (None, -1) and reserved < cap:
        problems.append(f"committer reserved concurrency {reserved} < mapping maximum concurrency {cap}: throttles spend deliveries")
    if "ReportBatchItemFailures" not in (mapping.get("function_response_types") or []):
        problems.append("committer mapping does not take partial batch responses")
    dlq_arn = json.loads(queue["redrive_policy"])["deadLetterTargetArn"]
    dlq = next(q for q in run.of_type("aws_sqs_queue").values() if q["arn"] == dlq_arn)
    if dlq["message_retention_seconds"] <= queue["message_retention_seconds"]:
        problems.append("commit DLQ keeps messages no longer than the queue: dead-lettered requests expire at once")
    return problems


# --------------------------------------------------------------------------- scoping


def scoping_problems(run: Run, unscopable: set[str]) -> list[str]:
    """The planned function policies: no wildcard action, "*" only for unscopable actions."""
    problems = []
    for role in functions_of(run):
        for statement in policy_of(run, role)["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            problems += [f"{role} {statement.get('Sid')}: wildcard action {a}" for a in actions if "*" in a]
            if "*" in resources and set(actions) - unscopable:
                problems.append(f"{role} {statement.get('Sid')}: resource * for scopable {sorted(set(actions) - unscopable)}")
    return problems
