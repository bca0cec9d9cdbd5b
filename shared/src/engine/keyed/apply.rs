//! Guarded apply of a batch of changes to an upsert table with any key, merge-on-read.
//!
//! Per key, the batch's newest change (highest rank: order value, then Kafka position,
//! [`super::rank`]) applies only if it ranks above the key's current state: the live row's, or
//! the tombstone's if the key was deleted, so a stale change never overwrites newer state and
//! never resurrects a deleted key, and a change already applied does nothing. Applying removes the live row with a position delete (one delete
//! file per data file; a file whose last live rows go is removed whole) and appends the new row,
//! or records a tombstone for a delete, all in one commit with the batch's offsets.
//!
//! A truncate (Debezium `op = "t"`, where allowed) is a tombstone of every key at its source
//! position: the rows ranked before it go (the order column of every live file is read:
//! truncates are rare), and the position is kept in [`TRUNCATED_AT_PROPERTY`], so later
//! deliveries of older changes stay stale without a tombstone per key.
//!
//! The plan is made on every commit attempt against the table as it is then (touched keys'
//! rows, positions and tombstones read again), so a lost race recomputes instead of rebasing
//! blindly, and two writers never leave two live rows for one key.
//!
//! A Kafka batch's commit advances the watermarks and skips what they cover; a dead-letter
//! replay's ([`KeyedApply::replay`]) leaves them, skips the changes the table's replay marks
//! name and marks the rest, applied or stale, in the same commit.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_select::concat::concat;
use arrow_select::take::take_record_batch;
use iceberg::spec::{DataFile, Operation};
use iceberg::table::Table;

use super::key_index::KeyIndexCache;
use super::keys::KeyCodec;
use super::probe::{KeyPartitions, Probe, candidate_files, live_rows_of};
use super::rank::{Position, Rank, RankColumns};
use super::stats::ApplyStats;
use super::tombstones::{KeyTombstones, TRUNCATED_AT_PROPERTY, Tombstone, truncate_update, truncated_at};
use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::engine::commit::deletes::delete_rows;
use crate::engine::commit::live_rows::{LiveFiles, deleted_positions, read_live_rows};
use crate::engine::commit::replayed::ReplayedOffsets;
use crate::engine::commit::{ChangeSet, Planner, Watermarks};
use crate::engine::writer::write_data_files;
use crate::model::event::TopicPartition;
use crate::model::tables::lineage;

/// One batch of decoded changes.
pub struct KeyedChanges {
    /// Inserts and updates: rows of the table's Arrow schema, lineage included.
    pub rows: RecordBatch,
    /// Deletes: the key columns, the order column and the lineage columns.
    pub deletes: RecordBatch,
    /// Truncates, in any order.
    pub truncates: Vec<Truncate>,
}

/// A truncate: every key's row goes as of `position` (a source position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    pub position: i64,
    pub tp: TopicPartition,
    pub offset: i64,
}

impl Truncate {
    pub fn rank(&self) -> Rank {
        Rank::new(self.position, Position::of(&self.tp, self.offset))
    }
}

/// Which change, in which batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Row(usize),
    Delete(usize),
}

/// The newest change of one key so far.
#[derive(Debug, Clone)]
struct Latest {
    rank: Rank,
    source: Source,
}

/// The newest change per encoded key.
type LatestPerKey = HashMap<Vec<u8>, Latest>;

/// The guarded-apply planner for one batch of an upsert pipeline.
pub struct KeyedApply {
    changes: KeyedChanges,
    codec: KeyCodec,
    order: String,
    covers: Watermarks,
    /// A dead-letter replay: marks instead of watermarks.
    replay: bool,
    compression: String,
    target_file_size: usize,
    now_us: i64,
    key_index: Arc<KeyIndexCache>,
    pub stats: ApplyStats,
}

impl KeyedApply {
    /// `key`, `order`: the table's key columns and order column; `ranges`: first and last
    /// offset per topic-partition of the whole event.
    pub fn new(
        changes: KeyedChanges,
        key: &[String],
        order: &str,
        ranges: &BTreeMap<TopicPartition, (i64, i64)>,
        compression: &str,
        target_file_size: usize,
    ) -> Result<Self> {
        let mut covers = Watermarks::default();
        for (tp, (_, last)) in ranges {
            covers.advance(tp, *last);
        }
        Ok(Self {
            codec: KeyCodec::new(&changes.rows.schema(), key)?,
            changes,
            order: order.to_string(),
            covers,
            replay: false,
            compression: compression.to_string(),
            target_file_size,
            now_us: chrono::Utc::now().timestamp_micros(),
            key_index: KeyIndexCache::none(),
            stats: ApplyStats::default(),
        })
    }

    /// Read data files' footers and key page indexes through `cache` (none by default).
    pub fn with_key_index(mut self, cache: Arc<KeyIndexCache>) -> Self {
        self.key_index = cache;
        self
    }

    /// A dead-letter replay: the changes the table's replay marks name are held, the rest are
    /// marked in the commit, and the watermarks stay as they are.
    pub fn replay(mut self) -> Self {
        self.replay = true;
        self.covers = Watermarks::default();
        self
    }

    /// The newest change per key among the changes `held` does not name, the key columns of
    /// all of them (for pruning) and their offsets.
    fn latest(&mut self, held: impl Fn(&TopicPartition, i64) -> bool) -> Result<(LatestPerKey, Vec<ArrayRef>, ReplayedOffsets)> {
        let mut latest = LatestPerKey::new();
        let mut offsets = ReplayedOffsets::default();
        let mut touched: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.codec.fields().len()];
        for (batch, is_delete) in [(&self.changes.rows, false), (&self.changes.deletes, true)] {
            let ranks = RankColumns::new(&Columns::new(batch, "upsert batch"), &self.order)?;
            let keys = self.codec.rows(batch, "upsert batch", None)?;
            let mut fresh = Vec::with_capacity(batch.num_rows());
            for i in 0..batch.num_rows() {
                let tp = ranks.topic_partition(i);
                if held(&tp, ranks.offset(i)) {
                    self.stats.skipped_replay += 1;
                    continue;
                }
                fresh.push(i as u32);
                if self.replay {
                    offsets.insert(&tp, ranks.offset(i));
                }
                let candidate = Latest { rank: ranks.rank(i), source: if is_delete { Source::Delete(i) } else { Source::Row(i) } };
                let key = keys.row(i).data().to_vec();
                if latest.get(&key).is_none_or(|cur| candidate.rank > cur.rank) {
                    latest.insert(key, candidate);
                }
            }
            let fresh = take_record_batch(batch, &UInt32Array::from(fresh))?;
            for (all, column) in touched.iter_mut().zip(self.codec.columns(&fresh, "upsert batch", None)?) {
                all.push(column);
            }
        }
        let touched = touched
            .iter()
            .map(|parts| concat(&parts.iter().map(AsRef::as_ref).collect::<Vec<_>>()))
            .collect::<std::result::Result<_, _>>()?;
        Ok((latest, touched, offsets))
    }
}

/// What a truncate removes from `files`.
struct Swept {
    /// Per file: the live positions of the rows ranked before the truncate.
    positions: Vec<BTreeSet<i64>>,
    live_counts: Vec<usize>,
    bytes: u64,
}

/// The live rows of `files` ranked before `truncate` (the order and lineage columns of each
/// file, read whole).
async fn rows_ranked_before(table: &Table, live: &LiveFiles, files: &[&DataFile], order: &str, truncate: &Rank) -> Result<Swept> {
    let schema = table.metadata().current_schema();
    let mut swept = Swept { positions: Vec::with_capacity(files.len()), live_counts: Vec::with_capacity(files.len()), bytes: 0 };
    for file in files {
        let path = file.file_path();
        let deletes = live.deletes_for(path);
        let deleted = deleted_positions(table, path, &deletes).await?;
        let (batches, positions) =
            read_live_rows(table, path, &[order, lineage::TOPIC, lineage::PARTITION, lineage::OFFSET], &deleted).await?;
        let mut at = positions.iter();
        let mut gone = BTreeSet::new();
        for batch in &batches {
            let ranks = RankColumns::new(&Columns::new(batch, path).with_schema(schema), order)?;
            for (i, pos) in (0..batch.num_rows()).zip(at.by_ref()) {
                if ranks.rank(i) < *truncate {
                    gone.insert(*pos);
                }
            }
        }
        swept.positions.push(gone);
        swept.live_counts.push(positions.len());
        swept.bytes += file.file_size_in_bytes() + deletes.iter().map(|d| d.file_size_in_bytes()).sum::<u64>();
    }
    Ok(swept)
}

impl Planner for KeyedApply {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        self.stats = ApplyStats::default();
        let properties = table.metadata().properties();
        let (marks, replayed) = (Watermarks::from_properties(properties), ReplayedOffsets::from_properties(properties));
        let replay = self.replay;
        let held = |tp: &TopicPartition, offset: i64| if replay { replayed.contains(tp, offset) } else { marks.covers(tp, offset) };
        let (latest, touched, mut ours) = self.latest(held)?;
        // A truncate newer than the table's last one empties what it precedes.
        let new_truncate = self.changes.truncates.iter().filter(|t| !held(&t.tp, t.offset)).map(Truncate::rank).max();
        if replay {
            for t in self.changes.truncates.iter().filter(|t| !held(&t.tp, t.offset)) {
                ours.insert(&t.tp, t.offset);
            }
        }
        let truncating = truncate_update(properties, new_truncate.as_ref());
        if latest.is_empty() && truncating.is_empty() && ours.is_empty() {
            return Ok(None);
        }
        let truncated = truncated_at(properties).max(new_truncate.clone());
        let keys: HashSet<Vec<u8>> = latest.keys().cloned().collect();
        let live = LiveFiles::of(table).await?;
        live.check_supported(table)?;
        let partitions = KeyPartitions::new(table, &self.codec, &touched)?;
        let files = match truncating.is_empty() {
            false => live.data.iter().collect(),
            true => candidate_files(&live, &partitions),
        };
        let probe = Probe { codec: &self.codec, order: &self.order, keys: &keys, partitions: &partitions, index_cache: &self.key_index };
        let (rows, mut live_counts, mut cost) =
            if latest.is_empty() { Default::default() } else { live_rows_of(table, &live, &files, &probe).await? };
        let mut tombstones = KeyTombstones::load(table, KeyCodec::of_fields(self.codec.fields().to_vec())?).await?;
        let tombstones_before = tombstones.map.clone();

        let mut deletes: BTreeMap<usize, BTreeSet<i64>> = BTreeMap::new();
        if let Some(truncate) = new_truncate.as_ref().filter(|_| !truncating.is_empty()) {
            let swept = rows_ranked_before(table, &live, &files, &self.order, truncate).await?;
            live_counts = swept.live_counts;
            cost.files = files.len();
            cost.bytes += swept.bytes;
            for (file, positions) in swept.positions.into_iter().enumerate().filter(|(_, p)| !p.is_empty()) {
                self.stats.rows_truncated += positions.len();
                deletes.insert(file, positions);
            }
            // The truncate stands for these keys' tombstones now.
            tombstones.map.retain(|_, t| t.rank() > *truncate);
        }
        self.stats.files_read = cost.files;
        self.stats.bytes_read = cost.bytes;
        self.stats.read_requests = cost.requests;
        let mut added: Vec<u32> = Vec::new();
        for (key, change) in &latest {
            let current_rows = rows.get(key).map(Vec::as_slice).unwrap_or_default();
            let current = current_rows
                .iter()
                .map(|r| r.rank.clone())
                .chain(tombstones.map.get(key).map(Tombstone::rank))
                .chain(truncated.clone())
                .max();
            // Not above the current state: older, or the very change already applied.
            if current.is_some_and(|rank| change.rank <= rank) {
                self.stats.stale += 1;
                continue;
            }
            self.stats.applied += 1;
            for row in current_rows {
                deletes.entry(row.file).or_default().insert(row.pos);
            }
            match change.source {
                Source::Delete(_) => {
                    tombstones.map.insert(key.clone(), Tombstone::of(&change.rank, self.now_us));
                }
                Source::Row(i) => {
                    // The live row's order value now supersedes any tombstone.
                    tombstones.map.remove(key);
                    added.push(i as u32);
                }
            }
        }
        added.sort_unstable();
        self.stats.rows_added = added.len();
        self.stats.rows_deleted = deletes.values().map(BTreeSet::len).sum();
        self.stats.tombstones = tombstones.len();

        let mut change = ChangeSet::new(Operation::Overwrite);
        if !added.is_empty() {
            let batch = take_record_batch(&self.changes.rows, &UInt32Array::from(added))?;
            change.added_data_files = write_data_files(table, &[batch], &self.compression, self.target_file_size).await?;
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
                let deleted = delete_rows(table, &live, data_file, positions, &self.compression).await?;
                change.added_delete_files.push(deleted.added);
                change.removed_files.extend(deleted.replaced);
            }
        }
        self.stats.data_files = change.added_data_files.len();
        self.stats.delete_files = change.added_delete_files.len();
        if tombstones.map != tombstones_before {
            let (key, path) = tombstones.store(table, &self.compression).await?;
            change.properties.insert(key, path);
        }
        change.properties.extend(truncating);
        // A replay marks its changes, applied or stale, so a second replay adds nothing.
        change.properties.extend(replayed.property_updates(&ours));
        if !change.has_files() && change.properties.is_empty() {
            // Every change was stale: nothing to write. A redelivery finds them stale again.
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
        if let Some(truncate) = new_truncate.filter(|_| change.properties.contains_key(TRUNCATED_AT_PROPERTY)) {
            change.summary.insert("icestream.cdc.truncated-at".into(), truncate.order.to_string());
        }
        Ok(Some(change))
    }
}
