//! `icestream cdc-rebuild TABLE pipelines=…`: recompute an upsert pipeline's table from its
//! changelog (recovery, backfill, a check), for any key. The newest change per key (order
//! value, then Kafka position, as the guarded apply ranks them, [`crate::engine::keyed::rank`]) becomes its
//! row, or its tombstone when it is a delete, unless the changelog's newest truncate ranks above
//! it; the new state replaces every live file of the table in one commit, with the changelog's
//! watermarks. The changelog is read again on every attempt,
//! so a writer committing meanwhile is never lost.

use std::collections::HashMap;
use std::time::Instant;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;
use futures::TryStreamExt;
use iceberg::TableIdent;
use iceberg::spec::Operation;
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::engine::catalog::Catalogs;
use crate::engine::columns::Columns;
use crate::engine::commit::live_rows::LiveFiles;
use crate::engine::commit::{ChangeSet, Planner, Watermarks};
use crate::engine::keyed::keys::KeyCodec;
use crate::engine::keyed::rank::{Rank, RankColumns};
use crate::engine::keyed::tombstones::{KeyTombstones, Tombstone, truncate_properties, truncated_at};
use crate::engine::writer::write_data_files;
use crate::model::pipeline::Pipeline;
use crate::model::pipeline::upsert::OPERATION;

/// What a rebuild did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RebuildReport {
    pub changelog_rows: usize,
    /// Distinct keys in the changelog.
    pub keys: usize,
    pub live_rows: usize,
    pub tombstones: usize,
    pub files_removed: usize,
    pub files_added: usize,
    pub snapshot_id: Option<i64>,
    pub commit_attempts: u32,
    pub duration_ms: u64,
}

/// Every row of `table` as one batch of its Arrow schema (`None` before its first snapshot).
async fn read_all(table: &Table) -> Result<Option<RecordBatch>> {
    if table.metadata().current_snapshot().is_none() {
        return Ok(None);
    }
    let batches: Vec<RecordBatch> = table.scan().build()?.to_arrow().await?.try_collect().await?;
    let schema = std::sync::Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    Ok(Some(concat_batches(&schema, &batches)?))
}

struct RebuildKeyed<'a> {
    catalogs: &'a Catalogs,
    changelog: TableIdent,
    key: &'a [String],
    order: &'a str,
    compression: &'a str,
    target_file_size: usize,
    now_us: i64,
    report: RebuildReport,
}

impl Planner for RebuildKeyed<'_> {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let changelog = self.catalogs.catalog().load_table(&self.changelog).await?;
        let data_schema = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?;
        let codec = KeyCodec::new(&data_schema, self.key)?;
        let mut tombstones = KeyTombstones::load(table, KeyCodec::new(&data_schema, self.key)?).await?;
        tombstones.map.clear();
        let mut kept: Vec<u32> = Vec::new();
        let mut changes = None;
        let truncated = truncated_at(changelog.metadata().properties());
        if let Some(all) = read_all(&changelog).await? {
            let source = format!("changelog {}", self.changelog);
            let columns = Columns::new(&all, &source).with_schema(changelog.metadata().current_schema());
            let ops = columns.strings(OPERATION)?;
            let ranks = RankColumns::new(&columns, self.order)?;
            let keys = codec.rows(&all, &source, Some(changelog.metadata().current_schema()))?;
            // The newest change per key, ranked as the guarded apply ranks them.
            let mut latest: HashMap<&[u8], (Rank, usize)> = HashMap::new();
            for i in 0..all.num_rows() {
                let rank = ranks.rank(i);
                if latest.get(keys.row(i).data()).is_none_or(|cur| rank > cur.0) {
                    latest.insert(keys.row(i).data(), (rank, i));
                }
            }
            for (key, (rank, i)) in &latest {
                if truncated.as_ref().is_some_and(|at| rank < at) {
                    continue; // gone with the truncate, which stands for its tombstone
                }
                match ops.value(*i) {
                    "D" => {
                        tombstones.map.insert(key.to_vec(), Tombstone::of(rank, self.now_us));
                    }
                    "I" | "U" => kept.push(*i as u32),
                    other => return Err(Error::Data(format!("{source}: a row with operation {other:?} (I, U or D)"))),
                }
            }
            kept.sort_unstable();
            self.report.changelog_rows = all.num_rows();
            self.report.keys = latest.len();
            changes = Some(all);
        }
        let mut change = ChangeSet::new(Operation::Overwrite);
        let live = LiveFiles::of(table).await?;
        change.removed_files.extend(live.every_path());
        if let Some(all) = changes.filter(|_| !kept.is_empty()) {
            let picked = take_record_batch(&all, &UInt32Array::from(kept))?;
            let columns = Columns::new(&picked, format!("changelog {}", self.changelog)).with_schema(changelog.metadata().current_schema());
            let rows = data_schema.fields().iter().map(|f| columns.as_type(f.name(), f.data_type())).collect::<Result<Vec<_>>>()?;
            let rows = RecordBatch::try_new(std::sync::Arc::new(data_schema), rows)?;
            self.report.live_rows = rows.num_rows();
            change.added_data_files = write_data_files(table, &[rows], self.compression, self.target_file_size).await?;
        }
        self.report.tombstones = tombstones.len();
        self.report.files_removed = change.removed_files.len();
        self.report.files_added = change.added_data_files.len();
        let (key, path) = tombstones.store(table, self.compression).await?;
        change.properties.insert(key, path);
        if let Some(at) = &truncated {
            change.properties.extend(truncate_properties(at));
        }
        change.watermarks = Watermarks::from_properties(changelog.metadata().properties());
        change.summary.insert("icestream.cdc".into(), "rebuild".into());
        Ok(Some(change))
    }
}

/// Rebuild upsert `pipeline`'s table from its changelog.
pub async fn rebuild(
    catalogs: &Catalogs,
    pipeline: &Pipeline,
    compression: &str,
    target_file_size: usize,
    deadline: Instant,
) -> Result<RebuildReport> {
    let started = Instant::now();
    let refuse = |why: &str| Error::Config(format!("cdc-rebuild {}: {why}", pipeline.table));
    let upsert = pipeline.upsert.as_ref().ok_or_else(|| refuse("not an upsert pipeline (mode = \"upsert\")"))?;
    let changelog =
        upsert.changelog.as_ref().ok_or_else(|| refuse("the pipeline keeps no changelog (changelog = true) to rebuild from"))?;
    let mut planner = RebuildKeyed {
        catalogs,
        changelog: catalogs.ident(&changelog.name),
        key: &pipeline.key,
        order: upsert.order_column(),
        compression,
        target_file_size,
        now_us: chrono::Utc::now().timestamp_micros(),
        report: RebuildReport::default(),
    };
    let outcome = catalogs.committer.commit(&catalogs.ident(&pipeline.table), deadline, &mut planner).await?;
    let mut report = planner.report;
    report.snapshot_id = outcome.snapshot_id;
    report.commit_attempts = outcome.attempts;
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}
