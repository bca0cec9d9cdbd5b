//! Schema-registry frames (Confluent and Glue, each format): any bytes either read as a frame
//! whose payload lies inside the value (or inflates within the bound), or fail with a reason.
#![no_main]

use icestream::model::registry::frame::{confluent, glue};
use icestream::model::schema::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for format in [Format::Avro, Format::Protobuf, Format::Json] {
        match confluent(data, format) {
            Ok(frame) => assert!(frame.payload.len() + 5 <= data.len(), "payload longer than the value"),
            Err(reason) => assert!(!reason.is_empty()),
        }
        if let Err(reason) = glue(data, format) {
            assert!(!reason.is_empty());
        }
    }
});
