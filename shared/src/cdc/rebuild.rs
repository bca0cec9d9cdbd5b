//! `icestream cdc-rebuild`: recompute the mirror from the changelog (recovery, backfill, or a
//! check). The newest change per account (by `seq`, Kafka position breaking ties, as the
//! guarded apply ranks them, [`super::rank`]) becomes its row, or its tombstone when it is a
//! delete; the new state replaces every live file of the mirror in one commit, with the
//! changelog's watermarks. The changelog is read again on every attempt, so a writer
//! committing meanwhile is never lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use iceberg::spec::Operation;
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use serde::Serialize;

use super::change::{Change, Op};
use super::mirror::{MirrorRowBuilder, SourcedChange, latest_per_key};
use super::tombstones::{Tombstone, Tombstones};
use super::CdcPipeline;
use crate::engine::columns::Columns;
use crate::engine::commit::row_delta::LiveFiles;
use crate::engine::commit::{ChangeSet, Planner, Watermarks};
use crate::base::error::{Error, Result};
use crate::model::event::TopicPartition;
use crate::model::tables::{cdc as col, lineage};
use crate::engine::writer::write_data_files;

/// What a rebuild did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RebuildReport {
    pub changelog_rows: usize,
    /// Distinct keys (accounts) in the changelog.
    pub keys: usize,
    pub live_rows: usize,
    pub tombstones: usize,
    pub files_removed: usize,
    pub files_added: usize,
    pub snapshot_id: Option<i64>,
    pub commit_attempts: u32,
    pub duration_ms: u64,
}

/// Every change of the changelog, as the mirror planner sees changes.
async fn read_changelog(changelog: &Table) -> Result<Vec<SourcedChange>> {
    let mut out = Vec::new();
    if changelog.metadata().current_snapshot().is_none() {
        return Ok(out);
    }
    let mut stream = changelog.scan().build()?.to_arrow().await?;
    let mut tps: BTreeMap<(String, i32), Arc<TopicPartition>> = BTreeMap::new();
    while let Some(batch) = stream.try_next().await? {
        let columns = Columns::new(&batch, "changelog scan").with_schema(changelog.metadata().current_schema());
        let (ops, ids, balances) = (columns.strings(col::OPERATION)?, columns.i64(col::ACCOUNT_ID)?, columns.i64_nullable(col::BALANCE)?);
        let (times, seqs) = (columns.timestamp_micros(col::LAST_UPDATED)?, columns.i64(col::SEQ)?);
        let (topics, partitions, offsets) = (columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?);
        for i in 0..batch.num_rows() {
            let op = match ops.value(i) {
                "I" => Op::Insert,
                "U" => Op::Update,
                "D" => Op::Delete,
                other => return Err(Error::Data(format!("changelog row with operation {other:?}"))),
            };
            let key = (topics.value(i).to_string(), partitions.value(i));
            let tp = tps
                .entry(key)
                .or_insert_with_key(|(topic, partition)| Arc::new(TopicPartition { topic: topic.clone(), partition: *partition }))
                .clone();
            out.push(SourcedChange {
                change: Change {
                    op,
                    account_id: ids.value(i),
                    balance_cents: arrow_array::Array::is_valid(&balances, i).then(|| balances.value(i)),
                    last_updated_us: times.value(i),
                    seq: seqs.value(i),
                },
                tp,
                offset: offsets.value(i),
            });
        }
    }
    Ok(out)
}

struct RebuildMirror<'a> {
    catalog: &'a Arc<dyn Catalog>,
    changelog: TableIdent,
    schema: SchemaRef,
    compression: String,
    target_file_size: usize,
    now_us: i64,
    report: RebuildReport,
}

impl Planner for RebuildMirror<'_> {
    async fn plan(&mut self, mirror: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let changelog = self.catalog.load_table(&self.changelog).await?;
        let changes = read_changelog(&changelog).await?;
        let latest = latest_per_key(&changes);
        let mut rows = MirrorRowBuilder::default();
        let mut tombstones = Tombstones::default();
        for (key, c) in &latest {
            match c.change.op {
                Op::Delete => {
                    tombstones.0.insert(*key, Tombstone::of(&c.rank(), self.now_us));
                }
                Op::Insert | Op::Update => rows.append(&c.change, &c.tp, c.offset),
            }
        }
        let rows = rows.finish(self.schema.clone())?;
        let live = LiveFiles::of(mirror).await?;
        let mut change = ChangeSet::new(Operation::Overwrite);
        change.removed_files.extend(live.every_path());
        self.report = RebuildReport {
            changelog_rows: changes.len(),
            keys: latest.len(),
            live_rows: rows.num_rows(),
            tombstones: tombstones.len(),
            files_removed: change.removed_files.len(),
            ..Default::default()
        };
        if rows.num_rows() > 0 {
            change.added_data_files = write_data_files(mirror, &[rows], &self.compression, self.target_file_size).await?;
        }
        self.report.files_added = change.added_data_files.len();
        let (key, path) = tombstones.store(mirror, &self.compression).await?;
        change.properties.insert(key, path);
        change.watermarks = Watermarks::from_properties(changelog.metadata().properties());
        change.summary.insert("icestream.cdc".into(), "rebuild".into());
        Ok(Some(change))
    }
}

/// Rebuild the mirror of `pipeline`'s configuration from its changelog.
pub async fn rebuild(pipeline: &CdcPipeline, deadline: Instant) -> Result<RebuildReport> {
    let started = Instant::now();
    let config = pipeline.config();
    let catalogs = pipeline.catalogs();
    let mut planner = RebuildMirror {
        catalog: catalogs.catalog(),
        changelog: catalogs.ident(&config.changelog_table),
        schema: pipeline.mirror_schema(),
        compression: config.compression.clone(),
        target_file_size: config.target_file_size_bytes,
        now_us: chrono::Utc::now().timestamp_micros(),
        report: RebuildReport::default(),
    };
    let outcome = catalogs.committer.commit(&catalogs.ident(&config.mirror_table), deadline, &mut planner).await?;
    let mut report = planner.report;
    report.snapshot_id = outcome.snapshot_id;
    report.commit_attempts = outcome.attempts;
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}
