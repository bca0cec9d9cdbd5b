//! A table's live rows: which data files the current snapshot holds (with the delete files and
//! row lineage of each), which positions their deletes remove, and the rows that remain, read
//! straight from Parquet by field id under the table's evolution rules.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Schema as ArrowSchema, SchemaRef};
use futures::{StreamExt, TryFutureExt, TryStreamExt};
use iceberg::spec::{DataContentType, DataFile, DataFileFormat};
use iceberg::table::Table;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{PARQUET_FIELD_ID_META_KEY, ProjectionMask};
use parquet::schema::types::SchemaDescriptor;

use super::row_lineage::{FileLineage, InheritedRowIds, LAST_UPDATED_FIELD_ID, ROW_ID_FIELD_ID};
use crate::base::error::{Error, Result};
use crate::engine::columns::Columns;
use crate::engine::columns::conform::conform_batch;

/// Reserved field ids of the position-delete schema (Iceberg spec).
pub(super) const FILE_PATH_FIELD_ID: i32 = 2_147_483_546;
pub(super) const POS_FIELD_ID: i32 = 2_147_483_545;

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

/// Read a data file's live rows (`deletes` applied) straight from its Parquet, as rows of
/// `schema` (the table's Arrow schema, with field ids): a file written under an older schema
/// reads by Iceberg's evolution rules ([`conform_batch`]).
pub async fn read_data_file(table: &Table, path: &str, deletes: &[&DataFile], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let deleted = deleted_positions(table, path, deletes).await?;
    let (batches, _) = read_live_rows(table, path, &[], &deleted).await?;
    batches.iter().map(|batch| conform_batch(batch, path, schema)).collect()
}

/// The live rows of data file `path` (`deletes` applied) as rows of `schema` (the table's
/// Arrow schema with the lineage columns last, [`with_lineage_columns`]), each with its
/// `_row_id` and `_last_updated_sequence_number`: the file's own values where it has them,
/// else from its `lineage`.
pub async fn read_with_lineage(
    table: &Table,
    path: &str,
    deletes: &[&DataFile],
    schema: &SchemaRef,
    lineage: FileLineage,
) -> Result<Vec<RecordBatch>> {
    let deleted = deleted_positions(table, path, deletes).await?;
    let (batches, positions) = read_live_rows(table, path, &[], &deleted).await?;
    let rows = ArrowSchema::new(schema.fields()[..schema.fields().len() - 2].to_vec());
    let rows = Arc::new(rows.with_metadata(schema.metadata().clone()));
    let mut at = 0;
    batches
        .iter()
        .map(|batch| {
            let positions = &positions[at..at + batch.num_rows()];
            at += batch.num_rows();
            let conformed = conform_batch(batch, path, &rows)?;
            let row_ids = own_or(batch, ROW_ID_FIELD_ID, path, |i| lineage.first_row_id + positions[i])?;
            let sequence_numbers = own_or(batch, LAST_UPDATED_FIELD_ID, path, |_| lineage.sequence_number)?;
            let mut columns = conformed.columns().to_vec();
            columns.extend([row_ids, sequence_numbers]);
            Ok(RecordBatch::try_new(schema.clone(), columns)?)
        })
        .collect()
}

/// Column `field_id` of a file's `batch` where it has a value, else `inherited(row)`.
fn own_or(batch: &RecordBatch, field_id: i32, path: &str, inherited: impl Fn(usize) -> i64) -> Result<ArrayRef> {
    let id = field_id.to_string();
    let own = batch.schema_ref().fields().iter().position(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id));
    let own = match own.map(|i| batch.column(i)) {
        Some(array) if array.data_type() == &DataType::Int64 => Some(array.as_primitive::<Int64Type>().clone()),
        Some(array) => return Err(Error::Data(format!("{path}: lineage column {field_id} is {}, not a long", array.data_type()))),
        None => None,
    };
    let values: Int64Array =
        (0..batch.num_rows()).map(|i| Some(own.as_ref().filter(|a| a.is_valid(i)).map_or_else(|| inherited(i), |a| a.value(i)))).collect();
    Ok(Arc::new(values))
}
