//! Exactly-once append: rows that carry Kafka lineage (`kafka_topic`, `kafka_partition`,
//! `kafka_offset`) are appended together with the offset watermarks they cover.
//!
//! On every attempt the planner looks at the table's watermarks as they are *now*: rows at or
//! below them are dropped (another attempt, a duplicate invocation or an overlapping re-cut
//! batch already committed them). The data files are written once and reused while the
//! watermarks of our partitions stay put; if they moved into our range the remaining rows are
//! written again and the first files are left unreferenced (orphan cleanup removes them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFile, PrimitiveType, Schema, SchemaRef, Type};
use iceberg::table::Table;

use super::deduped::DedupedOffsets;
use super::gaps::TakenGaps;
use super::replace_column::{Rewrite, replace_columns};
use super::{ChangeSet, Planner, Watermarks};
use crate::base::error::{Error, Result};
use crate::base::freshness::{Freshness, RecordTimes};
use crate::engine::project::project_batch;
use crate::engine::writer::write_data_files_as;
use crate::model::config::FailPoint;
use crate::model::event::TopicPartition;
use crate::model::evolve::evolve_for;
use crate::model::schema::SourceSchema;
use crate::model::tables::kafka::KafkaColumns;
use crate::model::tables::lineage;

/// Append rows of one batch with the offsets they cover.
pub struct OffsetAppend {
    rows: RecordBatch,
    /// First and last offset of the event per topic-partition: what this append covers, rows
    /// or not (dead letters and dropped duplicates are covered too).
    ranges: BTreeMap<TopicPartition, (i64, i64)>,
    covers: Watermarks,
    compression: String,
    target_file_size: usize,
    fail_point: FailPoint,
    /// The writer schemas the rows were decoded with: each attempt folds them onto the table's
    /// schema as it is then (evolution re-planned, never replayed blindly).
    writers: Vec<Arc<SourceSchema>>,
    /// The live files rewritten when the commit replaces a column ([`target_schema`]).
    rewrite: Rewrite,
    /// Table watermarks (of our partitions) and the schema the cached files were written for.
    cached: Option<(Vec<Option<i64>>, SchemaRef, Vec<DataFile>, usize)>,
    /// Rows dropped because the table already held them, as of the last plan.
    pub skipped_replay: usize,
    /// Rows in the files of the last plan.
    pub rows_planned: usize,
    /// Data files of the last plan.
    pub files_planned: usize,
    /// Bytes of the data files of the last plan.
    pub bytes_planned: u64,
    /// Kafka timestamps of the records covered: their ages go into the snapshot summary.
    pub record_times: Option<RecordTimes>,
    /// The ages recorded by the last plan.
    pub freshness: Option<Freshness>,
    /// Offsets dedup dropped from the rows: recorded in the table with them.
    deduped: DedupedOffsets,
    started: Instant,
}

impl OffsetAppend {
    pub fn new(
        rows: RecordBatch,
        ranges: BTreeMap<TopicPartition, (i64, i64)>,
        compression: &str,
        target_file_size: usize,
        fail_point: FailPoint,
    ) -> Self {
        let mut covers = Watermarks::default();
        for (tp, (_, last)) in &ranges {
            covers.advance(tp, *last);
        }
        Self {
            rows,
            ranges,
            covers,
            compression: compression.to_string(),
            target_file_size,
            fail_point,
            writers: Vec::new(),
            rewrite: Rewrite::new(compression, target_file_size),
            cached: None,
            skipped_replay: 0,
            rows_planned: 0,
            files_planned: 0,
            bytes_planned: 0,
            record_times: None,
            freshness: None,
            deduped: DedupedOffsets::default(),
            started: Instant::now(),
        }
    }
}

impl OffsetAppend {
    /// Rows decoded with these writer schemas: the commit evolves the table to take them.
    pub fn with_writers(mut self, writers: Vec<Arc<SourceSchema>>) -> Self {
        self.writers = writers;
        self
    }

    /// Offsets dedup dropped from the rows: the commit records them ([`super::deduped`]).
    pub fn with_deduped(mut self, deduped: DedupedOffsets) -> Self {
        self.deduped = deduped;
        self
    }
}

/// The schema `table` must have to take rows of `writers` with the Kafka metadata columns
/// `kafka`: its current one, or the evolved one the commit adds (`Some` in the second place);
/// third, the `long` columns the commit replaces by `double`s (the writers of `schema =
/// "infer"` ask for them): such a commit also rewrites every live file ([`Rewrite`]).
pub fn target_schema(
    table: &Table,
    writers: &[Arc<SourceSchema>],
    kafka: KafkaColumns,
) -> Result<(SchemaRef, Option<Schema>, Vec<String>)> {
    let metadata = table.metadata();
    let mut names: Vec<String> = writers.iter().flat_map(|w| w.replaced_columns().iter().cloned()).collect();
    names.sort();
    names.dedup();
    let mut last = metadata.last_column_id();
    let replaced = replace_columns(metadata.current_schema(), &names, &mut last)?;
    let base = replaced.as_ref().unwrap_or(metadata.current_schema());
    let evolved = evolve_for(base, last, writers, kafka)
        .map_err(|e| Error::Schema(format!("table {} cannot take the batch's rows: {e}", table.identifier())))?;
    let current = metadata.current_schema();
    names.retain(|n| current.field_by_name(n).is_some_and(|f| *f.field_type == Type::Primitive(PrimitiveType::Long)));
    Ok(match evolved.or(replaced) {
        Some(schema) => (Arc::new(schema.clone()), Some(schema), names),
        None => (current.clone(), None, vec![]),
    })
}

/// The rows of `rows` whose offset is above `marks` for their topic-partition. `ranges` (first
/// and last offset per topic-partition of the rows) lets partitions whose watermark does not
/// reach into the range skip the per-row look.
pub fn unseen_rows(rows: &RecordBatch, ranges: &BTreeMap<TopicPartition, (i64, i64)>, marks: &Watermarks) -> Result<RecordBatch> {
    rows_not_held(rows, ranges, marks, &TakenGaps::default())
}

/// [`unseen_rows`], also keeping rows at or below the watermark whose offset lies in one of
/// `gaps` (offsets the queued committer moved past before their request came).
pub fn rows_not_held(
    rows: &RecordBatch,
    ranges: &BTreeMap<TopicPartition, (i64, i64)>,
    marks: &Watermarks,
    gaps: &TakenGaps,
) -> Result<RecordBatch> {
    let relevant: BTreeMap<&TopicPartition, i64> =
        ranges.iter().filter_map(|(tp, (first, _))| marks.get(tp).filter(|w| w >= first).map(|w| (tp, w))).collect();
    if relevant.is_empty() || rows.num_rows() == 0 {
        return Ok(rows.clone());
    }
    let schema = rows.schema();
    let column = |name: &str| -> Result<usize> {
        schema.index_of(name).map_err(|_| Error::Invariant(format!("rows have no lineage column {name}")))
    };
    let topics = rows.column(column(lineage::TOPIC)?).as_string::<i32>();
    let partitions = rows.column(column(lineage::PARTITION)?).as_primitive::<Int32Type>();
    let offsets = rows.column(column(lineage::OFFSET)?).as_primitive::<Int64Type>();
    let keep: BooleanArray = (0..rows.num_rows())
        .map(|i| {
            let (offset, found) =
                (offsets.value(i), relevant.iter().find(|(tp, _)| tp.partition == partitions.value(i) && tp.topic == topics.value(i)));
            Some(found.is_none_or(|(tp, w)| offset > *w || gaps.contains(tp, offset)))
        })
        .collect();
    Ok(filter_record_batch(rows, &keep)?)
}

impl Planner for OffsetAppend {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let marks = Watermarks::from_properties(table.metadata().properties());
        let key: Vec<Option<i64>> = self.covers.0.keys().map(|tp| marks.get(tp)).collect();
        if self.covers.0.iter().all(|(tp, offset)| marks.covers(tp, *offset)) {
            // Everything this append covers is in the table already.
            self.skipped_replay = self.rows.num_rows();
            (self.rows_planned, self.files_planned, self.bytes_planned) = (0, 0, 0);
            return Ok(None);
        }
        // The metadata columns the rows carry: an existing table gains them in this swap.
        let kafka = KafkaColumns::of(self.rows.schema().fields().iter().map(|f| f.name().as_str()));
        let (schema, evolved, replaced) = target_schema(table, &self.writers, kafka)?;
        let (files, kept) = match &self.cached {
            Some((cached_key, cached_schema, files, kept)) if *cached_key == key && cached_schema.as_struct() == schema.as_struct() => {
                (files.clone(), *kept)
            }
            _ => {
                let unseen = unseen_rows(&self.rows, &self.ranges, &marks)?;
                let kept = unseen.num_rows();
                let files = if kept == 0 {
                    vec![]
                } else {
                    let layout = Arc::new(schema_to_arrow_schema(&schema)?);
                    let rows = project_batch(&unseen, &layout)?;
                    write_data_files_as(table, schema.clone(), &[rows], &self.compression, self.target_file_size).await?
                };
                if self.fail_point == FailPoint::AfterWrite {
                    crate::base::failpoint::abort("after-write");
                }
                self.cached = Some((key, schema.clone(), files.clone(), kept));
                (files, kept)
            }
        };
        self.skipped_replay = self.rows.num_rows() - kept;
        self.rows_planned = kept;
        self.files_planned = files.len();
        self.bytes_planned = files.iter().map(|f| f.file_size_in_bytes()).sum();
        if files.is_empty() {
            return Ok(None);
        }
        let mut change = ChangeSet::append(files);
        change.watermarks = self.covers.clone();
        change.properties.extend(DedupedOffsets::from_properties(table.metadata().properties()).property_updates(&self.deduped));
        change.schema = evolved;
        if !replaced.is_empty() {
            self.rewrite.apply(table, &schema, &replaced, &mut change).await?;
        }
        let latency = self.started.elapsed().as_millis() as u64;
        self.freshness = self.record_times.as_ref().and_then(|t| t.at(chrono::Utc::now().timestamp_millis(), latency));
        if let Some(freshness) = &self.freshness {
            change.summary.extend(freshness.summary_properties());
        }
        Ok(Some(change))
    }
}
