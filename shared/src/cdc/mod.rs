//! CDC: bank-account changes from a DMS-like feed (docs/cdc.md). Each batch is
//! appended to the changelog (every change once) and applied to the mirror (one live row per
//! account, guarded by `seq`, deletes kept as tombstones), both exactly once by offsets.
//! Shared by the `cdc` Lambda function and `icestream cdc`.

pub mod change;
pub mod changelog;
pub mod envelope;
mod file_reads;
pub mod keyed;
pub mod key_index;
pub mod key_reader;
pub mod key_tombstones;
pub mod keys;
pub mod layout;
pub mod mirror;
pub mod probe;
pub mod rank;
pub mod registry_envelopes;
pub mod registry_rows;
pub mod rebuild;
pub mod rebuild_keyed;
pub mod simulate;
pub mod tombstones;
pub mod upsert;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_schema::SchemaRef;
use serde::Serialize;

use crate::engine::catalog::Catalogs;
use crate::engine::commit::Watermarks;
use crate::model::config::{CdcFormat, Config, FailPoint};
use crate::modes::dead_letter::{DeadLetterBuilder, Reject};
use crate::base::error::Result;
use crate::model::event::{ParsedEvent, TopicPartition, parse_event};
use crate::modes::sink::{Append, AppendSink};
use crate::model::tables::{self, TableDef};
use change::{ChangelogBuilder, Decoded};
use changelog::ChangelogAppend;
use key_index::KeyIndexCache;
use mirror::{MirrorStats, SourcedChange, mirror_apply};

/// What one invocation did; printed by `icestream cdc` and logged as metrics.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CdcSummary {
    pub records: usize,
    /// Changes decoded (not yet held by the tables).
    pub changes: usize,
    /// DMS control records (no row change).
    pub control: usize,
    pub dead_letter: usize,
    /// Records every table already held (replays, overlapping re-cuts).
    pub skipped_replay: usize,
    /// Rows appended to the changelog.
    pub changelog_written: usize,
    /// Records the event carried twice, kept once in the changelog.
    pub duplicates: usize,
    pub mirror: MirrorStats,
    /// The mirror's new snapshot, if it changed.
    pub snapshot_id: Option<i64>,
    pub files: usize,
    pub commit_attempts: u32,
    pub commit_ms: u64,
    pub max_record_age_ms: i64,
    pub duration_ms: u64,
}

impl CdcSummary {
    /// Metrics for the EMF line.
    pub fn metrics(&self) -> Vec<(&'static str, &'static str, f64)> {
        vec![
            ("Records", "Count", self.records as f64),
            ("Written", "Count", self.changelog_written as f64),
            ("DeadLettered", "Count", self.dead_letter as f64),
            ("SkippedReplays", "Count", self.skipped_replay as f64),
            ("Duplicates", "Count", self.duplicates as f64),
            ("MirrorApplied", "Count", self.mirror.applied as f64),
            ("MirrorStale", "Count", self.mirror.stale as f64),
            ("MirrorDeleteFiles", "Count", self.mirror.delete_files as f64),
            ("MirrorFilesRead", "Count", self.mirror.files_read as f64),
            ("MirrorBytesRead", "Bytes", self.mirror.bytes_read as f64),
            ("MirrorReadRequests", "Count", self.mirror.read_requests as f64),
            ("CommitAttempts", "Count", f64::from(self.commit_attempts)),
            ("CommitTime", "Milliseconds", self.commit_ms as f64),
            ("Duration", "Milliseconds", self.duration_ms as f64),
            ("MaxRecordAge", "Milliseconds", self.max_record_age_ms as f64),
        ]
    }
}

/// Config, catalog and the three tables: built once per process, reused per invocation.
pub struct CdcPipeline {
    config: Config,
    catalogs: Catalogs,
    /// Dead letters follow `commit_mode`. The changelog (its duplicate check reads the table)
    /// and the mirror (guarded apply reads the rows) always commit directly.
    sink: AppendSink,
    changelog: TableDef,
    changelog_schema: SchemaRef,
    mirror: TableDef,
    mirror_schema: SchemaRef,
    dead_letter: TableDef,
    dead_letter_schema: SchemaRef,
    /// The mirror's data files' footers and key page indexes, kept while the process is.
    key_index: Arc<KeyIndexCache>,
}

impl CdcPipeline {
    /// Connect to the catalog and create the tables if they do not exist.
    pub async fn new(config: Config) -> Result<Self> {
        let catalogs = Catalogs::connect(&config).await?;
        let changelog = tables::accounts_changelog(&config.changelog_table, &config.compression, config.target_file_size_bytes)?;
        let mirror = tables::accounts_mirror(&config.mirror_table, &config.compression, config.target_file_size_bytes)?;
        let dead_letter = tables::dead_letter_table(&config.cdc_dead_letter_table(), &config.compression)?;
        for def in [&changelog, &mirror, &dead_letter] {
            catalogs.ensure_table(def).await?;
        }
        Ok(Self {
            sink: AppendSink::from_config(&config).await,
            changelog_schema: changelog.arrow_schema()?,
            mirror_schema: mirror.arrow_schema()?,
            dead_letter_schema: dead_letter.arrow_schema()?,
            key_index: Arc::new(KeyIndexCache::new(config.key_index_cache_bytes)),
            config,
            catalogs,
            changelog,
            mirror,
            dead_letter,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    pub fn mirror_schema(&self) -> SchemaRef {
        self.mirror_schema.clone()
    }

    /// Handle a raw event (JSON bytes).
    pub async fn handle_json(&self, json: &[u8], deadline: Instant) -> Result<CdcSummary> {
        self.handle(parse_event(json)?, deadline).await
    }

    /// Handle a parsed event: dead letters, then the changelog, then the mirror. A crash between
    /// two commits is repaired by the replay: each table skips what its watermarks cover.
    pub async fn handle(&self, event: ParsedEvent, deadline: Instant) -> Result<CdcSummary> {
        let started = Instant::now();
        let catalog = self.catalogs.catalog();
        let idents = [&self.dead_letter, &self.changelog, &self.mirror].map(|d| self.catalogs.ident(&d.name));
        // Each table is loaded once: the same load starts its commit.
        let mut tables = Vec::with_capacity(3);
        for ident in &idents {
            tables.push(catalog.load_table(ident).await?);
        }
        let marks: Vec<Watermarks> = tables.iter().map(|t| Watermarks::from_properties(t.metadata().properties())).collect();
        let [dead_letter_table, changelog_table, mirror_table]: [_; 3] = tables.try_into().map_err(|_| crate::base::error::Error::Invariant("three tables loaded".into()))?;
        let decoded = decode_changes(&event, self.config.cdc_format, &self.config.cdc_order_column, &marks, chrono::Utc::now().timestamp_micros());
        let mut summary = CdcSummary {
            records: event.record_count(),
            changes: decoded.changes.len(),
            control: decoded.control,
            skipped_replay: decoded.skipped_replay,
            ..Default::default()
        };
        let [dead_letter_ident, _, _] = idents;

        let rejects = decoded.rejects.finish(self.dead_letter_schema.clone())?;
        if rejects.num_rows() > 0 {
            let t = Instant::now();
            let append = Append {
                ident: &dead_letter_ident,
                table: Some(dead_letter_table),
                rows: rejects,
                ranges: &decoded.ranges,
                oldest_record_ms: decoded.oldest_timestamp_ms,
                record_times: None,
                writers: vec![],
            };
            let appended = self.sink.append(&self.catalogs, &self.config, append, deadline).await?;
            summary.commit_ms += t.elapsed().as_millis() as u64;
            summary.commit_attempts += appended.commit_attempts;
            summary.dead_letter = appended.rows;
            summary.files += appended.files;
        }

        let rows = decoded.rows.finish(self.changelog_schema.clone())?;
        if rows.num_rows() > 0 {
            let t = Instant::now();
            let mut planner = ChangelogAppend::new(rows, decoded.ranges.clone(), &self.config.compression, self.config.target_file_size_bytes)?;
            let outcome = self.catalogs.committer.commit_to(changelog_table, deadline, &mut planner).await?;
            summary.commit_ms += t.elapsed().as_millis() as u64;
            summary.commit_attempts += outcome.attempts;
            summary.duplicates = planner.duplicates;
            if outcome.committed {
                summary.changelog_written = planner.append().rows_planned;
                summary.files += planner.append().files_planned;
            }
        }
        if self.config.fail_point == FailPoint::AfterCommit {
            crate::base::failpoint::abort("after-commit (changelog committed, mirror not)");
        }

        if !decoded.changes.is_empty() {
            let t = Instant::now();
            let mut planner = mirror_apply(
                &decoded.changes,
                &decoded.ranges,
                self.mirror_schema.clone(),
                &self.config.compression,
                self.config.target_file_size_bytes,
            )?
            .with_key_index(self.key_index.clone());
            let outcome = self.catalogs.committer.commit_to(mirror_table, deadline, &mut planner).await?;
            summary.commit_ms += t.elapsed().as_millis() as u64;
            summary.commit_attempts += outcome.attempts;
            summary.mirror = planner.stats;
            summary.snapshot_id = outcome.snapshot_id;
            if outcome.committed {
                summary.files += summary.mirror.data_files + summary.mirror.delete_files;
            }
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        summary.max_record_age_ms = decoded.oldest_timestamp_ms.map(|t| (now_ms - t).max(0)).unwrap_or(0);
        summary.duration_ms = started.elapsed().as_millis() as u64;
        Ok(summary)
    }
}

/// An event decoded against the watermarks of the dead-letter, changelog and mirror tables.
pub struct DecodedChanges {
    pub changes: Vec<SourcedChange>,
    pub rows: ChangelogBuilder,
    pub rejects: DeadLetterBuilder,
    pub control: usize,
    pub skipped_replay: usize,
    pub ranges: BTreeMap<TopicPartition, (i64, i64)>,
    pub oldest_timestamp_ms: Option<i64>,
}

/// Decode every record some table does not hold yet. `marks`: dead letter, changelog, mirror.
pub fn decode_changes(event: &ParsedEvent, format: CdcFormat, order_column: &str, marks: &[Watermarks], rejected_at_us: i64) -> DecodedChanges {
    let source_name = match format {
        CdcFormat::Csv => "cdc-csv",
        CdcFormat::Dms => "cdc-dms",
    };
    let mut out = DecodedChanges {
        changes: Vec::new(),
        rows: ChangelogBuilder::default(),
        rejects: DeadLetterBuilder::new(rejected_at_us, source_name),
        control: 0,
        skipped_replay: 0,
        ranges: BTreeMap::new(),
        oldest_timestamp_ms: None,
    };
    for (tp, records) in &event.partitions {
        if let (Some(first), Some(last)) = (records.first(), records.last()) {
            out.ranges.insert(tp.clone(), (first.offset, last.offset));
        }
        let shared_tp = Arc::new(tp.clone());
        for record in records {
            out.oldest_timestamp_ms = Some(out.oldest_timestamp_ms.map_or(record.timestamp_ms, |o| o.min(record.timestamp_ms)));
            if marks.iter().all(|m| m.covers(tp, record.offset)) {
                out.skipped_replay += 1;
                continue;
            }
            let value = match (&record.value, &record.value_error) {
                (_, Some(e)) => Err(e.to_string()),
                (Some(v), None) => Ok(&v[..]),
                (None, None) => Err("value is absent (null)".to_string()),
            };
            match value.and_then(|v| change::decode(format, order_column, v)) {
                Ok(Decoded::Control) => out.control += 1,
                Ok(Decoded::Change(change)) => {
                    out.rows.append(&change, &tp.topic, tp.partition, record.offset);
                    out.changes.push(SourcedChange { change, tp: shared_tp.clone(), offset: record.offset });
                }
                Err(_) if marks[0].covers(tp, record.offset) => out.skipped_replay += 1,
                Err(error) => {
                    out.rejects.append(Reject::of(tp, record, &error));
                }
            }
        }
    }
    out
}
