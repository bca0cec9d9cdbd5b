//! Manifest rewrite: many per-commit manifests make every scan plan open many small Avro
//! files. Rewrite the live data entries of the current snapshot into few manifests (metadata
//! only: a replace snapshot with no data change).

use std::collections::BTreeMap;
use std::time::Instant;

use iceberg::TableIdent;
use iceberg::spec::{ManifestContentType, Operation};
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::Result;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::{ChangeSet, Planner};

/// Rewrite only past this many data manifests: a few are cheap to plan over.
const MAX_DATA_MANIFESTS: usize = 4;

/// Entries per rewritten manifest (kept in step with the commit module's rewrite).
const ENTRIES_PER_MANIFEST: u64 = 10_000;

/// What the manifest rewrite did (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RewriteManifestsReport {
    pub dry_run: bool,
    pub data_manifests_before: usize,
    pub data_manifests_after: usize,
    pub live_data_files: u64,
    pub committed: bool,
    pub snapshot_id: Option<i64>,
    pub commit_attempts: u32,
}

/// Data manifests of the current snapshot and the live entries in them, by partition spec.
async fn data_manifests(table: &Table) -> Result<(usize, BTreeMap<i32, u64>)> {
    let Some(current) = table.metadata().current_snapshot() else { return Ok((0, BTreeMap::new())) };
    let manifests = super::manifests_of(table, current).await?;
    let data: Vec<_> = manifests.iter().filter(|m| m.content == ManifestContentType::Data).collect();
    let mut live = BTreeMap::new();
    for m in &data {
        *live.entry(m.partition_spec_id).or_default() +=
            m.added_files_count.unwrap_or(0) as u64 + m.existing_files_count.unwrap_or(0) as u64;
    }
    Ok((data.len(), live))
}

struct RewritePlanner;

impl Planner for RewritePlanner {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let (count, _) = data_manifests(table).await?;
        if count <= MAX_DATA_MANIFESTS {
            return Ok(None);
        }
        let mut change = ChangeSet::new(Operation::Replace);
        change.rewrite_manifests = true;
        change.summary.insert("icestream.maintenance".into(), "rewrite-manifests".into());
        Ok(Some(change))
    }
}

/// Rewrite `ident`'s data manifests if there are more than a few.
pub async fn rewrite_manifests(
    catalogs: &Catalogs,
    ident: &TableIdent,
    dry_run: bool,
    deadline: Instant,
) -> Result<RewriteManifestsReport> {
    let table = catalogs.catalog().load_table(ident).await?;
    let (before, live) = data_manifests(&table).await?;
    let live_data_files = live.values().sum();
    let mut report = RewriteManifestsReport { dry_run, data_manifests_before: before, live_data_files, ..Default::default() };
    // A rewritten manifest holds the entries of one partition spec.
    let planned_after = live.values().map(|n| n.div_ceil(ENTRIES_PER_MANIFEST) as usize).sum();
    if before <= MAX_DATA_MANIFESTS {
        report.data_manifests_after = before;
        return Ok(report);
    }
    if dry_run {
        report.data_manifests_after = planned_after;
        return Ok(report);
    }
    let outcome = catalogs.committer.commit(ident, deadline, &mut RewritePlanner).await?;
    report.committed = outcome.committed;
    report.snapshot_id = outcome.snapshot_id;
    report.commit_attempts = outcome.attempts;
    report.data_manifests_after = data_manifests(&outcome.table).await?.0;
    Ok(report)
}
