//! The snapshot's manifest list, in the table's format version (v3 assigns row ids).

use iceberg::spec::{FormatVersion, ManifestFile, ManifestListWriter};
use iceberg::table::Table;

use crate::base::error::Result;

/// A manifest list at `path` for `snapshot_id` holding `manifests`, filled but not uploaded
/// ([`super::Staged::write`] uploads it beside the metadata file). Manifests that hold no live
/// file any more (all entries deleted long ago) are left out.
pub(super) async fn manifest_list(
    table: &Table,
    path: &str,
    snapshot_id: i64,
    mut manifests: Vec<ManifestFile>,
) -> Result<ManifestListWriter> {
    let metadata = table.metadata();
    let output = table.file_io().new_output(path)?.writer().await?;
    let (parent, next_seq) = (metadata.current_snapshot_id(), metadata.next_sequence_number());
    let mut writer = match metadata.format_version() {
        FormatVersion::V1 => ManifestListWriter::v1(output, snapshot_id, parent),
        FormatVersion::V2 => ManifestListWriter::v2(output, snapshot_id, parent, next_seq),
        FormatVersion::V3 => ManifestListWriter::v3(output, snapshot_id, parent, next_seq, Some(metadata.next_row_id())),
    };
    manifests.retain(|m| m.has_added_files() || m.has_existing_files() || m.added_snapshot_id == snapshot_id);
    writer.add_manifests(manifests.into_iter())?;
    Ok(writer)
}
