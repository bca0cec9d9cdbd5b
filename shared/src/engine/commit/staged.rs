//! Staged appends for queued commits (`commit_mode=queued`): a writer writes its data files and
//! one manifest that lists them under the table location, and sends a small commit request
//! naming that manifest; the committer reads the manifest back, commits its files in a snapshot
//! of its own making, and then removes the manifest.
//!
//! A staged manifest is an ordinary Iceberg data manifest (the same writer as the commit's own
//! manifests, [`super::manifest`]), written with the table's current schema and partition spec;
//! no snapshot refers to it. Unconsumed ones are unreferenced files, which orphan removal
//! deletes once they are older than its margin.

use iceberg::spec::{DataContentType, DataFile, DataFileFormat, Manifest, ManifestContentType, TableMetadata};
use iceberg::table::Table;

use crate::base::error::{Error, Result};
use crate::engine::confine;

/// Directory under the table location that holds staged manifests.
pub use crate::engine::confine::STAGED_DIR;

/// Where the staged manifest named `name` of the table at `location` is:
/// `<location>/staged/<name>.avro`.
pub fn staged_manifest_path(location: &str, name: &uuid::Uuid) -> String {
    format!("{}/{STAGED_DIR}/{name}.{}", location.trim_end_matches('/'), DataFileFormat::Avro)
}

/// The name of a staged manifest of the table `metadata` describes: `path` must be a file
/// directly in the table's own staged directory (normalized, no `..`: [`crate::engine::confine`]),
/// named `<uuid>.avro`. `Err` says what is wrong.
pub fn staged_manifest_name(metadata: &TableMetadata, path: &str) -> std::result::Result<uuid::Uuid, String> {
    let dir = confine::staged_dir(metadata)?;
    let normalized = confine::normalize(path)?;
    let not_staged = || format!("{path} is not a staged manifest of the table (`<uuid>.avro` directly in {dir})");
    let name = normalized.strip_prefix(&dir).and_then(|rest| rest.strip_prefix('/')).ok_or_else(not_staged)?;
    let stem = name.strip_suffix(".avro").filter(|stem| !stem.contains('/')).ok_or_else(not_staged)?;
    uuid::Uuid::parse_str(stem).ok().filter(|u| u.hyphenated().to_string() == stem).ok_or_else(not_staged)
}

/// Write a manifest listing `files` (data files of `table`, not committed) named `name`, and
/// return its path.
pub async fn write_staged_manifest(table: &Table, files: &[DataFile], name: &uuid::Uuid) -> Result<String> {
    if let Some(file) = files.iter().find(|f| f.content_type() != DataContentType::Data) {
        return Err(Error::Invariant(format!("only data files can be staged, not {}", file.file_path())));
    }
    let path = staged_manifest_path(table.metadata().location(), name);
    // No snapshot owns these entries yet: the committer adds the files to its own manifest.
    let mut writer =
        super::manifest::ManifestFileWriter::new(table, table.metadata().current_schema(), path.clone(), None, ManifestContentType::Data)?;
    for file in files {
        writer.add_file(file.clone(), -1)?;
    }
    writer.write_manifest_file().await?;
    Ok(path)
}

/// The data files a staged manifest lists.
pub async fn read_staged_manifest(table: &Table, path: &str) -> Result<Vec<DataFile>> {
    let bytes = table.file_io().new_input(path)?.read().await.map_err(|e| Error::Storage { path: path.to_string(), source: e })?;
    let manifest = Manifest::parse_avro(&bytes).map_err(|e| Error::Data(format!("staged manifest {path} is not a manifest: {e}")))?;
    Ok(manifest.entries().iter().map(|e| e.data_file().clone()).collect())
}

/// Remove consumed staged manifests; one already gone (a redelivered request) is no error.
/// Only the manifests: their data files are committed, or unreferenced for orphan removal.
/// A path that is not one of the table's own staged manifests ([`staged_manifest_name`], and
/// the rule of every delete, [`confine::deletable`]) is left alone.
pub async fn remove_staged_manifests(table: &Table, paths: impl IntoIterator<Item = &str>) {
    for path in paths {
        let allowed = staged_manifest_name(table.metadata(), path).and_then(|_| confine::deletable(table.metadata(), path));
        if let Err(reason) = allowed {
            tracing::warn!(%path, %reason, "not removed");
            continue;
        }
        if let Err(e) = table.file_io().delete(path).await {
            tracing::debug!(%path, error = %e, "staged manifest not removed; orphan removal will");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn write(table: &Table, path: &str) {
        table.file_io().new_output(path).unwrap().write(bytes::Bytes::from_static(b"x")).await.unwrap();
    }

    async fn exists(table: &Table, path: &str) -> bool {
        table.file_io().exists(path).await.unwrap()
    }

    /// A dropped request names what it likes: only a `<uuid>.avro` directly in the table's own
    /// staged directory is removed, not a path climbing out of it nor another `staged/`.
    #[tokio::test]
    async fn only_the_tables_own_staged_manifests_are_removed() {
        let fixture = crate::testkit::LocalTable::partitioned_by(iceberg::spec::Transform::Identity).await;
        let table = fixture.load().await;
        let location = table.metadata().location().trim_end_matches('/').to_string();
        let parent = location.rsplit_once('/').unwrap().0.to_string();
        let own = staged_manifest_path(&location, &uuid::Uuid::new_v4());
        let climbing = format!("{location}/{STAGED_DIR}/../../victim/precious.txt");
        let victim = format!("{parent}/victim/precious.txt");
        let other_staged = format!("{parent}/other/{STAGED_DIR}/{}.avro", uuid::Uuid::new_v4());
        let not_a_manifest = format!("{location}/{STAGED_DIR}/notes.txt");
        let nested = format!("{location}/{STAGED_DIR}/x/{}.avro", uuid::Uuid::new_v4());
        for path in [&own, &victim, &other_staged, &not_a_manifest, &nested] {
            write(&table, path).await;
        }
        remove_staged_manifests(&table, [own.as_str(), climbing.as_str(), other_staged.as_str(), not_a_manifest.as_str(), nested.as_str()])
            .await;
        assert!(!exists(&table, &own).await);
        for path in [&victim, &other_staged, &not_a_manifest, &nested] {
            assert!(exists(&table, path).await, "{path} was removed");
        }
        assert!(staged_manifest_name(table.metadata(), &climbing).unwrap_err().contains("`..`"));
    }
}
