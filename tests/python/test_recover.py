"""`icestream recover s3://bucket/prefix` against moto S3 + Glue: a batch the Kafka mapping
discarded to its S3 on-failure destination (bounded retries) is ingested into its table below the
watermark, once, marked replayed so the audit counts it; a second run adds nothing.

The on-failure objects are written as AWS documents them for an S3 destination of an MSK mapping
(requestContext, responseContext, KafkaBatchInfo, and the original event in `payload` as an escaped
JSON string), under aws/lambda/<mapping UUID>/... of the bucket.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from readers import pyiceberg_glue_table
from test_aws_catalogs import BIN, gen, run, summary

pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")

TOPIC = "vehicle-telemetry"


def on_failure_record(event: dict, payload_as_string: bool = True) -> bytes:
    """What an MSK mapping writes to its S3 on-failure destination for a discarded batch."""
    records = [r for rs in event["records"].values() for r in rs]
    info = {f"{TOPIC}-0": {"firstRecordOffset": str(records[0]["offset"]), "lastRecordOffset": str(records[-1]["offset"]),
                           "firstRecordTimestamp": "2026-12-04T00:00:00.000Z", "lastRecordTimestamp": "2026-12-04T00:00:01.000Z"}}
    return json.dumps({
        "requestContext": {"requestId": str(uuid.uuid4()), "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:icestream-ingest",
                           "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0",
        "timestamp": "2026-12-04T00:00:02.000Z",
        "KafkaBatchInfo": {"batchSize": len(records), "eventSourceArn": event["eventSourceArn"], "bootstrapServers": "b-1:9098",
                           "payloadSize": len(json.dumps(event)), "recordsInfo": info},
        "payload": json.dumps(event) if payload_as_string else event,
    }).encode()


def test_a_discarded_batch_is_recovered_below_the_watermark_once(moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    bucket = f"wh-{uuid.uuid4().hex[:10]}"
    failures = f"failures-{uuid.uuid4().hex[:10]}"
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=failures)
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    knobs = ["catalog=glue", f"warehouse=s3://{bucket}/warehouse", f"namespace={ns}", "s3_path_style=true", "source=json"]
    common = ["format=json", "partitions=1", f"topic={TOPIC}"]
    before, exp_before = gen(tmp_path, "before", "records=300", "start_offset=0", "seed=1", *common)
    lost, exp_lost = gen(tmp_path, "lost", "records=200", "start_offset=300", "seed=2", *common)
    after, exp_after = gen(tmp_path, "after", "records=300", "start_offset=500", "seed=3", *common)

    # The mapping retried `lost` until its bound, discarded it to S3 and went on with `after`.
    run(moto_endpoint, "ingest", str(before), *knobs)
    run(moto_endpoint, "ingest", str(after), *knobs)
    audit = json.loads(run(moto_endpoint, "audit", "vehicle_telemetry", *knobs).stdout.splitlines()[-1])
    assert audit["gap_offsets"] == 200, audit

    event = json.loads(lost.read_text())
    prefix = f"aws/lambda/{uuid.uuid4()}/"
    s3.put_object(Bucket=failures, Key=f"{prefix}{TOPIC}-0/2026/12/04/2026-12-04T00.00.02-{uuid.uuid4()}", Body=on_failure_record(event))
    # The same batch discarded twice (a second object, its payload as an object), and a
    # metadata-only record: each record once, the metadata listed.
    s3.put_object(Bucket=failures, Key=f"{prefix}{TOPIC}-0/2026/12/04/2026-12-04T00.00.03-{uuid.uuid4()}", Body=on_failure_record(event, False))
    meta = json.loads(on_failure_record(event))
    meta.pop("payload")
    s3.put_object(Bucket=failures, Key=f"{prefix}{TOPIC}-0/2026/12/04/2026-12-04T00.00.04-meta", Body=json.dumps(meta).encode())

    dry = summary(run(moto_endpoint, "recover", f"s3://{failures}/{prefix}", "dry-run=true", *knobs))
    assert (dry["objects"], dry["records"], dry["tables"][0]["recovered"]) == (3, 200, exp_lost["valid"]), dry
    assert pyiceberg_glue_table(moto_endpoint, ns, "vehicle_telemetry").scan().to_arrow().num_rows == exp_before["valid"] + exp_after["valid"]

    first = summary(run(moto_endpoint, "recover", f"s3://{failures}/{prefix}", *knobs))
    assert len(first["without_payload"]) == 1 and "RetryAttemptsExhausted" in first["without_payload"][0], first
    table_report = first["tables"][0]
    assert (table_report["recovered"], table_report["already_held"], table_report["not_committed_yet"]) == (exp_lost["valid"], 0, 0), first

    again = summary(run(moto_endpoint, "recover", f"s3://{failures}/{prefix}", *knobs))
    assert (again["tables"][0]["recovered"], again["tables"][0]["already_held"]) == (0, 200), again

    table = pyiceberg_glue_table(moto_endpoint, ns, "vehicle_telemetry").scan().to_arrow()
    offsets = table.column("kafka_offset").to_pylist()
    assert table.num_rows == exp_before["valid"] + exp_lost["valid"] + exp_after["valid"] == len(set(offsets))
    assert set(range(300, 500)) <= set(offsets)
    audit = json.loads(run(moto_endpoint, "audit", "vehicle_telemetry", *knobs).stdout.splitlines()[-1])
    assert (audit["verdict"], audit["gap_offsets"], audit["replayed"], audit["duplicate_offsets"]) == ("pass", 0, exp_lost["valid"], 0), audit


def test_records_above_the_watermark_wait_and_unknown_topics_are_reported(moto_endpoint: str, aws_client: Any, tmp_path: Path) -> None:
    bucket = f"wh-{uuid.uuid4().hex[:10]}"
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=bucket)
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    # A pipeline file naming its topic: another topic is claimed by no pipeline.
    schema = Path(__file__).resolve().parents[2] / "shared" / "json" / "vehicle_telemetry.schema.json"
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(f'namespace = "{ns}"\n[[pipeline]]\ntable = "vehicle_telemetry"\ntopics = ["{TOPIC}"]\n'
                         f'format = "json"\nschema = "{schema}"\n')
    knobs = ["catalog=glue", f"warehouse=s3://{bucket}/warehouse", f"namespace={ns}", "s3_path_style=true", f"pipelines={pipelines}"]
    common = ["format=json", "partitions=1"]
    first, _ = gen(tmp_path, "first", "records=50", "start_offset=0", "seed=4", f"topic={TOPIC}", *common)
    # Discarded, and nothing of its partition landed after it: its offsets are above the watermark.
    lost, _ = gen(tmp_path, "lost", "records=40", "start_offset=50", "seed=5", f"topic={TOPIC}", *common)
    other, _ = gen(tmp_path, "other", "records=7", "start_offset=0", "seed=6", "topic=not-a-pipeline-topic", *common)
    run(moto_endpoint, "ingest", str(first), *knobs)
    s3.put_object(Bucket=bucket, Key="failures/aws/lambda/x/a", Body=on_failure_record(json.loads(lost.read_text())))
    s3.put_object(Bucket=bucket, Key="failures/aws/lambda/x/b", Body=on_failure_record(json.loads(other.read_text())))
    report = summary(run(moto_endpoint, "recover", f"s3://{bucket}/failures/", *knobs))
    assert report["unrouted"] == {"not-a-pipeline-topic": 7}, report
    assert (report["tables"][0]["not_committed_yet"], report["tables"][0]["recovered"]) == (40, 0), report
    # Not an on-failure record: named, nothing written.
    s3.put_object(Bucket=bucket, Key="failures/aws/lambda/x/c", Body=b"{\"hello\": 1}")
    out = run(moto_endpoint, "recover", f"s3://{bucket}/failures/", *knobs, check=False)
    assert out.returncode != 0 and "failures/aws/lambda/x/c" in out.stderr, out.stderr
