//! `icestream report TABLE`: what a table holds, read from its metadata and manifests.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataContentType, DataFileFormat, FormatVersion, ManifestContentType};
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::Result;
use crate::engine::commit::Watermarks;

/// A table's state, as `icestream report` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    pub table: String,
    pub location: String,
    pub metadata_location: String,
    pub format_version: u8,
    pub partition_spec: Vec<String>,
    pub snapshots: usize,
    pub current_snapshot_id: Option<i64>,
    pub data_files: usize,
    pub delete_files: usize,
    /// Of the delete files, deletion vectors (v3: at most one a data file).
    pub deletion_vectors: usize,
    /// v3: the row id the next row added takes (row lineage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_row_id: Option<u64>,
    pub data_bytes: u64,
    /// Rows in the data files, deleted ones included.
    pub records: u64,
    /// The rows a reader sees: `records` less the position deletes (each deletes one row, as
    /// icestream writes them); `None` when equality deletes make it a scan's question.
    pub live_rows: Option<u64>,
    pub position_deletes: u64,
    pub equality_deletes: u64,
    pub manifests: usize,
    pub partitions: usize,
    /// Highest committed offset per `topic-partition`.
    pub watermarks: BTreeMap<String, i64>,
    /// S3 Tables: the maintenance AWS runs on this table and its bucket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_maintenance: Option<serde_json::Value>,
}

/// Build the report of `table` from its current snapshot's manifests.
pub async fn report(table: &Table) -> Result<TableReport> {
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec();
    let mut r = TableReport {
        table: table.identifier().to_string(),
        location: metadata.location().to_string(),
        metadata_location: table.metadata_location().unwrap_or_default().to_string(),
        format_version: metadata.format_version() as u8,
        // `day(ts) as ts_day`: the transform of its source column, then the partition field.
        partition_spec: spec
            .fields()
            .iter()
            .map(|f| {
                let source = metadata.current_schema().name_by_field_id(f.source_id).unwrap_or("?");
                format!("{}({source}) as {}", f.transform, f.name)
            })
            .collect(),
        snapshots: metadata.snapshots().len(),
        current_snapshot_id: metadata.current_snapshot_id(),
        data_files: 0,
        delete_files: 0,
        deletion_vectors: 0,
        next_row_id: (metadata.format_version() >= FormatVersion::V3).then(|| metadata.next_row_id()),
        data_bytes: 0,
        records: 0,
        live_rows: Some(0),
        position_deletes: 0,
        equality_deletes: 0,
        manifests: 0,
        partitions: 0,
        watermarks: Watermarks::from_properties(metadata.properties()).0.into_iter().map(|(tp, o)| (tp.to_string(), o)).collect(),
        managed_maintenance: None,
    };
    let Some(snapshot) = metadata.current_snapshot() else { return Ok(r) };
    let mut partitions = std::collections::HashSet::new();
    let manifests = crate::engine::commit::manifest_cache::manifest_list(table, snapshot).await?;
    r.manifests = manifests.len();
    let reads: Vec<_> = manifests
        .iter()
        .map(|m| async move { crate::engine::commit::manifest_cache::manifest(table, m).await.map(|loaded| (m.content, loaded)) })
        .collect();
    let loaded: Vec<_> = futures::stream::iter(reads).buffer_unordered(8).try_collect().await?;
    for (content, manifest) in loaded {
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            match (content, file.content_type()) {
                (ManifestContentType::Data, _) | (_, DataContentType::Data) => {
                    r.data_files += 1;
                    r.records += file.record_count();
                    r.data_bytes += file.file_size_in_bytes();
                    partitions.insert(format!("{:?}", file.partition()));
                }
                (_, DataContentType::EqualityDeletes) => {
                    r.delete_files += 1;
                    r.equality_deletes += file.record_count();
                }
                _ => {
                    r.delete_files += 1;
                    r.deletion_vectors += usize::from(file.file_format() == DataFileFormat::Puffin);
                    r.position_deletes += file.record_count();
                }
            }
        }
    }
    r.partitions = partitions.len();
    r.live_rows = (r.equality_deletes == 0).then(|| r.records.saturating_sub(r.position_deletes));
    Ok(r)
}
