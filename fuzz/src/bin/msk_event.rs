//! The MSK / self-managed Kafka event parser: any bytes either parse or fail with an error;
//! a parsed event renders back to JSON that parses to the same records.
#![no_main]

use icestream::event::{event_json, parse_event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(parsed) = parse_event(data) else { return };
    let source = parsed.event_source.clone().unwrap_or_else(|| "aws:kafka".into());
    let json = event_json(&source, "arn", "b-1:9092", &parsed.partitions).to_string();
    let again = parse_event(json.as_bytes()).expect("a rendered event parses");
    assert_eq!(again.partitions, parsed.partitions, "round trip changed the records");
});
