//! The accounts mirror: its changes as rows and deletes of the generic guarded apply
//! ([`super::keyed::KeyedApply`]) with the key `account_id` ordered by `seq`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use serde::Serialize;

use super::change::{Change, Op};
use super::keyed::{KeyedApply, KeyedChanges};
use super::rank::{Position, Rank};
use crate::base::error::Result;
use crate::model::event::TopicPartition;
use crate::model::tables::{cdc as col, lineage};

/// A decoded change and the Kafka record it came from.
#[derive(Debug, Clone)]
pub struct SourcedChange {
    pub change: Change,
    pub tp: Arc<TopicPartition>,
    pub offset: i64,
}

impl SourcedChange {
    /// Rank among changes of one account: `seq`, then the Kafka position ([`super::rank`]).
    pub fn rank(&self) -> Rank {
        Rank::new(self.change.seq, Position::of(&self.tp, self.offset))
    }
}

/// The newest change per account among `changes`.
pub fn latest_per_key<'a>(changes: impl IntoIterator<Item = &'a SourcedChange>) -> BTreeMap<i64, &'a SourcedChange> {
    let mut latest: BTreeMap<i64, &SourcedChange> = BTreeMap::new();
    for c in changes {
        latest
            .entry(c.change.account_id)
            .and_modify(|cur| {
                if c.rank() > cur.rank() {
                    *cur = c;
                }
            })
            .or_insert(c);
    }
    latest
}

/// What the last plan did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct MirrorStats {
    /// Keys whose newest change applied.
    pub applied: usize,
    /// Keys whose newest change was older than the mirror's state (and was ignored).
    pub stale: usize,
    /// Live rows removed (position deletes written).
    pub rows_deleted: usize,
    pub rows_added: usize,
    pub data_files: usize,
    pub delete_files: usize,
    /// Data files removed whole because none of their rows stayed live.
    pub files_dropped: usize,
    /// Data files read to find the touched keys' rows.
    pub files_read: usize,
    /// Bytes read of those files and of their delete files, and the range requests made.
    pub bytes_read: u64,
    pub read_requests: u64,
    pub tombstones: usize,
    /// Live rows a truncate removed (`allow_truncate`).
    pub rows_truncated: usize,
    /// Changes the table already held (offsets at or below its watermarks).
    pub skipped_replay: usize,
}

/// The guarded-apply planner for one batch of account changes: the generic one, with the
/// accounts' key and order columns.
pub fn mirror_apply(
    changes: &[SourcedChange],
    ranges: &BTreeMap<TopicPartition, (i64, i64)>,
    schema: SchemaRef,
    compression: &str,
    target_file_size: usize,
) -> Result<KeyedApply> {
    let mut rows = MirrorRowBuilder::default();
    let mut deletes = DeleteBuilder::default();
    for c in changes {
        match c.change.op {
            Op::Delete => deletes.append(&c.change, &c.tp, c.offset),
            Op::Insert | Op::Update => rows.append(&c.change, &c.tp, c.offset),
        }
    }
    let changes = KeyedChanges { rows: rows.finish(schema)?, deletes: deletes.finish()?, truncates: Vec::new() };
    KeyedApply::new(changes, &[col::ACCOUNT_ID.to_string()], col::SEQ, ranges, compression, target_file_size)
}

/// The deletes' key, order and lineage columns.
#[derive(Default)]
struct DeleteBuilder {
    account_id: Int64Builder,
    seq: Int64Builder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
}

impl DeleteBuilder {
    fn append(&mut self, change: &Change, tp: &TopicPartition, offset: i64) {
        self.account_id.append_value(change.account_id);
        self.seq.append_value(change.seq);
        self.topic.append_value(&tp.topic);
        self.partition.append_value(tp.partition);
        self.offset.append_value(offset);
    }

    fn finish(mut self) -> Result<RecordBatch> {
        Ok(RecordBatch::try_from_iter([
            (col::ACCOUNT_ID, Arc::new(self.account_id.finish()) as ArrayRef),
            (col::SEQ, Arc::new(self.seq.finish())),
            (lineage::TOPIC, Arc::new(self.topic.finish())),
            (lineage::PARTITION, Arc::new(self.partition.finish())),
            (lineage::OFFSET, Arc::new(self.offset.finish())),
        ])?)
    }
}

/// Column builders for the mirror schema (`tables::accounts_mirror`).
#[derive(Default)]
pub struct MirrorRowBuilder {
    account_id: Int64Builder,
    balance: Int64Builder,
    last_updated: TimestampMicrosecondBuilder,
    seq: Int64Builder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
}

impl MirrorRowBuilder {
    /// A live row for an insert or update.
    pub fn append(&mut self, change: &Change, tp: &TopicPartition, offset: i64) {
        self.account_id.append_value(change.account_id);
        self.balance.append_value(change.balance_cents.unwrap_or_default());
        self.last_updated.append_value(change.last_updated_us);
        self.seq.append_value(change.seq);
        self.topic.append_value(&tp.topic);
        self.partition.append_value(tp.partition);
        self.offset.append_value(offset);
    }

    pub fn finish(mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.account_id.finish()),
            Arc::new(self.balance.finish()),
            Arc::new(self.last_updated.finish().with_timezone("+00:00")),
            Arc::new(self.seq.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}
