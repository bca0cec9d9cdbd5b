//! Keys of any primitive types, compared as Arrow row-format bytes (`arrow-row`): one code path
//! for a single long, a string + long pair, a uuid or a date. Rows read back from data files or
//! tombstone files are cast to the table's key types first, so equal keys give equal bytes.

use arrow_array::{ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, Field, FieldRef, Schema as ArrowSchema};
use iceberg::spec::Datum;

use crate::base::error::{Error, Result};
use crate::engine::columns::Columns;

/// The key columns of a table and their row encoding.
pub struct KeyCodec {
    fields: Vec<FieldRef>,
    converter: RowConverter,
}

impl KeyCodec {
    /// The `key` columns of `schema` (the table's Arrow schema), in key order.
    pub fn new(schema: &ArrowSchema, key: &[String]) -> Result<Self> {
        let fields = key
            .iter()
            .map(|name| {
                schema
                    .field_with_name(name)
                    .map(|f| FieldRef::new(f.clone()))
                    .map_err(|_| Error::Config(format!("the table has no key column {name:?}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::of_fields(fields)
    }

    /// A codec for exactly these fields.
    pub fn of_fields(fields: Vec<FieldRef>) -> Result<Self> {
        let converter = RowConverter::new(fields.iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        Ok(Self { fields, converter })
    }

    pub fn fields(&self) -> &[FieldRef] {
        &self.fields
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|f| f.name().as_str())
    }

    /// The key columns of `batch` (by name, or by field id through `table_schema`), cast to the
    /// key types.
    pub fn columns(&self, batch: &RecordBatch, source: &str, table_schema: Option<&iceberg::spec::Schema>) -> Result<Vec<ArrayRef>> {
        let mut found = Columns::new(batch, source);
        if let Some(schema) = table_schema {
            found = found.with_schema(schema);
        }
        self.fields.iter().map(|f| found.as_type(f.name(), f.data_type())).collect()
    }

    /// The keys of `batch`'s rows.
    pub fn rows(&self, batch: &RecordBatch, source: &str, table_schema: Option<&iceberg::spec::Schema>) -> Result<Rows> {
        Ok(self.converter.convert_columns(&self.columns(batch, source, table_schema)?)?)
    }

    /// The keys of rows given as key columns (already of the key types).
    pub fn encode(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }

    /// Key columns back from encoded keys (tombstone files are written from these).
    pub fn decode<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        let parser = self.converter.parser();
        Ok(self.converter.convert_rows(keys.into_iter().map(|k| parser.parse(k)))?)
    }

    /// The key fields as plain Arrow fields (no field-id metadata), for side files.
    pub fn plain_fields(&self) -> Vec<Field> {
        self.fields.iter().map(|f| Field::new(f.name(), f.data_type().clone(), false)).collect()
    }
}

/// Value `i` of `array` as an Iceberg datum, for comparing with file bounds; `None` for types
/// the bounds check does not use (the file is then read).
pub fn datum_at(array: &ArrayRef, i: usize) -> Option<Datum> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, Int32Type, Int64Type, TimestampMicrosecondType};
    if array.is_null(i) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int32 => Datum::int(array.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => Datum::long(array.as_primitive::<Int64Type>().value(i)),
        DataType::Utf8 => Datum::string(array.as_string::<i32>().value(i)),
        DataType::Date32 => Datum::date(array.as_primitive::<Date32Type>().value(i)),
        DataType::Timestamp(_, None) => Datum::timestamp_micros(array.as_primitive::<TimestampMicrosecondType>().value(i)),
        DataType::Timestamp(_, Some(_)) => Datum::timestamptz_micros(array.as_primitive::<TimestampMicrosecondType>().value(i)),
        DataType::FixedSizeBinary(16) => Datum::uuid(uuid::Uuid::from_slice(array.as_fixed_size_binary().value(i)).ok()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn composite_keys_round_trip_and_compare_across_representations() {
        let schema = ArrowSchema::new(vec![Field::new("tenant", DataType::Utf8, false), Field::new("id", DataType::Int64, false)]);
        let codec = KeyCodec::new(&schema, &["tenant".into(), "id".into()]).unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![Arc::new(StringArray::from(vec!["a", "a", "b"])), Arc::new(Int64Array::from(vec![1, 2, 1]))],
        )
        .unwrap();
        let rows = codec.rows(&batch, "test", None).unwrap();
        assert_ne!(rows.row(0).data(), rows.row(1).data());
        assert_ne!(rows.row(0).data(), rows.row(2).data());
        // Another engine's int32 id and large strings encode to the same key.
        let other = ArrowSchema::new(vec![Field::new("tenant", DataType::LargeUtf8, false), Field::new("id", DataType::Int32, false)]);
        let batch2 = RecordBatch::try_new(
            Arc::new(other),
            vec![Arc::new(arrow_array::LargeStringArray::from(vec!["b"])), Arc::new(arrow_array::Int32Array::from(vec![1]))],
        )
        .unwrap();
        assert_eq!(codec.rows(&batch2, "test", None).unwrap().row(0).data(), rows.row(2).data());
        let back = codec.decode([rows.row(2).data()]).unwrap();
        assert_eq!(back[0].as_ref(), &StringArray::from(vec!["b"]) as &dyn arrow_array::Array);
        assert_eq!(datum_at(&back[1], 0), Some(Datum::long(1)));
    }
}
