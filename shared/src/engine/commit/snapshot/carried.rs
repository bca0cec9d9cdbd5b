//! The current snapshot's manifests carried into the next: untouched ones as they are, those
//! holding removed files rewritten with deleted entries, and all data manifests rewritten into
//! few well-sized ones when the change asks (`rewrite_manifests`).

use std::collections::{BTreeMap, HashSet};

use iceberg::spec::{DataFile, ManifestContentType, ManifestFile, PartitionSpecRef, SchemaRef, SnapshotSummaryCollector, TableMetadata};
use iceberg::table::Table;

use super::files::AttemptFiles;
use crate::base::error::{Error, Result};
use crate::engine::commit::ChangeSet;
use crate::engine::commit::manifest::ManifestFileWriter;
use crate::engine::commit::manifest_cache;
use crate::engine::commit::row_lineage::InheritedRowIds;

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

/// What one attempt writes into the manifests it carries.
pub(super) struct Carry<'a> {
    pub table: &'a Table,
    pub change: &'a ChangeSet,
    pub schema: &'a SchemaRef,
    pub snapshot_id: i64,
}

impl Carry<'_> {
    /// The manifests of the current snapshot as the next one holds them, every removed file
    /// counted in `collector`. A file to remove that is no longer live is a conflict.
    pub async fn manifests(&self, files: &mut AttemptFiles, collector: &mut SnapshotSummaryCollector) -> Result<Vec<ManifestFile>> {
        let (table, change) = (self.table, self.change);
        let mut manifests = Vec::new();
        let mut still_to_remove: HashSet<&str> = change.removed_files.iter().map(String::as_str).collect();
        // Live data entries gathered for `rewrite_manifests` by partition spec, written after the
        // loop: a rewritten manifest holds entries of one spec only.
        let mut to_rewrite: BTreeMap<i32, Vec<RewrittenEntry>> = BTreeMap::new();
        if let Some(current) = table.metadata().current_snapshot() {
            // Collected first: the library's iterator is not Send, and commits run on spawned tasks.
            let carried: Vec<ManifestFile> = manifest_cache::manifest_list(table, current).await?.as_ref().clone();
            for manifest_file in carried {
                if change.rewrite_manifests && manifest_file.content == ManifestContentType::Data {
                    let manifest = manifest_cache::manifest(table, &manifest_file).await?;
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
                manifests.push(self.without_removed(manifest_file, &mut still_to_remove, files, collector).await?);
            }
        }
        for (spec_id, entries) in &to_rewrite {
            manifests.extend(self.rewritten(*spec_id, entries, files, collector).await?);
        }
        if !still_to_remove.is_empty() {
            // A file to remove is no longer live: someone else removed or replaced it. The planner
            // must look again rather than commit a change built on a stale view.
            return Err(Error::CommitConflict {
                table: table.identifier().to_string(),
                reason: format!("{} file(s) to remove are no longer live", still_to_remove.len()),
            });
        }
        Ok(manifests)
    }

    /// A writer of the attempt's next manifest, owned by its snapshot.
    fn writer(&self, spec: &PartitionSpecRef, content: ManifestContentType, files: &mut AttemptFiles) -> Result<ManifestFileWriter> {
        ManifestFileWriter::for_spec(self.table, self.schema, spec, files.next_manifest(), Some(self.snapshot_id), content)
    }

    /// `manifest_file` as it is, or rewritten with the files it holds that the change removes
    /// as deleted entries (taken out of `still_to_remove`).
    async fn without_removed(
        &self,
        manifest_file: ManifestFile,
        still_to_remove: &mut HashSet<&str>,
        files: &mut AttemptFiles,
        collector: &mut SnapshotSummaryCollector,
    ) -> Result<ManifestFile> {
        if still_to_remove.is_empty() || !manifest_file.has_added_files() && !manifest_file.has_existing_files() {
            return Ok(manifest_file);
        }
        let manifest = manifest_cache::manifest(self.table, &manifest_file).await?;
        if !manifest.entries().iter().any(|e| e.is_alive() && still_to_remove.contains(e.file_path())) {
            return Ok(manifest_file);
        }
        let spec = spec_by_id(self.table.metadata(), manifest_file.partition_spec_id)?;
        let mut writer = self.writer(spec, manifest_file.content, files)?;
        let mut row_ids = InheritedRowIds::of(&manifest_file);
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            let seq = entry.sequence_number().unwrap_or(manifest_file.sequence_number);
            let file_seq = entry.file_sequence_number.or(Some(seq));
            let data_file =
                writer.widened(row_ids.explicit(entry.data_file().clone(), entry.status(), manifest_file.partition_spec_id)?)?;
            if still_to_remove.remove(entry.file_path()) {
                collector.remove_file(&data_file, self.schema.clone(), spec.clone());
                writer.add_delete_file(data_file, seq, file_seq)?;
            } else {
                let entry_snapshot = entry.snapshot_id().unwrap_or(manifest_file.added_snapshot_id);
                writer.add_existing_file(data_file, entry_snapshot, seq, file_seq)?;
            }
        }
        writer.write_manifest_file().await
    }

    /// Few, well-sized manifests of one spec: entries keep their snapshot and sequence numbers
    /// (status existing), so readers and later expiry see the same files as before.
    async fn rewritten(
        &self,
        spec_id: i32,
        entries: &[RewrittenEntry],
        files: &mut AttemptFiles,
        collector: &mut SnapshotSummaryCollector,
    ) -> Result<Vec<ManifestFile>> {
        let spec = spec_by_id(self.table.metadata(), spec_id)?;
        let mut out = Vec::new();
        for chunk in entries.chunks(ENTRIES_PER_REWRITTEN_MANIFEST) {
            let mut writer = self.writer(spec, ManifestContentType::Data, files)?;
            for e in chunk {
                if e.removed {
                    let data_file = writer.widened(e.data_file.clone())?;
                    collector.remove_file(&data_file, self.schema.clone(), spec.clone());
                    writer.add_delete_file(data_file, e.seq, e.file_seq)?;
                } else {
                    writer.add_existing_file(e.data_file.clone(), e.snapshot_id, e.seq, e.file_seq)?;
                }
            }
            out.push(writer.write_manifest_file().await?);
        }
        Ok(out)
    }
}

/// The table's partition spec `id`, which a manifest or file names.
fn spec_by_id(metadata: &TableMetadata, id: i32) -> Result<&PartitionSpecRef> {
    metadata
        .partition_spec_by_id(id)
        .ok_or_else(|| Error::Data(format!("partition spec {id} is named by a manifest but is not in the table's metadata")))
}
