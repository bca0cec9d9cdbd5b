//! The MSK event JSON written back out (generator, poller, recovery files, tests): what the
//! event-source mapping would send for these records.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;

use super::{KafkaRecordIn, NOT_BASE64, TimestampType, TopicPartition};

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
    let render = |field: &Option<Bytes>, name: &str| {
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
        "timestampType": r.timestamp_type.map(TimestampType::name),
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
