//! Rows for `<table>_dead_letter`: every record that did not decode, with its raw key, value
//! and headers, where it came from and why, so nothing is lost and a partition is never
//! blocked by bad input.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, LargeBinaryBuilder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use bytes::Bytes;

use crate::base::error::{Error, Result};
use crate::model::event::{Headers, KafkaRecordIn, TimestampType, TopicPartition};
use crate::model::tables::kafka::{self, KafkaColumns};
use crate::model::tables::{dead_letter as col, lineage};
use crate::modes::kafka_columns::{KafkaColumnsBuilder, RecordMeta};

/// One rejected record.
pub struct Reject<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a Headers,
    pub error: &'a str,
    /// The record's timestamp and its type (the `kafka_timestamp*` columns, when the table has them).
    pub timestamp_ms: i64,
    pub timestamp_type: Option<TimestampType>,
}

impl<'a> Reject<'a> {
    /// The rejected Kafka record of `tp`, with the reason.
    pub fn of(tp: &'a TopicPartition, record: &'a KafkaRecordIn, error: &'a str) -> Self {
        Self {
            topic: &tp.topic,
            partition: tp.partition,
            offset: record.offset,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &record.headers,
            error,
            timestamp_ms: record.timestamp_ms,
            timestamp_type: record.timestamp_type,
        }
    }
}

/// Column builders for the dead-letter schema (`tables::dead_letter_table`).
pub struct DeadLetterBuilder {
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    raw_key: LargeBinaryBuilder,
    raw_value: LargeBinaryBuilder,
    error: StringBuilder,
    source: StringBuilder,
    rejected_at: TimestampMicrosecondBuilder,
    /// Headers per row, the last value of a repeated name.
    headers: Vec<BTreeMap<String, Bytes>>,
    rejected_at_us: i64,
    source_name: String,
    /// `kafka_timestamp` and `kafka_timestamp_type`, filled when the table has them.
    kafka: KafkaColumnsBuilder,
}

impl DeadLetterBuilder {
    /// `rejected_at_us`: one timestamp for the whole invocation, so a replay of the same batch
    /// lands in the same day partition. `source`: the pipeline's format, stored on every row.
    pub fn new(rejected_at_us: i64, source: &str) -> Self {
        Self {
            topic: StringBuilder::new(),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            raw_key: LargeBinaryBuilder::new(),
            raw_value: LargeBinaryBuilder::new(),
            error: StringBuilder::new(),
            source: StringBuilder::new(),
            rejected_at: TimestampMicrosecondBuilder::new().with_timezone("+00:00"),
            headers: Vec::new(),
            rejected_at_us,
            source_name: source.to_string(),
            kafka: KafkaColumnsBuilder::new(KafkaColumns::of([kafka::TIMESTAMP, kafka::TIMESTAMP_TYPE])),
        }
    }

    pub fn append(&mut self, reject: Reject<'_>) {
        self.topic.append_value(reject.topic);
        self.partition.append_value(reject.partition);
        self.offset.append_value(reject.offset);
        self.raw_key.append_option(reject.key);
        self.raw_value.append_option(reject.value);
        self.error.append_value(reject.error);
        self.source.append_value(&self.source_name);
        self.rejected_at.append_value(self.rejected_at_us);
        self.headers.push(reject.headers.iter_shared().map(|(name, value)| (name.to_string(), value)).collect());
        let meta =
            RecordMeta { timestamp_ms: reject.timestamp_ms, timestamp_type: reject.timestamp_type, key: None, headers: reject.headers };
        self.kafka.append(meta);
    }

    /// The rows as a batch of `schema` (the dead-letter table's Arrow schema), columns matched
    /// by name: a table created before a column existed (e.g. `headers`) simply lacks it.
    pub fn finish(mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let array: ArrayRef = match field.name().as_str() {
                lineage::TOPIC => Arc::new(self.topic.finish()),
                lineage::PARTITION => Arc::new(self.partition.finish()),
                lineage::OFFSET => Arc::new(self.offset.finish()),
                col::RAW_KEY => Arc::new(self.raw_key.finish()),
                col::RAW_VALUE => Arc::new(self.raw_value.finish()),
                col::ERROR => Arc::new(self.error.finish()),
                col::SOURCE => Arc::new(self.source.finish()),
                col::REJECTED_AT => Arc::new(self.rejected_at.finish()),
                col::HEADERS => crate::modes::kafka_columns::headers_array(&self.headers, field.data_type())?,
                kafka::TIMESTAMP | kafka::TIMESTAMP_TYPE => self.kafka.column(field)?,
                _ if field.is_nullable() => arrow_array::new_null_array(field.data_type(), self.headers.len()),
                other => return Err(Error::Config(format!("dead-letter table has a required column {other:?} icestream does not fill"))),
            };
            // Other engines' tables may use other physical types (Binary for LargeBinary, …).
            let array = if array.data_type() == field.data_type() { array } else { arrow_cast::cast(&array, field.data_type())? };
            columns.push(array);
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::MapArray;

    use super::*;

    #[test]
    fn rows_carry_headers_and_fit_the_table_schema() {
        let def = crate::model::tables::dead_letter_table("t_dead_letter", "zstd").unwrap();
        let schema = def.arrow_schema().unwrap();
        let mut b = DeadLetterBuilder::new(1_700_000_000_000_000, "avro");
        let headers = Headers::from_iter([("trace", &[1, 2][..]), ("trace", &[3])]);
        b.append(Reject {
            topic: "t",
            partition: 1,
            offset: 7,
            key: Some(b"k"),
            value: None,
            headers: &headers,
            error: "bad",
            timestamp_ms: 5,
            timestamp_type: None,
        });
        b.append(Reject {
            topic: "t",
            partition: 1,
            offset: 8,
            key: None,
            value: Some(b"v"),
            headers: &Headers::default(),
            error: "worse",
            timestamp_ms: 5,
            timestamp_type: None,
        });
        let batch = b.finish(schema).unwrap();
        assert_eq!(batch.num_rows(), 2);
        let map = batch.column_by_name(col::HEADERS).unwrap().as_any().downcast_ref::<MapArray>().unwrap();
        assert_eq!(map.value_length(0), 1, "a repeated header keeps its last value");
        assert_eq!(map.value_length(1), 0);
    }

    #[test]
    fn a_table_without_headers_still_takes_rows() {
        let def = crate::model::tables::dead_letter_table("t_dead_letter", "zstd").unwrap();
        let full = def.arrow_schema().unwrap();
        let fields: Vec<_> = full.fields().iter().filter(|f| f.name() != col::HEADERS).cloned().collect();
        let schema = Arc::new(arrow_schema::Schema::new(fields));
        let mut b = DeadLetterBuilder::new(0, "json");
        b.append(Reject {
            topic: "t",
            partition: 0,
            offset: 1,
            key: None,
            value: None,
            headers: &Headers::default(),
            error: "e",
            timestamp_ms: 5,
            timestamp_type: None,
        });
        assert_eq!(b.finish(schema).unwrap().num_columns(), 8);
    }
}
