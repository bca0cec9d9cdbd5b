//! The lineage columns (topic, partition, offset, and an upsert's source position) of decoded
//! rows, filled per record: every row says which Kafka record it came from.

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use crate::base::error::{Error, Result};
use crate::model::event::TopicPartition;
use crate::model::pipeline::upsert::SOURCE_POSITION;
use crate::model::tables::lineage;

/// Lineage columns (and the source position) of decoded rows, filled per record.
#[derive(Default)]
pub struct Lineage {
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    position: Int64Builder,
}

impl Lineage {
    pub fn with_capacity(records: usize) -> Self {
        Self {
            topic: StringBuilder::with_capacity(records, records * 16),
            partition: Int32Builder::with_capacity(records),
            offset: Int64Builder::with_capacity(records),
            position: Int64Builder::new(),
        }
    }

    /// The Kafka position of one row.
    pub fn append(&mut self, tp: &TopicPartition, offset: i64) {
        self.topic.append_value(&tp.topic);
        self.partition.append_value(tp.partition);
        self.offset.append_value(offset);
    }

    pub fn append_sourced(&mut self, tp: &TopicPartition, offset: i64, position: Option<i64>) {
        self.append(tp, offset);
        self.position.append_option(position);
    }

    /// Columns of `schema` in order: lineage and position from here, the rest from `decoded`.
    pub fn batch(&mut self, schema: SchemaRef, decoded: Vec<ArrayRef>) -> Result<RecordBatch> {
        let mut decoded = decoded.into_iter();
        let (topic, partition, offset, position): (ArrayRef, ArrayRef, ArrayRef, ArrayRef) = (
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.position.finish()),
        );
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = match field.name().as_str() {
                lineage::TOPIC => topic.clone(),
                lineage::PARTITION => partition.clone(),
                lineage::OFFSET => offset.clone(),
                SOURCE_POSITION => position.clone(),
                _ => decoded.next().ok_or_else(|| Error::Invariant(format!("the decoder returned no column for {:?}", field.name())))?,
            };
            let column = if column.data_type() == field.data_type() { column } else { arrow_cast::cast(&column, field.data_type())? };
            columns.push(column);
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}
