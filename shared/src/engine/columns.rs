//! Reading columns of record batches that may come from files another engine wrote (Spark,
//! PyIceberg, Trino): found by Iceberg field id (the `PARQUET:field_id` metadata that Parquet
//! readers and iceberg-rust scans carry), else by name; accepted in every Arrow representation
//! that holds the same values (Int32 for a long, Utf8/LargeUtf8/Utf8View, dictionary-encoded,
//! any timestamp unit); anything else is an [`Error::Data`] naming the file and column, never a
//! panic: a panic would fail the invocation and the mapping would retry the same batch forever.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, TimeUnit};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::base::error::{Error, Result};

pub mod conform;

/// The columns of one batch, looked up by field id where known.
pub struct Columns<'a> {
    batch: &'a RecordBatch,
    /// What the batch was read from (a file path, "changelog scan"), for error messages.
    source: String,
    ids: HashMap<String, i32>,
}

impl<'a> Columns<'a> {
    /// Columns found by name only, until [`Self::with_schema`] or [`Self::with_id`] gives ids.
    pub fn new(batch: &'a RecordBatch, source: impl std::fmt::Display) -> Self {
        Self { batch, source: source.to_string(), ids: HashMap::new() }
    }

    /// Field ids of the top-level fields of an Iceberg schema.
    pub fn with_schema(mut self, schema: &iceberg::spec::Schema) -> Self {
        for field in schema.as_struct().fields() {
            self.ids.insert(field.name.clone(), field.id);
        }
        self
    }

    /// The field id of one column (reserved ids: position-delete `file_path`, `pos`).
    pub fn with_id(mut self, name: &str, id: i32) -> Self {
        self.ids.insert(name.to_string(), id);
        self
    }

    /// The array of column `name`: by field id if known and present, else by name.
    pub fn array(&self, name: &str) -> Result<&'a ArrayRef> {
        let schema = self.batch.schema_ref();
        let by_id = self.ids.get(name).and_then(|id| {
            let id = id.to_string();
            schema.fields().iter().position(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id))
        });
        let index =
            by_id.or_else(|| schema.index_of(name).ok()).ok_or_else(|| Error::Data(format!("{} has no column {name}", self.source)))?;
        Ok(self.batch.column(index))
    }

    /// A required integer column as Int64 (from any signed or unsigned integer type that fits).
    pub fn i64(&self, name: &str) -> Result<Int64Array> {
        let array = self.array(name)?;
        let cast = self.cast(name, array, &DataType::Int64, integer)?;
        Ok(self.required(name, cast)?.as_primitive::<Int64Type>().clone())
    }

    /// A nullable integer column as Int64.
    pub fn i64_nullable(&self, name: &str) -> Result<Int64Array> {
        let array = self.array(name)?;
        Ok(self.cast(name, array, &DataType::Int64, integer)?.as_primitive::<Int64Type>().clone())
    }

    /// A required integer column as Int32; values outside i32 are an error, not truncated.
    pub fn i32(&self, name: &str) -> Result<Int32Array> {
        let array = self.array(name)?;
        let cast = self.cast(name, array, &DataType::Int32, integer)?;
        Ok(self.required(name, cast)?.as_primitive::<Int32Type>().clone())
    }

    /// A required string column as Utf8 (from Utf8, LargeUtf8, Utf8View or a dictionary of them).
    pub fn strings(&self, name: &str) -> Result<StringArray> {
        let array = self.array(name)?;
        let cast = self.cast(name, array, &DataType::Utf8, |t| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))?;
        Ok(self.required(name, cast)?.as_string::<i32>().clone())
    }

    /// A required timestamp column in microseconds (from any unit; nanoseconds are truncated).
    pub fn timestamp_micros(&self, name: &str) -> Result<TimestampMicrosecondArray> {
        let array = self.array(name)?;
        let tz = match array.data_type() {
            DataType::Timestamp(_, tz) => tz.clone(),
            DataType::Dictionary(_, value) => match value.as_ref() {
                DataType::Timestamp(_, tz) => tz.clone(),
                _ => None,
            },
            _ => None,
        };
        let target = DataType::Timestamp(TimeUnit::Microsecond, tz);
        let cast = self.cast(name, array, &target, |t| matches!(t, DataType::Timestamp(..)))?;
        Ok(self.required(name, cast)?.as_primitive::<TimestampMicrosecondType>().clone())
    }

    /// Column `name` as `target` (nulls kept), from any equivalent representation or an older
    /// type it was promoted from, nested fields by id ([`conform`]): what a rewrite
    /// (compaction) needs to put another engine's rows into our schema.
    pub fn as_type(&self, name: &str, target: &DataType) -> Result<ArrayRef> {
        let array = self.array(name)?;
        conform::conform(array, &Field::new(name, target.clone(), true), &self.source, name)
    }

    /// `array` as `target`, if its type (or its dictionary's value type) is `accepted`.
    fn cast(&self, name: &str, array: &ArrayRef, target: &DataType, accepted: impl Fn(&DataType) -> bool) -> Result<ArrayRef> {
        if array.data_type() == target {
            return Ok(array.clone());
        }
        let values = match array.data_type() {
            DataType::Dictionary(_, value) => value.as_ref(),
            other => other,
        };
        if !accepted(values) {
            return Err(Error::Data(format!(
                "{}: column {name} is {}, expected {target} or an equivalent type",
                self.source,
                array.data_type()
            )));
        }
        // Checked: a value that does not fit the target is an error, not a wrapped number.
        let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
        arrow_cast::cast_with_options(array, target, &options)
            .map_err(|e| Error::Data(format!("{}: column {name} ({}) as {target}: {e}", self.source, array.data_type())))
    }

    fn required(&self, name: &str, array: ArrayRef) -> Result<ArrayRef> {
        if array.null_count() > 0 {
            return Err(Error::Data(format!(
                "{}: column {name} has {} null value(s) where a value is required",
                self.source,
                array.null_count()
            )));
        }
        Ok(array)
    }
}

fn integer(t: &DataType) -> bool {
    t.is_integer()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap as Map;
    use std::sync::Arc;

    use arrow_array::builder::StringDictionaryBuilder;
    use arrow_array::types::Int8Type;
    use arrow_array::{LargeStringArray, StringViewArray, TimestampMillisecondArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn batch(columns: Vec<(&str, Option<i32>, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, id, a)| {
                let field = Field::new(*name, a.data_type().clone(), true);
                match id {
                    Some(id) => field.with_metadata(Map::from([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())])),
                    None => field,
                }
            })
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns.into_iter().map(|(_, _, a)| a).collect()).unwrap()
    }

    #[test]
    fn integers_and_strings_in_other_representations_read_the_same() {
        let mut dict = StringDictionaryBuilder::<Int8Type>::new();
        dict.append_value("b");
        dict.append_value("a");
        let b = batch(vec![
            ("id", None, Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
            ("large", None, Arc::new(LargeStringArray::from(vec!["x", "y"])) as ArrayRef),
            ("view", None, Arc::new(StringViewArray::from(vec!["x", "y"])) as ArrayRef),
            ("dict", None, Arc::new(dict.finish()) as ArrayRef),
            ("ms", None, Arc::new(TimestampMillisecondArray::from(vec![1, 2])) as ArrayRef),
            ("big", None, Arc::new(Int64Array::from(vec![1, i64::MAX])) as ArrayRef),
        ]);
        let c = Columns::new(&b, "test");
        assert_eq!(c.i64("id").unwrap().values(), &[1, 2]);
        assert_eq!(c.strings("large").unwrap().iter().flatten().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(c.strings("view").unwrap().iter().flatten().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(c.strings("dict").unwrap().iter().flatten().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(c.timestamp_micros("ms").unwrap().values(), &[1000, 2000]);
        // Narrowing that does not fit, a wrong type, a missing column: errors that say so.
        let err = c.i32("big").unwrap_err().to_string();
        assert!(err.contains("column big"), "{err}");
        let err = c.i64("large").unwrap_err().to_string();
        assert!(err.contains("column large is") && err.contains("expected"), "{err}");
        let err = c.i64("nope").unwrap_err().to_string();
        assert!(err.contains("test has no column nope"), "{err}");
    }

    #[test]
    fn field_ids_win_over_names_and_nulls_in_required_columns_are_errors() {
        let b = batch(vec![
            ("renamed", Some(7), Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("account_id", Some(8), Arc::new(Int64Array::from(vec![2])) as ArrayRef),
            ("n", None, Arc::new(Int64Array::from(vec![None])) as ArrayRef),
        ]);
        let c = Columns::new(&b, "f.parquet").with_id("account_id", 7);
        assert_eq!(c.i64("account_id").unwrap().value(0), 1);
        let err = c.i64("n").unwrap_err().to_string();
        assert!(err.contains("null"), "{err}");
        assert!(c.i64_nullable("n").unwrap().is_null(0));
    }
}
