//! Compaction: bin-pack the small data files of closed partitions into files near the target
//! size and commit each batch of groups as a replace snapshot. The planner re-checks, on the
//! freshly loaded table of every attempt, that a group's files are still live, so a concurrent
//! ingest commit is never lost and a concurrent compaction is never undone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;
use iceberg::TableIdent;
use iceberg::spec::{DataContentType, DataFile, Literal, Operation, PartitionSpec, PrimitiveLiteral, Struct, Transform};
use iceberg::table::Table;
use serde::Serialize;

use super::MaintenanceSettings;
use crate::base::error::{Error, Result};
use crate::engine::catalog::Catalogs;
use crate::engine::commit::live_rows::{LiveFiles, read_data_file, read_with_lineage};
use crate::engine::commit::row_lineage::{FileLineage, with_lineage_columns};
use crate::engine::commit::{ChangeSet, Planner};
use crate::engine::writer::write_data_files_as;

/// Groups rewritten per commit: small enough that a timeout loses little work, large enough
/// that a big backlog does not become hundreds of snapshots.
const GROUPS_PER_COMMIT: usize = 8;

/// Below this share of the target size a file counts as small.
const SMALL_FILE_PERCENT: u64 = 75;

/// Time always kept back for a commit after rewriting, when no batch has been timed yet.
const MIN_BATCH_RESERVE: Duration = Duration::from_secs(2);

/// What compaction did (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactReport {
    pub dry_run: bool,
    /// Small live data files in closed partitions without deletes.
    pub candidate_files: usize,
    pub groups_planned: usize,
    pub groups_committed: usize,
    /// Groups dropped because another writer removed one of their files meanwhile.
    pub groups_skipped_stale: usize,
    /// Groups not done because the time budget ran out (the next run does them).
    pub groups_left: usize,
    pub stopped_by_deadline: bool,
    pub files_removed: usize,
    pub files_added: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub rows_rewritten: u64,
    pub commits: usize,
    pub commit_attempts: u32,
    /// Partitions left alone because ingest may still write there.
    pub hot_partitions_skipped: usize,
    /// Partitions left alone because position-delete files of other writers (not scoped to
    /// one data file) apply to them.
    pub partitions_with_deletes_skipped: usize,
    /// Candidate files with position deletes, folded in by the rewrite.
    pub files_with_deletes: usize,
    pub rewrite_ms: u64,
    pub bytes_rewritten_per_sec: f64,
}

/// A live data file to rewrite: small, or with position deletes to fold in.
#[derive(Debug, Clone)]
struct Candidate {
    path: String,
    size: u64,
    /// Position-delete files that reference only this file, as of planning: applied while
    /// rewriting and removed with it.
    deletes: Vec<DataFile>,
    /// Where its rows' ids come from (v3), carried into the rewritten files.
    lineage: Option<FileLineage>,
}

/// Files of one partition rewritten together.
#[derive(Debug, Clone)]
struct Group {
    files: Vec<Candidate>,
}

impl Group {
    fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

fn small_threshold(target: usize) -> u64 {
    target as u64 * SMALL_FILE_PERCENT / 100
}

/// Live data files below 75% of `target` in the current snapshot (for the report).
pub async fn small_file_count(table: &Table, target: usize) -> Result<usize> {
    let Some(current) = table.metadata().current_snapshot() else { return Ok(0) };
    let referenced = super::referenced_by(table, [current]).await?;
    Ok(referenced
        .live_files
        .values()
        .filter(|(content, size)| *content == DataContentType::Data && *size < small_threshold(target))
        .count())
}

/// Which partitions are still being written: a time partition (hours or days) reaching into the
/// last `hot_hours` hours. A table without a time partition has no hot partition.
struct HotPartitions {
    /// Per partition spec with one: the index of the time field in the partition tuple, and
    /// hours per partition value (a file of an older spec has its tuple laid out by that spec).
    time_fields: HashMap<i32, (usize, i64)>,
    default_spec: i32,
    /// Partitions ending after this hour (since the epoch) are hot.
    hot_after_hour: i64,
}

impl HotPartitions {
    fn new(table: &Table, hot_hours: i64, now_ms: i64) -> Self {
        let metadata = table.metadata();
        let time_field = |spec: &PartitionSpec| {
            spec.fields().iter().enumerate().find_map(|(i, f)| match f.transform {
                Transform::Hour => Some((i, 1)),
                Transform::Day => Some((i, 24)),
                _ => None,
            })
        };
        let time_fields = metadata.partition_specs_iter().filter_map(|spec| Some((spec.spec_id(), time_field(spec)?))).collect();
        let now_hour = now_ms.div_euclid(3_600_000);
        Self { time_fields, default_spec: metadata.default_partition_spec_id(), hot_after_hour: now_hour - hot_hours + 1 }
    }

    /// Whether `partition`, a tuple of spec `spec_id` (unknown: the default), is hot.
    fn is_hot(&self, partition: &Struct, spec_id: Option<i32>) -> bool {
        let Some(&(index, hours)) = self.time_fields.get(&spec_id.unwrap_or(self.default_spec)) else { return false };
        match partition.fields().get(index) {
            Some(Some(Literal::Primitive(PrimitiveLiteral::Int(value)))) => (*value as i64 + 1) * hours > self.hot_after_hour,
            Some(Some(Literal::Primitive(PrimitiveLiteral::Long(value)))) => (value + 1) * hours > self.hot_after_hour,
            // A null time lands in no clock hour: ingest's current hour never writes there.
            _ => false,
        }
    }
}

/// Bin-pack the small files of closed partitions, and every file with position deletes (the
/// rewrite applies them), into groups near the target.
async fn plan_groups(table: &Table, settings: &MaintenanceSettings, report: &mut CompactReport) -> Result<Vec<Group>> {
    if table.metadata().current_snapshot().is_none() {
        return Ok(vec![]);
    }
    let hot = HotPartitions::new(table, settings.hot_partition_hours, settings.clock.now_ms());
    let threshold = small_threshold(settings.target_file_size_bytes);
    let live = LiveFiles::of(table).await?;
    live.check_supported(table)?;
    // Debug text of the partition tuple: a stable key that also sorts oldest hour first.
    let key_of = |file: &DataFile| format!("{:?}", file.partition());
    // Delete files without a referenced data file (other writers) may hold positions of any
    // file of their partition: such partitions are left alone.
    let unscoped: HashSet<String> = live.unscoped_deletes.iter().map(key_of).collect();
    let mut by_partition: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
    let mut hot_seen: HashSet<String> = HashSet::new();
    for file in &live.data {
        let key = key_of(file);
        if hot.is_hot(file.partition(), live.spec_ids.get(file.file_path()).copied()) {
            hot_seen.insert(key);
            continue;
        }
        let deletes: Vec<DataFile> = live.deletes_by_data_file.get(file.file_path()).cloned().unwrap_or_default();
        let small = file.file_size_in_bytes() < threshold && !settings.compact_deletes_only;
        if small || !deletes.is_empty() {
            by_partition.entry(key).or_default().push(Candidate {
                path: file.file_path().to_string(),
                size: file.file_size_in_bytes(),
                deletes,
                lineage: live.lineage.get(file.file_path()).copied(),
            });
        }
    }
    report.hot_partitions_skipped = hot_seen.len();
    let mut groups = Vec::new();
    for (key, mut files) in by_partition {
        if unscoped.contains(&key) {
            report.partitions_with_deletes_skipped += 1;
            continue;
        }
        report.candidate_files += files.len();
        report.files_with_deletes += files.iter().filter(|f| !f.deletes.is_empty()).count();
        // First-fit decreasing: few bins, each close to the target.
        files.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.path.cmp(&b.path)));
        let mut bins: Vec<Group> = Vec::new();
        for file in files {
            match bins.iter_mut().find(|g| g.bytes() + file.size <= settings.target_file_size_bytes as u64) {
                Some(bin) => bin.files.push(file),
                None => bins.push(Group { files: vec![file] }),
            }
        }
        // A lone file gains nothing from a rewrite, unless it has deletes to fold in.
        groups.extend(bins.into_iter().filter(|g| g.files.len() > 1 || g.files.iter().any(|f| !f.deletes.is_empty())));
    }
    report.groups_planned = groups.len();
    Ok(groups)
}

/// Commits rewritten groups whose input files are all still live.
struct CompactCommit {
    rewritten: Vec<(Group, Vec<DataFile>)>,
    /// Indexes of the groups the last plan left out.
    stale: Vec<usize>,
    /// Indexes of the groups whose outputs the table already holds: an earlier attempt whose
    /// swap had an unknown outcome landed after all.
    landed: Vec<usize>,
}

impl Planner for CompactCommit {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let live = LiveFiles::of(table).await?;
        let live_data: HashSet<&str> = live.data.iter().map(DataFile::file_path).collect();
        let unscoped: HashSet<String> = live.unscoped_deletes.iter().map(|d| format!("{:?}", d.partition())).collect();
        let partition_of: std::collections::HashMap<&str, String> =
            live.data.iter().map(|f| (f.file_path(), format!("{:?}", f.partition()))).collect();
        self.stale.clear();
        self.landed.clear();
        let mut change = ChangeSet::new(Operation::Replace);
        for (i, (group, outputs)) in self.rewritten.iter().enumerate() {
            if !outputs.is_empty() && outputs.iter().all(|o| live_data.contains(o.file_path())) {
                self.landed.push(i);
                continue;
            }
            // Still valid only if every input is live with exactly the deletes we applied: a
            // delete added since (a CDC commit) would be lost by committing this rewrite.
            let unchanged = group.files.iter().all(|f| {
                let now: HashSet<&str> = live.deletes_by_data_file.get(&f.path).into_iter().flatten().map(DataFile::file_path).collect();
                let then: HashSet<&str> = f.deletes.iter().map(DataFile::file_path).collect();
                live_data.contains(f.path.as_str())
                    && now == then
                    && partition_of.get(f.path.as_str()).is_none_or(|p| !unscoped.contains(p))
            });
            if unchanged {
                change.removed_files.extend(group.files.iter().map(|f| f.path.clone()));
                change.removed_files.extend(group.files.iter().flat_map(|f| f.deletes.iter().map(|d| d.file_path().to_string())));
                change.added_data_files.extend(outputs.iter().cloned());
            } else {
                self.stale.push(i);
            }
        }
        if change.removed_files.is_empty() {
            return Ok(None);
        }
        change.summary.insert("icestream.maintenance".into(), "compact".into());
        Ok(Some(change))
    }
}

/// Compact `ident`'s closed partitions, stopping before `deadline` with what is left reported.
pub async fn compact(
    catalogs: &Catalogs,
    ident: &TableIdent,
    settings: &MaintenanceSettings,
    dry_run: bool,
    deadline: Instant,
) -> Result<CompactReport> {
    let table = catalogs.catalog().load_table(ident).await?;
    let mut report = CompactReport { dry_run, ..Default::default() };
    let groups = plan_groups(&table, settings, &mut report).await?;
    if dry_run || groups.is_empty() {
        report.groups_left = groups.len();
        return Ok(report);
    }
    let schema: SchemaRef = std::sync::Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let with_lineage = std::sync::Arc::new(with_lineage_columns(table.metadata().current_schema())?);
    let lineage_schema = (with_lineage.clone(), std::sync::Arc::new(iceberg::arrow::schema_to_arrow_schema(&with_lineage)?));
    let started = Instant::now();
    let mut reserve = MIN_BATCH_RESERVE;
    let mut pending = groups.into_iter().peekable();
    while pending.peek().is_some() {
        if Instant::now() + reserve >= deadline {
            report.stopped_by_deadline = true;
            break;
        }
        let batch_started = Instant::now();
        let mut rewritten = Vec::new();
        for group in pending.by_ref().take(GROUPS_PER_COMMIT) {
            let mut batches = Vec::new();
            // Rows keep their ids (v3): the files written carry them as columns.
            let keep_lineage = group.files.iter().all(|f| f.lineage.is_some());
            for file in &group.files {
                let deletes = file.deletes.iter().collect::<Vec<_>>();
                batches.extend(match file.lineage.filter(|_| keep_lineage) {
                    Some(lineage) => read_with_lineage(&table, &file.path, &deletes, &lineage_schema.1, lineage).await?,
                    None => read_data_file(&table, &file.path, &deletes, &schema).await?,
                });
            }
            let written_schema = if keep_lineage { lineage_schema.0.clone() } else { table.metadata().current_schema().clone() };
            let outputs =
                write_data_files_as(&table, written_schema, &batches, &settings.compression, settings.target_file_size_bytes).await?;
            let rows_in = batches.iter().map(|b| b.num_rows() as u64).sum::<u64>();
            let rows_out = outputs.iter().map(|f| f.record_count()).sum::<u64>();
            if rows_in != rows_out {
                let written: Vec<String> = outputs.iter().map(|f| f.file_path().to_string()).collect();
                super::delete_files(&table, &written, Instant::now() + Duration::from_secs(30)).await;
                return Err(Error::Invariant(format!("compaction read {rows_in} rows but wrote {rows_out}: not committed")));
            }
            rewritten.push((group, outputs));
        }
        let mut planner = CompactCommit { rewritten, stale: vec![], landed: vec![] };
        let outcome = catalogs.committer.commit(ident, deadline, &mut planner).await;
        // Outputs of stale groups are unreferenced: remove them now, but only when every swap's
        // outcome is known (one that may still land could reference them; orphan removal, with
        // its margin, takes them then). After a failed commit nothing is deleted, for the same
        // reason.
        let unused: Vec<String> = match &outcome {
            Ok(o) if !o.unsettled => {
                planner.stale.iter().flat_map(|&i| planner.rewritten[i].1.iter()).map(|f| f.file_path().to_string()).collect()
            }
            _ => vec![],
        };
        super::delete_files(&table, &unused, Instant::now() + Duration::from_secs(30)).await;
        let outcome = match outcome {
            Ok(o) => o,
            Err(Error::CommitGaveUp { .. }) => {
                // Out of time while retrying: these groups are left for the next run.
                report.groups_left += planner.rewritten.len();
                report.stopped_by_deadline = true;
                break;
            }
            Err(e) => return Err(e),
        };
        report.commit_attempts += outcome.attempts;
        report.groups_skipped_stale += planner.stale.len();
        if outcome.committed || !planner.landed.is_empty() {
            report.commits += 1;
            for (i, (group, outputs)) in planner.rewritten.iter().enumerate() {
                if planner.stale.contains(&i) {
                    continue;
                }
                report.groups_committed += 1;
                report.files_removed += group.files.len();
                report.files_added += outputs.len();
                report.bytes_read += group.bytes();
                report.bytes_written += outputs.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
                report.rows_rewritten += outputs.iter().map(|f| f.record_count()).sum::<u64>();
            }
        }
        // Keep back one and a half batches' time for the next, so we stop rather than overrun.
        reserve = batch_started.elapsed().mul_f64(1.5).max(MIN_BATCH_RESERVE);
    }
    report.groups_left += pending.count();
    report.rewrite_ms = started.elapsed().as_millis() as u64;
    if report.rewrite_ms > 0 {
        report.bytes_rewritten_per_sec = report.bytes_read as f64 * 1000.0 / report.rewrite_ms as f64;
    }
    Ok(report)
}
