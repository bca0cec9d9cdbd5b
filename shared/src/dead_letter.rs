//! Rows for `<table>_dead_letter`: every record that did not decode, with its raw bytes, where
//! it came from and why, so nothing is lost and a partition is never blocked by bad input.

use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use crate::error::Result;

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
    rejected_at_us: i64,
}

impl DeadLetterBuilder {
    /// `rejected_at_us`: one timestamp for the whole invocation, so a replay of the same batch
    /// lands in the same day partition.
    pub fn new(rejected_at_us: i64) -> Self {
        Self {
            topic: StringBuilder::new(),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            raw_key: LargeBinaryBuilder::new(),
            raw_value: LargeBinaryBuilder::new(),
            error: StringBuilder::new(),
            source: StringBuilder::new(),
            rejected_at: TimestampMicrosecondBuilder::new().with_timezone("+00:00"),
            rejected_at_us,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        error: &str,
        source: &str,
    ) {
        self.topic.append_value(topic);
        self.partition.append_value(partition);
        self.offset.append_value(offset);
        self.raw_key.append_option(key);
        self.raw_value.append_option(value);
        self.error.append_value(error);
        self.source.append_value(source);
        self.rejected_at.append_value(self.rejected_at_us);
    }

    pub fn finish(mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.raw_key.finish()),
            Arc::new(self.raw_value.finish()),
            Arc::new(self.error.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.rejected_at.finish()),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}
