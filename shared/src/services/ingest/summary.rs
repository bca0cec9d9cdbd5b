//! What one ingest invocation did: the CLI's last line and the function's metrics.

use serde::Serialize;

use crate::base::freshness::Freshness;
use crate::engine::catalog_calls::CatalogCalls;
use crate::services::metrics::{Metered, Metric, per_gb};

/// What one invocation did; printed as the CLI's last line and logged as metrics.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Records in the event.
    pub records: usize,
    /// Rows committed to the pipelines' tables.
    pub written: usize,
    /// Rows committed to the dead-letter tables.
    pub dead_letter: usize,
    /// Records the tables already held (replays, overlapping re-cuts).
    pub skipped_replay: usize,
    /// Rows dropped as duplicates by `dedup`.
    pub duplicates: usize,
    /// Kafka tombstones (null values) of append pipelines: skipped, no row and no dead letter
    /// (an append table has no row a tombstone could delete); their offsets still advance the
    /// watermarks.
    pub tombstones: usize,
    /// Data files committed, all tables.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// The last new snapshot of a pipeline table (or of a dead-letter table, if only it changed).
    pub snapshot_id: Option<i64>,
    /// Commit attempts, all tables.
    pub commit_attempts: u32,
    /// Wall time spent committing (planning, staging, swapping, retries), all tables.
    pub commit_ms: u64,
    /// Age of the oldest record at commit time (Kafka timestamp to now), milliseconds; in
    /// queued mode at the time the commit requests were sent (the committer reports the rest).
    pub max_record_age_ms: i64,
    /// Commit requests sent to the commit queue (`commit_mode=queued`).
    pub commit_requests: usize,
    /// Pipeline tables this event fed.
    pub tables: usize,
    /// Records dead-lettered because their writer schema is one the table cannot take.
    pub schema_rejects: usize,
    /// Tables whose schema this event evolved.
    pub schema_changes: usize,
    /// Schema-registry calls made during this event (0 when the cache knew every writer).
    pub registry_calls: u64,
    /// Upsert pipelines: keys whose newest change applied, and keys whose newest change was
    /// older than the table's state (ignored).
    pub upsert_applied: usize,
    pub upsert_stale: usize,
    /// Upsert pipelines: live rows removed by truncates (`allow_truncate`).
    pub upsert_truncated: usize,
    /// Upsert pipelines: data files (and their delete files' bytes) read to find the touched
    /// keys' rows: the read cost of the batch.
    pub key_files_read: usize,
    pub key_bytes_read: u64,
    /// Upsert pipelines: the storage requests (range reads) of that read.
    pub key_read_requests: u64,
    /// Rows appended to `<table>_changelog` tables.
    pub changelog_written: usize,
    /// Per pipeline table: rows, dead letters and freshness at commit (the per-table EMF lines).
    pub table_metrics: Vec<TableMetrics>,
    pub duration_ms: u64,
    /// Bytes of the event's record keys and values (the Kafka payload).
    pub payload_bytes: u64,
    /// Catalog, storage and queue calls of this invocation, and how many were sequential.
    pub round_trips: CatalogCalls,
}

/// One pipeline table's share of an invocation.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TableMetrics {
    pub table: String,
    pub written: usize,
    pub dead_letter: usize,
    /// Ages of the records at the data commit (none when nothing new was committed directly).
    pub freshness: Option<Freshness>,
}

/// The invocation's metrics, and per pipeline table its rows, dead letters, and the records'
/// ages at the commit (p50, p99, max = the oldest record, the newest record) and the commit
/// latency.
impl Metered for Summary {
    fn function(&self) -> &'static str {
        "ingest"
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![
            ("Records", "Count", self.records as f64),
            ("Written", "Count", self.written as f64),
            ("DeadLettered", "Count", self.dead_letter as f64),
            ("SkippedReplays", "Count", self.skipped_replay as f64),
            ("Duplicates", "Count", self.duplicates as f64),
            ("Tombstones", "Count", self.tombstones as f64),
            ("CommitAttempts", "Count", f64::from(self.commit_attempts)),
            ("CommitTime", "Milliseconds", self.commit_ms as f64),
            ("Bytes", "Bytes", self.bytes as f64),
            ("Duration", "Milliseconds", self.duration_ms as f64),
            ("MaxRecordAge", "Milliseconds", self.max_record_age_ms as f64),
            ("CommitRequests", "Count", self.commit_requests as f64),
            ("UpsertApplied", "Count", self.upsert_applied as f64),
            ("UpsertStale", "Count", self.upsert_stale as f64),
            ("KeyFilesRead", "Count", self.key_files_read as f64),
            ("KeyBytesRead", "Bytes", self.key_bytes_read as f64),
            ("KeyReadRequests", "Count", self.key_read_requests as f64),
            ("ChangelogWritten", "Count", self.changelog_written as f64),
            ("PayloadBytes", "Bytes", self.payload_bytes as f64),
            ("Files", "Count", self.files as f64),
            ("FilesPerGB", "Count", per_gb(self.files, self.payload_bytes)),
            ("CatalogCalls", "Count", self.round_trips.catalog() as f64),
            ("StorageReads", "Count", self.round_trips.storage_reads as f64),
            ("StorageWrites", "Count", self.round_trips.storage_writes as f64),
            ("QueueSends", "Count", self.round_trips.queue_sends as f64),
            ("SequentialRoundTrips", "Count", self.round_trips.sequential as f64),
        ]
    }

    fn table_metrics(&self) -> Vec<(String, Vec<Metric>)> {
        self.table_metrics
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
                (t.table.clone(), metrics)
            })
            .collect()
    }
}

impl Summary {
    /// A summary with every per-table figure, for the metric names (`icestream contract`).
    pub fn with_every_figure() -> Self {
        Summary { table_metrics: vec![TableMetrics { freshness: Some(Freshness::default()), ..Default::default() }], ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::metrics::{declared_metrics, emf_lines};

    #[test]
    fn line_declares_every_value_it_carries() {
        let s = Summary { records: 10, dead_letter: 2, key_files_read: 3, key_bytes_read: 4096, ..Default::default() };
        let v: serde_json::Value = serde_json::from_str(&emf_lines(&s)[0]).unwrap();
        let declared = v["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap();
        for m in declared {
            let name = m["Name"].as_str().unwrap();
            assert!(v[name].is_number(), "{name} declared but missing");
        }
        assert_eq!(v["DeadLettered"], 2.0);
        assert_eq!((v["KeyFilesRead"].as_f64(), v["KeyBytesRead"].as_f64()), (Some(3.0), Some(4096.0)), "an upsert batch's read cost");
        assert!(declared_metrics(&emf_lines(&s)[0]).contains(&"DeadLettered".to_string()));
    }
}
