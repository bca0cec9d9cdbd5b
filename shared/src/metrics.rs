//! One CloudWatch Embedded Metric Format line per invocation: CloudWatch turns it into metrics
//! (namespace `icestream`, dimension `Function`) with no API call from the function.

use serde_json::json;

use crate::ingest::Summary;
use crate::queued::batch::BatchReport;

/// Metric namespace the alarms and dashboard read.
pub const NAMESPACE: &str = "icestream";

/// The EMF JSON line for one invocation of `function`.
pub fn emf_line(function: &str, summary: &Summary) -> String {
    let metrics = [
        ("Records", "Count", summary.records as f64),
        ("Written", "Count", summary.written as f64),
        ("DeadLettered", "Count", summary.dead_letter as f64),
        ("SkippedReplays", "Count", summary.skipped_replay as f64),
        ("Duplicates", "Count", summary.duplicates as f64),
        ("CommitAttempts", "Count", f64::from(summary.commit_attempts)),
        ("CommitTime", "Milliseconds", summary.commit_ms as f64),
        ("Bytes", "Bytes", summary.bytes as f64),
        ("Duration", "Milliseconds", summary.duration_ms as f64),
        ("MaxRecordAge", "Milliseconds", summary.max_record_age_ms as f64),
        ("CommitRequests", "Count", summary.commit_requests as f64),
    ];
    emf_line_of(function, &metrics)
}

/// The EMF JSON line for one committer invocation: per batch, summed over its tables.
pub fn committer_emf_line(report: &BatchReport) -> String {
    let sum = |f: &dyn Fn(&crate::queued::batch::TableCommitReport) -> f64| report.tables.iter().map(f).sum::<f64>();
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
    let mut line = json!({
        "_aws": {
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": metrics.iter().map(|(n, u, _)| json!({"Name": n, "Unit": u})).collect::<Vec<_>>(),
            }],
        },
        "Function": function,
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
        let s = Summary { records: 10, dead_letter: 2, ..Default::default() };
        let v: serde_json::Value = serde_json::from_str(&emf_line("ingest", &s)).unwrap();
        let declared = v["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap();
        for m in declared {
            let name = m["Name"].as_str().unwrap();
            assert!(v[name].is_number(), "{name} declared but missing");
        }
        assert_eq!(v["DeadLettered"], 2.0);
        assert_eq!(v["Function"], "ingest");
    }

    #[test]
    fn committer_line_sums_tables_and_carries_the_record_age() {
        use crate::queued::batch::TableCommitReport;
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
