//! A `long` column replaced by a `double` of the same name, in the commit of the rows that need
//! it. Iceberg allows no long → double promotion (only int → long, float → double, wider
//! decimals; readers such as PyIceberg refuse a schema that changes a type otherwise), so the
//! column gets a new field id of type double (the old field dropped) and every live data file
//! of the table is rewritten with that column's values cast to double under the new id: the
//! rows otherwise as they were (lineage and Kafka columns kept, v3 row ids kept), every value
//! exact (a column is replaced only while all its values are within ±2^53, as its files'
//! bounds show, and while the table is small enough to rewrite in one invocation). One
//! snapshot removes the old files and adds the rewritten ones with the batch's.
//!
//! Only an ingest's direct commit replaces a column: a queued writer's staged files, or a
//! replay's rows, decoded for the old field id could land after it and read null there.
//!
//! The rewrite is planned again on every commit attempt against the table as it is then (a
//! file another writer added meanwhile is rewritten too); files of an attempt that lost are
//! unreferenced, and orphan removal takes them.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Float64Array, RecordBatch};
use arrow_schema::{DataType, Schema as ArrowSchema};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{Datum, NestedField, Operation, PrimitiveLiteral, PrimitiveType, Schema, SchemaRef, TableMetadata, Type};
use iceberg::table::Table;

use super::ChangeSet;
use super::live_rows::{LiveFiles, read_data_file, read_with_lineage};
use super::row_lineage::with_lineage_columns;
use crate::base::error::{Error, Result};
use crate::engine::project::project_batch;
use crate::engine::writer::write_data_files_as;
use crate::model::tables::is_written_by_icestream;

/// The largest magnitude up to which every integer is a double (2^53).
const EXACT_IN_DOUBLE: i64 = 1 << 53;

/// The most Parquet bytes a replacement rewrites: the whole table is read into memory and
/// written again within the ingest invocation, so only a young table's worth (a larger table
/// keeps the column `long`, and the fraction is a dead letter).
pub const MAX_REWRITE_BYTES: u64 = 64 << 20;

/// `current` with each top-level `long` column of `names` replaced by an optional `double` of
/// the same name at the same place, its id after `last_column_id` (which moves past it).
/// Columns that are not (or no longer) `long` stay as they are.
pub fn replace_columns(current: &Schema, names: &[String], last_column_id: &mut i32) -> Result<Option<Schema>> {
    let mut changed = false;
    let fields = current
        .as_struct()
        .fields()
        .iter()
        .map(|f| match names.contains(&f.name) && *f.field_type == Type::Primitive(PrimitiveType::Long) {
            true => {
                changed = true;
                *last_column_id += 1;
                Arc::new(NestedField::optional(*last_column_id, &f.name, Type::Primitive(PrimitiveType::Double)))
            }
            false => f.clone(),
        })
        .collect::<Vec<_>>();
    if !changed {
        return Ok(None);
    }
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()?;
    Ok(Some(schema))
}

/// The top-level `long` columns of a table that may become `double`: not icestream's, no
/// partition source, sort column or key. Whether the table allows it now: [`can_replace`].
pub fn candidates(metadata: &TableMetadata) -> Vec<String> {
    let used: HashSet<i32> = metadata
        .partition_specs_iter()
        .flat_map(|s| s.fields().iter().map(|f| f.source_id))
        .chain(metadata.sort_orders_iter().flat_map(|o| o.fields.iter().map(|f| f.source_id)))
        .chain(metadata.current_schema().identifier_field_ids())
        .collect();
    metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .filter(|f| *f.field_type == Type::Primitive(PrimitiveType::Long) && !is_written_by_icestream(&f.name) && !used.contains(&f.id))
        .map(|f| f.name.clone())
        .collect()
}

/// Those of `names` (top-level `long` columns) that can be replaced now: every value a double
/// holds exactly, as the live files' bounds show (within ±2^53), and the table small enough to be
/// rewritten within one invocation ([`MAX_REWRITE_BYTES`]). A file without bounds for the
/// column, or a table with delete files, keeps it `long`.
pub async fn can_replace(table: &Table, names: &[String]) -> Result<Vec<String>> {
    let live = LiveFiles::of(table).await?;
    if live.has_equality_deletes || !live.unscoped_deletes.is_empty() || !live.deletes_by_data_file.is_empty() {
        return Ok(vec![]);
    }
    if live.data.iter().map(|f| f.file_size_in_bytes()).sum::<u64>() > MAX_REWRITE_BYTES {
        return Ok(vec![]);
    }
    let exact = |bound: Option<&Datum>| match bound.map(Datum::literal) {
        Some(PrimitiveLiteral::Long(v)) => v.checked_abs().is_some_and(|v| v <= EXACT_IN_DOUBLE),
        _ => false,
    };
    let schema = table.metadata().current_schema();
    Ok(names
        .iter()
        .filter(|name| {
            let Some(field) = schema.field_by_name(name) else { return false };
            live.data.iter().all(|file| {
                let nulls_only = file.null_value_counts().get(&field.id).is_some_and(|n| *n == file.record_count());
                nulls_only || (exact(file.lower_bounds().get(&field.id)) && exact(file.upper_bounds().get(&field.id)))
            })
        })
        .cloned()
        .collect())
}

/// The rewrite of a table's live files for a replaced column, kept across commit attempts while
/// the table's live files and the target schema stay the same.
pub struct Rewrite {
    compression: String,
    target_file_size: usize,
    /// The live files rewritten (sorted), the schema written, the files written.
    cached: Option<(Vec<String>, SchemaRef, Vec<iceberg::spec::DataFile>)>,
}

impl Rewrite {
    pub fn new(compression: &str, target_file_size: usize) -> Self {
        Rewrite { compression: compression.to_string(), target_file_size, cached: None }
    }

    /// Adds to `change` every live data file of `table` rewritten into `target`, the table's
    /// next schema, in which `replaced` (long columns of the current schema) are doubles; the
    /// files rewritten are removed and the snapshot is an overwrite.
    pub async fn apply(&mut self, table: &Table, target: &SchemaRef, replaced: &[String], change: &mut ChangeSet) -> Result<()> {
        let live = LiveFiles::of(table).await?;
        live.check_supported(table)?;
        let mut paths: Vec<String> = live.every_path().collect();
        paths.sort();
        let files = match &self.cached {
            Some((cached_paths, schema, files)) if *cached_paths == paths && schema.as_struct() == target.as_struct() => files.clone(),
            _ => {
                let files = self.rewrite(table, &live, target, replaced).await?;
                self.cached = Some((paths.clone(), target.clone(), files.clone()));
                files
            }
        };
        change.operation = Operation::Overwrite;
        change.removed_files.extend(paths);
        change.added_data_files.extend(files);
        change.summary.insert("icestream.replaced-columns".into(), replaced.join(","));
        Ok(())
    }

    async fn rewrite(
        &self,
        table: &Table,
        live: &LiveFiles,
        target: &SchemaRef,
        replaced: &[String],
    ) -> Result<Vec<iceberg::spec::DataFile>> {
        if live.data.is_empty() {
            return Ok(vec![]);
        }
        let current = table.metadata().current_schema();
        // Rows keep their ids (v3): read and written with the lineage columns.
        let keep_lineage = live.data.iter().all(|f| live.lineage.contains_key(f.file_path()));
        let (read_schema, written) = match keep_lineage {
            true => (with_lineage_columns(current)?, Arc::new(with_lineage_columns(target)?)),
            false => ((**current).clone(), target.clone()),
        };
        let read_arrow = Arc::new(schema_to_arrow_schema(&read_schema)?);
        let written_arrow = Arc::new(schema_to_arrow_schema(&written)?);
        let mut batches = Vec::new();
        for file in &live.data {
            let path = file.file_path();
            let deletes = live.deletes_for(path);
            let read = match live.lineage.get(path).filter(|_| keep_lineage) {
                Some(lineage) => read_with_lineage(table, path, &deletes, &read_arrow, *lineage).await?,
                None => read_data_file(table, path, &deletes, &read_arrow).await?,
            };
            for batch in read {
                batches.push(project_batch(&as_doubles(&batch, replaced, path)?, &written_arrow)?);
            }
        }
        let files = write_data_files_as(table, written, &batches, &self.compression, self.target_file_size).await?;
        let (rows_in, rows_out) =
            (batches.iter().map(|b| b.num_rows() as u64).sum::<u64>(), files.iter().map(|f| f.record_count()).sum::<u64>());
        if rows_in != rows_out {
            return Err(Error::Invariant(format!("replacing columns read {rows_in} rows but wrote {rows_out}: not committed")));
        }
        Ok(files)
    }
}

/// `batch` with the `long` columns `names` cast to `double` (names kept: the rows are laid out
/// by name afterwards); a value a double cannot hold exactly refuses the rewrite.
fn as_doubles(batch: &RecordBatch, names: &[String], path: &str) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if !names.contains(field.name()) || column.data_type() != &DataType::Int64 {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
            continue;
        }
        let longs = column.as_primitive::<Int64Type>();
        if let Some(v) = longs.iter().flatten().find(|v| v.checked_abs().is_none_or(|v| v > EXACT_IN_DOUBLE)) {
            return Err(Error::Data(format!("{path}: column {:?} holds {v}, which a double cannot hold exactly", field.name())));
        }
        let doubles: Float64Array = longs.iter().map(|v| v.map(|v| v as f64)).collect();
        fields.push(arrow_schema::Field::new(field.name(), DataType::Float64, true));
        columns.push(Arc::new(doubles));
    }
    Ok(RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns)?)
}

#[cfg(test)]
mod tests;
