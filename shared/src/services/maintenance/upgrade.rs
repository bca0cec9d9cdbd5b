//! `maintain action=upgrade format_version=3`: a v2 table becomes v3 in place, metadata only,
//! as the spec allows (its files stay; row ids are given out from the next commit on).
//!
//! Refused while a v2 delete file is live (a position-delete Parquet file, or an equality
//! delete): v3 writers replace a data file's deletes with one deletion vector, and readers
//! must not find both kinds for one file. Compaction folds position deletes into their data
//! files first. Checked on every commit attempt, against the table as it is then.

use std::time::Instant;

use iceberg::TableIdent;
use iceberg::spec::{DataFileFormat, FormatVersion, Operation};
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::engine::catalog::Catalogs;
use crate::engine::commit::live_rows::LiveFiles;
use crate::engine::commit::{ChangeSet, Planner};

/// What the upgrade did (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpgradeReport {
    pub dry_run: bool,
    pub from: u8,
    pub to: u8,
    pub committed: bool,
}

struct UpgradePlanner {
    to: FormatVersion,
}

/// Why `table` cannot become `to` now, or `None` if it can (or already is).
async fn refusal(table: &Table, to: FormatVersion) -> Result<Option<String>> {
    let from = table.metadata().format_version();
    if to < from {
        return Ok(Some(format!(
            "table {} is format version {}: a table is never downgraded to {}",
            table.identifier(),
            from as u8,
            to as u8
        )));
    }
    let live = LiveFiles::of(table).await?;
    let deletes = live.deletes_by_data_file.values().flatten().chain(&live.unscoped_deletes);
    let v2_deletes = deletes.filter(|d| d.file_format() != DataFileFormat::Puffin).count();
    if v2_deletes > 0 || live.has_equality_deletes {
        return Ok(Some(format!(
            "table {} has {v2_deletes} position delete file(s){}: run `maintain action=compact` first, which folds them into their data files (a partition written to within `hot_partition_hours` is left for later)",
            table.identifier(),
            if live.has_equality_deletes { " and equality deletes" } else { "" }
        )));
    }
    Ok(None)
}

impl Planner for UpgradePlanner {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        if table.metadata().format_version() == self.to {
            return Ok(None);
        }
        if let Some(why) = refusal(table, self.to).await? {
            return Err(Error::Data(why));
        }
        let mut change = ChangeSet::new(Operation::Replace);
        change.format_version = Some(self.to);
        Ok(Some(change))
    }
}

/// Upgrade table `ident` to format version `to` (`None`: the `format_version` knob was not given).
pub async fn upgrade(catalogs: &Catalogs, ident: &TableIdent, to: Option<u8>, dry_run: bool, deadline: Instant) -> Result<UpgradeReport> {
    let to = match to {
        Some(3) => FormatVersion::V3,
        Some(2) => FormatVersion::V2,
        _ => return Err(Error::Config("action=upgrade needs the version to upgrade to: format_version=3".into())),
    };
    let table = catalogs.catalog().load_table(ident).await?;
    let mut report = UpgradeReport { dry_run, from: table.metadata().format_version() as u8, to: to as u8, committed: false };
    if dry_run {
        if let Some(why) = refusal(&table, to).await? {
            return Err(Error::Data(why));
        }
        return Ok(report);
    }
    let outcome = catalogs.committer.commit_to(table, deadline, &mut UpgradePlanner { to }).await?;
    report.committed = outcome.committed;
    Ok(report)
}

#[cfg(test)]
mod tests;
