//! Rows of a data file written under any earlier schema of its table, read as rows of the
//! current one (Iceberg's schema evolution): columns and nested fields found by field id (by
//! name in a file that carries no ids), a column or struct field added since read as nulls,
//! promoted types widened (int → long, float → double, decimal to a higher precision), and any
//! equivalent Arrow representation accepted (as [`super::Columns`] does). What does not read
//! that way is an [`Error::Data`] naming the file and the column.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, MapArray, RecordBatch, RecordBatchOptions, StructArray, new_null_array};
use arrow_schema::{DataType, Field, FieldRef, Fields, SchemaRef};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::base::error::{Error, Result};

/// `batch`, read from `source`, as rows of `target` (an Arrow schema with field ids, as
/// `iceberg::arrow::schema_to_arrow_schema` makes of the table's schema).
pub fn conform_batch(batch: &RecordBatch, source: &str, target: &SchemaRef) -> Result<RecordBatch> {
    let file_fields = batch.schema_ref().fields().clone();
    let columns = target
        .fields()
        .iter()
        .map(|t| child(&file_fields, batch.columns(), batch.num_rows(), t, source, t.name()))
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(target.clone(), columns, &options)?)
}

/// `array` (column `path` of `source`) as `target`'s type, nested fields matched by id.
pub fn conform(array: &ArrayRef, target: &Field, source: &str, path: &str) -> Result<ArrayRef> {
    let unreadable = |from: &DataType| {
        Error::Data(format!(
            "{source}: column {path} is {from}, which does not read as {} (not a promotion Iceberg allows)",
            target.data_type()
        ))
    };
    // A dictionary's values are what is read (another engine's writer may encode any column).
    let array = match array.data_type() {
        DataType::Dictionary(_, values) => cast(array, values, source, path)?,
        _ => array.clone(),
    };
    let out: ArrayRef = match (array.data_type(), target.data_type()) {
        (from, to) if from == to => array,
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let children = fields
                .iter()
                .map(|t| child(s.fields(), s.columns(), s.len(), t, source, &format!("{path}.{}", t.name())))
                .collect::<Result<Vec<_>>>()?;
            Arc::new(StructArray::try_new(fields.clone(), children, s.nulls().cloned()).map_err(|e| data(source, path, e))?)
        }
        (DataType::List(_), DataType::List(element)) => {
            let list = array.as_list::<i32>();
            let values = conform(list.values(), element, source, &format!("{path}.element"))?;
            Arc::new(
                ListArray::try_new(element.clone(), list.offsets().clone(), values, list.nulls().cloned())
                    .map_err(|e| data(source, path, e))?,
            )
        }
        (
            DataType::LargeList(from) | DataType::FixedSizeList(from, _) | DataType::ListView(from) | DataType::LargeListView(from),
            DataType::List(_),
        ) => {
            let as_list = cast(&array, &DataType::List(from.clone()), source, path)?;
            conform(&as_list, target, source, path)?
        }
        (DataType::Map(_, _), DataType::Map(entries, sorted)) => {
            let map = array.as_map();
            let found: ArrayRef = Arc::new(map.entries().clone());
            let conformed = conform(&found, entries, source, &format!("{path}.key_value"))?;
            let entries_array = conformed.as_struct().clone();
            Arc::new(
                MapArray::try_new(entries.clone(), map.offsets().clone(), entries_array, map.nulls().cloned(), *sorted)
                    .map_err(|e| data(source, path, e))?,
            )
        }
        (from, to) if promotes(from, to) => cast(&array, to, source, path)?,
        (from, _) => return Err(unreadable(from)),
    };
    if !target.is_nullable() && out.null_count() > 0 {
        return Err(Error::Data(format!("{source}: column {path} has {} null value(s) where a value is required", out.null_count())));
    }
    Ok(out)
}

/// Whether values of `from` read as `to`: the same kind of value in another Arrow
/// representation, or a promotion the Iceberg spec allows. A value that does not fit the
/// target (a long read as an int) is still an error when cast.
pub fn promotes(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (from, to) if from.is_integer() && to.is_integer() => true,
        (Float16 | Float32 | Float64, Float32 | Float64) => true,
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => true,
        (Timestamp(..), Timestamp(..)) => true,
        (Date32 | Date64, Date32) => true,
        // Decimal(P, S) to Decimal(P', S) with P' >= P; the scale never changes.
        (
            Decimal32(p, s) | Decimal64(p, s) | Decimal128(p, s) | Decimal256(p, s),
            Decimal32(q, t) | Decimal64(q, t) | Decimal128(q, t) | Decimal256(q, t),
        ) => s == t && p <= q,
        _ => false,
    }
}

/// The field id of an Arrow field, from its `PARQUET:field_id` metadata.
fn field_id(field: &Field) -> Option<i32> {
    field.metadata().get(PARQUET_FIELD_ID_META_KEY)?.parse().ok()
}

/// The column of `fields` (with `arrays`, `len` rows) that `target` names, as `target`: by field
/// id when the file's fields carry ids (a name may have been reused or renamed since), else by
/// name; absent, an optional column is all nulls.
fn child(fields: &Fields, arrays: &[ArrayRef], len: usize, target: &FieldRef, source: &str, path: &str) -> Result<ArrayRef> {
    let found = match field_id(target) {
        Some(id) if fields.iter().any(|f| field_id(f).is_some()) => fields.iter().position(|f| field_id(f) == Some(id)),
        _ => fields.iter().position(|f| f.name() == target.name()),
    };
    match found {
        Some(i) => conform(&arrays[i], target, source, path),
        None if target.is_nullable() => Ok(new_null_array(target.data_type(), len)),
        None => Err(Error::Data(format!("{source} has no column {path}, which the table requires"))),
    }
}

fn cast(array: &ArrayRef, to: &DataType, source: &str, path: &str) -> Result<ArrayRef> {
    // Checked: a value that does not fit the target is an error, not a wrapped number.
    let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
    arrow_cast::cast_with_options(array, to, &options)
        .map_err(|e| Error::Data(format!("{source}: column {path} ({}) as {to}: {e}", array.data_type())))
}

fn data(source: &str, path: &str, e: arrow_schema::ArrowError) -> Error {
    Error::Data(format!("{source}: column {path}: {e}"))
}

#[cfg(test)]
mod tests;
