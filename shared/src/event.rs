//! MSK / self-managed Kafka Lambda events: parsed into our own [`KafkaEvent`],
//! then flattened into [`KafkaRecordIn`]s grouped by topic-partition in offset order.
//!
//! A malformed event (not JSON, no `records`) is an [`Error::Event`]; a malformed record (bad
//! base64) is not: it travels on with the problem attached and becomes a dead-letter row.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};

/// The event sources the MSK and self-managed Kafka mappings put in `eventSource`.
pub const EVENT_SOURCES: &[&str] = &["aws:kafka", "SelfManagedKafka"];

/// The `eventSourceArn` of events built locally (generator, poller): a made-up MSK cluster.
pub const LOCAL_CLUSTER_ARN: &str =
    "arn:aws:kafka:us-east-1:123456789012:cluster/icestream-local/00000000-0000-0000-0000-000000000000-1";

/// Topic and partition: the unit of ordering and of offset watermarks.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// One Kafka record, decoded from the event's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecordIn {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Vec<u8>>,
    /// The record value; `None` = absent. When `value_error` is set, the raw text as sent.
    pub value: Option<Vec<u8>>,
    /// Why the record could not be read (key or value not base64); such a record becomes a
    /// dead letter, and the field that was not base64 holds the raw text as sent.
    pub value_error: Option<String>,
    pub headers: Vec<(String, Vec<u8>)>,
    /// `valueSchemaMetadata`: set when the event source mapping's own schema-registry support
    /// validated the value (its `SchemaRegistryConfig`): the writer schema's registry id, and the
    /// value is the record as JSON (`EventRecordFormat = JSON`) or without its frame (`SOURCE`).
    pub value_schema: Option<SchemaMetadata>,
}

/// What the mapping says of a value it validated against a schema registry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaMetadata {
    /// `AVRO`, `PROTOBUF` or `JSON`.
    pub data_format: String,
    /// The registry's id of the writer schema: a Confluent schema id, or a Glue schema version UUID.
    pub schema_id: String,
}

impl KafkaRecordIn {
    /// Bytes of key and value.
    pub fn payload_len(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// A parsed event: records by topic-partition, each list in ascending offset order.
#[derive(Debug, Default, Clone)]
pub struct ParsedEvent {
    pub event_source: Option<String>,
    pub partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
}

impl ParsedEvent {
    pub fn record_count(&self) -> usize {
        self.partitions.values().map(Vec::len).sum()
    }
}

/// The MSK / self-managed Kafka event as the mapping sends it, read in one pass: each record is
/// decoded (base64 key and value, headers) straight from the borrowed JSON text into a
/// [`KafkaRecordIn`] under its topic-partition, with no copy of the text and no second parse.
/// Our own types rather than `aws_lambda_events`' `KafkaEvent`, whose timestamp deserializer goes
/// through `f64` seconds and truncates (a millisecond lost) and `assert!`s on a fractional
/// timestamp (a panic on input): timestamps here are integer milliseconds
/// (fuzz/findings/msk_event-timestamp-truncated.json).
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEvent {
    pub event_source: Option<String>,
    pub event_source_arn: Option<String>,
    pub bootstrap_servers: Option<String>,
    /// `None`: the event has no `records` field (or it is `null`).
    pub records: Option<Records>,
}

/// The event's `records`: its topic-partition groups, flattened into lists in arrival order.
#[derive(Debug, Default, Clone)]
pub struct Records(pub BTreeMap<TopicPartition, Vec<KafkaRecordIn>>);

/// Parse the raw event JSON (one pass, borrowed: a 6 MB event must fit a 128 MB function).
pub fn parse_event(json: &[u8]) -> Result<ParsedEvent> {
    // UTF-8 checked once, over the whole text: serde_json trusts a `&str`, where from bytes it
    // checks each of the ~15 strings of every record on its own (a twentieth of the parse).
    let text = std::str::from_utf8(json).map_err(|e| Error::Event(format!("event is not JSON: {e}")))?;
    let event: KafkaEvent = serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => Error::Event(format!("event is not a Kafka event: {e}")),
        _ => Error::Event(format!("event is not JSON: {e}")),
    })?;
    from_kafka_event(event)
}

/// Check an already-deserialized [`KafkaEvent`] (what the Lambda runtime hands us) and put each
/// topic-partition's records in offset order.
pub fn from_kafka_event(event: KafkaEvent) -> Result<ParsedEvent> {
    let Some(Records(mut partitions)) = event.records else {
        return Err(Error::Event("event has no `records` field".into()));
    };
    if let Some(source) = &event.event_source
        && !EVENT_SOURCES.contains(&source.as_str())
    {
        return Err(Error::Event(format!(
            "eventSource {source:?} is not a Kafka source (expected one of {})",
            EVENT_SOURCES.join(", ")
        )));
    }
    for records in partitions.values_mut() {
        // Stable, and near-linear on the (usual) already sorted list.
        records.sort_by_key(|r| r.offset);
        // A re-cut batch never repeats an offset within one event; if one does, keep one copy.
        records.dedup_by_key(|r| r.offset);
    }
    Ok(ParsedEvent { event_source: event.event_source, partitions })
}

/// How [`RawRecord::into_record`] says a field was not base64 (and [`record_json`] tells raw fields).
const NOT_BASE64: &str = "is not base64";

/// One record as it stands in the event JSON, its strings borrowed from the JSON text.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRecord<'a> {
    #[serde(borrow)]
    topic: Option<Text<'a>>,
    partition: i64,
    offset: i64,
    /// Epoch milliseconds.
    timestamp: i64,
    #[serde(borrow)]
    key: Option<Text<'a>>,
    #[serde(borrow)]
    value: Option<Text<'a>>,
    #[serde(default)]
    headers: Headers,
    #[serde(default)]
    value_schema_metadata: Option<SchemaMetadata>,
}

impl RawRecord<'_> {
    fn into_record(self) -> KafkaRecordIn {
        // A key or value that is not base64 is kept as the raw text sent, for the record's
        // dead-letter row (a bad key must not silently become no key).
        let mut problems = Vec::new();
        let mut decode = |text: Option<Text>, what: &str| {
            let text = text?.0;
            Some(match base64_decode(&text) {
                Ok(bytes) => bytes,
                Err(e) => {
                    problems.push(format!("{what} {NOT_BASE64}: {e}"));
                    text.into_owned().into_bytes()
                }
            })
        };
        let key = decode(self.key, "key");
        let value = decode(self.value, "value");
        let value_error = (!problems.is_empty()).then(|| problems.join("; "));
        KafkaRecordIn {
            offset: self.offset,
            timestamp_ms: self.timestamp,
            key,
            value,
            value_error,
            headers: self.headers.0,
            value_schema: self.value_schema_metadata,
        }
    }
}

/// Standard base64 with padding: SIMD first; whatever it refuses goes to the `base64` crate,
/// which accepts what it always did and names the offending symbol.
fn base64_decode(text: &str) -> std::result::Result<Vec<u8>, base64::DecodeError> {
    match base64_simd::STANDARD.decode_to_vec(text) {
        Ok(bytes) => Ok(bytes),
        Err(_) => STANDARD.decode(text),
    }
}

/// A JSON string, borrowed from the event text unless it had escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A record's headers: a list of `{name: [signed bytes]}` objects, read as (name, bytes) pairs
/// in order (a name may repeat, as Kafka allows).
#[derive(Default)]
struct Headers(Vec<(String, Vec<u8>)>);

impl<'de> serde::Deserialize<'de> for Headers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Headers;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of header objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Headers, A::Error> {
                let mut out = Vec::new();
                while seq.next_element_seed(Object(&mut out))?.is_some() {}
                Ok(Headers(out))
            }
        }
        /// One `{name: [signed bytes], ..}` object, appended to the list.
        struct Object<'o>(&'o mut Vec<(String, Vec<u8>)>);
        impl<'de> DeserializeSeed<'de> for Object<'_> {
            type Value = ();
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
                d.deserialize_map(self)
            }
        }
        impl<'de> Visitor<'de> for Object<'_> {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a header object {name: [signed bytes]}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
                while let Some(name) = map.next_key::<String>()? {
                    let bytes = map.next_value_seed(SignedBytes)?;
                    self.0.push((name, bytes));
                }
                Ok(())
            }
        }
        /// `[signed bytes]` as bytes, into one allocation (serde's `Vec` starts empty and grows:
        /// three reallocations for a 13-byte header, on every record).
        struct SignedBytes;
        impl<'de> DeserializeSeed<'de> for SignedBytes {
            type Value = Vec<u8>;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Vec<u8>, D::Error> {
                d.deserialize_seq(self)
            }
        }
        impl<'de> Visitor<'de> for SignedBytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of signed bytes")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Vec<u8>, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(32).min(4096));
                while let Some(b) = seq.next_element::<i8>()? {
                    bytes.push(b as u8);
                }
                Ok(bytes)
            }
        }
        d.deserialize_seq(List)
    }
}

impl<'de> serde::Deserialize<'de> for Records {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Groups;
        impl<'de> Visitor<'de> for Groups {
            type Value = Records;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of topic-partition record lists")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Records, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    map.next_value_seed(Group { key: &key, out: &mut out })?;
                }
                Ok(Records(out))
            }
        }
        d.deserialize_map(Groups)
    }
}

/// One group of `records` (`"topic-partition": [..]`), each record filed under its own
/// topic-partition.
struct Group<'g> {
    key: &'g str,
    out: &'g mut BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
}

impl<'de> DeserializeSeed<'de> for Group<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Group<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of Kafka records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        // A group's records share one topic-partition in practice: collect a run of them and
        // file it once, rather than looking the map up (and allocating a topic) per record.
        let mut run: Option<(TopicPartition, Vec<KafkaRecordIn>)> = None;
        while let Some(raw) = seq.next_element::<RawRecord<'de>>()? {
            let (topic, partition) = topic_partition(self.key, &raw).map_err(de::Error::custom)?;
            if !matches!(&run, Some((tp, _)) if tp.partition == partition && tp.topic == topic) {
                let tp = TopicPartition { topic: topic.to_owned(), partition };
                if let Some((done, records)) = run.replace((tp, Vec::new())) {
                    file_run(self.out, done, records);
                }
            }
            if let Some((_, records)) = &mut run {
                records.push(raw.into_record());
            }
        }
        if let Some((done, records)) = run {
            file_run(self.out, done, records);
        }
        Ok(())
    }
}

/// File a run of one topic-partition's records: the first run moves in whole (no copy of a
/// million records), a later one is appended.
fn file_run(out: &mut BTreeMap<TopicPartition, Vec<KafkaRecordIn>>, tp: TopicPartition, records: Vec<KafkaRecordIn>) {
    match out.entry(tp) {
        Entry::Vacant(slot) => {
            slot.insert(records);
        }
        Entry::Occupied(mut slot) => slot.get_mut().extend(records),
    }
}

/// Topic from the record's own field; else from the group key `topic-partition`, split at the
/// last `-` because topic names may contain dashes.
fn topic_partition<'r>(group_key: &'r str, record: &'r RawRecord) -> std::result::Result<(&'r str, i32), String> {
    let partition =
        i32::try_from(record.partition).map_err(|_| format!("partition {} out of range", record.partition))?;
    let topic = match record.topic.as_ref().map(|t| t.0.as_ref()) {
        Some(t) if !t.is_empty() => t,
        _ => match group_key.rsplit_once('-') {
            Some((topic, _)) if !topic.is_empty() => topic,
            _ => {
                return Err(format!(
                    "record at offset {} has no topic and its group key {group_key:?} is not topic-partition",
                    record.offset
                ));
            }
        },
    };
    Ok((topic, partition))
}

/// One record as the MSK mapping renders it: base64 key and value, signed-byte headers.
pub fn record_json(tp: &TopicPartition, r: &KafkaRecordIn) -> serde_json::Value {
    let headers: Vec<serde_json::Value> = r
        .headers
        .iter()
        .map(|(k, v)| {
            let signed: Vec<i8> = v.iter().map(|&b| b as i8).collect();
            serde_json::json!({ k: signed })
        })
        .collect();
    // A field named in the error holds the raw text it was sent as.
    let render = |field: &Option<Vec<u8>>, name: &str| {
        let raw = r.value_error.as_deref().is_some_and(|e| e.contains(&format!("{name} {NOT_BASE64}")));
        match field {
            Some(bytes) if raw => serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned()),
            Some(bytes) => serde_json::Value::String(STANDARD.encode(bytes)),
            None => serde_json::Value::Null,
        }
    };
    let (key, value) = (render(&r.key, "key"), render(&r.value, "value"));
    let mut record = serde_json::json!({
        "topic": tp.topic,
        "partition": tp.partition,
        "offset": r.offset,
        "timestamp": r.timestamp_ms,
        "timestampType": "CREATE_TIME",
        "key": key,
        "value": value,
        "headers": headers,
    });
    if let Some(metadata) = &r.value_schema {
        record["valueSchemaMetadata"] = serde_json::json!(metadata);
    }
    record
}

/// Build the event JSON the MSK mapping would send for these records (generator, poller, tests).
pub fn event_json(
    event_source: &str,
    event_source_arn: &str,
    bootstrap_servers: &str,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
) -> serde_json::Value {
    let mut records = serde_json::Map::new();
    for (tp, list) in partitions {
        let items: Vec<serde_json::Value> = list.iter().map(|r| record_json(tp, r)).collect();
        records.insert(tp.to_string(), serde_json::Value::Array(items));
    }
    serde_json::json!({
        "eventSource": event_source,
        "eventSourceArn": event_source_arn,
        "bootstrapServers": bootstrap_servers,
        "records": records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzz finding (fuzz/findings/msk_event-timestamp-truncated.json): a timestamp survives
    /// parse → render → parse to the millisecond; a fractional one is an event error, not a panic.
    #[test]
    fn timestamps_are_exact_milliseconds_and_never_panic() {
        let text = include_str!("../../fuzz/findings/msk_event-timestamp-truncated.json");
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
        assert_eq!(record.value_schema, Some(SchemaMetadata { data_format: "AVRO".into(), schema_id: "42".into() }));
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
        assert_eq!(p0[1].value, Some(vec![1, 2, 3]));
        assert_eq!(p0[1].headers, [("h".to_string(), vec![104, 255])]);
        // Topic derived from the group key, dash included.
        let p1 = &parsed.partitions[&TopicPartition { topic: "vehicle-telemetry".into(), partition: 1 }];
        assert_eq!(p1[0].key.as_deref(), Some(&b"key"[..]));
        assert!(p1[0].value_error.as_ref().unwrap().contains("base64"));
        assert_eq!(p1[0].value.as_deref(), Some(&b"!!notbase64"[..]));
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
        let headers = [("a".to_string(), vec![1]), ("a".to_string(), vec![2]), ("b".to_string(), vec![128])];
        assert_eq!(t0[1].headers, headers);
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
        let e = parse_event(br#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":0,"headers":[{"h":[300]}]}]}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a Kafka event"), "{e}");
        let e = parse_event(br#"{"records":{"t-0":[{"partition":4294967296,"offset":1,"timestamp":0}]}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("partition 4294967296 out of range"), "{e}");
        let e = parse_event(br#"{"records":{"nodash":[{"partition":0,"offset":1,"timestamp":0}]}}"#).unwrap_err().to_string();
        assert!(e.contains("no topic"), "{e}");
    }

    #[test]
    fn bad_base64_names_the_symbol() {
        let json = br#"{"records":{"t-0":[{"partition":0,"offset":1,"timestamp":0,"value":"AQ!D"}]}}"#;
        let parsed = parse_event(json).unwrap();
        let r = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }][0];
        assert!(r.value_error.as_deref().unwrap().contains("value is not base64: Invalid symbol 33"), "{r:?}");
    }

    proptest::proptest! {
        /// The SIMD decoder takes what the `base64` crate takes, to the same bytes; whatever it
        /// takes renders back (canonically) to the same bytes.
        #[test]
        fn base64_decoding_agrees_with_the_base64_crate(text in "[A-Za-z0-9+/=]{0,40}", bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Ok(expected) = STANDARD.decode(&text) {
                proptest::prop_assert_eq!(base64_decode(&text).unwrap(), expected);
            }
            if let Ok(got) = base64_decode(&text) {
                proptest::prop_assert_eq!(base64_decode(&STANDARD.encode(&got)).unwrap(), got);
            }
            proptest::prop_assert_eq!(base64_decode(&STANDARD.encode(&bytes)).unwrap(), bytes);
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
}
