//! Row lineage (format v3) of entries a commit carries into a rewritten manifest.
//!
//! A data file added with no `first_row_id` inherits one from its manifest: the manifest's
//! `first-row-id` plus the record counts of the live entries before it that inherit too. A
//! manifest rewritten (a file removed from it, or manifests merged) gets a new range, so each
//! entry it carries must hold the id it had as an explicit `first_row_id`: the rows keep their
//! `_row_id`. New files take the snapshot's range through the manifest list writer.
//!
//! Rows a rewrite moves to new files (compaction) keep their ids too: the new files carry each
//! row's `_row_id` and `_last_updated_sequence_number` as columns (the spec's reserved field
//! ids), which readers take over the new file's inherited ones.

use std::collections::HashSet;
use std::sync::Arc;

use iceberg::spec::{DataFile, ManifestFile, ManifestStatus, NestedField, PrimitiveType, Schema, Type};

use super::manifest::with_first_row_id;
use crate::base::error::Result;

/// Reserved field ids and names of the row lineage columns (Iceberg spec, v3).
pub const ROW_ID_FIELD_ID: i32 = 2_147_483_540;
pub const LAST_UPDATED_FIELD_ID: i32 = 2_147_483_539;
const ROW_ID: &str = "_row_id";
const LAST_UPDATED: &str = "_last_updated_sequence_number";

/// Where the ids of a live data file's rows come from: the file's first row id (its own or
/// inherited) and its data sequence number. A row's own lineage columns, when the file has
/// them and they are not null, come first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLineage {
    pub first_row_id: i64,
    pub sequence_number: i64,
}

/// The inherited row ids of one manifest's entries, read in the manifest's order.
pub struct InheritedRowIds {
    next: Option<i64>,
}

impl InheritedRowIds {
    /// For the entries of `manifest` (no ids: a manifest without row lineage, or of deletes).
    pub fn of(manifest: &ManifestFile) -> Self {
        Self::from(manifest.first_row_id)
    }

    /// For the entries of a manifest whose `first-row-id` is `first`.
    pub fn from(first: Option<u64>) -> Self {
        Self { next: first.and_then(|id| i64::try_from(id).ok()) }
    }

    /// The first row id of `file`, the next entry of the manifest (of `status`; every entry is
    /// passed, in order), or `None` without row lineage.
    pub fn first_row_id(&mut self, file: &DataFile, status: ManifestStatus) -> Option<i64> {
        if let Some(own) = file.first_row_id() {
            return Some(own);
        }
        let next = self.next.filter(|_| status != ManifestStatus::Deleted)?;
        self.next = Some(next + file.record_count() as i64);
        Some(next)
    }

    /// `file`, the next entry of the manifest (of `status`), with its row id explicit. Every
    /// entry is passed, in order: deleted ones take no ids.
    pub fn explicit(&mut self, file: DataFile, status: ManifestStatus, spec_id: i32) -> Result<DataFile> {
        match (file.first_row_id(), self.first_row_id(&file, status)) {
            (None, Some(inherited)) => with_first_row_id(&file, spec_id, inherited),
            _ => Ok(file),
        }
    }
}

/// `schema` with the two lineage columns (optional longs), for files a rewrite writes.
pub fn with_lineage_columns(schema: &Schema) -> Result<Schema> {
    let mut fields: Vec<_> = schema.as_struct().fields().to_vec();
    for (id, name) in [(ROW_ID_FIELD_ID, ROW_ID), (LAST_UPDATED_FIELD_ID, LAST_UPDATED)] {
        fields.push(Arc::new(NestedField::optional(id, name, Type::Primitive(PrimitiveType::Long))));
    }
    let ids: HashSet<i32> = schema.identifier_field_ids().collect();
    Ok(Schema::builder().with_schema_id(schema.schema_id()).with_identifier_field_ids(ids).with_fields(fields).build()?)
}

#[cfg(test)]
mod tests;
