use super::*;
use crate::testkit::TestResult;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Fuzz finding (fuzz/findings/msk_event-timestamp-truncated.json): a timestamp survives
/// parse → render → parse to the millisecond; a fractional one is an event error, not a panic.
#[test]
fn timestamps_are_exact_milliseconds_and_never_panic() {
    let text = include_str!("../../../../fuzz/findings/msk_event-timestamp-truncated.json");
    let parsed = parse_event(text.as_bytes()).unwrap();
    let p1 = &parsed.partitions[&TopicPartition { topic: "vcle-telemetry".into(), partition: 1 }];
    assert_eq!(p1[0].timestamp_ms, 1_699_999_999_998);
    let again = parse_event(event_json("aws:kafka", "arn", "b", &parsed.partitions).to_string().as_bytes()).unwrap();
    assert_eq!(again.partitions, parsed.partitions);
    let fractional = r#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":1700000000000.5,"headers":[]}]}}"#;
    assert!(parse_event(fractional.as_bytes()).unwrap_err().to_string().contains("not a Kafka event"));
}

/// The mapping's own registry support adds `valueSchemaMetadata`: kept, and rendered back.
#[test]
fn value_schema_metadata_is_read_and_rendered_back() {
    let text = r#"{"records":{"t-0":[{"topic":"t","partition":0,"offset":3,"timestamp":1,"value":"e30=",
        "valueSchemaMetadata":{"dataFormat":"AVRO","schemaId":"42"},"headers":[]}]}}"#;
    let parsed = parse_event(text.as_bytes()).unwrap();
    let record = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }][0];
    assert_eq!(record.value_schema.as_deref(), Some(&SchemaMetadata { data_format: "AVRO".into(), schema_id: "42".into() }));
    let again = parse_event(event_json("aws:kafka", "arn", "b", &parsed.partitions).to_string().as_bytes()).unwrap();
    assert_eq!(again.partitions, parsed.partitions);
}

const SAMPLE: &str = r#"{
  "eventSource": "aws:kafka",
  "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc",
  "bootstrapServers": "b-1:9092",
  "records": {
    "vehicle-telemetry-0": [
      {"topic": "vehicle-telemetry", "partition": 0, "offset": 16, "timestamp": 1700000000000,
       "timestampType": "CREATE_TIME", "key": null, "value": "AQID",
       "headers": [{"h": [104, -1]}]},
      {"topic": "vehicle-telemetry", "partition": 0, "offset": 15, "timestamp": 1700000000000,
       "timestampType": "CREATE_TIME", "value": null, "headers": []}
    ],
    "vehicle-telemetry-1": [
      {"partition": 1, "offset": 3, "timestamp": 1700000000000,
       "timestampType": "CREATE_TIME", "key": "a2V5", "value": "!!notbase64", "headers": []}
    ]
  }
}"#;

#[test]
fn parses_groups_sorts_and_keeps_bad_values_as_record_errors() {
    let parsed = parse_event(SAMPLE.as_bytes()).unwrap();
    assert_eq!(parsed.record_count(), 3);
    let p0 = &parsed.partitions[&TopicPartition { topic: "vehicle-telemetry".into(), partition: 0 }];
    assert_eq!(p0.iter().map(|r| r.offset).collect::<Vec<_>>(), [15, 16]);
    assert_eq!(p0[0].value, None);
    assert_eq!(p0[1].value.as_deref(), Some(&[1, 2, 3][..]));
    assert_eq!(p0[1].headers, Headers::from_iter([("h", [104, 255])]));
    // Topic derived from the group key, dash included.
    let p1 = &parsed.partitions[&TopicPartition { topic: "vehicle-telemetry".into(), partition: 1 }];
    assert_eq!(p1[0].key.as_deref(), Some(&b"key"[..]));
    assert!(p1[0].value_error.as_ref().unwrap().contains("base64"));
    assert_eq!(p1[0].value.as_deref(), Some(&b"!!notbase64"[..]));
}

#[test]
fn each_group_is_put_in_offset_order_and_a_repeated_offset_kept_once() -> TestResult {
    let group = |offsets: &[(i64, &str)]| {
        let records: Vec<String> = offsets
            .iter()
            .map(|(offset, value)| format!(r#"{{"partition":0,"offset":{offset},"timestamp":0,"value":"{value}","headers":[]}}"#))
            .collect();
        format!(r#"{{"records":{{"t-0":[{}]}}}}"#, records.join(","))
    };
    let read = |text: String| -> crate::base::error::Result<Vec<(i64, Option<bytes::Bytes>)>> {
        let parsed = parse_event(text.as_bytes())?;
        Ok(parsed.partitions.into_values().flatten().map(|r| (r.offset, r.value)).collect())
    };
    let v = |b: &'static [u8]| Some(bytes::Bytes::from_static(b));
    let expected = [(1, v(&[1])), (2, v(&[2])), (5, v(&[3]))];
    // Ascending: as sent.
    assert_eq!(read(group(&[(1, "AQ=="), (2, "Ag=="), (5, "Aw==")]))?, expected);
    // Out of order, and an offset sent twice: sorted, the first copy kept.
    assert_eq!(read(group(&[(5, "Aw=="), (2, "Ag=="), (1, "AQ=="), (2, "BA==")]))?, expected);
    // In order but repeated: one copy, the first.
    assert_eq!(read(group(&[(1, "AQ=="), (2, "Ag=="), (2, "BA=="), (5, "Aw==")]))?, expected);
    Ok(())
}

#[test]
fn a_key_that_is_not_base64_makes_a_dead_letter_with_the_raw_key() {
    let json = br#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":0,"key":"%%bad","value":"AQID","headers":[]}]}}"#;
    let parsed = parse_event(json).unwrap();
    let r = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }][0];
    assert!(r.value_error.as_deref().unwrap().contains("key is not base64"), "{r:?}");
    assert_eq!(r.key.as_deref(), Some(&b"%%bad"[..]));
    assert_eq!(r.value.as_deref(), Some(&[1u8, 2, 3][..]));
    // Rendered back as sent.
    let again = parse_event(event_json("aws:kafka", "arn", "b", &parsed.partitions).to_string().as_bytes()).unwrap();
    assert_eq!(again.partitions, parsed.partitions);
}

#[test]
fn malformed_events_name_the_problem() {
    let e = parse_event(b"not json").unwrap_err().to_string();
    assert!(e.contains("not JSON"), "{e}");
    // Bytes that are not UTF-8, inside a string: named with where they are.
    let e = parse_event(b"{\"records\":{\"t-0\":[{\"topic\":\"t\xff\"}]}}").unwrap_err().to_string();
    assert!(e.contains("not JSON") && e.contains("utf-8") && e.contains("index 30"), "{e}");
    let e = parse_event(br#"{"eventSource":"aws:kafka"}"#).unwrap_err().to_string();
    assert!(e.contains("records"), "{e}");
    // Another service's event says what it looks like (issue 46: not just "no records field").
    let e = parse_event(br#"{"Records":[{"eventSource":"aws:sqs","body":"x"}]}"#).unwrap_err().to_string();
    assert!(e.contains("no `records` field: it looks like an event of aws:sqs (`Records`, capital R), not an MSK"), "{e}");
    let e = parse_event(br#"{"detail-type":"Scheduled Event","source":"aws.events"}"#).unwrap_err().to_string();
    assert!(e.contains("an EventBridge event (detail-type \"Scheduled Event\")"), "{e}");
    let e = parse_event(br#"{"orders":[1]}"#).unwrap_err().to_string();
    assert!(e.contains("an object with keys orders"), "{e}");
    let e = parse_event(br#"{"eventSource":"aws:sqs","records":{}}"#).unwrap_err().to_string();
    assert!(e.contains("aws:sqs"), "{e}");
    let e = parse_event(br#"{"records":{"t-0":[{"partition":0}]}}"#).unwrap_err().to_string();
    assert!(e.contains("not a Kafka event"), "{e}");
}

#[test]
fn one_pass_reads_escaped_text_repeated_headers_and_mixed_groups() {
    // `\/` is a legal JSON escape inside base64 ("/w==" = [255]); the escaped string cannot be
    // borrowed and must decode the same. A group holding two topic-partitions files each under
    // its own, merged with the other group of the same topic-partition.
    let json = br#"{"records":{"t-0":[
        {"partition":0,"offset":2,"timestamp":5,"value":"\/w==","headers":[{"a":[1]},{"a":[2],"b":[-128]}]},
        {"topic":"u","partition":7,"offset":9,"timestamp":5,"value":"AQ==","headers":[]},
        {"partition":0,"offset":1,"timestamp":5,"value":"AQ==","headers":[]}],
      "u-7":[{"partition":7,"offset":3,"timestamp":5,"value":null,"headers":[]}]}}"#;
    let parsed = parse_event(json).unwrap();
    let t0 = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }];
    assert_eq!(t0.iter().map(|r| r.offset).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(t0[1].value.as_deref(), Some(&[255u8][..]));
    assert_eq!(t0[1].headers, Headers::from_iter([("a", [1]), ("a", [2]), ("b", [128])]));
    let u7 = &parsed.partitions[&TopicPartition { topic: "u".into(), partition: 7 }];
    assert_eq!(u7.iter().map(|r| r.offset).collect::<Vec<_>>(), [3, 9]);
    let again = parse_event(event_json("aws:kafka", "arn", "b", &parsed.partitions).to_string().as_bytes()).unwrap();
    assert_eq!(again.partitions, parsed.partitions);
}

#[test]
fn text_is_borrowed_from_the_event_unless_escaped() {
    let Text(plain) = serde_json::from_slice(br#""AQID""#).unwrap();
    assert!(matches!(plain, Cow::Borrowed("AQID")), "{plain:?}");
    let Text(escaped) = serde_json::from_slice(br#""\/w==""#).unwrap();
    assert!(matches!(escaped, Cow::Owned(ref s) if s == "/w=="), "{escaped:?}");
}

#[test]
fn truncated_or_mistyped_events_say_which() {
    let e = parse_event(br#"{"records":{"t-0":[{"partition":0,"#).unwrap_err().to_string();
    assert!(e.contains("not JSON"), "{e}");
    let e = parse_event(br#"{"records":{"t-0":[{"partition":4294967296,"offset":1,"timestamp":0}]}}"#).unwrap_err().to_string();
    assert!(e.contains("partition 4294967296 out of range"), "{e}");
    let e = parse_event(br#"{"records":{"nodash":[{"partition":0,"offset":1,"timestamp":0}]}}"#).unwrap_err().to_string();
    assert!(e.contains("no topic"), "{e}");
}

/// Issue 46: one header byte outside the signed range made the whole event fail; it is that
/// record's problem (a dead letter naming the header and the byte), the others read as sent.
#[test]
fn a_header_byte_out_of_range_is_the_records_problem_not_the_events() {
    let json = br#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":0,"value":"AQ==","headers":[{"ok":[1]},{"h":[7,300]},{"late":[-129]}]},
        {"partition":0,"offset":2,"timestamp":0,"value":"AQ==","headers":[{"h":[-128,127]}]}]}}"#;
    let parsed = parse_event(json).unwrap();
    let records = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }];
    let reason = records[0].value_error.as_deref().map_or("", String::as_str);
    assert!(reason.contains("header `h`: 300 is not a signed byte (-128 to 127)"), "{reason}");
    assert_eq!(records[0].headers, Headers::from_iter([("ok", [1])]), "headers out of range are left out");
    assert_eq!(records[0].value.as_deref(), Some(&[1u8][..]));
    assert_eq!((records[1].value_error.as_deref(), &records[1].headers), (None, &Headers::from_iter([("h", [128, 127])])));
    // A header list of the wrong shape still fails the event: it is not the mapping's.
    let e =
        parse_event(br#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":0,"headers":[{"h":["x"]}]}]}}"#).unwrap_err().to_string();
    assert!(e.contains("not a Kafka event"), "{e}");
}

#[test]
fn bad_base64_names_the_symbol() {
    let json = br#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":0,"value":"AQ!D"}]}}"#;
    let parsed = parse_event(json).unwrap();
    let r = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }][0];
    assert!(r.value_error.as_deref().unwrap().contains("value is not base64: Invalid symbol 33"), "{r:?}");
}

/// `text` decoded by `arena`, its chunk frozen for the field's slice.
fn decode(arena: &mut Arena, text: &str) -> Result<bytes::Bytes, base64::DecodeError> {
    let field = arena.base64(text)?;
    Ok(field.resolve(&arena.freeze_values()).unwrap_or_default())
}

proptest::proptest! {
    /// The arena's SIMD decoder takes what the `base64` crate takes, to the same bytes; whatever
    /// it takes renders back (canonically) to the same bytes.
    #[test]
    fn base64_decoding_agrees_with_the_base64_crate(text in "[A-Za-z0-9+/=]{0,40}", bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
        let mut arena = Arena::new();
        if let Ok(expected) = STANDARD.decode(&text) {
            proptest::prop_assert_eq!(decode(&mut arena, &text).ok(), Some(bytes::Bytes::from(expected)));
        }
        if let Ok(got) = decode(&mut arena, &text) {
            proptest::prop_assert_eq!(decode(&mut arena, &STANDARD.encode(&got)).ok(), Some(got));
        }
        proptest::prop_assert_eq!(decode(&mut arena, &STANDARD.encode(&bytes)).ok(), Some(bytes::Bytes::from(bytes)));
    }
}

#[test]
fn self_managed_source_and_round_trip() {
    let parsed = parse_event(SAMPLE.as_bytes()).unwrap();
    let json = event_json("SelfManagedKafka", "arn", "localhost:9092", &parsed.partitions);
    let again = parse_event(json.to_string().as_bytes()).unwrap();
    assert_eq!(again.record_count(), 3);
    assert_eq!(again.event_source.as_deref(), Some("SelfManagedKafka"));
}

/// A million records are parsed before any is decoded: each byte of `KafkaRecordIn` is a
/// megabyte of fresh pages at that size. What is rare (`valueSchemaMetadata`, a value error) is
/// boxed, the headers are one `Bytes`.
#[test]
fn a_parsed_record_stays_small() {
    assert!(std::mem::size_of::<KafkaRecordIn>() <= 136, "{}", std::mem::size_of::<KafkaRecordIn>());
}

/// The sample events are pretty-printed files ending in a newline, as a user hands one over:
/// each takes the fast path (the scan), compact or not, to the records serde reads.
#[test]
fn pretty_printed_events_and_trailing_newlines_take_the_fast_path() {
    for text in [include_str!("../../../../events/msk-proto.json"), include_str!("../../../../events/msk-json-corrupt.json"), SAMPLE] {
        let compact = serde_json::from_str::<serde_json::Value>(text).unwrap().to_string();
        for variant in [text.to_string(), compact.clone(), format!("{compact}\n"), format!("{}\n", text.trim_end())] {
            assert!(takes_fast_path(variant.as_bytes()), "{variant}");
            assert_eq!(parse_event(variant.as_bytes()).unwrap().partitions, parse_event_with_serde(text.as_bytes()).unwrap().partitions);
        }
    }
}
