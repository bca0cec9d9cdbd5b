//! The on-failure destination: a discarded batch becomes one JSON file shaped like the
//! invocation record the MSK mapping writes to an S3 destination (metadata plus the payload).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::{DateTime, SecondsFormat, Utc};

use super::batch::Batch;

/// Why a batch was discarded (the record's `requestContext.condition`).
#[derive(Debug, Clone, Copy)]
pub enum Condition {
    RetryAttemptsExhausted,
    /// A single record over the payload cap: no invocation can carry it.
    PayloadTooLarge,
}

/// Write the batch's invocation record; returns the file written.
pub fn write_failed_batch(
    dir: &Path,
    function_name: &str,
    batch: &Batch,
    condition: Condition,
    invoke_count: u32,
    error: &str,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("on-failure directory {}", dir.display()))?;
    let now = Utc::now();
    let records_info: serde_json::Map<String, serde_json::Value> = batch
        .records
        .iter()
        .filter_map(|(tp, list)| Some((tp, list.first()?, list.last()?)))
        .map(|(tp, first, last)| {
            (
                tp.to_string(),
                serde_json::json!({
                    "firstRecordOffset": first.offset.to_string(),
                    "firstRecordTimestamp": timestamp(first.timestamp_ms),
                    "lastRecordOffset": last.offset.to_string(),
                    "lastRecordTimestamp": timestamp(last.timestamp_ms),
                }),
            )
        })
        .collect();
    let payload: serde_json::Value = serde_json::from_str(batch.event()).context("the batch's own event JSON")?;
    let record = serde_json::json!({
        "requestContext": {
            "requestId": uuid::Uuid::new_v4().to_string(),
            "functionArn": format!("arn:aws:lambda:us-east-1:123456789012:function:{function_name}"),
            "condition": format!("{condition:?}"),
            "approximateInvokeCount": invoke_count,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": "Unhandled",
            "errorMessage": error,
        },
        "version": "1.0",
        "timestamp": now.to_rfc3339_opts(SecondsFormat::Millis, true),
        "KafkaBatchInfo": {
            "batchSize": batch.count,
            "eventSourceArn": payload.get("eventSourceArn"),
            "bootstrapServers": payload.get("bootstrapServers"),
            "payloadSize": batch.bytes,
            "recordsInfo": records_info,
        },
        "payload": payload,
    });
    let first = batch.records.iter().next().map(|(tp, l)| format!("{tp}-{}", l[0].offset)).unwrap_or_default();
    let path = dir.join(format!("{}-{first}-{}.json", now.format("%Y-%m-%dT%H.%M.%S"), uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, serde_json::to_vec_pretty(&record)?).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn timestamp(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(SecondsFormat::Millis, true)
}
