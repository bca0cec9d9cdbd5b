//! Row lineage (format v3) of entries a commit carries into a rewritten manifest.
//!
//! A data file added with no `first_row_id` inherits one from its manifest: the manifest's
//! `first-row-id` plus the record counts of the live entries before it that inherit too. A
//! manifest rewritten (a file removed from it, or manifests merged) gets a new range, so each
//! entry it carries must hold the id it had as an explicit `first_row_id`: the rows keep their
//! `_row_id`. New files take the snapshot's range through the manifest list writer.

use iceberg::spec::{DataFile, ManifestFile, ManifestStatus};

use super::manifest::with_first_row_id;
use crate::error::Result;

/// The inherited row ids of one manifest's entries, read in the manifest's order.
pub struct InheritedRowIds {
    next: Option<i64>,
}

impl InheritedRowIds {
    /// For the entries of `manifest` (no ids: a manifest without row lineage, or of deletes).
    pub fn of(manifest: &ManifestFile) -> Self {
        Self { next: manifest.first_row_id.and_then(|id| i64::try_from(id).ok()) }
    }

    /// `file`, the next entry of the manifest (of `status`), with its row id explicit. Every
    /// entry is passed, in order: deleted ones take no ids.
    pub fn explicit(&mut self, file: DataFile, status: ManifestStatus, spec_id: i32) -> Result<DataFile> {
        let Some(next) = self.next.filter(|_| status != ManifestStatus::Deleted && file.first_row_id().is_none()) else {
            return Ok(file);
        };
        self.next = Some(next + file.record_count() as i64);
        with_first_row_id(&file, spec_id, next)
    }
}

#[cfg(test)]
mod tests;
