//! Exactly-once append to a changelog, with duplicate deliveries of one change dropped.
//!
//! Offsets make replays of the same Kafka records idempotent ([`OffsetAppend`]); a change
//! delivered twice (a producer retry: same key and order value at another offset, possibly
//! another partition) is dropped too, within the batch and against what the table holds. The
//! check against the table runs on every commit attempt, so two writers delivering the same
//! change concurrently still commit it once. It reads only files whose order bounds overlap the
//! batch's: the order grows with time, so that is the recent files, whatever the table's size.

use std::collections::{BTreeMap, HashSet};

use arrow_array::{BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::{Datum, PrimitiveType, Type};
use iceberg::table::Table;

use super::key_tombstones::truncate_update;
use super::keys::KeyCodec;
use super::probe::order_values;
use crate::columns::Columns;
use crate::commit::append::OffsetAppend;
use crate::commit::{ChangeSet, Planner, Watermarks};
use crate::config::FailPoint;
use crate::error::Result;
use crate::event::TopicPartition;
use crate::tables::lineage;

/// One change's identity: its key (encoded) and order value.
type ChangeId = (Vec<u8>, i64);

/// Appends one batch of changelog rows.
pub struct ChangelogAppend {
    rows: RecordBatch,
    codec: KeyCodec,
    order: String,
    ranges: BTreeMap<TopicPartition, (i64, i64)>,
    compression: String,
    target_file_size: usize,
    /// The changes dropped as already in the table, and the append of the rest.
    inner: Option<(HashSet<ChangeId>, OffsetAppend)>,
    in_batch_repeats: usize,
    /// Rows dropped as repeats, within the batch or of rows the table holds.
    pub duplicates: usize,
    /// The batch's newest truncate: not a row (it has no key), the table property a rebuild
    /// reads ([`super::key_tombstones::TRUNCATED_AT_PROPERTY`]).
    truncate: Option<i64>,
}

impl ChangelogAppend {
    /// `key`, `order`: the columns that identify a change.
    pub fn new(
        rows: RecordBatch,
        key: &[String],
        order: &str,
        ranges: BTreeMap<TopicPartition, (i64, i64)>,
        compression: &str,
        target_file_size: usize,
    ) -> Result<Self> {
        let codec = KeyCodec::new(&rows.schema(), key)?;
        let (rows, duplicates) = drop_repeats_in_batch(&rows, &codec, order)?;
        Ok(Self {
            rows,
            codec,
            order: order.to_string(),
            ranges,
            compression: compression.to_string(),
            target_file_size,
            inner: None,
            in_batch_repeats: duplicates,
            duplicates,
            truncate: None,
        })
    }

    /// Record the batch's newest truncate position with its rows.
    pub fn with_truncate(mut self, position: Option<i64>) -> Self {
        self.truncate = position;
        self
    }

    /// The append's own numbers (rows, files, bytes, replays) as of the last plan.
    pub fn append(&self) -> Option<&OffsetAppend> {
        self.inner.as_ref().map(|(_, a)| a)
    }
}

/// The identity of each row of `batch`.
fn change_ids(batch: &RecordBatch, codec: &KeyCodec, order: &str, table_schema: Option<&iceberg::spec::Schema>) -> Result<Vec<ChangeId>> {
    let keys = codec.rows(batch, "changelog rows", table_schema)?;
    let mut columns = Columns::new(batch, "changelog rows");
    if let Some(schema) = table_schema {
        columns = columns.with_schema(schema);
    }
    let orders = order_values(&columns, order)?;
    Ok((0..batch.num_rows()).map(|i| (keys.row(i).data().to_vec(), orders.value(i))).collect())
}

/// Keep the first row of each change.
fn drop_repeats_in_batch(rows: &RecordBatch, codec: &KeyCodec, order: &str) -> Result<(RecordBatch, usize)> {
    let ids = change_ids(rows, codec, order, None)?;
    let mut seen = HashSet::with_capacity(rows.num_rows());
    let keep: BooleanArray = ids.into_iter().map(|id| Some(seen.insert(id))).collect();
    let kept = filter_record_batch(rows, &keep)?;
    let dropped = rows.num_rows() - kept.num_rows();
    Ok((kept, dropped))
}

/// `v` as a literal of the order column's type, for the scan filter.
fn order_datum(ty: &Type, v: i64) -> Option<Datum> {
    Some(match ty {
        Type::Primitive(PrimitiveType::Long) => Datum::long(v),
        Type::Primitive(PrimitiveType::Int) => Datum::int(i32::try_from(v).ok()?),
        Type::Primitive(PrimitiveType::Date) => Datum::date(i32::try_from(v).ok()?),
        Type::Primitive(PrimitiveType::Timestamp) => Datum::timestamp_micros(v),
        Type::Primitive(PrimitiveType::Timestamptz) => Datum::timestamptz_micros(v),
        _ => return None,
    })
}

/// Of `changes`, those the table holds.
async fn held_by_table(table: &Table, codec: &KeyCodec, order: &str, changes: &HashSet<ChangeId>) -> Result<HashSet<ChangeId>> {
    let (Some(lo), Some(hi)) = (changes.iter().map(|p| p.1).min(), changes.iter().map(|p| p.1).max()) else {
        return Ok(HashSet::new());
    };
    if table.metadata().current_snapshot().is_none() {
        return Ok(HashSet::new());
    }
    let schema = table.metadata().current_schema();
    let ty = schema.field_by_name(order).map(|f| (*f.field_type).clone());
    let mut columns: Vec<&str> = codec.names().collect();
    columns.push(order);
    let mut scan = table.scan().select(columns);
    if let (Some(lo), Some(hi)) = (ty.as_ref().and_then(|t| order_datum(t, lo)), ty.as_ref().and_then(|t| order_datum(t, hi))) {
        scan = scan.with_filter(Reference::new(order).greater_than_or_equal_to(lo).and(Reference::new(order).less_than_or_equal_to(hi)));
    }
    let mut stream = scan.build()?.to_arrow().await?;
    let mut held = HashSet::new();
    while let Some(batch) = stream.try_next().await? {
        for id in change_ids(&batch, codec, order, Some(schema))? {
            if changes.contains(&id) {
                held.insert(id);
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
        let ids = change_ids(&self.rows, &self.codec, &self.order, None)?;
        let topics = columns.strings(lineage::TOPIC)?;
        let partitions = columns.i32(lineage::PARTITION)?;
        let offsets = columns.i64(lineage::OFFSET)?;
        let fresh: HashSet<ChangeId> = (0..self.rows.num_rows())
            .filter(|&i| {
                let tp = TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) };
                !marks.covers(&tp, offsets.value(i))
            })
            .map(|i| ids[i].clone())
            .collect();
        let held = held_by_table(table, &self.codec, &self.order, &fresh).await?;
        let reuse = matches!(&self.inner, Some((dropped, _)) if *dropped == held);
        if !reuse {
            let keep: BooleanArray = (0..self.rows.num_rows())
                .map(|i| {
                    let tp = TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) };
                    // A covered row stays: the offset append counts it as a replay.
                    Some(marks.covers(&tp, offsets.value(i)) || !held.contains(&ids[i]))
                })
                .collect();
            let rows = filter_record_batch(&self.rows, &keep)?;
            let append = OffsetAppend::new(rows, self.ranges.clone(), &self.compression, self.target_file_size, FailPoint::None);
            self.inner = Some((held, append));
        }
        let (held, append) = self.inner.as_mut().expect("set above");
        let mut planned = append.plan(table, attempt).await?;
        if let Some(change) = planned.as_mut() {
            change.properties.extend(truncate_update(table.metadata().properties(), self.truncate));
        }
        // Repeats of the table's rows, on top of the batch's own.
        self.duplicates = self.in_batch_repeats + held.len();
        Ok(planned)
    }
}
