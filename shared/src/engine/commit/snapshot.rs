//! Builds the next table metadata for a [`ChangeSet`] on top of a loaded table: manifests,
//! manifest list, snapshot, summary and property updates. This is where the operations
//! iceberg-rust 0.10 lacks (replace, overwrite/row-delta) are made from its public blocks:
//! manifests ([`super::manifest`]), `ManifestListWriter`, `Snapshot::builder` and `TableUpdate`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestListWriter,
    PartitionSpecRef, Schema, Snapshot, SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary, TableMetadata,
    TableMetadataBuildResult,
};
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableUpdate};
use uuid::Uuid;

use super::ChangeSet;
use super::manifest::{ManifestFileWriter, spec_of};
use super::row_lineage::InheritedRowIds;
use crate::base::error::{Error, Result};

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

/// Entries per manifest when manifests are rewritten: ~8 MB of Avro for our schemas' stats.
const ENTRIES_PER_REWRITTEN_MANIFEST: usize = 10_000;

/// One live data-manifest entry carried into a rewritten manifest.
struct RewrittenEntry {
    data_file: DataFile,
    snapshot_id: i64,
    seq: i64,
    file_seq: Option<i64>,
    /// The change removes this file: written as a deleted entry.
    removed: bool,
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
    let commit_id = Uuid::new_v4();
    let meta_dir = format!("{}/metadata", metadata.location());
    let mut written = Vec::new();
    let mut manifest_count = 0;
    let mut next_manifest_path = || {
        manifest_count += 1;
        format!("{meta_dir}/{commit_id}-m{manifest_count}.{}", DataFileFormat::Avro)
    };

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
    let mut manifests: Vec<ManifestFile> = Vec::new();

    // The change's own manifests (data and deletes), uploaded side by side and beside the read of
    // the current manifest list (and whatever carrying it rewrites): one round trip, not two.
    let mut own = Vec::new();
    // By content and spec: a file written before the spec evolved (a delete file's tuple is its
    // data file's) goes in a manifest of its own spec.
    let mut own_groups: BTreeMap<(bool, i32), (Vec<&DataFile>, ManifestContentType, &PartitionSpecRef)> = BTreeMap::new();
    for (files, content) in
        [(&change.added_data_files, ManifestContentType::Data), (&change.added_delete_files, ManifestContentType::Deletes)]
    {
        for file in files {
            let file_spec = spec_of(file, metadata)?;
            let key = (content == ManifestContentType::Deletes, file_spec.spec_id());
            own_groups.entry(key).or_insert_with(|| (Vec::new(), content, file_spec)).0.push(file);
        }
    }
    for (files, content, spec) in own_groups.into_values() {
        let path = next_manifest_path();
        written.push(path.clone());
        let mut writer = ManifestFileWriter::for_spec(table, &schema, spec, path, Some(snapshot_id), content)?;
        for file in files {
            let expected = match content {
                ManifestContentType::Data => DataContentType::Data,
                ManifestContentType::Deletes => DataContentType::PositionDeletes,
            };
            if file.content_type() != expected {
                return Err(Error::Invariant(format!("{} is {:?}, expected {expected:?}", file.file_path(), file.content_type())));
            }
            let file = writer.widened(file.clone())?;
            collector.add_file(&file, schema.clone(), spec.clone());
            // -1: the data sequence number is inherited from the manifest list at commit.
            writer.add_file(file, -1)?;
        }
        own.push(writer.write_manifest_file());
    }
    let carry = async {
        // Carry the current snapshot's manifests, rewriting those that hold removed files.
        let mut still_to_remove: HashSet<&str> = change.removed_files.iter().map(String::as_str).collect();
        // Live data entries gathered for `rewrite_manifests` by partition spec, written after the
        // loop: a rewritten manifest holds entries of one spec only.
        let mut to_rewrite: BTreeMap<i32, Vec<RewrittenEntry>> = BTreeMap::new();
        if let Some(current) = metadata.current_snapshot() {
            // Collected first: the library's iterator is not Send, and commits run on spawned tasks.
            let carried: Vec<ManifestFile> = super::manifest_cache::manifest_list(table, current).await?.as_ref().clone();
            for manifest_file in carried {
                if change.rewrite_manifests && manifest_file.content == ManifestContentType::Data {
                    let manifest = crate::engine::commit::manifest_cache::manifest(table, &manifest_file).await?;
                    let mut row_ids = InheritedRowIds::of(&manifest_file);
                    for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                        let seq = entry.sequence_number().unwrap_or(manifest_file.sequence_number);
                        let data_file = row_ids.explicit(entry.data_file().clone(), entry.status(), manifest_file.partition_spec_id)?;
                        to_rewrite.entry(manifest_file.partition_spec_id).or_default().push(RewrittenEntry {
                            removed: still_to_remove.remove(entry.file_path()),
                            snapshot_id: entry.snapshot_id().unwrap_or(manifest_file.added_snapshot_id),
                            seq,
                            file_seq: entry.file_sequence_number.or(Some(seq)),
                            data_file,
                        });
                    }
                    continue;
                }
                if still_to_remove.is_empty() || !manifest_file.has_added_files() && !manifest_file.has_existing_files() {
                    manifests.push(manifest_file);
                    continue;
                }
                let manifest = super::manifest_cache::manifest(table, &manifest_file).await?;
                let touched = manifest.entries().iter().any(|e| e.is_alive() && still_to_remove.contains(e.file_path()));
                if !touched {
                    manifests.push(manifest_file);
                    continue;
                }
                let path = next_manifest_path();
                written.push(path.clone());
                let spec = spec_by_id(metadata, manifest_file.partition_spec_id)?;
                let mut writer = ManifestFileWriter::for_spec(table, &schema, spec, path, Some(snapshot_id), manifest_file.content)?;
                let mut row_ids = InheritedRowIds::of(&manifest_file);
                for entry in manifest.entries() {
                    if !entry.is_alive() {
                        continue;
                    }
                    let seq = entry.sequence_number().unwrap_or(manifest_file.sequence_number);
                    let file_seq = entry.file_sequence_number.or(Some(seq));
                    let data_file =
                        writer.widened(row_ids.explicit(entry.data_file().clone(), entry.status(), manifest_file.partition_spec_id)?)?;
                    if still_to_remove.remove(entry.file_path()) {
                        collector.remove_file(&data_file, schema.clone(), spec.clone());
                        writer.add_delete_file(data_file, seq, file_seq)?;
                    } else {
                        let entry_snapshot = entry.snapshot_id().unwrap_or(manifest_file.added_snapshot_id);
                        writer.add_existing_file(data_file, entry_snapshot, seq, file_seq)?;
                    }
                }
                manifests.push(writer.write_manifest_file().await?);
            }
        }
        // Few, well-sized manifests: entries keep their snapshot and sequence numbers (status
        // existing), so readers and later expiry see the same files as before.
        for (spec_id, entries) in &to_rewrite {
            let spec = spec_by_id(metadata, *spec_id)?;
            for chunk in entries.chunks(ENTRIES_PER_REWRITTEN_MANIFEST) {
                let path = next_manifest_path();
                written.push(path.clone());
                let mut writer = ManifestFileWriter::for_spec(table, &schema, spec, path, Some(snapshot_id), ManifestContentType::Data)?;
                for e in chunk {
                    if e.removed {
                        let data_file = writer.widened(e.data_file.clone())?;
                        collector.remove_file(&data_file, schema.clone(), spec.clone());
                        writer.add_delete_file(data_file, e.seq, e.file_seq)?;
                    } else {
                        writer.add_existing_file(e.data_file.clone(), e.snapshot_id, e.seq, e.file_seq)?;
                    }
                }
                manifests.push(writer.write_manifest_file().await?);
            }
        }
        if !still_to_remove.is_empty() {
            // A file to remove is no longer live: someone else removed or replaced it. The planner
            // must look again rather than commit a change built on a stale view.
            return Err(Error::CommitConflict {
                table: table.identifier().to_string(),
                reason: format!("{} file(s) to remove are no longer live", still_to_remove.len()),
            });
        }
        Ok::<_, Error>(())
    };
    let ((), own) = futures::try_join!(carry, futures::future::try_join_all(own))?;
    manifests.extend(own);

    let next_seq = metadata.next_sequence_number();
    let list_path = format!("{meta_dir}/snap-{snapshot_id}-1-{commit_id}.{}", DataFileFormat::Avro);
    written.push(list_path.clone());
    let mut list_writer = match metadata.format_version() {
        FormatVersion::V1 => {
            ManifestListWriter::v1(table.file_io().new_output(&list_path)?.writer().await?, snapshot_id, metadata.current_snapshot_id())
        }
        FormatVersion::V2 => ManifestListWriter::v2(
            table.file_io().new_output(&list_path)?.writer().await?,
            snapshot_id,
            metadata.current_snapshot_id(),
            next_seq,
        ),
        FormatVersion::V3 => ManifestListWriter::v3(
            table.file_io().new_output(&list_path)?.writer().await?,
            snapshot_id,
            metadata.current_snapshot_id(),
            next_seq,
            Some(metadata.next_row_id()),
        ),
    };
    // Drop manifests that hold no live file any more (all entries deleted long ago).
    manifests.retain(|m| m.has_added_files() || m.has_existing_files() || m.added_snapshot_id == snapshot_id);
    list_writer.add_manifests(manifests.into_iter())?;
    let next_row_id = list_writer.next_row_id();

    let mut summary_props = change.summary.clone();
    summary_props.extend(collector.build());
    let summary = with_totals(
        Summary { operation: change.operation.clone(), additional_properties: summary_props },
        metadata.current_snapshot().map(|s| s.summary()),
    );
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(metadata.current_snapshot_id())
        .with_sequence_number(next_seq)
        .with_summary(summary)
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
    Ok(Staged { snapshot_id: Some(snapshot_id), build: builder.build()?, written, manifest_list: Some(list_writer) })
}

/// The table's partition spec `id`, which a manifest or file names.
fn spec_by_id(metadata: &TableMetadata, id: i32) -> Result<&PartitionSpecRef> {
    metadata
        .partition_spec_by_id(id)
        .ok_or_else(|| Error::Data(format!("partition spec {id} is named by a manifest but is not in the table's metadata")))
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

/// Fill the `total-*` summary fields from the parent's totals plus this snapshot's changes
/// (iceberg-rust keeps its own version of this crate-private).
fn with_totals(mut summary: Summary, previous: Option<&Summary>) -> Summary {
    let prev = |key: &str| -> u64 { previous.and_then(|p| p.additional_properties.get(key)).and_then(|v| v.parse().ok()).unwrap_or(0) };
    let props = &mut summary.additional_properties;
    for (total, added, removed) in [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        ("total-delete-files", "added-delete-files", "removed-delete-files"),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        ("total-position-deletes", "added-position-deletes", "removed-position-deletes"),
        ("total-equality-deletes", "added-equality-deletes", "removed-equality-deletes"),
    ] {
        let get = |props: &HashMap<String, String>, k: &str| props.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let value = (prev(total) + get(props, added)).saturating_sub(get(props, removed));
        props.insert(total.to_string(), value.to_string());
    }
    summary
}

/// Whether the table asks for old metadata files to be deleted once they fall off the log.
pub fn delete_after_commit(metadata: &TableMetadata) -> bool {
    metadata.properties().get(super::DELETE_AFTER_COMMIT).is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests;
