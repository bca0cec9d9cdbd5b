//! `icestream recover s3://bucket/prefix` and the maintenance input
//! `{"action": "recover", "source": "s3://bucket/prefix"}`: the batches a Kafka event source
//! mapping discarded (bounded retries or record age, with an S3 on-failure destination) ingested
//! into their tables after all, exactly once.
//!
//! What the mapping writes (AWS Lambda developer guide, "Capturing discarded batches for Amazon
//! MSK and self-managed Apache Kafka event sources", S3 destination example): one JSON object
//! per discarded invocation, under `aws/lambda/<mapping UUID>/...` of the bucket, holding
//! `requestContext` (`condition`, e.g. `RetryAttemptsExhausted`), `responseContext`,
//! `KafkaBatchInfo` (batch size, `recordsInfo` per `<topic>-<partition>`) and `payload`: the
//! original invocation event (`eventSource` `aws:kafka` or `SelfManagedKafka`, `records` by
//! topic-partition, base64 keys and values), documented "as an escaped JSON string". We assume:
//! * `payload` is that string, or the event itself as a JSON object (both are read);
//! * an object without `payload` (or `null`) carries metadata only (the SQS/SNS form, or a batch
//!   over the destination's limit): nothing to recover from it, so it is listed, not failed;
//! * objects of any key under the given prefix are such records (the bucket is the mapping's own);
//!   one that is not JSON fails the run naming its key.
//!
//! Exactly once: a discarded batch's offsets are below the watermark once later batches landed,
//! in neither table (a gap the audit shows). Per table, recover takes only the records at or
//! below the watermark that the table, its dead-letter table and its replay marks do not hold
//! yet, decodes them as ingest does and appends them with their offsets marked in
//! `icestream.replayed.<topic>.<partition>` in the same swap ([`crate::services::replay::append_marked`],
//! as dead-letter replays are): the audit counts them as replayed, and a second run finds them
//! marked and adds nothing. Records above the watermark are left (their partition has not moved
//! past them: run again later); records that still do not decode are reported by reason and stay
//! in the bucket for a run after the pipeline is fixed. Upsert tables are not recovered here:
//! an out-of-order change needs the keyed apply (reported, not failed).

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::engine::commit::Watermarks;
use crate::engine::commit::replayed::ReplayedOffsets;
use crate::model::event::{KafkaRecordIn, TopicPartition, parse_event};
use crate::model::pipeline::Pipeline;
use crate::modes::recovery::dead_lettered_offsets;
use crate::services::ingest::{IngestPipeline, PipelineTables};
use crate::services::replay::{append_marked, decode_again};

/// What reading the on-failure bucket calls (`crate::services::deployment`: the maintenance function).
pub const SOURCE_LIST_ACTIONS: &[&str] = &["s3:ListBucket"];
pub const SOURCE_READ_ACTIONS: &[&str] = &["s3:GetObject"];

/// Most objects one run reads: a run that stops here says so, and the next takes the rest
/// (recovered records are marked, so rereading them costs reads, not rows).
pub const MAX_OBJECTS: usize = 10_000;

/// What a recovery did (or, dry, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoverReport {
    pub source: String,
    pub dry_run: bool,
    /// On-failure records read.
    pub objects: usize,
    /// Keys of records without a payload (metadata only), with the mapping's condition.
    pub without_payload: Vec<String>,
    /// Distinct Kafka records found (an offset in two objects counts once).
    pub records: usize,
    /// Records of topics no pipeline claims (or a pattern's whose table was never made), by topic.
    pub unrouted: BTreeMap<String, usize>,
    pub tables: Vec<TableRecovery>,
    /// More than [`MAX_OBJECTS`] objects: the rest wait for the next run.
    pub truncated: bool,
    pub duration_ms: u64,
}

/// One table's share.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableRecovery {
    pub table: String,
    /// Records routed to this table.
    pub matched: usize,
    /// Above the table's watermark: its partition has not moved past them yet. Left alone.
    pub not_committed_yet: usize,
    /// Already held by the table (a recovered record, or a commit that landed before the
    /// invocation failed) or by its dead-letter table. Left alone.
    pub already_held: usize,
    /// Rows appended (dry run: that would be).
    pub recovered: usize,
    /// Records that still do not decode, by reason (kept in the bucket).
    pub still_failing: BTreeMap<String, usize>,
    /// Why the table was not recovered into, if it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub snapshot_id: Option<i64>,
    pub commit_attempts: u32,
}

/// The maintenance function's input for a recovery: `{"action": "recover", "source":
/// "s3://bucket/prefix", "dry_run": false}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoverRequest {
    action: String,
    pub source: String,
    #[serde(default)]
    pub dry_run: bool,
}

impl RecoverRequest {
    /// `Some` for an input whose `action` is `recover` (any other input is maintenance's).
    pub fn from_event(payload: &serde_json::Value) -> Result<Option<Self>> {
        if payload.get("action").and_then(|a| a.as_str()) != Some("recover") {
            return Ok(None);
        }
        let request: Self = serde_json::from_value(payload.clone()).map_err(|e| {
            Error::Event(format!("recover input {{\"action\": \"recover\", \"source\": \"s3://bucket/prefix\", \"dry_run\"}}: {e}"))
        })?;
        debug_assert_eq!(request.action, "recover");
        Ok(Some(request))
    }
}

/// One on-failure record read: the event it held, or `None` for metadata only.
#[derive(Debug)]
pub struct DiscardedBatch {
    pub key: String,
    pub partitions: Option<BTreeMap<TopicPartition, Vec<KafkaRecordIn>>>,
    /// `requestContext.condition`, e.g. `RetryAttemptsExhausted`.
    pub condition: Option<String>,
}

/// Read one on-failure record (see the module doc for the format assumed).
pub fn parse_failure_record(key: &str, bytes: &[u8]) -> Result<DiscardedBatch> {
    let bad = |why: String| Error::Event(format!("on-failure record {key}: {why}"));
    let record: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let object = record.as_object().ok_or_else(|| bad("not a JSON object".into()))?;
    if !object.contains_key("requestContext") && !object.contains_key("KafkaBatchInfo") {
        return Err(bad("neither requestContext nor KafkaBatchInfo: not a Lambda event source mapping's on-failure record".into()));
    }
    let condition = object.get("requestContext").and_then(|c| c.get("condition")).and_then(|c| c.as_str()).map(str::to_string);
    let event = match object.get("payload") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => Some(parse_event(text.as_bytes())),
        Some(event @ serde_json::Value::Object(_)) => Some(parse_event(&serde_json::to_vec(event)?)),
        Some(other) => return Err(bad(format!("payload is neither the event nor a JSON string of it: {other}"))),
    };
    let partitions = event.transpose().map_err(|e| bad(format!("payload: {e}")))?.map(|e| e.partitions);
    Ok(DiscardedBatch { key: key.to_string(), partitions, condition })
}

/// Recover the discarded batches under `source` (`s3://bucket/prefix`, or a local directory
/// holding copies of the objects) into the tables of `pipeline`.
pub async fn recover(pipeline: &IngestPipeline, source: &str, dry_run: bool, deadline: Instant) -> Result<RecoverReport> {
    let started = Instant::now();
    let mut report = RecoverReport { source: source.to_string(), dry_run, ..Default::default() };
    let (objects, truncated) = read_source(source).await?;
    report.truncated = truncated;
    report.objects = objects.len();
    // Every record once, whichever objects repeat it (a batch discarded twice, overlapping cuts).
    let mut records: BTreeMap<TopicPartition, BTreeMap<i64, KafkaRecordIn>> = BTreeMap::new();
    for (key, bytes) in objects {
        let batch = parse_failure_record(&key, &bytes)?;
        let Some(partitions) = batch.partitions else {
            report.without_payload.push(format!("{key} ({})", batch.condition.as_deref().unwrap_or("no condition")));
            continue;
        };
        for (tp, list) in partitions {
            let held = records.entry(tp).or_default();
            for record in list {
                held.entry(record.offset).or_insert(record);
            }
        }
    }
    report.records = records.values().map(BTreeMap::len).sum();

    // Routed as ingest routes (a pattern's topic to the table its template gives it); a topic
    // no pipeline claims, or whose table was never made, is reported (its records stay).
    let set = pipeline.pipelines();
    let mut routed: BTreeMap<(usize, String), BTreeMap<TopicPartition, Vec<KafkaRecordIn>>> = BTreeMap::new();
    for (tp, list) in records {
        let key = match set.route(&tp.topic) {
            Ok(index) => (index, String::new()),
            Err(_) if set.pattern_table(&tp.topic).is_some() => (usize::MAX, tp.topic.clone()),
            Err(_) => {
                *report.unrouted.entry(tp.topic.clone()).or_default() += list.len();
                continue;
            }
        };
        routed.entry(key).or_default().insert(tp, list.into_values().collect());
    }
    for ((index, topic), partitions) in routed {
        let out = match set.pipelines.get(index) {
            Some(spec) => {
                let (spec, tables) = pipeline
                    .pipeline_of(&spec.table)
                    .ok_or_else(|| Error::Invariant(format!("recover: no pipeline writes {}", spec.table)))?;
                recover_table(pipeline, spec, tables, partitions, dry_run, deadline).await?
            }
            None => match pipeline.existing_instance(&topic).await? {
                Some(instance) => recover_table(pipeline, &instance.0, &instance.1, partitions, dry_run, deadline).await?,
                None => {
                    *report.unrouted.entry(topic).or_default() += partitions.values().map(Vec::len).sum::<usize>();
                    continue;
                }
            },
        };
        report.tables.push(out);
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(source, objects = report.objects, records = report.records, "discarded batches recovered");
    Ok(report)
}

async fn recover_table(
    pipeline: &IngestPipeline,
    spec: &Pipeline,
    tables: &PipelineTables,
    mut partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    dry_run: bool,
    deadline: Instant,
) -> Result<TableRecovery> {
    let mut out = TableRecovery { table: tables.data.to_string(), matched: partitions.values().map(Vec::len).sum(), ..Default::default() };
    if spec.upsert.is_some() {
        out.skipped = Some(
            "upsert table: a discarded change needs the keyed apply, which recover does not run; replay the topic's offsets instead".into(),
        );
        return Ok(out);
    }
    let catalog = pipeline.catalogs().catalog();
    let data = catalog.load_table(&tables.data).await?;
    let dead_letter = catalog.load_table(&tables.dead_letter).await?;
    let marks = Watermarks::from_properties(data.metadata().properties());
    let replayed = ReplayedOffsets::from_properties(data.metadata().properties());

    // Above the watermark: not ours to settle yet.
    for (tp, list) in partitions.iter_mut() {
        let before = list.len();
        list.retain(|r| marks.covers(tp, r.offset));
        out.not_committed_yet += before - list.len();
    }
    partitions.retain(|_, list| !list.is_empty());
    // Held by either table (lineage read for exactly these offsets), or marked already.
    let everything = Watermarks(partitions.keys().map(|tp| (tp.clone(), i64::MAX)).collect());
    let none = Watermarks::default();
    let (in_data, in_dead_letters) = futures::try_join!(
        dead_lettered_offsets(&data, &partitions, &none, &everything),
        dead_lettered_offsets(&dead_letter, &partitions, &none, &everything),
    )?;
    for (tp, list) in partitions.iter_mut() {
        let before = list.len();
        let held = |o: i64| {
            replayed.contains(tp, o)
                || in_data.get(tp).is_some_and(|s| s.contains(&o))
                || in_dead_letters.get(tp).is_some_and(|s| s.contains(&o))
        };
        list.retain(|r| !held(r.offset));
        out.already_held += before - list.len();
    }
    partitions.retain(|_, list| !list.is_empty());
    if partitions.is_empty() {
        return Ok(out);
    }
    let decoded = decode_again(spec, tables, &partitions, &data).await?;
    out.still_failing = decoded.still_failing.clone();
    out.recovered = decoded.rows.num_rows();
    if dry_run || decoded.rows.num_rows() == 0 {
        return Ok(out);
    }
    let (appended, outcome) = append_marked(pipeline, data, decoded, deadline).await?;
    out.recovered = appended;
    out.snapshot_id = outcome.snapshot_id;
    out.commit_attempts = outcome.attempts;
    Ok(out)
}

/// The objects under `source`, as (key, bytes), in key order; and whether more were left.
async fn read_source(source: &str) -> Result<(Vec<(String, Vec<u8>)>, bool)> {
    match source.strip_prefix("s3://") {
        Some(rest) => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::Config(format!("recover: {source:?} is not s3://bucket/prefix")));
            }
            read_s3(bucket, prefix).await
        }
        None => read_dir(std::path::Path::new(source)),
    }
}

/// A local copy of the bucket (`aws s3 sync`): every file below the directory.
fn read_dir(root: &std::path::Path) -> Result<(Vec<(String, Vec<u8>)>, bool)> {
    if !root.is_dir() {
        return Err(Error::Config(format!("recover: {} is neither s3://bucket/prefix nor a directory", root.display())));
    }
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let truncated = files.len() > MAX_OBJECTS;
    files.truncate(MAX_OBJECTS);
    let objects = files.into_iter().map(|p| Ok((p.display().to_string(), std::fs::read(&p)?))).collect::<Result<_>>()?;
    Ok((objects, truncated))
}

#[cfg(not(feature = "aws"))]
async fn read_s3(bucket: &str, prefix: &str) -> Result<(Vec<(String, Vec<u8>)>, bool)> {
    Err(Error::not_built(&format!("recover s3://{bucket}/{prefix}"), "aws"))
}

#[cfg(feature = "aws")]
async fn read_s3(bucket: &str, prefix: &str) -> Result<(Vec<(String, Vec<u8>)>, bool)> {
    let sdk = crate::base::aws::sdk_config().await;
    let s3 = aws_sdk_s3::Client::from_conf(crate::base::aws::s3_config(&sdk, None));
    let resource = format!("s3://{bucket}/{prefix}");
    let mut pages = s3.list_objects_v2().bucket(bucket).prefix(prefix).into_paginator().send();
    let mut keys = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| crate::base::aws::error("s3:ListBucket", &resource, e))?;
        keys.extend(page.contents().iter().filter_map(|o| o.key()).filter(|k| !k.ends_with('/')).map(str::to_string));
        if keys.len() > MAX_OBJECTS {
            break;
        }
    }
    let truncated = keys.len() > MAX_OBJECTS;
    keys.truncate(MAX_OBJECTS);
    let mut objects = Vec::with_capacity(keys.len());
    for key in keys {
        let object = format!("s3://{bucket}/{key}");
        let body = s3
            .get_object()
            .bucket(bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| crate::base::aws::error("s3:GetObject", &object, e))?
            .body
            .collect()
            .await
            .map_err(|e| Error::Aws { message: format!("s3:GetObject {object}: reading the body: {e}"), retryable: true })?
            .into_bytes();
        objects.push((object, body.to_vec()));
    }
    Ok((objects, truncated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: &str, offsets: &[i64]) -> serde_json::Value {
        let records: Vec<_> = offsets
            .iter()
            .map(|o| serde_json::json!({"topic": topic, "partition": 0, "offset": o, "timestamp": 1_700_000_000_000i64, "timestampType": "CREATE_TIME", "value": "AA==", "headers": []}))
            .collect();
        serde_json::json!({"eventSource": "aws:kafka", "eventSourceArn": crate::model::event::LOCAL_CLUSTER_ARN, "records": {format!("{topic}-0"): records}})
    }

    fn envelope(payload: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "requestContext": {"requestId": "r", "functionArn": "arn:aws:lambda:eu-west-1:1:function:f", "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": "2026-12-04T00:00:00.000Z",
            "KafkaBatchInfo": {"batchSize": 2, "eventSourceArn": crate::model::event::LOCAL_CLUSTER_ARN, "bootstrapServers": "b:9098", "payloadSize": 10, "recordsInfo": {}},
            "payload": payload,
        }))
        .unwrap()
    }

    #[test]
    fn the_maintenance_input_names_the_source_and_other_actions_are_not_ours() {
        let r = RecoverRequest::from_event(&serde_json::json!({"action": "recover", "source": "s3://b/aws/lambda/"})).unwrap().unwrap();
        assert_eq!((r.source.as_str(), r.dry_run), ("s3://b/aws/lambda/", false));
        assert!(RecoverRequest::from_event(&serde_json::json!({"action": "compact", "table": "t"})).unwrap().is_none());
        assert!(RecoverRequest::from_event(&serde_json::Value::Null).unwrap().is_none());
        let err = RecoverRequest::from_event(&serde_json::json!({"action": "recover"})).unwrap_err().to_string();
        assert!(err.contains("source"), "{err}");
    }

    #[test]
    fn the_payload_is_read_as_an_escaped_string_or_as_the_event() {
        let tp = TopicPartition { topic: "t".into(), partition: 0 };
        for payload in [serde_json::Value::String(event("t", &[5, 6]).to_string()), event("t", &[5, 6])] {
            let batch = parse_failure_record("k", &envelope(payload)).unwrap();
            let partitions = batch.partitions.unwrap();
            assert_eq!(partitions[&tp].iter().map(|r| r.offset).collect::<Vec<_>>(), vec![5, 6]);
            assert_eq!(batch.condition.as_deref(), Some("RetryAttemptsExhausted"));
        }
    }

    #[test]
    fn metadata_only_records_carry_nothing_and_bad_ones_name_their_key() {
        assert!(parse_failure_record("k", &envelope(serde_json::Value::Null)).unwrap().partitions.is_none());
        for (bytes, why) in [
            (b"not json".to_vec(), "not JSON"),
            (b"[1]".to_vec(), "not a JSON object"),
            (b"{\"payload\": \"{}\"}".to_vec(), "not a Lambda event source mapping"),
            (envelope(serde_json::json!(7)), "payload is neither"),
            (envelope(serde_json::Value::String("{\"eventSource\": \"aws:sqs\", \"records\": {}}".into())), "payload: "),
        ] {
            let err = parse_failure_record("aws/lambda/x/1", &bytes).unwrap_err().to_string();
            assert!(err.contains("aws/lambda/x/1") && err.contains(why), "{err}");
        }
    }
}
