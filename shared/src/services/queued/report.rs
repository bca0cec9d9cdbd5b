//! What the committer did with one batch: the SQS partial-batch response and its metrics.

use serde::Serialize;

use crate::services::metrics::{Metered, Metric};

/// What the committer did with one batch; `batch_item_failures` go back to SQS.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BatchReport {
    pub messages: usize,
    /// Message ids to deliver again (SQS partial batch response).
    pub batch_item_failures: Vec<String>,
    /// Those of them deferred for an offset gap (to come again soon, see `commit_gap_retry_s`).
    pub deferred: Vec<String>,
    pub tables: Vec<TableCommitReport>,
    /// Age of the oldest record committed (Kafka timestamp to commit), milliseconds.
    pub max_record_age_ms: i64,
    pub duration_ms: u64,
}

/// One table's share of a batch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableCommitReport {
    pub table: String,
    pub requests: usize,
    pub committed: usize,
    pub trimmed: usize,
    pub dropped: usize,
    pub deferred: usize,
    /// Requests that cannot be committed (unreadable message or staged manifest).
    pub failed: usize,
    pub rows: u64,
    pub files: usize,
    pub bytes: u64,
    pub snapshot_id: Option<i64>,
    pub attempts: u32,
    pub commit_ms: u64,
    pub error: Option<String>,
    /// Offsets moved past with no request bringing them (recorded in the table as open gaps).
    pub gap_offsets_taken: u64,
    /// Offsets of open gaps that late requests brought.
    pub gap_offsets_filled: u64,
}

/// Per batch, summed over its tables.
impl Metered for BatchReport {
    fn function(&self) -> &'static str {
        "committer"
    }

    fn metrics(&self) -> Vec<Metric> {
        let sum = |f: &dyn Fn(&TableCommitReport) -> f64| self.tables.iter().map(f).sum::<f64>();
        vec![
            ("Requests", "Count", self.messages as f64),
            ("RequestsCommitted", "Count", sum(&|t| t.committed as f64)),
            ("RequestsTrimmed", "Count", sum(&|t| t.trimmed as f64)),
            ("RequestsDropped", "Count", sum(&|t| t.dropped as f64)),
            ("RequestsDeferred", "Count", sum(&|t| t.deferred as f64)),
            ("BatchItemFailures", "Count", self.batch_item_failures.len() as f64),
            ("Written", "Count", sum(&|t| t.rows as f64)),
            ("Files", "Count", sum(&|t| t.files as f64)),
            ("Bytes", "Bytes", sum(&|t| t.bytes as f64)),
            ("Snapshots", "Count", sum(&|t| f64::from(u8::from(t.snapshot_id.is_some())))),
            ("CommitAttempts", "Count", sum(&|t| f64::from(t.attempts))),
            ("CommitTime", "Milliseconds", sum(&|t| t.commit_ms as f64)),
            ("MaxRecordAge", "Milliseconds", self.max_record_age_ms as f64),
            ("Duration", "Milliseconds", self.duration_ms as f64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::metrics::emf_lines;

    #[test]
    fn committer_line_sums_tables_and_carries_the_record_age() {
        let t = |committed, snapshot_id| TableCommitReport { committed, snapshot_id, rows: 10, ..Default::default() };
        let report = BatchReport {
            messages: 5,
            batch_item_failures: vec!["m".into()],
            deferred: vec![],
            tables: vec![t(3, Some(1)), t(1, None)],
            max_record_age_ms: 4200,
            duration_ms: 1,
        };
        let v: serde_json::Value = serde_json::from_str(&emf_lines(&report)[0]).unwrap();
        for m in v["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap() {
            assert!(v[m["Name"].as_str().unwrap()].is_number(), "{m}");
        }
        assert_eq!((v["RequestsCommitted"].as_f64(), v["Snapshots"].as_f64()), (Some(4.0), Some(1.0)));
        assert_eq!((v["MaxRecordAge"].as_f64(), v["BatchItemFailures"].as_f64()), (Some(4200.0), Some(1.0)));
    }
}
