//! Exactly-once append to the changelog, with duplicate deliveries of one change dropped.
//!
//! Offsets make replays of the same Kafka records idempotent ([`OffsetAppend`]); a change
//! delivered twice (a producer retry: same `account_id` and `seq` at another offset, possibly
//! another partition) is dropped too, within the batch and against what the table holds. The
//! check against the table runs on every commit attempt, so two writers delivering the same
//! change concurrently still commit it once. It reads only files whose `seq` bounds overlap the
//! batch's: `seq` grows with time, so that is the recent files, whatever the table's size.

use std::collections::{BTreeMap, HashSet};

use arrow_array::{BooleanArray, Int64Array, RecordBatch};
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::Datum;
use iceberg::table::Table;

use crate::columns::Columns;
use crate::commit::append::OffsetAppend;
use crate::commit::{ChangeSet, Planner, Watermarks};
use crate::config::FailPoint;
use crate::error::Result;
use crate::event::TopicPartition;
use crate::tables::{cdc as col, lineage};

/// Appends one batch of changelog rows.
pub struct ChangelogAppend {
    rows: RecordBatch,
    ranges: BTreeMap<TopicPartition, (i64, i64)>,
    compression: String,
    target_file_size: usize,
    /// The (account_id, seq) pairs dropped as already in the table, and the append of the rest.
    inner: Option<(HashSet<(i64, i64)>, OffsetAppend)>,
    in_batch_repeats: usize,
    /// Rows dropped as repeats, within the batch or of rows the table holds.
    pub duplicates: usize,
}

impl ChangelogAppend {
    pub fn new(rows: RecordBatch, ranges: BTreeMap<TopicPartition, (i64, i64)>, compression: &str, target_file_size: usize) -> Result<Self> {
        let (rows, duplicates) = drop_repeats_in_batch(&rows)?;
        Ok(Self { rows, ranges, compression: compression.to_string(), target_file_size, inner: None, in_batch_repeats: duplicates, duplicates })
    }

    /// The append's own numbers (rows, files, bytes, replays) as of the last plan.
    pub fn append(&self) -> Option<&OffsetAppend> {
        self.inner.as_ref().map(|(_, a)| a)
    }
}

fn ids_and_seqs(columns: &Columns) -> Result<(Int64Array, Int64Array)> {
    Ok((columns.i64(col::ACCOUNT_ID)?, columns.i64(col::SEQ)?))
}

/// Keep the first row of each (account_id, seq).
fn drop_repeats_in_batch(rows: &RecordBatch) -> Result<(RecordBatch, usize)> {
    let (ids, seqs) = ids_and_seqs(&Columns::new(rows, "changelog batch"))?;
    let mut seen = HashSet::with_capacity(rows.num_rows());
    let keep: BooleanArray = (0..rows.num_rows()).map(|i| Some(seen.insert((ids.value(i), seqs.value(i))))).collect();
    let kept = filter_record_batch(rows, &keep)?;
    let dropped = rows.num_rows() - kept.num_rows();
    Ok((kept, dropped))
}

/// Of `pairs`, those the table holds.
async fn held_by_table(table: &Table, pairs: &HashSet<(i64, i64)>) -> Result<HashSet<(i64, i64)>> {
    let (Some(lo), Some(hi)) = (pairs.iter().map(|p| p.1).min(), pairs.iter().map(|p| p.1).max()) else {
        return Ok(HashSet::new());
    };
    if table.metadata().current_snapshot().is_none() {
        return Ok(HashSet::new());
    }
    let predicate = Reference::new(col::SEQ)
        .greater_than_or_equal_to(Datum::long(lo))
        .and(Reference::new(col::SEQ).less_than_or_equal_to(Datum::long(hi)));
    let scan = table.scan().select([col::ACCOUNT_ID, col::SEQ]).with_filter(predicate).build()?;
    let mut stream = scan.to_arrow().await?;
    let mut held = HashSet::new();
    while let Some(batch) = stream.try_next().await? {
        let columns = Columns::new(&batch, "changelog scan").with_schema(table.metadata().current_schema());
        let (ids, seqs) = ids_and_seqs(&columns)?;
        for i in 0..batch.num_rows() {
            let pair = (ids.value(i), seqs.value(i));
            if pairs.contains(&pair) {
                held.insert(pair);
            }
        }
    }
    Ok(held)
}

impl Planner for ChangelogAppend {
    async fn plan(&mut self, table: &Table, attempt: u32) -> Result<Option<ChangeSet>> {
        // Rows not covered by the watermarks: only those can be repeats of *other* records.
        let marks = Watermarks::from_properties(table.metadata().properties());
        let columns = Columns::new(&self.rows, "changelog batch");
        let (ids, seqs) = ids_and_seqs(&columns)?;
        let topics = columns.strings(lineage::TOPIC)?;
        let partitions = columns.i32(lineage::PARTITION)?;
        let offsets = columns.i64(lineage::OFFSET)?;
        let fresh: HashSet<(i64, i64)> = (0..self.rows.num_rows())
            .filter(|&i| {
                let tp = TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) };
                !marks.covers(&tp, offsets.value(i))
            })
            .map(|i| (ids.value(i), seqs.value(i)))
            .collect();
        let held = held_by_table(table, &fresh).await?;
        let reuse = matches!(&self.inner, Some((dropped, _)) if *dropped == held);
        if !reuse {
            let keep: BooleanArray = (0..self.rows.num_rows())
                .map(|i| {
                    let tp = TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) };
                    // A covered row stays: the offset append counts it as a replay.
                    Some(marks.covers(&tp, offsets.value(i)) || !held.contains(&(ids.value(i), seqs.value(i))))
                })
                .collect();
            let rows = filter_record_batch(&self.rows, &keep)?;
            let append = OffsetAppend::new(rows, self.ranges.clone(), &self.compression, self.target_file_size, FailPoint::None);
            self.inner = Some((held, append));
        }
        let (held, append) = self.inner.as_mut().expect("set above");
        let planned = append.plan(table, attempt).await?;
        // Repeats of the table's rows, on top of the batch's own.
        self.duplicates = self.in_batch_repeats + held.len();
        Ok(planned)
    }
}
