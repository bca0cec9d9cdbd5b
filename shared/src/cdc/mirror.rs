//! Guarded apply of a batch of changes to the mirror, merge-on-read.
//!
//! Per key, the batch's newest change (by `seq`, Kafka offset breaking ties) applies only if
//! its `seq` is at least the key's current one: the live row's, or the tombstone's if the key
//! was deleted. Applying removes the live row with a position delete and appends the new row
//! (or records a tombstone, for a delete), all in one commit with the batch's offsets.
//!
//! The plan is made on every commit attempt against the table as it is then: the touched
//! keys' rows, positions and tombstones are read again, so a lost race recomputes instead of
//! rebasing blindly, and two writers can never leave two live rows for one key. A batch reads
//! only the data files whose partition (bucket of the account id) and account-id bounds can
//! hold a touched key, and only their `account_id` and `seq` columns.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataFile, Datum, Literal, Operation, PrimitiveLiteral, Transform};
use iceberg::table::Table;
use iceberg::transform::create_transform_function;
use serde::Serialize;

use super::change::{Change, Op};
use super::tombstones::{Tombstone, Tombstones};
use crate::columns::Columns;
use crate::commit::row_delta::{LiveFiles, deleted_positions, read_live_rows, write_position_deletes};
use crate::commit::{ChangeSet, Planner, Watermarks};
use crate::error::Result;
use crate::event::TopicPartition;
use crate::tables::cdc as col;
use crate::writer::write_data_files;

/// A decoded change and the Kafka record it came from.
#[derive(Debug, Clone)]
pub struct SourcedChange {
    pub change: Change,
    pub tp: Arc<TopicPartition>,
    pub offset: i64,
}

impl SourcedChange {
    /// Order of changes of one key: `seq`, then the Kafka position.
    fn order(&self) -> (i64, i64, &str, i32) {
        (self.change.seq, self.offset, self.tp.topic.as_str(), self.tp.partition)
    }
}

/// The newest change per account among `changes`.
pub fn latest_per_key<'a>(changes: impl IntoIterator<Item = &'a SourcedChange>) -> BTreeMap<i64, &'a SourcedChange> {
    let mut latest: BTreeMap<i64, &SourcedChange> = BTreeMap::new();
    for c in changes {
        latest
            .entry(c.change.account_id)
            .and_modify(|cur| {
                if c.order() > cur.order() {
                    *cur = c;
                }
            })
            .or_insert(c);
    }
    latest
}

/// Where a key's live row is.
#[derive(Debug, Clone, Copy)]
struct LiveRow {
    file: usize,
    pos: i64,
    seq: i64,
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
    pub tombstones: usize,
    /// Changes the table already held (offsets at or below its watermarks).
    pub skipped_replay: usize,
}

/// The guarded-apply planner for one batch.
pub struct MirrorApply {
    changes: Vec<SourcedChange>,
    covers: Watermarks,
    schema: SchemaRef,
    compression: String,
    target_file_size: usize,
    now_us: i64,
    pub stats: MirrorStats,
}

impl MirrorApply {
    /// `ranges`: first and last offset per topic-partition of the whole event.
    pub fn new(
        changes: Vec<SourcedChange>,
        ranges: &BTreeMap<TopicPartition, (i64, i64)>,
        schema: SchemaRef,
        compression: &str,
        target_file_size: usize,
    ) -> Self {
        let mut covers = Watermarks::default();
        for (tp, (_, last)) in ranges {
            covers.advance(tp, *last);
        }
        Self {
            changes,
            covers,
            schema,
            compression: compression.to_string(),
            target_file_size,
            now_us: chrono::Utc::now().timestamp_micros(),
            stats: MirrorStats::default(),
        }
    }
}

/// Bucket partition value of an account id, as the mirror's spec computes it.
fn bucket_of(bucket: &dyn iceberg::transform::TransformFunction, account_id: i64) -> Result<Option<i32>> {
    Ok(match bucket.transform_literal(&Datum::long(account_id))? {
        Some(d) => match d.literal() {
            PrimitiveLiteral::Int(b) => Some(*b),
            _ => None,
        },
        None => None,
    })
}

/// Data files that may hold one of `keys`: right bucket, and `account_id` bounds that overlap.
fn candidate_files<'a>(table: &Table, live: &'a LiveFiles, keys: &BTreeSet<i64>) -> Result<Vec<&'a DataFile>> {
    let spec = table.metadata().default_partition_spec();
    let schema = table.metadata().current_schema();
    let account_field = schema.field_by_name(col::ACCOUNT_ID).map(|f| f.id);
    let bucket_field = spec.fields().iter().position(|f| Some(f.source_id) == account_field && matches!(f.transform, Transform::Bucket(_)));
    let buckets: Option<(usize, BTreeSet<i32>)> = match bucket_field {
        Some(index) => {
            let function = create_transform_function(&spec.fields()[index].transform)?;
            let mut set = BTreeSet::new();
            for k in keys {
                set.extend(bucket_of(function.as_ref(), *k)?);
            }
            Some((index, set))
        }
        None => None,
    };
    let field_id = account_field.unwrap_or(-1);
    let bound = |d: Option<&Datum>| match d.map(Datum::literal) {
        Some(PrimitiveLiteral::Long(v)) => Some(*v),
        _ => None,
    };
    Ok(live
        .data
        .iter()
        .filter(|f| match &buckets {
            Some((index, set)) => match f.partition().fields().get(*index) {
                Some(Some(Literal::Primitive(PrimitiveLiteral::Int(b)))) => set.contains(b),
                _ => true,
            },
            None => true,
        })
        .filter(|f| {
            let lo = bound(f.lower_bounds().get(&field_id)).unwrap_or(i64::MIN);
            let hi = bound(f.upper_bounds().get(&field_id)).unwrap_or(i64::MAX);
            keys.range(lo..=hi).next().is_some()
        })
        .collect())
}

/// The live rows of `keys` in one data file, and how many live rows the file has in all.
async fn live_rows_in(table: &Table, live: &LiveFiles, index: usize, file: &DataFile, keys: &BTreeSet<i64>) -> Result<(Vec<(i64, LiveRow)>, usize)> {
    let deleted = deleted_positions(table, file.file_path(), &live.deletes_for(file.file_path())).await?;
    let (batches, positions) = read_live_rows(table, file.file_path(), &[col::ACCOUNT_ID, col::SEQ], &deleted).await?;
    let mut out = Vec::new();
    let mut row = 0;
    for batch in batches {
        let columns = Columns::new(&batch, file.file_path()).with_schema(table.metadata().current_schema());
        let (ids, seqs) = (columns.i64(col::ACCOUNT_ID)?, columns.i64(col::SEQ)?);
        for i in 0..batch.num_rows() {
            if keys.contains(&ids.value(i)) {
                out.push((ids.value(i), LiveRow { file: index, pos: positions[row], seq: seqs.value(i) }));
            }
            row += 1;
        }
    }
    Ok((out, positions.len()))
}

/// The live rows of `keys`, by key (more than one only if an invariant was broken elsewhere),
/// and the number of live rows of each file.
async fn live_rows_of(
    table: &Table,
    live: &LiveFiles,
    files: &[&DataFile],
    keys: &BTreeSet<i64>,
) -> Result<(HashMap<i64, Vec<LiveRow>>, Vec<usize>)> {
    let mut reads = Vec::with_capacity(files.len());
    for (index, file) in files.iter().enumerate() {
        reads.push(live_rows_in(table, live, index, file, keys));
    }
    // `buffered` keeps the files' order, so the counts line up with `files`.
    let found: Vec<(Vec<(i64, LiveRow)>, usize)> = futures::stream::iter(reads).buffered(4).try_collect().await?;
    let mut by_key: HashMap<i64, Vec<LiveRow>> = HashMap::new();
    let mut live_counts = Vec::with_capacity(found.len());
    for (rows, count) in found {
        live_counts.push(count);
        for (k, row) in rows {
            by_key.entry(k).or_default().push(row);
        }
    }
    Ok((by_key, live_counts))
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

impl Planner for MirrorApply {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        self.stats = MirrorStats::default();
        let marks = Watermarks::from_properties(table.metadata().properties());
        let fresh: Vec<&SourcedChange> = self.changes.iter().filter(|c| !marks.covers(&c.tp, c.offset)).collect();
        self.stats.skipped_replay = self.changes.len() - fresh.len();
        if fresh.is_empty() {
            return Ok(None);
        }
        let latest = latest_per_key(fresh);
        let keys: BTreeSet<i64> = latest.keys().copied().collect();

        let live = LiveFiles::of(table).await?;
        live.check_supported(table)?;
        let files = candidate_files(table, &live, &keys)?;
        self.stats.files_read = files.len();
        let (rows, live_counts) = live_rows_of(table, &live, &files, &keys).await?;
        let mut tombstones = Tombstones::load(table).await?;
        let tombstones_before = tombstones.clone();

        let mut deletes: BTreeMap<usize, BTreeSet<i64>> = BTreeMap::new();
        let mut added = MirrorRowBuilder::default();
        for (key, sourced) in &latest {
            let change = &sourced.change;
            let current_rows = rows.get(key).map(Vec::as_slice).unwrap_or_default();
            let current = current_rows.iter().map(|r| r.seq).chain(tombstones.get(*key).map(|t| t.seq)).max();
            if current.is_some_and(|seq| change.seq < seq) {
                self.stats.stale += 1;
                continue;
            }
            self.stats.applied += 1;
            for row in current_rows {
                deletes.entry(row.file).or_default().insert(row.pos);
                self.stats.rows_deleted += 1;
            }
            match change.op {
                Op::Delete => {
                    tombstones.0.insert(*key, Tombstone { seq: change.seq, deleted_at_us: self.now_us });
                }
                Op::Insert | Op::Update => {
                    // The live row's seq now supersedes any tombstone.
                    tombstones.0.remove(key);
                    added.append(change, &sourced.tp, sourced.offset);
                    self.stats.rows_added += 1;
                }
            }
        }
        self.stats.tombstones = tombstones.len();

        let mut change = ChangeSet::new(Operation::Overwrite);
        let added = added.finish(self.schema.clone())?;
        if added.num_rows() > 0 {
            change.added_data_files = write_data_files(table, &[added], &self.compression, self.target_file_size).await?;
        }
        for (file, positions) in &deletes {
            let data_file = files[*file];
            if positions.len() == live_counts[*file] {
                // Every row left in the file goes: drop the file and its deletes rather than
                // keep a dead file alive behind one more delete file.
                change.removed_files.insert(data_file.file_path().to_string());
                let scoped = live.deletes_by_data_file.get(data_file.file_path()).into_iter().flatten();
                change.removed_files.extend(scoped.map(|d| d.file_path().to_string()));
                self.stats.files_dropped += 1;
            } else {
                change.added_delete_files.push(write_position_deletes(table, data_file, positions, &self.compression).await?);
            }
        }
        self.stats.data_files = change.added_data_files.len();
        self.stats.delete_files = change.added_delete_files.len();
        if tombstones != tombstones_before {
            let (key, path) = tombstones.store(table, &self.compression).await?;
            change.properties.insert(key, path);
        }
        if !change.has_files() && change.properties.is_empty() {
            // Every change was stale: nothing to write. A replay finds them stale again.
            return Ok(None);
        }
        let removes = !(change.added_delete_files.is_empty() && change.removed_files.is_empty());
        change.operation = match (change.added_data_files.is_empty(), removes) {
            (false, false) => Operation::Append,
            (true, true) => Operation::Delete,
            _ => Operation::Overwrite,
        };
        change.watermarks = self.covers.clone();
        change.summary.insert("icestream.cdc.applied".into(), self.stats.applied.to_string());
        change.summary.insert("icestream.cdc.stale".into(), self.stats.stale.to_string());
        Ok(Some(change))
    }
}
