//! MSK / self-managed Kafka Lambda events: parsed into our own [`KafkaEvent`],
//! then flattened into [`KafkaRecordIn`]s grouped by topic-partition in offset order.
//!
//! A malformed event (not JSON, no `records`) is an [`Error::Event`]; a malformed record (bad
//! base64) is not: it travels on with the problem attached and becomes a dead-letter row.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

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

/// The MSK / self-managed Kafka event as the mapping sends it. Our own types rather than
/// `aws_lambda_events`' `KafkaEvent`, whose timestamp deserializer goes through `f64` seconds and
/// truncates (a millisecond lost) and `assert!`s on a fractional timestamp (a panic on input):
/// timestamps here are integer milliseconds (fuzz/findings/msk_event-timestamp-truncated.json).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEvent {
    pub event_source: Option<String>,
    pub event_source_arn: Option<String>,
    pub bootstrap_servers: Option<String>,
    pub records: BTreeMap<String, Vec<KafkaRecord>>,
}

/// One record of a [`KafkaEvent`]: base64 key and value, signed-byte header values.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaRecord {
    pub topic: Option<String>,
    pub partition: i64,
    pub offset: i64,
    /// Epoch milliseconds.
    pub timestamp: i64,
    pub timestamp_type: Option<String>,
    pub key: Option<String>,
    pub value: Option<String>,
    #[serde(default)]
    pub headers: Vec<BTreeMap<String, Vec<i8>>>,
}

/// Parse the raw event JSON straight into [`KafkaEvent`] (no intermediate JSON tree: a 6 MB
/// event must fit a 128 MB function).
pub fn parse_event(json: &[u8]) -> Result<ParsedEvent> {
    /// Tells a missing `records` field from an empty one without building anything.
    #[derive(serde::Deserialize)]
    struct Probe {
        records: Option<serde::de::IgnoredAny>,
    }
    let probe: Probe = serde_json::from_slice(json).map_err(|e| Error::Event(format!("event is not JSON: {e}")))?;
    if probe.records.is_none() {
        return Err(Error::Event("event has no `records` field".into()));
    }
    let event: KafkaEvent = serde_json::from_slice(json)
        .map_err(|e| Error::Event(format!("event is not a Kafka event: {e}")))?;
    from_kafka_event(event)
}

/// Flatten an already-deserialized `KafkaEvent` (what the Lambda runtime hands us).
pub fn from_kafka_event(event: KafkaEvent) -> Result<ParsedEvent> {
    if let Some(source) = &event.event_source
        && !EVENT_SOURCES.contains(&source.as_str())
    {
        return Err(Error::Event(format!(
            "eventSource {source:?} is not a Kafka source (expected one of {})",
            EVENT_SOURCES.join(", ")
        )));
    }
    let mut parsed = ParsedEvent { event_source: event.event_source, ..Default::default() };
    for (group_key, records) in event.records {
        for record in records {
            let tp = topic_partition(&group_key, &record)?;
            parsed.partitions.entry(tp).or_default().push(record_in(record));
        }
    }
    for records in parsed.partitions.values_mut() {
        records.sort_by_key(|r| r.offset);
        // A re-cut batch never repeats an offset within one event; if one does, keep one copy.
        records.dedup_by_key(|r| r.offset);
    }
    Ok(parsed)
}

/// Topic from the record's own field; else from the group key `topic-partition`, split at the
/// last `-` because topic names may contain dashes.
fn topic_partition(group_key: &str, record: &KafkaRecord) -> Result<TopicPartition> {
    let partition = i32::try_from(record.partition)
        .map_err(|_| Error::Event(format!("partition {} out of range", record.partition)))?;
    let topic = match &record.topic {
        Some(t) if !t.is_empty() => t.clone(),
        _ => match group_key.rsplit_once('-') {
            Some((topic, _)) if !topic.is_empty() => topic.to_string(),
            _ => {
                return Err(Error::Event(format!(
                    "record at offset {} has no topic and its group key {group_key:?} is not topic-partition",
                    record.offset
                )));
            }
        },
    };
    Ok(TopicPartition { topic, partition })
}

/// How [`record_in`] says a field was not base64 (and [`record_json`] tells raw fields).
const NOT_BASE64: &str = "is not base64";

fn record_in(record: KafkaRecord) -> KafkaRecordIn {
    // A key or value that is not base64 is kept as the raw text sent, for the record's
    // dead-letter row (a bad key must not silently become no key).
    let mut problems = Vec::new();
    let mut decode = |text: Option<String>, what: &str| match text.as_deref().map(|t| STANDARD.decode(t)) {
        Some(Err(e)) => {
            problems.push(format!("{what} {NOT_BASE64}: {e}"));
            text.map(String::into_bytes)
        }
        Some(Ok(bytes)) => Some(bytes),
        None => None,
    };
    let key = decode(record.key, "key");
    let value = decode(record.value, "value");
    let value_error = (!problems.is_empty()).then(|| problems.join("; "));
    let headers = record
        .headers
        .into_iter()
        .flat_map(|h| h.into_iter())
        .map(|(name, bytes)| (name, bytes.into_iter().map(|b| b as u8).collect()))
        .collect();
    KafkaRecordIn {
        offset: record.offset,
        timestamp_ms: record.timestamp,
        key,
        value,
        value_error,
        headers,
    }
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
    serde_json::json!({
        "topic": tp.topic,
        "partition": tp.partition,
        "offset": r.offset,
        "timestamp": r.timestamp_ms,
        "timestampType": "CREATE_TIME",
        "key": key,
        "value": value,
        "headers": headers,
    })
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
        let e = parse_event(br#"{"eventSource":"aws:kafka"}"#).unwrap_err().to_string();
        assert!(e.contains("records"), "{e}");
        let e = parse_event(br#"{"eventSource":"aws:sqs","records":{}}"#).unwrap_err().to_string();
        assert!(e.contains("aws:sqs"), "{e}");
        let e = parse_event(br#"{"records":{"t-0":[{"partition":0}]}}"#).unwrap_err().to_string();
        assert!(e.contains("not a Kafka event"), "{e}");
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
