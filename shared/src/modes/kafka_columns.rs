//! The Kafka metadata columns of a batch's rows (`kafka_columns`, names and types in
//! `tables::kafka`): each record's timestamp, its type, key and headers, built beside the
//! lineage from the records themselves, for the pipeline's table and its dead-letter table.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, LargeBinaryArray, MapArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Schema as ArrowSchema, SchemaRef};
use bytes::Bytes;

use crate::base::error::{Error, Result};
use crate::model::event::{Headers, KafkaRecordIn, TimestampType};
use crate::model::tables::kafka::{self, KafkaColumns};

/// One record's metadata, as the event or a dead letter gives it back.
pub struct RecordMeta<'a> {
    pub timestamp_ms: i64,
    pub timestamp_type: Option<TimestampType>,
    pub key: Option<&'a [u8]>,
    pub headers: &'a Headers,
}

impl<'a> From<&'a KafkaRecordIn> for RecordMeta<'a> {
    fn from(record: &'a KafkaRecordIn) -> Self {
        Self {
            timestamp_ms: record.timestamp_ms,
            timestamp_type: record.timestamp_type,
            key: record.key.as_deref(),
            headers: &record.headers,
        }
    }
}

/// Builders of the metadata columns asked for; the others cost nothing per record.
pub struct KafkaColumnsBuilder {
    columns: KafkaColumns,
    timestamp: TimestampMicrosecondBuilder,
    timestamp_type: StringBuilder,
    key: LargeBinaryBuilder,
    /// Per row, the last value of a repeated name (a map has one value per key), as the
    /// dead-letter table's `headers`.
    headers: Vec<BTreeMap<String, Bytes>>,
    rows: usize,
}

impl KafkaColumnsBuilder {
    pub fn new(columns: KafkaColumns) -> Self {
        Self {
            columns,
            timestamp: TimestampMicrosecondBuilder::new().with_timezone("+00:00"),
            timestamp_type: StringBuilder::new(),
            key: LargeBinaryBuilder::new(),
            headers: Vec::new(),
            rows: 0,
        }
    }

    pub fn append(&mut self, meta: RecordMeta<'_>) {
        self.rows += 1;
        if self.columns.has(kafka::TIMESTAMP) {
            // Kafka's "no timestamp" is -1 with NO_TIMESTAMP_TYPE: a null, not 1969.
            let none = meta.timestamp_ms < 0 || meta.timestamp_type == Some(TimestampType::NoTimestampType);
            self.timestamp.append_option((!none).then(|| meta.timestamp_ms.saturating_mul(1000)));
        }
        if self.columns.has(kafka::TIMESTAMP_TYPE) {
            self.timestamp_type.append_option(meta.timestamp_type.map(TimestampType::name));
        }
        if self.columns.has(kafka::KEY) {
            self.key.append_option(meta.key);
        }
        if self.columns.has(kafka::HEADERS) {
            self.headers.push(meta.headers.iter_shared().map(|(name, value)| (name.to_string(), value)).collect());
        }
    }

    /// The column `field` names (a metadata column), of its exact type; nulls for one not
    /// built (a table that has it for a pipeline that no longer asks for it).
    pub fn column(&mut self, field: &arrow_schema::Field) -> Result<ArrayRef> {
        let built = self.columns.has(field.name());
        let array: ArrayRef = match field.name().as_str() {
            kafka::TIMESTAMP if built => Arc::new(self.timestamp.finish()),
            kafka::TIMESTAMP_TYPE if built => Arc::new(self.timestamp_type.finish()),
            kafka::KEY if built => Arc::new(self.key.finish()),
            kafka::HEADERS if built => headers_array(&std::mem::take(&mut self.headers), field.data_type())?,
            name if kafka::is_kafka_column(name) => arrow_array::new_null_array(field.data_type(), self.rows),
            other => return Err(Error::Invariant(format!("{other:?} is not a Kafka metadata column"))),
        };
        Ok(if array.data_type() == field.data_type() { array } else { arrow_cast::cast(&array, field.data_type())? })
    }

    /// `rows` (every column of `schema` but the metadata ones) with the metadata columns put in
    /// their places: a batch of `schema`.
    pub fn complete(&mut self, schema: SchemaRef, rows: &RecordBatch) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = match rows.column_by_name(field.name()) {
                _ if kafka::is_kafka_column(field.name()) => self.column(field)?,
                Some(column) => column.clone(),
                None => return Err(Error::Invariant(format!("rows have no column {:?}", field.name()))),
            };
            columns.push(column);
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// `schema` without its metadata columns: what the lineage and the decoder fill.
pub fn without_kafka_columns(schema: &ArrowSchema) -> SchemaRef {
    Arc::new(ArrowSchema::new(schema.fields().iter().filter(|f| !kafka::is_kafka_column(f.name())).cloned().collect::<Vec<_>>()))
}

/// A map<string, binary> column of the table's exact Arrow type (field names and ids): the
/// dead-letter table's `headers` and the metadata column `kafka_headers`.
pub(crate) fn headers_array(rows: &[BTreeMap<String, Bytes>], data_type: &DataType) -> Result<ArrayRef> {
    let DataType::Map(entries, sorted) = data_type else {
        return Err(Error::Config(format!("a headers column is {data_type}, not a map")));
    };
    let DataType::Struct(kv) = entries.data_type() else {
        return Err(Error::Config(format!("a headers column has entries of {}, not a struct", entries.data_type())));
    };
    let names: Vec<&str> = rows.iter().flat_map(|h| h.keys().map(String::as_str)).collect();
    let values: Vec<&[u8]> = rows.iter().flat_map(|h| h.values().map(|v| &v[..])).collect();
    let keys: ArrayRef = arrow_cast::cast(&StringArray::from(names), kv[0].data_type())?;
    let values: ArrayRef = arrow_cast::cast(&LargeBinaryArray::from(values), kv[1].data_type())?;
    let entries_array = StructArray::try_new(kv.clone(), vec![keys, values], None)?;
    let offsets = OffsetBuffer::from_lengths(rows.iter().map(BTreeMap::len));
    let nulls = NullBuffer::from(vec![true; rows.len()]);
    Ok(Arc::new(MapArray::try_new(entries.clone(), offsets, entries_array, Some(nulls), *sorted)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::{Array, MapArray};

    fn def(columns: &[&str]) -> SchemaRef {
        let kafka = KafkaColumns::parse(&columns.iter().map(|c| c.to_string()).collect::<Vec<_>>()).unwrap();
        let fields = kafka.fields();
        let mut next = 0;
        let fields: Vec<_> = fields.iter().map(|f| crate::model::schema::iceberg_field(f, &mut next)).collect();
        let schema = iceberg::spec::Schema::builder().with_fields(fields).build().unwrap();
        Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap())
    }

    #[test]
    fn records_fill_the_columns_asked_for() {
        let schema = def(&["timestamp", "timestamp_type", "key", "headers"]);
        let mut b = KafkaColumnsBuilder::new(KafkaColumns::of(schema.fields().iter().map(|f| f.name().as_str())));
        let headers = Headers::from_iter([("trace", &b"a"[..]), ("trace", b"b"), ("tenant", b"x")]);
        b.append(RecordMeta {
            timestamp_ms: 1_700_000_000_123,
            timestamp_type: Some(TimestampType::LogAppendTime),
            key: Some(b"k1"),
            headers: &headers,
        });
        b.append(RecordMeta {
            timestamp_ms: -1,
            timestamp_type: Some(TimestampType::NoTimestampType),
            key: None,
            headers: &Headers::default(),
        });
        let empty = RecordBatch::new_empty(Arc::new(ArrowSchema::empty()));
        let rows = b
            .complete(
                schema.clone(),
                &RecordBatch::try_new_with_options(empty.schema(), vec![], &arrow_array::RecordBatchOptions::new().with_row_count(Some(2)))
                    .unwrap(),
            )
            .unwrap();
        let ts = rows.column(0).as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!((ts.value(0), ts.is_null(1)), (1_700_000_000_123_000, true), "no timestamp is a null");
        let kinds = rows.column(1).as_string::<i32>();
        assert_eq!(kinds.value(0), "LOG_APPEND_TIME");
        assert!(rows.column(2).is_null(1) && !rows.column(2).is_null(0));
        let map = rows.column(3).as_any().downcast_ref::<MapArray>().unwrap();
        assert_eq!((map.value_length(0), map.value_length(1)), (2, 0), "a repeated header keeps one value");
    }

    #[test]
    fn a_column_not_asked_for_is_null() {
        let schema = def(&["key"]);
        let mut b = KafkaColumnsBuilder::new(KafkaColumns::default());
        b.append(RecordMeta { timestamp_ms: 1, timestamp_type: None, key: Some(b"k"), headers: &Headers::default() });
        let column = b.column(schema.field(0)).unwrap();
        assert_eq!((column.len(), column.null_count()), (1, 1));
    }
}
