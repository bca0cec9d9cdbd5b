//! The avro record decoder on the rich test schema (tests/schemas/rich.avsc): any bytes either
//! decode to exactly one row or are a record error that appends nothing; finishing the rows
//! always gives arrays of the table's types.
#![no_main]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use icestream::decode::RecordDecoder;
use icestream::schema::{Format, SourceSchema};
use libfuzzer_sys::fuzz_target;

fn source() -> &'static SourceSchema {
    static SOURCE: OnceLock<SourceSchema> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/schemas/rich.avsc");
        SourceSchema::load(Format::Avro, &path, None).expect("the rich test schema loads")
    })
}

/// The table the schema creates, as Arrow (what ingest decodes into).
fn target() -> arrow_schema::SchemaRef {
    static TARGET: OnceLock<arrow_schema::SchemaRef> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let schema = source().to_iceberg().expect("an Iceberg schema");
            Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).expect("an Arrow schema"))
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let mut decoder = RecordDecoder::new(source(), target()).expect("the schema fits its own table");
    let before = decoder.len();
    match decoder.append(data) {
        Ok(()) => assert_eq!(decoder.len(), before + 1),
        Err(reason) => {
            assert!(!reason.is_empty());
            assert_eq!(decoder.len(), before, "a record error appended a row");
        }
    }
    decoder.finish().expect("rows finish into arrays");
});
