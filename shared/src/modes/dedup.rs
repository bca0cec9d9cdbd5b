//! Duplicate suppression on a pipeline's `key` columns.
//!
//! `batch`: within one invocation, keep the first copy, the one with the lowest offset (a
//! producer's re-sends carry the same key at a later offset, so the value first written wins,
//! as `window` keeps the copy the table already holds). `window` (see `window.rs`) also drops keys
//! the table already holds in its recent partitions.
//!
//! Keys of any primitive types are compared as Arrow row-format bytes (`arrow-row`), so one
//! code path serves every schema.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use arrow_array::{ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_select::filter::filter_record_batch;

use crate::base::error::{Error, Result};
use crate::engine::commit::deduped::DedupedOffsets;
use crate::model::event::TopicPartition;
use crate::model::tables::lineage;

/// The key columns of a batch, as comparable rows.
pub struct KeyRows {
    converter: RowConverter,
    rows: Rows,
}

impl KeyRows {
    /// The `key` columns of `batch`, by name.
    pub fn of(batch: &RecordBatch, key: &[String]) -> Result<Self> {
        let columns = key_columns(batch, key)?;
        let converter = RowConverter::new(columns.iter().map(|c| SortField::new(c.data_type().clone())).collect())?;
        let rows = converter.convert_columns(&columns)?;
        Ok(Self { converter, rows })
    }

    /// The key of row `i`, as bytes comparable with other rows of the same key types.
    pub fn key(&self, i: usize) -> &[u8] {
        self.rows.row(i).data()
    }

    /// Convert other columns of the same types (e.g. read back from the table) the same way.
    pub fn convert(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }
}

/// The `key` columns of `batch`, in key order.
pub fn key_columns(batch: &RecordBatch, key: &[String]) -> Result<Vec<ArrayRef>> {
    key.iter()
        .map(|name| {
            batch.column_by_name(name).cloned().ok_or_else(|| Error::Config(format!("dedup: the batch has no key column {name:?}")))
        })
        .collect()
}

/// Keep one row per key: the one delivered first (lowest offset, then partition for a stable
/// choice). Returns the batch and how many rows were dropped.
pub fn dedup_batch(batch: &RecordBatch, key: &[String]) -> Result<(RecordBatch, usize)> {
    if batch.num_rows() < 2 {
        return Ok((batch.clone(), 0));
    }
    let keys = KeyRows::of(batch, key)?;
    let lineage = crate::engine::columns::Columns::new(batch, "dedup batch");
    let (offsets, partitions) = (lineage.i64(lineage::OFFSET)?, lineage.i32(lineage::PARTITION)?);
    let delivery = |row: usize| (offsets.value(row), partitions.value(row));
    let mut best: HashMap<&[u8], usize> = HashMap::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        match best.entry(keys.key(row)) {
            Entry::Vacant(v) => {
                v.insert(row);
            }
            Entry::Occupied(mut o) => {
                if delivery(row) < delivery(*o.get()) {
                    o.insert(row);
                }
            }
        }
    }
    let dropped = batch.num_rows() - best.len();
    if dropped == 0 {
        return Ok((batch.clone(), 0));
    }
    let mut keep = vec![false; batch.num_rows()];
    for row in best.into_values() {
        keep[row] = true;
    }
    Ok((filter_record_batch(batch, &BooleanArray::from(keep))?, dropped))
}

/// The offsets of `before`'s rows that `after` (a filtered copy) no longer has: what dedup
/// dropped, for the table to record ([`crate::engine::commit::deduped`]).
pub fn dropped(before: &RecordBatch, after: &RecordBatch) -> Result<DedupedOffsets> {
    if before.num_rows() == after.num_rows() {
        return Ok(DedupedOffsets::default());
    }
    let lineage_of = |batch: &RecordBatch| -> Result<(StringArray, Int32Array, Int64Array)> {
        let columns = crate::engine::columns::Columns::new(batch, "dedup");
        Ok((columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?))
    };
    let ((topics, partitions, offsets), (kept_topics, kept_partitions, kept_offsets)) = (lineage_of(before)?, lineage_of(after)?);
    // Borrowed from the arrays: only the dropped rows' topics are copied.
    let kept: HashSet<(&str, i32, i64)> =
        (0..after.num_rows()).map(|i| (kept_topics.value(i), kept_partitions.value(i), kept_offsets.value(i))).collect();
    let gone = (0..before.num_rows()).filter(|i| !kept.contains(&(topics.value(*i), partitions.value(*i), offsets.value(*i))));
    Ok(DedupedOffsets::of(
        gone.map(|i| (TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) }, offsets.value(i))),
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    /// Rows of (customer, order, offset): a composite string + long key.
    fn batch(rows: &[(&str, i64, i64)]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("customer", DataType::Utf8, false),
            Field::new("order_id", DataType::Int64, false),
            Field::new(lineage::PARTITION, DataType::Int32, false),
            Field::new(lineage::OFFSET, DataType::Int64, false),
            Field::new(lineage::TOPIC, DataType::Utf8, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int32Array::from(vec![0; rows.len()])),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|_| "t"))),
            ],
        )
        .unwrap()
    }

    #[test]
    fn keeps_the_first_delivery_per_composite_key() {
        let key = ["customer".to_string(), "order_id".to_string()];
        // Out of offset order on purpose: the lowest offset wins, not the first row.
        let (out, dropped) = dedup_batch(&batch(&[("a", 1, 8), ("a", 1, 9), ("a", 2, 6), ("b", 1, 7), ("a", 1, 5)]), &key).unwrap();
        assert_eq!(dropped, 2);
        let mut offsets: Vec<i64> = out.column(3).as_primitive::<Int64Type>().values().to_vec();
        offsets.sort();
        assert_eq!(offsets, [5, 6, 7]);
    }

    #[test]
    fn the_offsets_dedup_dropped_are_named() {
        let key = ["customer".to_string(), "order_id".to_string()];
        let before = batch(&[("a", 1, 8), ("a", 1, 9), ("a", 2, 6), ("b", 1, 7), ("a", 1, 5)]);
        let (after, _) = dedup_batch(&before, &key).unwrap();
        let gone = dropped(&before, &after).unwrap();
        let tp = TopicPartition { topic: "t".into(), partition: 0 };
        assert_eq!(gone.0[&tp], [(8, 9)]);
        assert!(dropped(&after, &after).unwrap().is_empty());
    }

    #[test]
    fn a_missing_key_column_is_named() {
        let e = dedup_batch(&batch(&[("a", 1, 1), ("a", 1, 2)]), &["nope".to_string()]).unwrap_err().to_string();
        assert!(e.contains("\"nope\""), "{e}");
    }
}
