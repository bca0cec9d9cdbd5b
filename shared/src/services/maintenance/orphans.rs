//! Orphan removal: files under the table location that no metadata references (leftovers of
//! crashed or lost commits, failed deletes) and that are older than `orphan_margin_hours`.
//! The margin matters: a write in flight is unreferenced until its commit lands.
//!
//! Queued commits (`commit_mode=queued`) hold data files that no metadata references for as
//! long as their request waits in the queue or its dead-letter queue, which can be longer than
//! any margin. Staged manifests are removed only by the committer, so a staged manifest that
//! exists may still be committed: it and every file it lists count as referenced, until it is
//! older than SQS's longest message retention, when no request can name it any more.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use iceberg::TableIdent;
use iceberg::table::Table;
use serde::Serialize;

use super::MaintenanceSettings;
use crate::base::error::{Error, Result};
use crate::engine::catalog::Catalogs;

/// Orphan paths listed in the report (the counts cover all of them).
const SAMPLE: usize = 20;

/// SQS keeps a message at most 14 days, counted from its first enqueue even after it moves to
/// a dead-letter queue; a staged manifest older than that (plus a day) has no request left.
pub const STAGED_RETENTION: Duration = Duration::from_secs(15 * 24 * 3600);

/// What orphan removal found and did (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OrphanReport {
    pub dry_run: bool,
    pub files_listed: usize,
    pub referenced: usize,
    /// Unreferenced files, old or not.
    pub orphans_found: usize,
    /// Unreferenced but younger than the margin: kept.
    pub orphans_too_young: usize,
    pub deleted: usize,
    pub bytes_deleted: u64,
    pub delete_failures: usize,
    /// Staged manifests of queued commits kept (with the files they list) for their committer.
    pub staged_manifests_kept: usize,
    /// Files listed under the location outside the table's own directories (another table's,
    /// when the location is shared): never candidates ([`crate::engine::confine::deletable`]).
    pub not_the_tables: usize,
    pub sample: Vec<String>,
}

/// A file under the table location.
#[derive(Debug, Clone)]
pub struct ListedFile {
    /// Full URI as metadata spells it (`file:///…`, `s3://bucket/key`).
    pub path: String,
    pub modified: SystemTime,
    pub size: u64,
}

/// One spelling for comparing locations: `file:/x`, `file:///x` and `/x` are the same file.
fn normalize(path: &str) -> String {
    match path.strip_prefix("file:") {
        Some(rest) => format!("/{}", rest.trim_start_matches('/')),
        None => path.to_string(),
    }
}

/// Everything the table's metadata references: metadata files (current and logged), and for
/// every snapshot its manifest list, manifests and every file its manifests name.
async fn referenced_by_table(table: &Table) -> Result<HashSet<String>> {
    let metadata = table.metadata();
    let mut out: HashSet<String> = HashSet::new();
    out.extend(table.metadata_location().map(normalize));
    out.extend(metadata.metadata_log().iter().map(|l| normalize(&l.metadata_file)));
    // An upsert table's tombstone file is named by a property, not by a manifest.
    out.extend(crate::engine::keyed::tombstones::referenced_file(metadata.properties()).map(normalize));
    let r = super::referenced_by(table, metadata.snapshots()).await?;
    out.extend(r.manifest_lists.iter().chain(&r.manifests).chain(&r.any_files).map(|p| normalize(p)));
    Ok(out)
}

fn walk_local(dir: &Path, out: &mut Vec<ListedFile>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            walk_local(&entry.path(), out)?;
        } else if meta.is_file() {
            out.push(ListedFile { path: format!("file://{}", entry.path().display()), modified: meta.modified()?, size: meta.len() });
        }
    }
    Ok(())
}

#[cfg(not(feature = "aws"))]
async fn list_s3(location: &str, _settings: &MaintenanceSettings) -> Result<Vec<ListedFile>> {
    Err(Error::not_built(&format!("listing {location}"), "aws"))
}

#[cfg(feature = "aws")]
async fn list_s3(location: &str, settings: &MaintenanceSettings) -> Result<Vec<ListedFile>> {
    let rest = location.strip_prefix("s3://").or_else(|| location.strip_prefix("s3a://")).unwrap_or(location);
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = if prefix.is_empty() { String::new() } else { format!("{}/", prefix.trim_end_matches('/')) };
    let sdk = crate::base::aws::sdk_config().await;
    // Same endpoint override and addressing as the catalog's file IO (local S3-compatible servers).
    let client = aws_sdk_s3::Client::from_conf(crate::base::aws::s3_config(&sdk, settings.s3_path_style));
    let mut pages = client.list_objects_v2().bucket(bucket).prefix(&prefix).into_paginator().send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| crate::base::aws::error("s3:ListBucket", &format!("s3://{bucket}/{prefix}"), e))?;
        for object in page.contents() {
            let (Some(key), Some(modified)) = (object.key(), object.last_modified()) else { continue };
            let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(modified.secs().max(0) as u64);
            out.push(ListedFile { path: format!("s3://{bucket}/{key}"), modified, size: object.size().unwrap_or(0).max(0) as u64 });
        }
    }
    Ok(out)
}

/// Every file under `location` (a `file://` or `s3://` URI).
pub async fn list_files(location: &str, settings: &MaintenanceSettings) -> Result<Vec<ListedFile>> {
    if location.starts_with("file:") || location.starts_with('/') {
        let dir = normalize(location);
        let mut out = Vec::new();
        tokio::task::spawn_blocking(move || walk_local(Path::new(&dir), &mut out).map(|()| out))
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))?
    } else if location.starts_with("s3://") || location.starts_with("s3a://") {
        list_s3(location, settings).await
    } else {
        Err(Error::Config(format!("cannot list files under {location}: only file:// and s3:// locations")))
    }
}

/// Delete `ident`'s unreferenced files older than the margin.
pub async fn remove_orphans(
    catalogs: &Catalogs,
    ident: &TableIdent,
    settings: &MaintenanceSettings,
    dry_run: bool,
    deadline: Instant,
) -> Result<OrphanReport> {
    remove_orphans_with(catalogs, ident, settings, dry_run, deadline, async || {}).await
}

/// [`remove_orphans`], running `after_load` right after the table whose references count is
/// loaded (tests put another process's commit there).
async fn remove_orphans_with(
    catalogs: &Catalogs,
    ident: &TableIdent,
    settings: &MaintenanceSettings,
    dry_run: bool,
    deadline: Instant,
    after_load: impl AsyncFnOnce(),
) -> Result<OrphanReport> {
    // List, then protect what is in flight, then read the metadata. A file committed between
    // the listing and the load is referenced by the metadata we read; one written after the
    // listing is not in the listing at all. Staged manifests are read before the load: the
    // committer deletes a request's manifest only after committing it, so a manifest gone by
    // then was committed before the load, and the load references its files.
    let first = catalogs.catalog().load_table(ident).await?;
    if !crate::engine::confine::gc_enabled(first.metadata()) {
        return Err(Error::Config(format!(
            "{ident} has {} = false (its files may be another table's): orphan removal refused",
            crate::engine::confine::GC_ENABLED
        )));
    }
    let location = first.metadata().location().to_string();
    let listed = list_files(&location, settings).await?;
    let mut referenced = HashSet::new();
    let staged_kept = keep_staged(&first, &listed, settings.clock.now(), &mut referenced).await;
    let table = catalogs.catalog().load_table(ident).await?;
    after_load().await;
    referenced.extend(referenced_by_table(&table).await?);
    let margin = Duration::from_secs(settings.orphan_margin_hours.max(1) as u64 * 3600);
    let cutoff = settings.clock.now().checked_sub(margin).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut report = OrphanReport {
        dry_run,
        files_listed: listed.len(),
        referenced: referenced.len(),
        staged_manifests_kept: staged_kept,
        ..Default::default()
    };
    let mut old_orphans = Vec::new();
    // Only the table's own directories: under a location shared with other tables (a
    // namespace directory) their files are listed too, and are not this table's orphans.
    let (own, not_own): (Vec<ListedFile>, Vec<ListedFile>) =
        listed.into_iter().partition(|f| crate::engine::confine::deletable(table.metadata(), &f.path).is_ok());
    report.not_the_tables = not_own.len();
    for file in own.into_iter().filter(|f| !referenced.contains(&normalize(&f.path))) {
        report.orphans_found += 1;
        if file.modified > cutoff {
            report.orphans_too_young += 1;
            continue;
        }
        if report.sample.len() < SAMPLE {
            report.sample.push(file.path.clone());
        }
        report.bytes_deleted += file.size;
        old_orphans.push(file.path);
    }
    if dry_run {
        report.deleted = old_orphans.len();
        return Ok(report);
    }
    let (deleted, failed) = super::delete_files(&table, &old_orphans, deadline).await;
    report.deleted = deleted;
    report.delete_failures = failed;
    Ok(report)
}

/// Add every staged manifest in `listed` younger than [`STAGED_RETENTION`], and the files it
/// lists, to `referenced`. One that cannot be read is kept too (only its own files are known
/// to be safe to keep, and the committer will report it). Returns how many were kept.
async fn keep_staged(table: &Table, listed: &[ListedFile], now: SystemTime, referenced: &mut HashSet<String>) -> usize {
    let dir = format!("/{}/", crate::engine::commit::staged::STAGED_DIR);
    let oldest = now.checked_sub(STAGED_RETENTION).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut kept = 0;
    for file in listed.iter().filter(|f| f.path.contains(&dir) && f.modified > oldest) {
        kept += 1;
        referenced.insert(normalize(&file.path));
        match crate::engine::commit::staged::read_staged_manifest(table, &file.path).await {
            Ok(files) => referenced.extend(files.iter().map(|f| normalize(f.file_path()))),
            Err(e) => tracing::warn!(path = %file.path, error = %e, "staged manifest unreadable; kept, its files may be removed"),
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::Clock;
    use crate::engine::commit::staged::{remove_staged_manifests, write_staged_manifest};
    use crate::testkit::{LocalTable, data_file};

    async fn write(table: &Table, path: &str) {
        table.file_io().new_output(path).unwrap().write(b"x".to_vec().into()).await.unwrap();
    }

    async fn exists(table: &Table, path: &str) -> bool {
        table.file_io().exists(path).await.unwrap()
    }

    /// Appends `files` once.
    struct AppendOnce(Vec<iceberg::spec::DataFile>);

    impl crate::engine::commit::Planner for AppendOnce {
        async fn plan(&mut self, _table: &Table, _attempt: u32) -> Result<Option<crate::engine::commit::ChangeSet>> {
            Ok((!self.0.is_empty()).then(|| crate::engine::commit::ChangeSet::append(std::mem::take(&mut self.0))))
        }
    }

    /// Issue 45, defect 7: the committer commits a queued request and removes its staged
    /// manifest while orphan removal runs. Its files are protected by the manifest or referenced
    /// by the table orphan removal reads, never neither.
    #[tokio::test]
    async fn a_request_committed_while_orphans_run_keeps_its_files() {
        let local = LocalTable::new().await;
        let table = local.load().await;
        let queued = data_file(&table, "queued");
        write(&table, queued.file_path()).await;
        let manifest = write_staged_manifest(&table, std::slice::from_ref(&queued), &uuid::Uuid::new_v4()).await.unwrap();
        let mut settings = MaintenanceSettings::from(&crate::model::config::Config::from_args(["orphan_margin_hours=1"]).unwrap());
        // Two days later: the request waited in the dead-letter queue and was redriven.
        settings.clock = Clock::Fixed(SystemTime::now() + Duration::from_secs(2 * 86_400));
        let deadline = Instant::now() + Duration::from_secs(30);
        let committer = async || {
            let mut planner = AppendOnce(vec![queued.clone()]);
            let out = local.catalogs.committer.commit(&local.ident, deadline, &mut planner).await.unwrap();
            remove_staged_manifests(&out.table, [manifest.as_str()]).await;
        };
        let report = remove_orphans_with(&local.catalogs, &local.ident, &settings, false, deadline, committer).await.unwrap();
        assert!(exists(&table, queued.file_path()).await, "a committed file was deleted: {report:?}");
        let now = local.load().await;
        assert_eq!(
            now.metadata().current_snapshot().map(|s| s.summary().additional_properties.get("added-data-files").cloned()),
            Some(Some("1".into()))
        );
    }

    #[tokio::test]
    async fn files_of_a_request_still_queued_survive_the_margin_until_sqs_retention_ends() {
        let local = LocalTable::new().await;
        let table = local.load().await;
        let queued = data_file(&table, "queued");
        let stray = data_file(&table, "stray");
        write(&table, queued.file_path()).await;
        write(&table, stray.file_path()).await;
        let manifest = write_staged_manifest(&table, std::slice::from_ref(&queued), &uuid::Uuid::new_v4()).await.unwrap();
        let mut settings = MaintenanceSettings::from(&crate::model::config::Config::from_args(["orphan_margin_hours=1"]).unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);

        // Two days later (the request waits in the dead-letter queue): only the stray goes.
        settings.clock = Clock::Fixed(SystemTime::now() + Duration::from_secs(2 * 86_400));
        let report = remove_orphans(&local.catalogs, &local.ident, &settings, false, deadline).await.unwrap();
        assert_eq!((report.staged_manifests_kept, report.deleted), (1, 1), "{report:?}");
        assert!(!exists(&table, stray.file_path()).await);
        assert!(exists(&table, queued.file_path()).await && exists(&table, &manifest).await);

        // Past SQS's retention no request can name the manifest: both are orphans.
        settings.clock = Clock::Fixed(SystemTime::now() + STAGED_RETENTION + Duration::from_secs(86_400));
        let report = remove_orphans(&local.catalogs, &local.ident, &settings, false, deadline).await.unwrap();
        assert_eq!((report.staged_manifests_kept, report.deleted), (0, 2), "{report:?}");
        assert!(!exists(&table, queued.file_path()).await && !exists(&table, &manifest).await);
    }
}
