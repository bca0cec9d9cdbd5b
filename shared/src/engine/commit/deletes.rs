//! The delete file that removes rows of one data file, in the form the table's format takes: a
//! position-delete Parquet file beside the file's earlier ones (v2), or a deletion vector that
//! replaces its earlier deletes (v3: at most one DV per data file in a snapshot, and no new
//! position-delete files).

use std::collections::BTreeSet;

use iceberg::spec::{DataFile, FormatVersion};
use iceberg::table::Table;

use super::dv;
use super::live_rows::{LiveFiles, deleted_positions};
use super::row_delta::write_position_deletes;
use crate::base::error::Result;

/// What deleting rows of one data file adds and removes in the commit.
pub struct FileDeletes {
    pub added: DataFile,
    /// Delete files the added one replaces (their positions are in it).
    pub replaced: Vec<String>,
}

/// Delete `positions` of `data_file`, a live file of `live` (the table's current snapshot).
pub async fn delete_rows(
    table: &Table,
    live: &LiveFiles,
    data_file: &DataFile,
    positions: &BTreeSet<i64>,
    compression: &str,
) -> Result<FileDeletes> {
    if table.metadata().format_version() < FormatVersion::V3 {
        let added = write_position_deletes(table, data_file, positions, compression).await?;
        return Ok(FileDeletes { added, replaced: vec![] });
    }
    let path = data_file.file_path();
    // The file's current DV (and any position deletes from before an upgrade) merge into the
    // new DV, which takes the place of those scoped to this file. Deletes another engine wrote
    // for many files stay: their positions are in the DV too, so applying both is the same.
    let earlier = live.deletes_for(path);
    let mut merged = dv::bitmap_of(deleted_positions(table, path, &earlier).await?, path)?;
    merged |= dv::bitmap_of(positions.iter().copied(), path)?;
    let added = dv::write(table, data_file, &merged).await?;
    let replaced = live.deletes_by_data_file.get(path).into_iter().flatten().map(|d| d.file_path().to_string()).collect();
    Ok(FileDeletes { added, replaced })
}

#[cfg(test)]
mod tests;
