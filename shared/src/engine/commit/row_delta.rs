//! Row-level changes (merge-on-read), the operation iceberg-rust 0.10 lacks, built from its
//! public blocks: find where rows live (data file + row position, minus positions already
//! deleted), and write Iceberg position-delete files that remove them. A [`super::ChangeSet`]
//! then carries the delete files together with the appended rows in one snapshot.
//!
//! Every delete file we write references exactly one data file (`referenced_data_file` set):
//! readers can skip it for every other file, and iceberg-rust 0.10.1's scan can hang when
//! several data files share one position-delete file. No equality deletes: slow to read and
//! unreadable by PyIceberg.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use futures::{StreamExt, TryFutureExt, TryStreamExt};
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::schema::types::SchemaDescriptor;

use super::manifest::spec_of;
use super::row_lineage::{FileLineage, InheritedRowIds};
use crate::base::error::{Error, Result};
use crate::engine::columns::Columns;
use crate::engine::columns::conform::conform_batch;
use crate::engine::writer::writer_properties;

/// Reserved field ids of the position-delete schema (Iceberg spec).
const FILE_PATH_FIELD_ID: i32 = 2_147_483_546;
const POS_FIELD_ID: i32 = 2_147_483_545;

/// The live files of a table's current snapshot, with the delete files that apply to each
/// data file.
#[derive(Debug, Default, Clone)]
pub struct LiveFiles {
    pub data: Vec<DataFile>,
    /// Position-delete files by the data file they reference.
    pub deletes_by_data_file: HashMap<String, Vec<DataFile>>,
    /// Position-delete files written without `referenced_data_file` (other writers): they may
    /// hold positions of any data file of their partition, so each is read for every file.
    pub unscoped_deletes: Vec<DataFile>,
    /// Whether the table has equality deletes (we never write them; we refuse to guess).
    pub has_equality_deletes: bool,
    /// The partition spec of each data file (by path), from its manifest: a file's partition
    /// tuple follows its own spec, which may not be the table's current one.
    pub spec_ids: HashMap<String, i32>,
    /// Row lineage of each data file (by path), on tables that have it (v3).
    pub lineage: HashMap<String, FileLineage>,
}

impl LiveFiles {
    /// The path of every live data and delete file (a rewrite of the whole table removes them).
    pub fn every_path(&self) -> impl Iterator<Item = String> + '_ {
        let deletes = self.deletes_by_data_file.values().flatten().chain(&self.unscoped_deletes);
        self.data.iter().chain(deletes).map(|f| f.file_path().to_string())
    }

    /// Read the current snapshot's manifests.
    pub async fn of(table: &Table) -> Result<Self> {
        let mut out = LiveFiles::default();
        let Some(current) = table.metadata().current_snapshot() else { return Ok(out) };
        let files = super::manifest_cache::manifest_list(table, current).await?;
        // Futures collected first: a closure in the stream's type trips the Send check.
        let reads: Vec<_> = files
            .iter()
            .map(|m| {
                crate::engine::commit::manifest_cache::manifest(table, m).map_ok(|manifest| (m.partition_spec_id, m.first_row_id, manifest))
            })
            .collect();
        let manifests: Vec<_> = futures::stream::iter(reads).buffer_unordered(8).try_collect().await?;
        for (spec_id, first_row_id, manifest) in manifests {
            let mut row_ids = InheritedRowIds::from(first_row_id);
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let file = entry.data_file().clone();
                match file.content_type() {
                    DataContentType::Data => {
                        out.spec_ids.insert(file.file_path().to_string(), spec_id);
                        if let (Some(first_row_id), Some(sequence_number)) =
                            (row_ids.first_row_id(&file, entry.status()), entry.sequence_number())
                        {
                            out.lineage.insert(file.file_path().to_string(), FileLineage { first_row_id, sequence_number });
                        }
                        out.data.push(file);
                    }
                    DataContentType::PositionDeletes => match file.referenced_data_file() {
                        Some(target) => out.deletes_by_data_file.entry(target).or_default().push(file),
                        None => out.unscoped_deletes.push(file),
                    },
                    DataContentType::EqualityDeletes => out.has_equality_deletes = true,
                }
            }
        }
        Ok(out)
    }

    /// The delete files that may hold positions of `data_path`.
    pub fn deletes_for(&self, data_path: &str) -> Vec<&DataFile> {
        self.deletes_by_data_file.get(data_path).into_iter().flatten().chain(self.unscoped_deletes.iter()).collect()
    }

    /// Refuse tables with equality deletes: row positions alone would not say what is live.
    pub fn check_supported(&self, table: &Table) -> Result<()> {
        if self.has_equality_deletes {
            return Err(Error::Data(format!(
                "table {} has equality delete files, which icestream neither writes nor applies",
                table.identifier()
            )));
        }
        Ok(())
    }
}

/// Positions of `data_path` deleted by `deletes`.
pub async fn deleted_positions(table: &Table, data_path: &str, deletes: &[&DataFile]) -> Result<HashSet<i64>> {
    let mut out = HashSet::new();
    for delete in deletes {
        if delete.file_format() == DataFileFormat::Puffin {
            // A deletion vector: one data file's positions (a DV never names another file).
            if delete.referenced_data_file().as_deref() == Some(data_path) {
                out.extend(super::dv::read(table, delete).await?.iter().map(|p| p as i64));
            }
            continue;
        }
        let bytes = table.file_io().new_input(delete.file_path())?.read().await?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?;
        for batch in reader {
            let batch = batch?;
            let columns = Columns::new(&batch, format!("position-delete file {}", delete.file_path()))
                .with_id("file_path", FILE_PATH_FIELD_ID)
                .with_id("pos", POS_FIELD_ID);
            let (paths, positions) = (columns.strings("file_path")?, columns.i64("pos")?);
            for i in 0..batch.num_rows() {
                if paths.value(i) == data_path {
                    out.insert(positions.value(i));
                }
            }
        }
    }
    Ok(out)
}

/// The leaves of a data file holding `columns` of `table` (all when empty): by field id when
/// the file has ids (another engine may name columns differently), else by name.
pub fn projection(table: &Table, schema: &SchemaDescriptor, data_path: &str, columns: &[&str]) -> Result<ProjectionMask> {
    if columns.is_empty() {
        return Ok(ProjectionMask::all());
    }
    Ok(ProjectionMask::leaves(schema, leaf_indices(table, schema, data_path, columns)?))
}

/// The leaf index of each of `columns` in a data file (see [`projection`]).
pub fn leaf_indices(table: &Table, schema: &SchemaDescriptor, data_path: &str, columns: &[&str]) -> Result<Vec<usize>> {
    let table_schema = table.metadata().current_schema();
    let matches = |i: usize, name: &str| {
        let info = schema.column(i).self_type().get_basic_info().clone();
        match table_schema.field_by_name(name) {
            Some(field) if info.has_id() => info.id() == field.id,
            _ => schema.column(i).name() == name,
        }
    };
    columns
        .iter()
        .map(|name| {
            (0..schema.num_columns()).find(|i| matches(*i, name)).ok_or_else(|| Error::Data(format!("{data_path} has no column {name}")))
        })
        .collect()
}

/// The columns `columns` of a data file's rows, in file order, with each row's position; rows
/// whose position is in `deleted` are left out.
pub async fn read_live_rows(
    table: &Table,
    data_path: &str,
    columns: &[&str],
    deleted: &HashSet<i64>,
) -> Result<(Vec<RecordBatch>, Vec<i64>)> {
    let bytes = table.file_io().new_input(data_path)?.read().await?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let mask = projection(table, builder.parquet_schema(), data_path, columns)?;
    let reader = builder.with_projection(mask).build()?;
    let mut batches = Vec::new();
    let mut positions = Vec::new();
    let mut next = 0i64;
    for batch in reader {
        let batch = batch?;
        let start = next;
        next += batch.num_rows() as i64;
        if deleted.is_empty() {
            positions.extend(start..next);
            batches.push(batch);
            continue;
        }
        let keep: arrow_array::BooleanArray = (start..next).map(|p| Some(!deleted.contains(&p))).collect();
        positions.extend((start..next).filter(|p| !deleted.contains(p)));
        batches.push(arrow_select::filter::filter_record_batch(&batch, &keep)?);
    }
    Ok((batches, positions))
}

fn position_delete_schema() -> Arc<ArrowSchema> {
    let field = |name: &str, ty: DataType, id: i32| {
        Field::new(name, ty, false).with_metadata(HashMap::from([("PARQUET:field_id".to_string(), id.to_string())]))
    };
    Arc::new(ArrowSchema::new(vec![field("file_path", DataType::Utf8, FILE_PATH_FIELD_ID), field("pos", DataType::Int64, POS_FIELD_ID)]))
}

/// Write one position-delete file removing `positions` of `data_file`, next to it.
pub async fn write_position_deletes(table: &Table, data_file: &DataFile, positions: &BTreeSet<i64>, compression: &str) -> Result<DataFile> {
    let data_path = data_file.file_path();
    let dir = data_path.rsplit_once('/').map(|(d, _)| d).unwrap_or(data_path);
    let path = format!("{dir}/{}-deletes.parquet", uuid::Uuid::new_v4());
    let schema = position_delete_schema();
    let n = positions.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(data_path, n))),
        Arc::new(positions.iter().copied().collect::<Int64Array>()),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    let mut buffer = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buffer, schema, Some(writer_properties(compression, &[&batch])?))?;
    writer.write(&batch)?;
    writer.close()?;
    let size = buffer.len() as u64;
    table.file_io().new_output(&path)?.write(buffer.into()).await?;
    let (first, last) = (*positions.first().unwrap_or(&0), *positions.last().unwrap_or(&0));
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(data_file.partition().clone())
        // The data file's tuple, so the data file's spec (an older one for a file written
        // before the spec evolved): the commit puts this file in a manifest of that spec.
        .partition_spec_id(spec_of(data_file, table.metadata())?.spec_id())
        .record_count(n as u64)
        .file_size_in_bytes(size)
        // Bounds on file_path let readers match the delete file to its data file from metadata.
        .lower_bounds(HashMap::from([(FILE_PATH_FIELD_ID, Datum::string(data_path)), (POS_FIELD_ID, Datum::long(first))]))
        .upper_bounds(HashMap::from([(FILE_PATH_FIELD_ID, Datum::string(data_path)), (POS_FIELD_ID, Datum::long(last))]))
        .referenced_data_file(Some(data_path.to_string()))
        .build()
        .map_err(|e| Error::Invariant(format!("position-delete file for {data_path}: {e}")))
}

/// Read a data file's live rows (`deletes` applied) straight from its Parquet, as rows of
/// `schema` (the table's Arrow schema, with field ids): a file written under an older schema
/// reads by Iceberg's evolution rules ([`conform_batch`]).
pub async fn read_data_file(table: &Table, path: &str, deletes: &[&DataFile], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let deleted = deleted_positions(table, path, deletes).await?;
    let (batches, _) = read_live_rows(table, path, &[], &deleted).await?;
    batches.iter().map(|batch| conform_batch(batch, path, schema)).collect()
}
