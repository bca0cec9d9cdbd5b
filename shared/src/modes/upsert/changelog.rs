//! Exactly-once append to a changelog: each change once.
//!
//! A change's identity is the Kafka record that carried it ([`crate::engine::keyed::rank`]): two changes of
//! one key with the same order value (an update and a delete in one `source.ts_ms`) are two
//! rows, and a rebuild ranks them by position as the guarded apply does. Offsets make
//! redeliveries idempotent ([`OffsetAppend`]); a record a batch carries twice is kept once. A
//! change sent again by its producer is another record, at another offset: kept, and ranked
//! above the first, as the guarded apply ranks it.

use std::collections::{BTreeMap, HashSet};

use arrow_array::{BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;
use iceberg::table::Table;

use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::engine::commit::append::OffsetAppend;
use crate::engine::commit::{ChangeSet, Planner};
use crate::engine::keyed::rank::{Position, Rank};
use crate::engine::keyed::tombstones::truncate_update;
use crate::model::config::FailPoint;
use crate::model::event::TopicPartition;
use crate::model::tables::lineage;

/// Appends one batch of changelog rows.
pub struct ChangelogAppend {
    append: OffsetAppend,
    /// Rows dropped as a record the batch carries twice.
    pub duplicates: usize,
    /// The batch's newest truncate: not a row (it has no key), the table property a rebuild
    /// reads ([`crate::engine::keyed::tombstones::TRUNCATED_AT_PROPERTY`]).
    truncate: Option<Rank>,
}

impl ChangelogAppend {
    pub fn new(
        rows: RecordBatch,
        ranges: BTreeMap<TopicPartition, (i64, i64)>,
        compression: &str,
        target_file_size: usize,
    ) -> Result<Self> {
        let (rows, duplicates) = once_per_record(&rows)?;
        Ok(Self { append: OffsetAppend::new(rows, ranges, compression, target_file_size, FailPoint::None), duplicates, truncate: None })
    }

    /// Record the batch's newest truncate with its rows.
    pub fn with_truncate(mut self, rank: Option<Rank>) -> Self {
        self.truncate = rank;
        self
    }

    /// The append's own numbers (rows, files, bytes, replays) as of the last plan.
    pub fn append(&self) -> &OffsetAppend {
        &self.append
    }
}

/// The first row of each Kafka record of `rows`, and how many rows repeated one.
pub fn once_per_record(rows: &RecordBatch) -> Result<(RecordBatch, usize)> {
    let columns = Columns::new(rows, "changelog rows");
    let (topics, partitions, offsets) = (columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?);
    let mut seen = HashSet::with_capacity(rows.num_rows());
    let keep: BooleanArray = (0..rows.num_rows())
        .map(|i| {
            Some(seen.insert(Position { offset: offsets.value(i), partition: partitions.value(i), topic: topics.value(i).to_string() }))
        })
        .collect();
    let kept = filter_record_batch(rows, &keep)?;
    let dropped = rows.num_rows() - kept.num_rows();
    Ok((kept, dropped))
}

impl Planner for ChangelogAppend {
    async fn plan(&mut self, table: &Table, attempt: u32) -> Result<Option<ChangeSet>> {
        let mut planned = self.append.plan(table, attempt).await?;
        if let Some(change) = planned.as_mut() {
            change.properties.extend(truncate_update(table.metadata().properties(), self.truncate.as_ref()));
        }
        Ok(planned)
    }
}
