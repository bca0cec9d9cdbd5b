//! The MSK / self-managed Kafka event parser: any bytes either parse or fail with an error, the
//! same as the serde path alone gives (the scan that reads the mapping's own form agrees with
//! it); a parsed event renders back to JSON that parses to the same records, and white space
//! between its tokens (runs chosen by the input's bytes) changes neither the records nor which
//! path reads it.
#![no_main]

use icestream::model::event::{event_json, parse_event, parse_event_with_serde, takes_fast_path, white_spaced};
use libfuzzer_sys::fuzz_target;

/// JSON's four white space bytes, alone and mixed.
const SPACES: [&str; 6] = ["", " ", "\n", "\t", "\r\n", " \n\t  \r"];

fuzz_target!(|data: &[u8]| {
    let outcome = |p: icestream::Result<icestream::model::event::ParsedEvent>| p.map(|p| (p.event_source, p.partitions)).map_err(|e| e.to_string());
    assert_eq!(outcome(parse_event(data)), outcome(parse_event_with_serde(data)), "the scan and serde disagree");
    let Ok(parsed) = parse_event(data) else { return };
    let source = parsed.event_source.clone().unwrap_or_else(|| "aws:kafka".into());
    let json = event_json(&source, "arn", "b-1:9092", &parsed.partitions).to_string();
    let again = parse_event(json.as_bytes()).expect("a rendered event parses");
    assert_eq!(again.partitions, parsed.partitions, "round trip changed the records");
    let spaced = white_spaced(&json, |n| SPACES[usize::from(data.get(n % data.len()).copied().unwrap_or(0)) % SPACES.len()]);
    assert_eq!(parse_event(spaced.as_bytes()).expect("white space between tokens parses").partitions, parsed.partitions);
    assert_eq!(takes_fast_path(spaced.as_bytes()), takes_fast_path(json.as_bytes()), "white space changed the path: {spaced}");
});
