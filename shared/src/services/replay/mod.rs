//! `icestream dead-letters replay TABLE [since=] [reason=] [dry-run=true]` and the maintenance
//! action `replay-dead-letters`: after a pipeline or schema fix, the dead letters' raw bytes go
//! through the current pipeline's decoding again ([`crate::modes::records::decode_partitions`], the
//! very code ingest runs) and those that now decode are appended to the table with their
//! original lineage, exactly once.
//!
//! Exactly once: the replayed offsets are marked in the table's properties
//! ([`marks::ReplayedOffsets`]) in the same swap as the rows, and every commit attempt drops the
//! rows whose offsets are marked by then. A dead letter is never deleted, so the audit still
//! finds every offset; it counts an offset held by both tables once when the mark names it.
//! Only dead letters at or below the table's or the dead-letter table's watermark are replayed:
//! above both, a batch is still half-committed and its redelivery decides.
//!
//! An upsert pipeline's dead letters go through its guarded apply instead ([`upsert`]).

/// The marks live with the commit machinery, which the guarded apply (below this layer) uses.
pub use crate::engine::commit::replayed as marks;
mod upsert;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::Schema as ArrowSchema;
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::{DataFile, Datum, SchemaRef};
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::decode::RecordDecoder;
use crate::engine::columns::Columns;
use crate::engine::commit::append::target_schema;
use crate::engine::commit::gaps::TakenGaps;
use crate::engine::commit::{ChangeSet, Planner, Watermarks};
use crate::engine::keyed::rank::Rank;
use crate::engine::keyed::tombstones::truncate_update;
use crate::engine::project::project_batch;
use crate::engine::writer::write_data_files_as;
use crate::model::event::{Headers, KafkaRecordIn, TimestampType, TopicPartition};
use crate::model::schema::SourceSchema;
use crate::model::tables::kafka::{self, KafkaColumns};
use crate::model::tables::{dead_letter as col, lineage};
use crate::modes::records::{Marks, decode_partitions};
use crate::modes::writer_plan::WriterPlan;
use crate::services::ingest::IngestPipeline;
use marks::ReplayedOffsets;

/// Which dead letters to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    /// Only dead letters rejected at or after this time (epoch microseconds).
    pub since_us: Option<i64>,
    /// Only dead letters whose reason contains this text.
    pub reason: Option<String>,
}

impl ReplayFilter {
    /// `since`: an RFC 3339 time, or an age such as `90m`, `6h`, `7d` before `now_us`.
    pub fn parse(since: &str, reason: &str, now_us: i64) -> Result<Self> {
        let since_us = match since.trim() {
            "" => None,
            text => Some(parse_since(text, now_us)?),
        };
        let reason = Some(reason.to_string()).filter(|r| !r.is_empty());
        Ok(Self { since_us, reason })
    }
}

fn parse_since(text: &str, now_us: i64) -> Result<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_micros());
    }
    let age = [('m', 60_000_000i64), ('h', 3_600_000_000), ('d', 86_400_000_000)]
        .iter()
        .find_map(|(unit, us)| text.strip_suffix(*unit).map(|n| (n, *us)));
    match age.map(|(n, us)| (n.parse::<i64>(), us)) {
        Some((Ok(n), us)) if n >= 0 => Ok(now_us - n.saturating_mul(us)),
        _ => Err(Error::Config(format!(
            "since={text:?}: allowed are an RFC 3339 time (2026-12-01T10:00:00Z) or an age in minutes, hours or days (90m, 6h, 7d)"
        ))),
    }
}

/// What a replay did (or, dry, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    pub table: String,
    pub dry_run: bool,
    /// Dead letters matching `since` and `reason`.
    pub matched: usize,
    /// Of those, already replayed earlier (marked): left alone.
    pub already_replayed: usize,
    /// Of those, above the table's watermark (their batch is not fully committed yet): left alone.
    pub not_committed_yet: usize,
    /// Rows appended to the table (dry run: that would be); of an upsert table, the changes
    /// replayed through its guarded apply, applied or stale.
    pub replayed: usize,
    /// Upsert tables: keys whose newest replayed change their state already ranked above (a
    /// newer version, a newer delete): marked, not applied.
    pub stale: usize,
    /// Dead letters that still do not decode, by reason.
    pub still_failing: BTreeMap<String, usize>,
    pub snapshot_id: Option<i64>,
    pub commit_attempts: u32,
    pub duration_ms: u64,
}

/// Replay the dead letters of `table` (a pipeline table of `pipeline`) that match `filter`.
pub async fn replay(
    pipeline: &IngestPipeline,
    table: &str,
    filter: &ReplayFilter,
    dry_run: bool,
    deadline: Instant,
) -> Result<ReplayReport> {
    let started = Instant::now();
    let made = match pipeline.pipeline_of(table) {
        Some(_) => None,
        None => pipeline.pattern_pipeline_of(table).await?,
    };
    let (spec, tables) = made.as_deref().map(|(p, t)| (p, t)).or_else(|| pipeline.pipeline_of(table)).ok_or_else(|| {
        let known: Vec<&str> = pipeline.pipelines().pipelines.iter().map(|p| p.table.as_str()).collect();
        Error::Config(format!("dead-letters replay: no pipeline writes table `{table}`; pipeline tables are: {}", known.join(", ")))
    })?;
    let catalog = pipeline.catalogs().catalog();
    let data = catalog.load_table(&tables.data).await?;
    let dead_letter = catalog.load_table(&tables.dead_letter).await?;
    let mut report = ReplayReport { table: tables.data.to_string(), dry_run, ..Default::default() };
    let marks = Watermarks::from_properties(data.metadata().properties());
    // A batch commits its dead letters first, and a batch of dead letters only commits nothing
    // to the data table (direct mode): a dead letter at or below either table's watermark was
    // committed by its batch, whose redelivery skips it as dead-lettered. Counting only the data
    // table's would leave a partition's last dead letters (every record after a producer's
    // schema change) unreplayable until a later record decodes.
    let dead_letter_marks = Watermarks::from_properties(dead_letter.metadata().properties());
    let replayed = ReplayedOffsets::from_properties(data.metadata().properties());

    let mut partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>> = BTreeMap::new();
    for (tp, record) in read_dead_letters(&dead_letter, filter).await? {
        report.matched += 1;
        if !marks.covers(&tp, record.offset) && !dead_letter_marks.covers(&tp, record.offset) {
            report.not_committed_yet += 1;
        } else if replayed.contains(&tp, record.offset) {
            report.already_replayed += 1;
        } else {
            partitions.entry(tp).or_default().push(record);
        }
    }
    for records in partitions.values_mut() {
        records.sort_by_key(|r| r.offset);
        records.dedup_by_key(|r| r.offset);
    }
    if let Some(upsert) = &spec.upsert {
        let tables = pipeline.upsert_tables(spec, upsert, tables);
        report = upsert::replay(pipeline, &tables, &partitions, report, dry_run, deadline).await?;
        report.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(report);
    }
    let decoded = decode_again(spec, tables, &partitions, &data).await?;
    report.still_failing = decoded.still_failing.clone();
    report.replayed = decoded.rows.num_rows();
    if dry_run || decoded.rows.num_rows() == 0 {
        report.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(report);
    }
    let (appended, outcome) = append_marked(pipeline, data, decoded, deadline).await?;
    report.replayed = appended;
    report.snapshot_id = outcome.snapshot_id;
    report.commit_attempts = outcome.attempts;
    report.duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(table = %report.table, replayed = report.replayed, still_failing = report.still_failing.values().sum::<usize>(), "dead letters replayed");
    Ok(report)
}

/// Records decoded again with the current pipeline, for [`append_marked`].
pub(crate) struct Decoded {
    /// Rows in the table's layout, with the records' own lineage.
    pub rows: RecordBatch,
    /// Records that still do not decode, by reason.
    pub still_failing: BTreeMap<String, usize>,
    /// The rows' writer schemas: the commit evolves the table to take them, as ingest's does.
    writers: Vec<Arc<SourceSchema>>,
}

/// Decode `partitions` as ingest decodes them: each record's writer schema (registry frames),
/// the table schema that takes them all (evolved in [`append_marked`]'s commit), the same
/// decoder. Dead-letter replay and `recover` (records a Kafka mapping discarded) share it.
pub(crate) async fn decode_again(
    spec: &crate::model::pipeline::Pipeline,
    tables: &crate::services::ingest::PipelineTables,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    data: &Table,
) -> Result<Decoded> {
    let plan = WriterPlan::new(spec, tables.registry.as_ref(), partitions.values().flatten(), data.metadata(), &[]).await?;
    let data_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&plan.target)?);
    let decoded_fields: Vec<_> =
        data_schema.fields().iter().filter(|f| !crate::model::tables::is_written_by_icestream(f.name())).cloned().collect();
    let writers: Vec<&SourceSchema> = plan.writers.iter().map(|w| w.as_ref()).collect();
    let decoder = RecordDecoder::with_precision(&writers, Arc::new(ArrowSchema::new(decoded_fields)), spec.timestamp_precision)?;
    let nothing_held = (Watermarks::default(), Default::default());
    let held = Marks { data: &nothing_held.0, open_gaps: &Default::default(), dead_letter: None, dead_lettered: &nothing_held.1 };
    let mut decoded = decode_partitions(spec, &plan, decoder, partitions, &held, 0)?;
    let rows = decoded.rows(data_schema)?;
    let rejects = std::mem::replace(&mut decoded.rejects, crate::modes::dead_letter::DeadLetterBuilder::new(0, ""));
    let rejects = rejects.finish(tables.dead_letter_schema.clone())?;
    let mut still_failing = BTreeMap::new();
    count_still_failing(&rejects, &mut still_failing);
    Ok(Decoded { rows, still_failing, writers: plan.writers.clone() })
}

/// Append `decoded` to `data` with its offsets marked replayed ([`marks`]), in one swap; every
/// attempt drops the rows marked by then, so a second run adds nothing. The rows appended.
pub(crate) async fn append_marked(
    pipeline: &IngestPipeline,
    data: Table,
    decoded: Decoded,
    deadline: Instant,
) -> Result<(usize, crate::engine::commit::CommitOutcome)> {
    let mut planner = ReplayAppend::new(decoded.rows, decoded.writers, pipeline.config());
    let outcome = pipeline.catalogs().committer.commit_to(data, deadline, &mut planner).await?;
    Ok((if outcome.committed { planner.planned } else { 0 }, outcome))
}

/// Tally the reasons of the dead letters that still do not decode.
fn count_still_failing(rejects: &RecordBatch, still_failing: &mut BTreeMap<String, usize>) {
    if let Some(reasons) = rejects.column_by_name(col::ERROR) {
        for reason in reasons.as_string::<i32>().iter().flatten() {
            *still_failing.entry(reason.to_string()).or_default() += 1;
        }
    }
}

/// The dead letters matching `filter`, as the Kafka records they were (raw key, value, headers).
async fn read_dead_letters(table: &Table, filter: &ReplayFilter) -> Result<Vec<(TopicPartition, KafkaRecordIn)>> {
    let mut out = Vec::new();
    if table.metadata().current_snapshot().is_none() {
        return Ok(out);
    }
    // The record's headers and timestamp, where the table keeps them (the metadata columns of
    // a replayed row are the record's, as ingest would have written them).
    let current = table.metadata().current_schema();
    let kept: Vec<&str> =
        [col::HEADERS, kafka::TIMESTAMP, kafka::TIMESTAMP_TYPE].into_iter().filter(|n| current.field_by_name(n).is_some()).collect();
    let selected = [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET, col::RAW_KEY, col::RAW_VALUE, col::ERROR, col::REJECTED_AT]
        .into_iter()
        .chain(kept.iter().copied());
    let mut scan = table.scan().select(selected);
    if let Some(since) = filter.since_us {
        scan = scan.with_filter(Reference::new(col::REJECTED_AT).greater_than_or_equal_to(Datum::timestamptz_micros(since)));
    }
    let mut stream = scan.build()?.to_arrow().await?;
    let source = format!("{} scan", table.identifier());
    while let Some(batch) = stream.try_next().await? {
        let columns = Columns::new(&batch, &source).with_schema(table.metadata().current_schema());
        let (topics, partitions, offsets) =
            (columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?);
        let (errors, rejected_at) = (columns.strings(col::ERROR)?, columns.timestamp_micros(col::REJECTED_AT)?);
        let binary = |name| -> Result<arrow_array::LargeBinaryArray> {
            let array = columns.as_type(name, &arrow_schema::DataType::LargeBinary)?;
            Ok(array.as_binary::<i64>().clone())
        };
        let (keys, values) = (binary(col::RAW_KEY)?, binary(col::RAW_VALUE)?);
        let meta = DeadLetterMeta::read(&columns, &kept)?;
        for i in 0..batch.num_rows() {
            // The scan filters by file statistics; check rows exactly.
            if filter.since_us.is_some_and(|s| rejected_at.value(i) < s)
                || filter.reason.as_deref().is_some_and(|r| !errors.value(i).contains(r))
            {
                continue;
            }
            let bytes = |a: &arrow_array::LargeBinaryArray| (!a.is_null(i)).then(|| bytes::Bytes::copy_from_slice(a.value(i)));
            let (timestamp_ms, timestamp_type) = meta.timestamp(i);
            let record = KafkaRecordIn {
                offset: offsets.value(i),
                timestamp_ms,
                timestamp_type,
                key: bytes(&keys),
                value: bytes(&values),
                value_error: None,
                headers: meta.headers(i)?,
                value_schema: None,
            };
            out.push((TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) }, record));
        }
    }
    Ok(out)
}

/// What a dead-letter scan holds of its records' headers and timestamps.
struct DeadLetterMeta {
    headers: Option<arrow_array::MapArray>,
    timestamps: Option<arrow_array::TimestampMicrosecondArray>,
    types: Option<arrow_array::StringArray>,
}

impl DeadLetterMeta {
    fn read(columns: &Columns<'_>, kept: &[&str]) -> Result<Self> {
        let has = |name: &str| kept.contains(&name);
        let cast =
            |name: &str, to: &arrow_schema::DataType| -> Result<arrow_array::ArrayRef> { Ok(arrow_cast::cast(columns.array(name)?, to)?) };
        let micros = arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None);
        Ok(Self {
            headers: if has(col::HEADERS) { columns.array(col::HEADERS)?.as_map_opt().cloned() } else { None },
            timestamps: if has(kafka::TIMESTAMP) { Some(cast(kafka::TIMESTAMP, &micros)?.as_primitive().clone()) } else { None },
            types: if has(kafka::TIMESTAMP_TYPE) {
                Some(cast(kafka::TIMESTAMP_TYPE, &arrow_schema::DataType::Utf8)?.as_string::<i32>().clone())
            } else {
                None
            },
        })
    }

    /// Row `i`'s Kafka timestamp and type; one the dead letter does not keep (a table from
    /// before `kafka_columns`) is "no timestamp", a null `kafka_timestamp`.
    fn timestamp(&self, i: usize) -> (i64, Option<TimestampType>) {
        match self.timestamps.as_ref().filter(|t| t.is_valid(i)) {
            Some(t) => {
                (t.value(i).div_euclid(1000), self.types.as_ref().filter(|t| t.is_valid(i)).and_then(|t| TimestampType::parse(t.value(i))))
            }
            None => (-1, Some(TimestampType::NoTimestampType)),
        }
    }

    fn headers(&self, i: usize) -> Result<Headers> {
        let Some(map) = self.headers.as_ref().filter(|m| m.is_valid(i)) else { return Ok(Headers::default()) };
        let entries = map.value(i);
        let names = arrow_cast::cast(entries.column(0), &arrow_schema::DataType::Utf8)?;
        let values = arrow_cast::cast(entries.column(1), &arrow_schema::DataType::LargeBinary)?;
        let (names, values) = (names.as_string::<i32>(), values.as_binary::<i64>());
        Ok((0..names.len()).map(|j| (names.value(j), if values.is_valid(j) { values.value(j) } else { &[][..] })).collect())
    }
}

/// Appends replayed rows with their marks; every attempt drops the rows marked by then.
struct ReplayAppend {
    rows: RecordBatch,
    /// The rows' writer schemas: the commit evolves the table to take them, as ingest's does.
    writers: Vec<Arc<SourceSchema>>,
    compression: String,
    target_file_size: usize,
    /// The marks and table schema the cached files were written against, the files and their marks.
    cached: Option<(ReplayedOffsets, SchemaRef, Vec<DataFile>, ReplayedOffsets)>,
    /// Rows in the files of the last plan.
    planned: usize,
    /// An upsert changelog's newest replayed truncate, recorded as ingest records it.
    truncate: Option<Rank>,
}

impl ReplayAppend {
    fn new(rows: RecordBatch, writers: Vec<Arc<SourceSchema>>, config: &crate::model::config::Config) -> Self {
        Self {
            rows,
            writers,
            compression: config.compression.clone(),
            target_file_size: config.target_file_size_bytes,
            cached: None,
            planned: 0,
            truncate: None,
        }
    }
}

impl Planner for ReplayAppend {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let current = ReplayedOffsets::from_properties(table.metadata().properties());
        let kafka = KafkaColumns::of(self.rows.schema().fields().iter().map(|f| f.name().as_str()));
        let (schema, evolved, replaced) = target_schema(table, &self.writers, kafka)?;
        crate::modes::sink::refuse_replacing(&replaced, "a dead-letter replay")?;
        let (files, ours) = match &self.cached {
            Some((seen, cached_schema, files, ours)) if *seen == current && cached_schema.as_struct() == schema.as_struct() => {
                (files.clone(), ours.clone())
            }
            _ => {
                let (unmarked, ours) = unmarked_rows(&self.rows, &current)?;
                self.planned = unmarked.num_rows();
                let files = if unmarked.num_rows() == 0 {
                    vec![]
                } else {
                    let layout = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
                    let rows = project_batch(&unmarked, &layout)?;
                    write_data_files_as(table, schema.clone(), &[rows], &self.compression, self.target_file_size).await?
                };
                self.cached = Some((current.clone(), schema, files.clone(), ours.clone()));
                (files, ours)
            }
        };
        // A truncate is no row: recorded even when the rows are all marked (or there are none).
        let truncating = truncate_update(table.metadata().properties(), self.truncate.as_ref());
        if files.is_empty() && truncating.is_empty() {
            self.planned = 0;
            return Ok(None);
        }
        let mut change = ChangeSet::append(files);
        change.schema = evolved;
        change.properties = current.property_updates(&ours);
        change.properties.extend(truncating);
        // Offsets the queued committer moved past and a late request could still bring (a
        // discarded batch's earlier attempt, `recover`): they are here now, so the gap closes.
        let open = TakenGaps::from_properties(table.metadata().properties());
        let mut closed = open.clone();
        for (tp, offsets) in &ours.0 {
            for offset in offsets {
                closed.fill(tp, *offset, *offset);
            }
        }
        change.properties.extend(closed.property_updates(&open, chrono::Utc::now().timestamp_millis()));
        change.summary.insert("icestream.replayed-dead-letters".into(), ours.len().to_string());
        Ok(Some(change))
    }
}

/// The rows whose offsets `marked` does not name yet, and those offsets.
fn unmarked_rows(rows: &RecordBatch, marked: &ReplayedOffsets) -> Result<(RecordBatch, ReplayedOffsets)> {
    let column =
        |name: &str| rows.column_by_name(name).ok_or_else(|| Error::Invariant(format!("replayed rows have no lineage column {name}")));
    let topics = column(lineage::TOPIC)?.as_string::<i32>();
    let partitions = column(lineage::PARTITION)?.as_primitive::<Int32Type>();
    let offsets = column(lineage::OFFSET)?.as_primitive::<Int64Type>();
    let mut ours = ReplayedOffsets::default();
    let mut seen: BTreeSet<(String, i32, i64)> = BTreeSet::new();
    let keep: BooleanArray = (0..rows.num_rows())
        .map(|i| {
            let tp = TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) };
            let offset = offsets.value(i);
            let fresh = !marked.contains(&tp, offset) && seen.insert((tp.topic.clone(), tp.partition, offset));
            if fresh {
                ours.insert(&tp, offset);
            }
            Some(fresh)
        })
        .collect();
    Ok((filter_record_batch(rows, &keep)?, ours))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_an_age_and_names_what_is_allowed() {
        let now = 10 * 86_400_000_000;
        assert_eq!(ReplayFilter::parse("6h", "", now).unwrap().since_us, Some(now - 6 * 3_600_000_000));
        assert_eq!(ReplayFilter::parse("2d", "", now).unwrap().since_us, Some(now - 2 * 86_400_000_000));
        assert_eq!(ReplayFilter::parse("1970-01-01T00:00:01Z", "x", now).unwrap().since_us, Some(1_000_000));
        let f = ReplayFilter::parse("", "avro:", now).unwrap();
        assert_eq!((f.since_us, f.reason.as_deref()), (None, Some("avro:")));
        for bad in ["yesterday", "5", "h", "-3h"] {
            let err = ReplayFilter::parse(bad, "", now).unwrap_err().to_string();
            assert!(err.contains("since=") && err.contains("RFC 3339"), "{bad}: {err}");
        }
    }
}
