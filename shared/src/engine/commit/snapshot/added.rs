//! The change's own manifests: its added data and delete files, one manifest per content and
//! partition spec.

use std::collections::BTreeMap;
use std::future::Future;

use iceberg::spec::{DataContentType, DataFile, ManifestContentType, ManifestFile, PartitionSpecRef, SchemaRef, SnapshotSummaryCollector};
use iceberg::table::Table;

use super::files::AttemptFiles;
use crate::base::error::{Error, Result};
use crate::engine::commit::ChangeSet;
use crate::engine::commit::manifest::{ManifestFileWriter, spec_of};

/// Fill the manifests of `change`'s added files and count them in `collector`; the returned
/// uploads run beside the carrying of the current manifests (one round trip, not two).
pub(super) fn added_manifests(
    table: &Table,
    change: &ChangeSet,
    schema: &SchemaRef,
    snapshot_id: i64,
    files: &mut AttemptFiles,
    collector: &mut SnapshotSummaryCollector,
) -> Result<Vec<impl Future<Output = Result<ManifestFile>> + use<>>> {
    let metadata = table.metadata();
    // By content and spec: a file written before the spec evolved (a delete file's tuple is its
    // data file's) goes in a manifest of its own spec.
    let mut groups: BTreeMap<(bool, i32), (Vec<&DataFile>, ManifestContentType, &PartitionSpecRef)> = BTreeMap::new();
    for (added, content) in
        [(&change.added_data_files, ManifestContentType::Data), (&change.added_delete_files, ManifestContentType::Deletes)]
    {
        for file in added {
            let file_spec = spec_of(file, metadata)?;
            let key = (content == ManifestContentType::Deletes, file_spec.spec_id());
            groups.entry(key).or_insert_with(|| (Vec::new(), content, file_spec)).0.push(file);
        }
    }
    let mut uploads = Vec::new();
    for (group, content, spec) in groups.into_values() {
        let mut writer = ManifestFileWriter::for_spec(table, schema, spec, files.next_manifest(), Some(snapshot_id), content)?;
        let expected = match content {
            ManifestContentType::Data => DataContentType::Data,
            ManifestContentType::Deletes => DataContentType::PositionDeletes,
        };
        for file in group {
            if file.content_type() != expected {
                return Err(Error::Invariant(format!("{} is {:?}, expected {expected:?}", file.file_path(), file.content_type())));
            }
            let file = writer.widened(file.clone())?;
            collector.add_file(&file, schema.clone(), spec.clone());
            // -1: the data sequence number is inherited from the manifest list at commit.
            writer.add_file(file, -1)?;
        }
        uploads.push(writer.write_manifest_file());
    }
    Ok(uploads)
}
