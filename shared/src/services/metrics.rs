//! One CloudWatch Embedded Metric Format line per invocation: CloudWatch turns it into metrics
//! (namespace `icestream`, dimension `Function` = the deployed function's name) with no API
//! call from the function. The lines go to standard output outside `tracing`, so no log filter
//! of ours drops them; Lambda's own log-level filter counts a line without `level` as INFO, so
//! the deployment must not filter application logs above INFO (infra/terraform sets TRACE and
//! filters with RUST_LOG instead).

use serde_json::json;

use crate::services::ingest::Summary;
use crate::services::queued::batch::BatchReport;

/// Metric namespace the alarms and dashboard read.
pub const NAMESPACE: &str = "icestream";

/// The one dimension of every metric.
pub const DIMENSION: &str = "Function";

/// The second dimension of the per-table lines ([`table_emf_lines`]).
pub const TABLE_DIMENSION: &str = "Table";

/// Where the dimension's value comes from under Lambda: the deployed function's name, so two
/// deployments in one account and region keep apart. Outside Lambda (the CLI) it is the
/// function's role name (`ingest`, `committer`).
pub const FUNCTION_NAME_ENV: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// The `Function` dimension value for `function`: the Lambda function name when running there.
fn dimension_value(function: &str) -> String {
    std::env::var(FUNCTION_NAME_ENV).ok().filter(|n| !n.is_empty()).unwrap_or_else(|| function.to_string())
}

/// The EMF JSON line for one invocation of `function`.
pub fn emf_line(function: &str, summary: &Summary) -> String {
    let metrics = [
        ("Records", "Count", summary.records as f64),
        ("Written", "Count", summary.written as f64),
        ("DeadLettered", "Count", summary.dead_letter as f64),
        ("SkippedReplays", "Count", summary.skipped_replay as f64),
        ("Duplicates", "Count", summary.duplicates as f64),
        ("Tombstones", "Count", summary.tombstones as f64),
        ("CommitAttempts", "Count", f64::from(summary.commit_attempts)),
        ("CommitTime", "Milliseconds", summary.commit_ms as f64),
        ("Bytes", "Bytes", summary.bytes as f64),
        ("Duration", "Milliseconds", summary.duration_ms as f64),
        ("MaxRecordAge", "Milliseconds", summary.max_record_age_ms as f64),
        ("CommitRequests", "Count", summary.commit_requests as f64),
        ("UpsertApplied", "Count", summary.upsert_applied as f64),
        ("UpsertStale", "Count", summary.upsert_stale as f64),
        ("KeyFilesRead", "Count", summary.key_files_read as f64),
        ("KeyBytesRead", "Bytes", summary.key_bytes_read as f64),
        ("KeyReadRequests", "Count", summary.key_read_requests as f64),
        ("ChangelogWritten", "Count", summary.changelog_written as f64),
        ("PayloadBytes", "Bytes", summary.payload_bytes as f64),
        ("Files", "Count", summary.files as f64),
        ("FilesPerGB", "Count", per_gb(summary.files, summary.payload_bytes)),
        ("CatalogCalls", "Count", summary.round_trips.catalog() as f64),
        ("StorageReads", "Count", summary.round_trips.storage_reads as f64),
        ("StorageWrites", "Count", summary.round_trips.storage_writes as f64),
        ("QueueSends", "Count", summary.round_trips.queue_sends as f64),
        ("SequentialRoundTrips", "Count", summary.round_trips.sequential as f64),
    ];
    emf_line_of(function, &metrics)
}

/// One EMF line per pipeline table an ingest invocation fed (dimensions `Function` and
/// `Table`): rows, dead letters, and the records' ages at the commit (p50, p99, max = the
/// oldest record, the newest record) and the commit latency. The dashboard and the freshness
/// and dead-letter alarms read these.
pub fn table_emf_lines(function: &str, summary: &Summary) -> Vec<String> {
    summary
        .table_metrics
        .iter()
        .map(|t| {
            let mut metrics = vec![("Written", "Count", t.written as f64), ("DeadLettered", "Count", t.dead_letter as f64)];
            if let Some(f) = &t.freshness {
                metrics.extend([
                    ("RecordAgeP50", "Milliseconds", f.age_p50_ms as f64),
                    ("RecordAgeP99", "Milliseconds", f.age_p99_ms as f64),
                    ("RecordAgeMax", "Milliseconds", f.age_max_ms as f64),
                    ("NewestRecordAge", "Milliseconds", f.newest_age_ms as f64),
                    ("CommitLatency", "Milliseconds", f.commit_latency_ms as f64),
                ]);
            }
            let mut line: serde_json::Value = serde_json::from_str(&emf_line_of(function, &metrics)).unwrap_or_default();
            line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = json!([[DIMENSION, TABLE_DIMENSION]]);
            line[TABLE_DIMENSION] = json!(t.table);
            line.to_string()
        })
        .collect()
}

/// `count` per GB (10^9 bytes) of record payload: what the cost model prices files by.
fn per_gb(count: usize, payload_bytes: u64) -> f64 {
    if payload_bytes == 0 { 0.0 } else { count as f64 * 1e9 / payload_bytes as f64 }
}

/// The EMF JSON line for one committer invocation: per batch, summed over its tables.
pub fn committer_emf_line(report: &BatchReport) -> String {
    let sum = |f: &dyn Fn(&crate::services::queued::batch::TableCommitReport) -> f64| report.tables.iter().map(f).sum::<f64>();
    let metrics = [
        ("Requests", "Count", report.messages as f64),
        ("RequestsCommitted", "Count", sum(&|t| t.committed as f64)),
        ("RequestsTrimmed", "Count", sum(&|t| t.trimmed as f64)),
        ("RequestsDropped", "Count", sum(&|t| t.dropped as f64)),
        ("RequestsDeferred", "Count", sum(&|t| t.deferred as f64)),
        ("BatchItemFailures", "Count", report.batch_item_failures.len() as f64),
        ("Written", "Count", sum(&|t| t.rows as f64)),
        ("Files", "Count", sum(&|t| t.files as f64)),
        ("Bytes", "Bytes", sum(&|t| t.bytes as f64)),
        ("Snapshots", "Count", sum(&|t| f64::from(u8::from(t.snapshot_id.is_some())))),
        ("CommitAttempts", "Count", sum(&|t| f64::from(t.attempts))),
        ("CommitTime", "Milliseconds", sum(&|t| t.commit_ms as f64)),
        ("MaxRecordAge", "Milliseconds", report.max_record_age_ms as f64),
        ("Duration", "Milliseconds", report.duration_ms as f64),
    ];
    emf_line_of("committer", &metrics)
}

/// The EMF JSON line for one invocation of `function` with `(name, unit, value)` metrics.
pub fn emf_line_of(function: &str, metrics: &[(&str, &str, f64)]) -> String {
    emf_line_with(&dimension_value(function), metrics)
}

/// The metric names an EMF line declares (the deployment's alarms may use only these).
pub fn declared_metrics(line: &str) -> Vec<String> {
    let parsed: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    let declared = parsed["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().cloned().unwrap_or_default();
    declared.iter().filter_map(|m| m["Name"].as_str().map(str::to_string)).collect()
}

/// The metric names each function's EMF line declares: `{"ingest": [...], "committer": [...], ...}`
/// (maintenance emits none), for `icestream contract`.
pub fn emitted_metrics() -> serde_json::Value {
    json!({
        "ingest": declared_metrics(&emf_line("ingest", &Summary::default())),
        "ingest_per_table": declared_metrics(&table_emf_lines("ingest", &table_metrics_sample())[0]),
        "committer": declared_metrics(&committer_emf_line(&BatchReport::default())),
        "maintenance": [],
    })
}

/// A summary with one table and every per-table figure, for the metric names.
fn table_metrics_sample() -> Summary {
    let freshness = Some(crate::base::freshness::Freshness::default());
    Summary { table_metrics: vec![crate::services::ingest::TableMetrics { freshness, ..Default::default() }], ..Default::default() }
}

fn emf_line_with(dimension: &str, metrics: &[(&str, &str, f64)]) -> String {
    let mut line = json!({
        "_aws": {
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [[DIMENSION]],
                "Metrics": metrics.iter().map(|(n, u, _)| json!({"Name": n, "Unit": u})).collect::<Vec<_>>(),
            }],
        },
        DIMENSION: dimension,
    });
    for (name, _, value) in metrics {
        line[*name] = json!(value);
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_declares_every_value_it_carries() {
        let s = Summary { records: 10, dead_letter: 2, key_files_read: 3, key_bytes_read: 4096, ..Default::default() };
        let v: serde_json::Value = serde_json::from_str(&emf_line("ingest", &s)).unwrap();
        let declared = v["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap();
        for m in declared {
            let name = m["Name"].as_str().unwrap();
            assert!(v[name].is_number(), "{name} declared but missing");
        }
        assert_eq!(v["DeadLettered"], 2.0);
        assert_eq!((v["KeyFilesRead"].as_f64(), v["KeyBytesRead"].as_f64()), (Some(3.0), Some(4096.0)), "an upsert batch's read cost");
        assert!(declared_metrics(&emf_line("ingest", &s)).contains(&"DeadLettered".to_string()));
    }

    #[test]
    fn dimension_is_the_deployed_function_name() {
        let v: serde_json::Value = serde_json::from_str(&emf_line_with("prod-ingest", &[("Records", "Count", 1.0)])).unwrap();
        assert_eq!(v["Function"], "prod-ingest");
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Function"]]));
    }

    #[test]
    fn committer_line_sums_tables_and_carries_the_record_age() {
        use crate::services::queued::batch::TableCommitReport;
        let t = |committed, snapshot_id| TableCommitReport { committed, snapshot_id, rows: 10, ..Default::default() };
        let report = BatchReport {
            messages: 5,
            batch_item_failures: vec!["m".into()],
            deferred: vec![],
            tables: vec![t(3, Some(1)), t(1, None)],
            max_record_age_ms: 4200,
            duration_ms: 1,
        };
        let v: serde_json::Value = serde_json::from_str(&committer_emf_line(&report)).unwrap();
        for m in v["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap() {
            assert!(v[m["Name"].as_str().unwrap()].is_number(), "{m}");
        }
        assert_eq!((v["RequestsCommitted"].as_f64(), v["Snapshots"].as_f64()), (Some(4.0), Some(1.0)));
        assert_eq!((v["MaxRecordAge"].as_f64(), v["BatchItemFailures"].as_f64()), (Some(4200.0), Some(1.0)));
    }
}
