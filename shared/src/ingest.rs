//! The ingest entry point shared by the Lambda function and `icestream ingest`: one MSK event
//! in; each record routed by its topic to the pipeline that claims it; rows in the pipeline's
//! table, rejects in its dead-letter table, one commit per table.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use iceberg::TableIdent;
use serde::Serialize;

use crate::catalog::Catalogs;
use crate::commit::Watermarks;
use crate::config::{Config, Dedup, FailPoint};
use crate::dead_letter::{DeadLetterBuilder, Reject};
use crate::decode::RecordDecoder;
use crate::catalog_calls::CatalogCalls;
use crate::error::{Error, Result};
use crate::event::{KafkaRecordIn, ParsedEvent, TopicPartition, parse_event};
use crate::pipeline::{Pipeline, PipelineSet, format_name};
use crate::recovery::dead_lettered_offsets;
use crate::sink::{Append, AppendSink};
use crate::tables::lineage;

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
    pub duration_ms: u64,
    /// Bytes of the event's record keys and values (the Kafka payload).
    pub payload_bytes: u64,
    /// Catalog, storage and queue calls of this invocation, and how many were sequential.
    pub round_trips: CatalogCalls,
}

/// One pipeline's tables as loaded at start: where rows go and in which Arrow layout.
struct PipelineTables {
    data: TableIdent,
    dead_letter: TableIdent,
    /// The table's columns in its own order (lineage included).
    data_schema: SchemaRef,
    /// The columns the decoder fills: the table's, lineage left out, in table order.
    decoded_schema: SchemaRef,
    dead_letter_schema: SchemaRef,
}

/// Config, catalog and pipelines: built once per process, reused per invocation.
pub struct IngestPipeline {
    config: Config,
    catalogs: Catalogs,
    sink: AppendSink,
    set: PipelineSet,
    tables: Vec<PipelineTables>,
}

impl IngestPipeline {
    /// Load the pipelines, connect to the catalog, create missing tables and check that every
    /// existing one can take its pipeline's records (refused at start, nothing written).
    pub async fn new(mut config: Config) -> Result<Self> {
        let set = PipelineSet::from_config(&config).await?;
        config.namespace = set.namespace.clone();
        let catalogs = Catalogs::connect(&config).await?;
        let mut tables = Vec::with_capacity(set.pipelines.len());
        for pipeline in &set.pipelines {
            tables.push(open_tables(&catalogs, pipeline).await?);
        }
        let sink = AppendSink::from_config(&config).await;
        Ok(Self { config, catalogs, sink, set, tables })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    pub fn pipelines(&self) -> &PipelineSet {
        &self.set
    }

    /// Handle a raw event (JSON bytes).
    pub async fn handle_json(&self, json: &[u8], deadline: Instant) -> Result<Summary> {
        self.handle(parse_event(json)?, deadline).await
    }

    /// Handle a parsed event: route every topic first (an unclaimed topic fails the invocation
    /// before anything is written), then each pipeline's records in turn.
    pub async fn handle(&self, event: ParsedEvent, deadline: Instant) -> Result<Summary> {
        let started = Instant::now();
        let calls_before = self.catalogs.calls();
        let payload_bytes = event.partitions.values().flatten().map(|r| r.payload_len() as u64).sum();
        let mut summary = Summary { records: event.record_count(), payload_bytes, ..Default::default() };
        let mut routed: BTreeMap<usize, BTreeMap<TopicPartition, Vec<KafkaRecordIn>>> = BTreeMap::new();
        for (tp, records) in event.partitions {
            let index = self.set.route(&tp.topic)?;
            routed.entry(index).or_default().insert(tp, records);
        }
        let mut oldest: Option<i64> = None;
        for (index, partitions) in routed {
            let pipeline_oldest = self.ingest_pipeline(index, &partitions, deadline, &mut summary).await?;
            oldest = match (oldest, pipeline_oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            summary.tables += 1;
        }
        if self.config.fail_point == FailPoint::AfterCommit {
            crate::failpoint::abort("after-commit");
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        summary.max_record_age_ms = oldest.map(|t| (now_ms - t).max(0)).unwrap_or(0);
        summary.duration_ms = started.elapsed().as_millis() as u64;
        summary.round_trips = self.catalogs.calls() - calls_before;
        Ok(summary)
    }

    /// One pipeline's share of the event: decode what its tables do not hold yet, dedup, then
    /// dead letters and rows, one commit each. Returns the oldest record's timestamp.
    async fn ingest_pipeline(
        &self,
        index: usize,
        partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
        deadline: Instant,
        summary: &mut Summary,
    ) -> Result<Option<i64>> {
        let pipeline = &self.set.pipelines[index];
        let tables = &self.tables[index];
        let catalog = self.catalogs.catalog();
        // Watermarks as of now; the commit re-checks them, this only saves decoding replays.
        // Each table is loaded once per invocation, both at once (one round trip, not two).
        let (data_table, dead_letter_table) =
            futures::try_join!(catalog.load_table(&tables.data), catalog.load_table(&tables.dead_letter))?;
        let data_marks = Watermarks::from_properties(data_table.metadata().properties());
        let dead_letter_marks = Watermarks::from_properties(dead_letter_table.metadata().properties());
        let dead_lettered = dead_lettered_offsets(&dead_letter_table, partitions, &data_marks, &dead_letter_marks).await?;

        let decoder = RecordDecoder::new(&pipeline.source, tables.decoded_schema.clone())?;
        let marks = Marks { data: &data_marks, dead_lettered: &dead_lettered };
        let mut decoded = decode_partitions(pipeline, decoder, partitions, &marks, self.now_us())?;
        summary.skipped_replay += decoded.skipped_replay;
        let mut rows = decoded.rows(tables.data_schema.clone())?;
        let rejects = decoded.rejects.finish(tables.dead_letter_schema.clone())?;
        if pipeline.dedup != Dedup::None {
            let (kept, dropped) = crate::dedup::dedup_batch(&rows, &pipeline.key)?;
            rows = kept;
            summary.duplicates += dropped;
        }
        if let (Dedup::Window, Some(event_time)) = (pipeline.dedup, &pipeline.event_time) {
            let (kept, dropped) = crate::window::drop_seen(&data_table, &rows, &pipeline.key, event_time, pipeline.dedup_window_minutes).await?;
            rows = kept;
            summary.duplicates += dropped;
        }

        // Dead letters first: if we crash between the two commits, the replay finds them by
        // the dead-letter watermark and keeps every offset in exactly one table.
        // Queued mode sends a request even with no row left, so the watermarks stay contiguous.
        // Each table was loaded once above: that load starts its commit.
        let appends = [(&tables.dead_letter, dead_letter_table, rejects, false), (&tables.data, data_table, rows, true)];
        for (ident, table, batch, is_data) in appends {
            let commit_started = Instant::now();
            let append = Append { ident, table: Some(table), rows: batch, ranges: &decoded.ranges, oldest_record_ms: decoded.oldest_timestamp_ms };
            let appended = self.sink.append(&self.catalogs, &self.config, append, deadline).await?;
            summary.commit_ms += commit_started.elapsed().as_millis() as u64;
            summary.commit_attempts += appended.commit_attempts;
            summary.files += appended.files;
            summary.bytes += appended.bytes;
            summary.skipped_replay += appended.skipped_replay;
            summary.commit_requests += appended.requests_sent;
            if is_data {
                summary.written += appended.rows;
            } else {
                summary.dead_letter += appended.rows;
            }
            if appended.snapshot_id.is_some() {
                summary.snapshot_id = appended.snapshot_id;
            }
        }
        Ok(decoded.oldest_timestamp_ms)
    }

    fn now_us(&self) -> i64 {
        chrono::Utc::now().timestamp_micros()
    }
}

/// Create the pipeline's tables if missing, and check an existing table can take its rows:
/// the lineage columns are there and every column fits the pipeline's schema (by name).
async fn open_tables(catalogs: &Catalogs, pipeline: &Pipeline) -> Result<PipelineTables> {
    let data = catalogs.ensure_table(&pipeline.def).await?;
    let ident = data.identifier().clone();
    let refuse = |what: String| Error::Config(format!("pipeline `{}` cannot write table {ident}: {what}; nothing was written", pipeline.table));
    let data_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(data.metadata().current_schema())?);
    for name in [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET] {
        if data_schema.field_with_name(name).is_err() {
            return Err(refuse(format!("it has no column {name:?} (icestream keeps Kafka lineage on every row for exactly-once)")));
        }
    }
    let decoded_fields: Vec<_> = data_schema.fields().iter().filter(|f| !is_lineage(f.name())).cloned().collect();
    let decoded_schema = Arc::new(ArrowSchema::new(decoded_fields));
    RecordDecoder::new(&pipeline.source, decoded_schema.clone()).map_err(|e| refuse(e.to_string()))?;
    let dead_letter = catalogs.ensure_table(&pipeline.dead_letter).await?;
    let dead_letter_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(dead_letter.metadata().current_schema())?);
    Ok(PipelineTables { data: ident, dead_letter: dead_letter.identifier().clone(), data_schema, decoded_schema, dead_letter_schema })
}

fn is_lineage(name: &str) -> bool {
    [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET].contains(&name)
}

/// What the tables already hold, as far as decoding needs to know.
pub struct Marks<'a> {
    /// Offsets at or below these are in the pipeline table (or were deliberately dropped).
    pub data: &'a Watermarks,
    /// Offsets past the data watermark that the dead-letter table holds (after a crash between
    /// the two commits).
    pub dead_lettered: &'a HashMap<TopicPartition, HashSet<i64>>,
}

/// One pipeline's records decoded: rows (without lineage yet), rejects, and what was skipped.
pub struct DecodedPartitions {
    decoder: RecordDecoder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    pub rejects: DeadLetterBuilder,
    pub skipped_replay: usize,
    /// First and last offset per topic-partition in the event.
    pub ranges: BTreeMap<TopicPartition, (i64, i64)>,
    pub oldest_timestamp_ms: Option<i64>,
}

impl DecodedPartitions {
    /// The decoded rows with their lineage, in the table's column order.
    pub fn rows(&mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let mut decoded = self.decoder.finish()?.into_iter();
        let (topic, partition, offset): (ArrayRef, ArrayRef, ArrayRef) =
            (Arc::new(self.topic.finish()), Arc::new(self.partition.finish()), Arc::new(self.offset.finish()));
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = match field.name().as_str() {
                lineage::TOPIC => topic.clone(),
                lineage::PARTITION => partition.clone(),
                lineage::OFFSET => offset.clone(),
                _ => decoded.next().ok_or_else(|| Error::Config(format!("decoder returned no column for {:?}", field.name())))?,
            };
            let column = if column.data_type() == field.data_type() { column } else { arrow_cast::cast(&column, field.data_type())? };
            columns.push(column);
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// Decode every record the tables do not hold yet: a record at or below the data watermark,
/// or already dead-lettered, is skipped undecoded (replays cost nothing), so every offset
/// lands in exactly one of the two tables.
pub fn decode_partitions(
    pipeline: &Pipeline,
    decoder: RecordDecoder,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    marks: &Marks<'_>,
    rejected_at_us: i64,
) -> Result<DecodedPartitions> {
    let records: usize = partitions.values().map(Vec::len).sum();
    let mut out = DecodedPartitions {
        decoder,
        topic: StringBuilder::with_capacity(records, records * 16),
        partition: Int32Builder::with_capacity(records),
        offset: Int64Builder::with_capacity(records),
        rejects: DeadLetterBuilder::new(rejected_at_us, format_name(pipeline.format)),
        skipped_replay: 0,
        ranges: BTreeMap::new(),
        oldest_timestamp_ms: None,
    };
    for (tp, records) in partitions {
        if let (Some(first), Some(last)) = (records.first(), records.last()) {
            out.ranges.insert(tp.clone(), (first.offset, last.offset));
        }
        // Looked up once per partition: nothing is allocated per record.
        let dead_lettered = marks.dead_lettered.get(tp);
        for record in records {
            out.oldest_timestamp_ms = Some(out.oldest_timestamp_ms.map_or(record.timestamp_ms, |o| o.min(record.timestamp_ms)));
            if marks.data.covers(tp, record.offset) || dead_lettered.is_some_and(|held| held.contains(&record.offset)) {
                out.skipped_replay += 1;
                continue;
            }
            let value = match (&record.value, &record.value_error) {
                (_, Some(e)) => Err(e.clone()),
                (Some(v), None) => Ok(v.as_slice()),
                (None, None) => Err("value is absent (null)".to_string()),
            };
            match value.and_then(|v| out.decoder.append(v)) {
                Ok(()) => {
                    out.topic.append_value(&tp.topic);
                    out.partition.append_value(tp.partition);
                    out.offset.append_value(record.offset);
                }
                Err(error) => out.rejects.append(Reject::of(tp, record, &error)),
            }
        }
    }
    Ok(out)
}
