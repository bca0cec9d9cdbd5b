//! Builds the next table metadata for a [`ChangeSet`] on top of a loaded table: manifests,
//! manifest list, snapshot, summary and property updates. This is where the operations
//! iceberg-rust 0.10 lacks (replace, overwrite/row-delta) are made from its public blocks:
//! manifests ([`super::manifest`]), `ManifestListWriter`, `Snapshot::builder` and `TableUpdate`.

mod added;
mod carried;
mod files;
mod manifest_list;
mod summary;

use std::sync::Arc;

use iceberg::io::FileIO;
use iceberg::spec::{
    MAIN_BRANCH, ManifestListWriter, Schema, Snapshot, SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, TableMetadata,
    TableMetadataBuildResult,
};
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableUpdate};
use uuid::Uuid;

use super::ChangeSet;
use crate::base::error::{Error, Result};
use carried::Carry;
use files::AttemptFiles;

/// The staged result of one attempt: metadata to write and swap in.
pub struct Staged {
    pub snapshot_id: Option<i64>,
    pub build: TableMetadataBuildResult,
    /// Files the attempt wrote (manifests, manifest list): orphans if the swap loses.
    pub written: Vec<String>,
    /// The manifest list, filled but not yet uploaded: [`Staged::write`] uploads it beside the
    /// metadata file, which only names it.
    manifest_list: Option<ManifestListWriter>,
}

impl Staged {
    /// Write the manifest list and the new metadata file at once (one round trip, not two):
    /// neither is visible to readers before the pointer swap.
    pub async fn write(&mut self, file_io: &FileIO, next: &MetadataLocation) -> Result<()> {
        let list = self.manifest_list.take();
        let list = async {
            match list {
                Some(writer) => writer.close().await,
                None => Ok(()),
            }
        };
        futures::try_join!(list, self.build.metadata.write_to(file_io, next))?;
        Ok(())
    }
}

/// A snapshot id not used by the table yet (positive, random).
fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (hi, lo) = Uuid::new_v4().as_u64_pair();
        let id = ((hi ^ lo) & (i64::MAX as u64)) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Stage `change` on `table`. Writes manifests and the manifest list; writes no metadata file.
pub async fn stage(table: &Table, change: &ChangeSet) -> Result<Staged> {
    let metadata = table.metadata();
    let current_location = table.metadata_location_result()?.to_string();
    let mut builder = metadata.clone().into_builder(Some(current_location));

    let mut properties = change.properties.clone();
    properties.extend(change.watermarks.property_updates(&super::Watermarks::from_properties(metadata.properties())));

    if !change.removed_snapshot_ids.is_empty() {
        if let Some(current) = metadata.current_snapshot_id()
            && change.removed_snapshot_ids.contains(&current)
        {
            return Err(Error::Invariant(format!("refusing to expire the current snapshot {current}")));
        }
        builder = TableUpdate::RemoveSnapshots { snapshot_ids: change.removed_snapshot_ids.clone() }.apply(builder)?;
    }

    if let Some(version) = change.format_version {
        builder = builder.upgrade_format_version(version)?;
    }
    if let Some(order) = &change.sort_order {
        builder = builder.add_sort_order(order.clone())?.set_default_sort_order(-1)?;
    }

    if !change.makes_snapshot() {
        if let Some(evolved) = &change.schema {
            builder = builder.add_current_schema(evolved.clone())?;
        }
        if !properties.is_empty() {
            builder = TableUpdate::SetProperties { updates: properties }.apply(builder)?;
        }
        return Ok(Staged { snapshot_id: None, build: builder.build()?, written: vec![], manifest_list: None });
    }

    let snapshot_id = new_snapshot_id(metadata);
    let mut files = AttemptFiles::new(metadata);

    // A schema change lands in the same metadata as the files written with it.
    let (schema, schema_id) = match &change.schema {
        Some(evolved) => {
            let id = schema_id_for(metadata, evolved);
            builder = builder.add_current_schema(evolved.clone())?;
            (Arc::new(evolved.clone().into_builder().with_schema_id(id).build()?), id)
        }
        None => (metadata.current_schema().clone(), metadata.current_schema_id()),
    };
    let mut collector = SnapshotSummaryCollector::default();
    // The change's own manifests upload beside the read of the current manifest list (and
    // whatever carrying it rewrites): one round trip, not two.
    let added = added::added_manifests(table, change, &schema, snapshot_id, &mut files, &mut collector)?;
    let carry = Carry { table, change, schema: &schema, snapshot_id };
    let (mut manifests, added) = futures::try_join!(carry.manifests(&mut files, &mut collector), futures::future::try_join_all(added))?;
    manifests.extend(added);

    let list_path = files.manifest_list(snapshot_id);
    let list_writer = manifest_list::manifest_list(table, &list_path, snapshot_id, manifests).await?;
    let next_row_id = list_writer.next_row_id();
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(metadata.current_snapshot_id())
        .with_sequence_number(metadata.next_sequence_number())
        .with_summary(summary::summary(change, collector, metadata))
        .with_schema_id(schema_id)
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis().max(metadata.last_updated_ms()));
    let snapshot = match next_row_id {
        Some(next) => snapshot.with_row_range(metadata.next_row_id(), next - metadata.next_row_id()).build(),
        None => snapshot.build(),
    };

    builder = TableUpdate::AddSnapshot { snapshot }.apply(builder)?;
    builder = TableUpdate::SetSnapshotRef {
        ref_name: MAIN_BRANCH.to_string(),
        reference: SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
    }
    .apply(builder)?;
    if !properties.is_empty() {
        builder = TableUpdate::SetProperties { updates: properties }.apply(builder)?;
    }
    Ok(Staged { snapshot_id: Some(snapshot_id), build: builder.build()?, written: files.written, manifest_list: Some(list_writer) })
}

/// The id `TableMetadataBuilder::add_schema` gives `schema`: an equal schema's, or the next.
fn schema_id_for(metadata: &TableMetadata, schema: &Schema) -> i32 {
    let same =
        metadata.schemas_iter().find(|s| s.as_struct() == schema.as_struct() && s.identifier_field_ids().eq(schema.identifier_field_ids()));
    match same {
        Some(s) => s.schema_id(),
        None => metadata.schemas_iter().map(|s| s.schema_id()).max().unwrap_or(0) + 1,
    }
}

/// Whether the table asks for old metadata files to be deleted once they fall off the log.
pub fn delete_after_commit(metadata: &TableMetadata) -> bool {
    metadata.properties().get(super::DELETE_AFTER_COMMIT).is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests;
