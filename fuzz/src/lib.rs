//! What the decoder fuzz targets share: the rich test schemas (tests/schemas/) and the check
//! that any bytes either decode to exactly one row or are a record error that appends nothing.

use std::path::Path;
use std::sync::Arc;

use icestream::decode::RecordDecoder;
use icestream::model::schema::{Format, SourceSchema};

/// A loaded test schema and the table it creates, as Arrow (what ingest decodes into).
pub struct Target {
    source: SourceSchema,
    table: arrow_schema::SchemaRef,
}

impl Target {
    /// `file` in tests/schemas/, with the protobuf `message` where needed.
    pub fn load(format: Format, file: &str, message: Option<&str>) -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/schemas").join(file);
        let source = SourceSchema::load(format, &path, message).expect("the rich test schema loads");
        let schema = source.to_iceberg().expect("an Iceberg schema");
        let table = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).expect("an Arrow schema"));
        Self { source, table }
    }

    /// Decode `data` as one record: one row or a reason, never a panic or a half row.
    pub fn check(&self, data: &[u8]) {
        let mut decoder = RecordDecoder::new(&self.source, self.table.clone()).expect("the schema fits its own table");
        match decoder.append(data) {
            Ok(()) => assert_eq!(decoder.len(), 1),
            Err(reason) => {
                assert!(!reason.is_empty());
                assert_eq!(decoder.len(), 0, "a record error appended a row");
            }
        }
        decoder.finish().expect("rows finish into arrays");
    }
}
