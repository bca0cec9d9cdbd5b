//! The ingest entry point shared by the Lambda function and `icestream ingest`: one MSK event
//! in, rows in `vehicle_telemetry`, rejects in its dead-letter table, one commit per table.

use std::collections::BTreeMap;
use std::time::Instant;

use arrow_schema::SchemaRef;
use serde::Serialize;

use crate::catalog::Catalogs;
use crate::codec::{self, TelemetryBuilder};
use crate::commit::Watermarks;
use crate::config::{Config, Dedup, FailPoint, Source};
use crate::dead_letter::DeadLetterBuilder;
use crate::error::Result;
use crate::event::{ParsedEvent, TopicPartition, parse_event};
use crate::sink::{Append, AppendSink};
use crate::tables::{self, TableDef};

/// What one invocation did; printed as the CLI's last line and logged as metrics.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Records in the event.
    pub records: usize,
    /// Rows committed to the telemetry table.
    pub written: usize,
    /// Rows committed to the dead-letter table.
    pub dead_letter: usize,
    /// Records the tables already held (replays, overlapping re-cuts).
    pub skipped_replay: usize,
    /// Rows dropped as duplicates by `dedup`.
    pub duplicates: usize,
    /// Data files committed, both tables.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// The telemetry table's new snapshot (or the dead-letter table's, if only it changed).
    pub snapshot_id: Option<i64>,
    /// Commit attempts, both tables.
    pub commit_attempts: u32,
    /// Wall time spent committing (planning, staging, swapping, retries), both tables.
    pub commit_ms: u64,
    /// Age of the oldest record at commit time (Kafka timestamp to now), milliseconds; in
    /// queued mode at the time the commit requests were sent (the committer reports the rest).
    pub max_record_age_ms: i64,
    /// Commit requests sent to the commit queue (`commit_mode=queued`).
    pub commit_requests: usize,
    pub duration_ms: u64,
}

/// Config, catalog and table definitions: built once per process, reused per invocation.
pub struct IngestPipeline {
    config: Config,
    catalogs: Catalogs,
    sink: AppendSink,
    telemetry: TableDef,
    telemetry_schema: SchemaRef,
    dead_letter: TableDef,
    dead_letter_schema: SchemaRef,
}

impl IngestPipeline {
    /// Connect to the catalog and create the two tables if they do not exist.
    pub async fn new(config: Config) -> Result<Self> {
        let catalogs = Catalogs::connect(&config).await?;
        let telemetry = tables::vehicle_telemetry(&config.table, &config.compression, config.target_file_size_bytes)?;
        let dead_letter = tables::dead_letter_table(&config.dead_letter_table(), &config.compression)?;
        catalogs.ensure_table(&telemetry).await?;
        catalogs.ensure_table(&dead_letter).await?;
        let sink = AppendSink::from_config(&config).await;
        Ok(Self {
            sink,
            telemetry_schema: telemetry.arrow_schema()?,
            dead_letter_schema: dead_letter.arrow_schema()?,
            config,
            catalogs,
            telemetry,
            dead_letter,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    /// Handle a raw event (JSON bytes).
    pub async fn handle_json(&self, json: &[u8], deadline: Instant) -> Result<Summary> {
        self.handle(parse_event(json)?, deadline).await
    }

    /// Handle a parsed event.
    pub async fn handle(&self, event: ParsedEvent, deadline: Instant) -> Result<Summary> {
        let started = Instant::now();
        let catalog = self.catalogs.catalog();
        let telemetry_ident = self.catalogs.ident(&self.telemetry.name);
        let dead_letter_ident = self.catalogs.ident(&self.dead_letter.name);
        // Watermarks as of now; the commit re-checks them, this only saves decoding replays.
        // Each table is loaded once: the same load starts its commit.
        let telemetry_table = catalog.load_table(&telemetry_ident).await?;
        let dead_letter_table = catalog.load_table(&dead_letter_ident).await?;
        let telemetry_marks = Watermarks::from_properties(telemetry_table.metadata().properties());
        let dead_letter_marks = Watermarks::from_properties(dead_letter_table.metadata().properties());

        let mut summary = Summary { records: event.record_count(), ..Default::default() };
        let decoded = decode_event(&event, self.config.source, &telemetry_marks, &dead_letter_marks, self.now_us());
        summary.skipped_replay = decoded.skipped_replay;
        let mut rows = decoded.rows.finish(self.telemetry_schema.clone())?;
        let rejects = decoded.rejects.finish(self.dead_letter_schema.clone())?;
        match self.config.dedup {
            Dedup::None => {}
            Dedup::Batch | Dedup::Window => {
                let (kept, dropped) = crate::dedup::dedup_batch(&rows)?;
                rows = kept;
                summary.duplicates += dropped;
            }
        }
        if self.config.dedup == Dedup::Window {
            let (kept, dropped) = crate::window::drop_seen(&telemetry_table, &rows, self.config.dedup_window_minutes).await?;
            rows = kept;
            summary.duplicates += dropped;
        }

        // Dead letters first: if we crash between the two commits, the replay re-derives the
        // telemetry rows, and the dead-letter watermark keeps its rows single.
        // Queued mode sends a request even with no row left, so the watermarks stay contiguous.
        let appends = [(&dead_letter_ident, dead_letter_table, rejects, false), (&telemetry_ident, telemetry_table, rows, true)];
        for (ident, table, batch, is_telemetry) in appends {
            let commit_started = Instant::now();
            let append = Append { ident, table: Some(table), rows: batch, ranges: &decoded.ranges, oldest_record_ms: decoded.oldest_timestamp_ms };
            let appended = self.sink.append(&self.catalogs, &self.config, append, deadline).await?;
            summary.commit_ms += commit_started.elapsed().as_millis() as u64;
            summary.commit_attempts += appended.commit_attempts;
            summary.files += appended.files;
            summary.bytes += appended.bytes;
            summary.skipped_replay += appended.skipped_replay;
            summary.commit_requests += appended.requests_sent;
            if is_telemetry {
                summary.written = appended.rows;
            } else {
                summary.dead_letter = appended.rows;
            }
            if appended.snapshot_id.is_some() {
                summary.snapshot_id = appended.snapshot_id;
            }
        }
        if self.config.fail_point == FailPoint::AfterCommit {
            crate::failpoint::abort("after-commit");
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        summary.max_record_age_ms = decoded.oldest_timestamp_ms.map(|t| (now_ms - t).max(0)).unwrap_or(0);
        summary.duration_ms = started.elapsed().as_millis() as u64;
        Ok(summary)
    }

    fn now_us(&self) -> i64 {
        chrono::Utc::now().timestamp_micros()
    }
}

/// An event decoded against the watermarks of the two tables.
pub struct DecodedEvent {
    pub rows: TelemetryBuilder,
    pub rejects: DeadLetterBuilder,
    pub skipped_replay: usize,
    /// First and last offset per topic-partition in the event.
    pub ranges: BTreeMap<TopicPartition, (i64, i64)>,
    pub oldest_timestamp_ms: Option<i64>,
}

/// Decode every record not already held by its destination table. A record both tables'
/// watermarks cover is skipped undecoded; one only the telemetry table covers is still decoded,
/// because it may be a reject the dead-letter table has not received yet (a crash between the
/// two commits).
pub fn decode_event(
    event: &ParsedEvent,
    source: Source,
    telemetry_marks: &Watermarks,
    dead_letter_marks: &Watermarks,
    rejected_at_us: i64,
) -> DecodedEvent {
    let source_name = match source {
        Source::Proto => "proto",
        Source::Avro => "avro",
        Source::Json => "json",
    };
    let mut rows = TelemetryBuilder::with_capacity(event.record_count());
    let mut rejects = DeadLetterBuilder::new(rejected_at_us);
    let mut scratch = TelemetryBuilder::with_capacity(0);
    let mut skipped_replay = 0;
    let mut ranges = BTreeMap::new();
    let mut oldest: Option<i64> = None;
    for (tp, records) in &event.partitions {
        if let (Some(first), Some(last)) = (records.first(), records.last()) {
            ranges.insert(tp.clone(), (first.offset, last.offset));
        }
        for record in records {
            oldest = Some(oldest.map_or(record.timestamp_ms, |o| o.min(record.timestamp_ms)));
            let in_telemetry = telemetry_marks.covers(tp, record.offset);
            let in_dead_letter = dead_letter_marks.covers(tp, record.offset);
            if in_telemetry && in_dead_letter {
                skipped_replay += 1;
                continue;
            }
            let value = match (&record.value, &record.value_error) {
                (_, Some(e)) => Err(e.clone()),
                (Some(v), None) => Ok(v.as_slice()),
                (None, None) => Err("value is absent (null)".to_string()),
            };
            let target = if in_telemetry { &mut scratch } else { &mut rows };
            match value.and_then(|v| codec::decode_into(source, v, target)) {
                Ok(()) if in_telemetry => skipped_replay += 1,
                Ok(()) => rows.append_lineage(&tp.topic, tp.partition, record.offset),
                Err(_) if in_dead_letter => skipped_replay += 1,
                Err(error) => {
                    rejects.append(&tp.topic, tp.partition, record.offset, record.key.as_deref(), record.value.as_deref(), &error, source_name);
                }
            }
        }
    }
    DecodedEvent { rows, rejects, skipped_replay, ranges, oldest_timestamp_ms: oldest }
}
