//! Staged appends for queued commits (`commit_mode=queued`): a writer writes its data files and
//! one manifest that lists them under the table location, and sends a small commit request
//! naming that manifest; the committer reads the manifest back, commits its files in a snapshot
//! of its own making, and then removes the manifest.
//!
//! A staged manifest is an ordinary Iceberg data manifest (the same writer as the commit's own
//! manifests, [`super::manifest`]), written with the table's current schema and partition spec;
//! no snapshot refers to it. Unconsumed ones are unreferenced files, which orphan removal
//! deletes once they are older than its margin.

use iceberg::spec::{DataContentType, DataFile, DataFileFormat, Manifest, ManifestContentType};
use iceberg::table::Table;

use crate::error::{Error, Result};

/// Directory under the table location that holds staged manifests.
pub const STAGED_DIR: &str = "staged";

/// Write a manifest listing `files` (data files of `table`, not committed) and return its path.
pub async fn write_staged_manifest(table: &Table, files: &[DataFile]) -> Result<String> {
    if let Some(file) = files.iter().find(|f| f.content_type() != DataContentType::Data) {
        return Err(Error::Invariant(format!("only data files can be staged, not {}", file.file_path())));
    }
    let path = format!(
        "{}/{STAGED_DIR}/{}.{}",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4(),
        DataFileFormat::Avro
    );
    // No snapshot owns these entries yet: the committer adds the files to its own manifest.
    let mut writer = super::manifest::ManifestFileWriter::new(table, table.metadata().current_schema(), path.clone(), None, ManifestContentType::Data)?;
    for file in files {
        writer.add_file(file.clone(), -1)?;
    }
    writer.write_manifest_file().await?;
    Ok(path)
}

/// The data files a staged manifest lists.
pub async fn read_staged_manifest(table: &Table, path: &str) -> Result<Vec<DataFile>> {
    let bytes = table
        .file_io()
        .new_input(path)?
        .read()
        .await
        .map_err(|e| Error::Storage { path: path.to_string(), source: e })?;
    let manifest = Manifest::parse_avro(&bytes).map_err(|e| Error::Data(format!("staged manifest {path} is not a manifest: {e}")))?;
    Ok(manifest.entries().iter().map(|e| e.data_file().clone()).collect())
}

/// Remove consumed staged manifests; one already gone (a redelivered request) is no error.
/// Only the manifests: their data files are committed, or unreferenced for orphan removal.
pub async fn remove_staged_manifests(table: &Table, paths: impl IntoIterator<Item = &str>) {
    for path in paths {
        if !path.contains(&format!("/{STAGED_DIR}/")) {
            tracing::warn!(%path, "not a staged manifest path; left alone");
            continue;
        }
        if let Err(e) = table.file_io().delete(path).await {
            tracing::debug!(%path, error = %e, "staged manifest not removed; orphan removal will");
        }
    }
}
