//! Snapshot expiry: drop snapshots older than `snapshot_max_age_hours` (never the current one,
//! never one a branch or tag points at, always keeping the `min_snapshots_to_keep` newest),
//! then delete the files only those snapshots referenced (none with `gc.enabled = false`, and
//! only the table's own: [`crate::engine::confine`]). Table properties (the offset watermarks) are
//! untouched: expiry changes the snapshot list only.

use std::collections::HashSet;
use std::time::Instant;

use iceberg::TableIdent;
use iceberg::spec::{DataContentType, Operation, SnapshotRef, TableMetadata};
use iceberg::table::Table;
use serde::Serialize;

use super::MaintenanceSettings;
use crate::base::error::Result;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::{ChangeSet, Planner};

/// What expiry did (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExpireReport {
    pub dry_run: bool,
    pub snapshots_before: usize,
    pub snapshots_expired: usize,
    pub expired_snapshot_ids: Vec<i64>,
    pub data_files_deleted: usize,
    pub delete_files_deleted: usize,
    pub manifests_deleted: usize,
    pub manifest_lists_deleted: usize,
    pub bytes_deleted: u64,
    /// Files that could not be deleted now (or may not be: not the table's own,
    /// [`crate::engine::confine::deletable`]); orphan removal finds them later.
    pub delete_failures: usize,
    /// The table has `gc.enabled = false`: snapshots expire, no file is deleted.
    pub gc_disabled: bool,
    pub commit_attempts: u32,
}

/// Snapshot ids any branch or tag points at (the library has no public accessor for refs).
fn ref_targets(metadata: &TableMetadata) -> Result<HashSet<i64>> {
    let json = serde_json::to_value(metadata)?;
    Ok(json
        .get("refs")
        .and_then(|r| r.as_object())
        .map(|refs| refs.values().filter_map(|r| r.get("snapshot-id").and_then(|v| v.as_i64())).collect())
        .unwrap_or_default())
}

/// The snapshots to expire as of `now_ms`.
fn expirable(metadata: &TableMetadata, settings: &MaintenanceSettings, now_ms: i64) -> Result<Vec<SnapshotRef>> {
    let mut protected = ref_targets(metadata)?;
    protected.extend(metadata.current_snapshot_id());
    let mut snapshots: Vec<&SnapshotRef> = metadata.snapshots().collect();
    snapshots.sort_by_key(|s| std::cmp::Reverse((s.timestamp_ms(), s.sequence_number())));
    let cutoff = now_ms - settings.snapshot_max_age_hours * 3_600_000;
    Ok(snapshots
        .into_iter()
        .skip(settings.min_snapshots_to_keep)
        .filter(|s| s.timestamp_ms() < cutoff && !protected.contains(&s.snapshot_id()))
        .cloned()
        .collect())
}

struct ExpirePlanner<'a> {
    settings: &'a MaintenanceSettings,
    now_ms: i64,
    /// The snapshots the last plan removes (their manifests are read after the commit).
    planned: Vec<SnapshotRef>,
}

impl Planner for ExpirePlanner<'_> {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        self.planned = expirable(table.metadata(), self.settings, self.now_ms)?;
        if self.planned.is_empty() {
            return Ok(None);
        }
        let mut change = ChangeSet::new(Operation::Delete);
        change.removed_snapshot_ids = self.planned.iter().map(|s| s.snapshot_id()).collect();
        Ok(Some(change))
    }
}

/// Files referenced by `expired` and by none of `kept`.
async fn unreachable_files(table: &Table, expired: &[SnapshotRef], kept: &[SnapshotRef]) -> Result<Unreachable> {
    let gone = super::referenced_by(table, expired).await?;
    let kept = super::referenced_by(table, kept).await?;
    let mut out = Unreachable {
        manifest_lists: gone.manifest_lists.difference(&kept.manifest_lists).cloned().collect(),
        manifests: gone.manifests.difference(&kept.manifests).cloned().collect(),
        ..Default::default()
    };
    for (path, (content, size)) in gone.live_files {
        // A kept snapshot that lists the file as deleted does not read it: only live entries
        // keep a file.
        if !kept.live_files.contains_key(&path) {
            out.bytes += size;
            match content {
                DataContentType::Data => out.data_files.push(path),
                _ => out.delete_files.push(path),
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Default)]
struct Unreachable {
    data_files: Vec<String>,
    delete_files: Vec<String>,
    manifests: Vec<String>,
    manifest_lists: Vec<String>,
    bytes: u64,
}

/// Expire `ident`'s old snapshots and delete what only they referenced.
pub async fn expire(
    catalogs: &Catalogs,
    ident: &TableIdent,
    settings: &MaintenanceSettings,
    dry_run: bool,
    deadline: Instant,
) -> Result<ExpireReport> {
    let now_ms = settings.clock.now_ms();
    let before = catalogs.catalog().load_table(ident).await?;
    let mut report = ExpireReport { dry_run, snapshots_before: before.metadata().snapshots().len(), ..Default::default() };
    let (expired, table) = if dry_run {
        (expirable(before.metadata(), settings, now_ms)?, before)
    } else {
        let mut planner = ExpirePlanner { settings, now_ms, planned: vec![] };
        let outcome = catalogs.committer.commit(ident, deadline, &mut planner).await?;
        report.commit_attempts = outcome.attempts;
        if !outcome.committed {
            return Ok(report);
        }
        (planner.planned, outcome.table)
    };
    let expired_ids: HashSet<i64> = expired.iter().map(|s| s.snapshot_id()).collect();
    // Kept = every snapshot of the table now (a concurrent commit's new snapshot included).
    let kept: Vec<SnapshotRef> = table.metadata().snapshots().filter(|s| !expired_ids.contains(&s.snapshot_id())).cloned().collect();
    report.snapshots_expired = expired.len();
    report.expired_snapshot_ids = expired.iter().map(|s| s.snapshot_id()).collect();
    if expired.is_empty() {
        return Ok(report);
    }
    // Iceberg's `gc.enabled = false`: the files may be shared with another table.
    if !crate::engine::confine::gc_enabled(table.metadata()) {
        report.gc_disabled = true;
        return Ok(report);
    }
    let unreachable = unreachable_files(&table, &expired, &kept).await?;
    report.bytes_deleted = unreachable.bytes;
    if dry_run {
        report.data_files_deleted = unreachable.data_files.len();
        report.delete_files_deleted = unreachable.delete_files.len();
        report.manifests_deleted = unreachable.manifests.len();
        report.manifest_lists_deleted = unreachable.manifest_lists.len();
        return Ok(report);
    }
    // Data first, metadata last: if we stop halfway, what is left is still unreferenced and
    // orphan removal (which lists the directory) finds it.
    for (paths, count) in [
        (&unreachable.data_files, &mut report.data_files_deleted),
        (&unreachable.delete_files, &mut report.delete_files_deleted),
        (&unreachable.manifests, &mut report.manifests_deleted),
        (&unreachable.manifest_lists, &mut report.manifest_lists_deleted),
    ] {
        let (deleted, failed) = super::delete_files(&table, paths, deadline).await;
        *count = deleted;
        report.delete_failures += failed;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Commits the change it is given, once.
    struct Once(Option<ChangeSet>);

    impl Planner for Once {
        async fn plan(&mut self, _table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
            Ok(self.0.take())
        }
    }

    /// A table with `gc.enabled = false` whose first file a later snapshot no longer lists:
    /// expiry drops the old snapshot and deletes nothing.
    #[tokio::test]
    async fn without_gc_snapshots_expire_and_no_file_is_deleted() {
        let fixture = crate::testkit::LocalTable::new().await;
        let ident = fixture.sibling("nogc", None, &[(crate::engine::confine::GC_ENABLED, "false")]).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let table = fixture.catalogs.catalog().load_table(&ident).await.unwrap();
        let first = crate::testkit::data_file(&table, "first");
        table.file_io().new_output(first.file_path()).unwrap().write(bytes::Bytes::from_static(b"x")).await.unwrap();
        fixture.catalogs.committer.commit(&ident, deadline, &mut Once(Some(ChangeSet::append(vec![first.clone()])))).await.unwrap();
        // An overwrite: the second snapshot no longer lists the first file.
        let mut overwrite = ChangeSet::append(vec![crate::testkit::data_file(&table, "second")]);
        overwrite.operation = Operation::Overwrite;
        overwrite.removed_files.insert(first.file_path().to_string());
        fixture.catalogs.committer.commit(&ident, deadline, &mut Once(Some(overwrite))).await.unwrap();
        let mut settings = MaintenanceSettings::from(
            &crate::model::config::Config::from_args(["snapshot_max_age_hours=1", "min_snapshots_to_keep=1"]).unwrap(),
        );
        settings.clock = crate::base::clock::Clock::Fixed(std::time::SystemTime::now() + Duration::from_secs(48 * 3600));
        let report = expire(&fixture.catalogs, &ident, &settings, false, deadline).await.unwrap();
        assert_eq!(
            (report.snapshots_expired, report.gc_disabled, report.data_files_deleted, report.manifests_deleted),
            (1, true, 0, 0),
            "{report:?}"
        );
        assert!(table.file_io().exists(first.file_path()).await.unwrap());
    }
}
