//! Purge an upsert table's tombstones older than `tombstone_retention_days` (counted from when
//! the delete was applied). A table without tombstones is left alone. The purge is a
//! properties-only commit through the commit module, re-planned on every attempt, so an upsert
//! writer adding tombstones meanwhile is never undone.

use std::time::Instant;

use iceberg::TableIdent;
use iceberg::spec::Operation;
use iceberg::table::Table;
use serde::Serialize;

use super::MaintenanceSettings;
use crate::base::error::Result;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::{ChangeSet, Planner};
use crate::engine::keyed::tombstones::{KeyTombstones, referenced_file};

/// What the purge did (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PurgeReport {
    pub dry_run: bool,
    pub tombstones: usize,
    pub purged: usize,
    pub cutoff_us: i64,
    pub commit_attempts: u32,
}

struct Purge {
    cutoff_us: i64,
    compression: String,
    dry_run: bool,
    report: PurgeReport,
}

impl Planner for Purge {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        // Any key: the file names its own key columns.
        let Some(mut tombstones) = KeyTombstones::load_any(table).await? else { return Ok(None) };
        self.report.tombstones = tombstones.len();
        self.report.purged = tombstones.purge_before(self.cutoff_us);
        if self.report.purged == 0 || self.dry_run {
            return Ok(None);
        }
        let mut change = ChangeSet::new(Operation::Replace);
        let (key, path) = tombstones.store(table, &self.compression).await?;
        change.properties.insert(key, path);
        Ok(Some(change))
    }
}

/// Whether `table` is an upsert table with tombstones.
pub fn has_tombstones(table: &Table) -> bool {
    referenced_file(table.metadata().properties()).is_some()
}

/// Purge `ident`'s tombstones applied before the retention.
pub async fn purge_tombstones(
    catalogs: &Catalogs,
    ident: &TableIdent,
    settings: &MaintenanceSettings,
    dry_run: bool,
    deadline: Instant,
) -> Result<PurgeReport> {
    let cutoff_us = settings.clock.now_us() - settings.tombstone_retention_days * 86_400_000_000;
    let mut planner = Purge {
        cutoff_us,
        compression: settings.compression.clone(),
        dry_run,
        report: PurgeReport { dry_run, cutoff_us, ..Default::default() },
    };
    let outcome = catalogs.committer.commit(ident, deadline, &mut planner).await?;
    let mut report = planner.report;
    report.commit_attempts = outcome.attempts;
    Ok(report)
}
