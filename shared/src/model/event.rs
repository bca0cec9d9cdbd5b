//! MSK / self-managed Kafka Lambda events: parsed into our own [`KafkaEvent`],
//! then flattened into [`KafkaRecordIn`]s grouped by topic-partition in offset order.
//!
//! A malformed event (not JSON, no `records`) is an [`Error::Event`]; a malformed record (bad
//! base64) is not: it travels on with the problem attached and becomes a dead-letter row.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use bytes::Bytes;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::base::error::{Error, Result};

mod arena;
mod encode;
mod headers;
mod scan;
mod timestamp_type;

use arena::{Arena, Field};
pub use encode::{event_json, record_json};
pub use headers::Headers;
pub use scan::white_spaced;
use timestamp_type::ReadTimestampType;
pub use timestamp_type::TimestampType;

/// The event sources the MSK and self-managed Kafka mappings put in `eventSource`.
pub const EVENT_SOURCES: &[&str] = &["aws:kafka", "SelfManagedKafka"];

/// The `eventSourceArn` of events built locally (generator, poller): a made-up MSK cluster.
pub const LOCAL_CLUSTER_ARN: &str = "arn:aws:kafka:us-east-1:123456789012:cluster/icestream-local/00000000-0000-0000-0000-000000000000-1";

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
    /// `timestampType`, when the event names one Kafka knows (the `kafka_timestamp_type` column).
    pub timestamp_type: Option<TimestampType>,
    /// Keys, values and header values of a parsed event share a few large buffers (`Bytes`
    /// slices of an [`Arena`]): one allocation per 64 KiB rather than three per record.
    pub key: Option<Bytes>,
    /// The record value; `None` = absent. When `value_error` is set, the raw text as sent.
    pub value: Option<Bytes>,
    /// Why the record could not be read (key or value not base64); such a record becomes a
    /// dead letter, and the field that was not base64 holds the raw text as sent. Boxed twice:
    /// rare, and one pointer leaves room for `timestamp_type` in the record's size.
    pub value_error: Option<Box<String>>,
    /// In one `Bytes` (of the arena, for a parsed event): no allocation per record.
    pub headers: Headers,
    /// `valueSchemaMetadata`: set when the event source mapping's own schema-registry support
    /// validated the value (its `SchemaRegistryConfig`): the writer schema's registry id, and the
    /// value is the record as JSON (`EventRecordFormat = JSON`) or without its frame (`SOURCE`).
    /// Boxed: rare, and a record is smaller without it inline (a million of them at once).
    pub value_schema: Option<Box<SchemaMetadata>>,
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
        self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len)
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

/// Parse the raw event JSON (one pass, borrowed: a 6 MB event must fit a 128 MB function): the
/// event as the mapping writes it by [`scan`] (compact or not), anything else by serde
/// ([`parse_event_with_serde`]).
pub fn parse_event(json: &[u8]) -> Result<ParsedEvent> {
    let text = event_text(json)?;
    let parsed = match scan::scan_event(text) {
        Some(event) => from_kafka_event(event),
        None => parse_text_with_serde(text),
    };
    described(text, parsed)
}

/// Whether [`parse_event`] reads `json` by its fast path (the scan) rather than serde: for the
/// tests, fuzzing and benchmarks that hold it to that.
pub fn takes_fast_path(json: &[u8]) -> bool {
    event_text(json).is_ok_and(|text| scan::scan_event(text).is_some())
}

/// `parsed`, its error saying what the event looks like when it has no Kafka records.
fn described(text: &str, parsed: Result<ParsedEvent>) -> Result<ParsedEvent> {
    parsed.map_err(|e| match e {
        Error::Event(message) if message == NO_RECORDS => Error::Event(format!("{NO_RECORDS}: {}", what_event(text))),
        other => other,
    })
}

const NO_RECORDS: &str = "event has no `records` field";

/// What an event without Kafka `records` looks like, for its error: the usual mistakes are
/// another service's event sent to the function, or a file that is not an event.
fn what_event(text: &str) -> String {
    let Ok(serde_json::Value::Object(top)) = serde_json::from_str::<serde_json::Value>(text) else {
        return "it is not a JSON object, so not an MSK or self-managed Kafka event".into();
    };
    let source = |v: &serde_json::Value| ["eventSource", "EventSource"].iter().find_map(|k| v.get(*k)?.as_str().map(str::to_string));
    let looks_like = if let Some(first) = top.get("Records").and_then(|r| r.get(0)) {
        format!("an event of {} (`Records`, capital R)", source(first).unwrap_or_else(|| "another AWS service".into()))
    } else if let Some(kind) = top.get("detail-type").and_then(|d| d.as_str()) {
        format!("an EventBridge event (detail-type {kind:?})")
    } else if top.contains_key("httpMethod") || top.contains_key("requestContext") {
        "an API Gateway or function URL request".into()
    } else {
        let keys: Vec<&str> = top.keys().map(String::as_str).take(8).collect();
        format!("an object with keys {}", if keys.is_empty() { "none".to_string() } else { keys.join(", ") })
    };
    format!(
        "it looks like {looks_like}, not an MSK or self-managed Kafka event (`eventSource` aws:kafka or SelfManagedKafka, with `records` by topic-partition)"
    )
}

/// The general path of [`parse_event`]: any JSON, each problem named. Public as the reference the
/// scan is checked against (tests, `make fuzz`).
pub fn parse_event_with_serde(json: &[u8]) -> Result<ParsedEvent> {
    let text = event_text(json)?;
    described(text, parse_text_with_serde(text))
}

/// UTF-8 checked once, over the whole text: serde_json trusts a `&str`, where from bytes it
/// checks each of the ~15 strings of every record on its own (a twentieth of its parse). SIMD
/// first; text it refuses is checked again by std, whose error says where.
fn event_text(json: &[u8]) -> Result<&str> {
    simdutf8::basic::from_utf8(json).or_else(|_| std::str::from_utf8(json)).map_err(|e| Error::Event(format!("event is not JSON: {e}")))
}

fn parse_text_with_serde(text: &str) -> Result<ParsedEvent> {
    let event: KafkaEvent = serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => Error::Event(format!("event is not a Kafka event: {e}")),
        _ => Error::Event(format!("event is not JSON: {e}")),
    })?;
    from_kafka_event(event)
}

/// Check a read [`KafkaEvent`] (by the scan, serde, or the esm building one) and put each
/// topic-partition's records in offset order.
pub fn from_kafka_event(event: KafkaEvent) -> Result<ParsedEvent> {
    let Some(Records(mut partitions)) = event.records else {
        return Err(Error::Event(NO_RECORDS.into()));
    };
    if let Some(source) = &event.event_source
        && !EVENT_SOURCES.contains(&source.as_str())
    {
        return Err(Error::Event(format!("eventSource {source:?} is not a Kafka source (expected one of {})", EVENT_SOURCES.join(", "))));
    }
    for records in partitions.values_mut() {
        // The usual list is already in strictly ascending order: one pass says so (a sort's
        // run detection and a dedup were two over every record, each a read of the whole list).
        if !records.is_sorted_by(|a, b| a.offset < b.offset) {
            // Stable, so of repeated offsets the first sent is kept.
            records.sort_by_key(|r| r.offset);
            // A re-cut batch never repeats an offset within one event; if one does, keep one copy.
            records.dedup_by_key(|r| r.offset);
        }
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
    #[serde(default)]
    timestamp_type: Option<ReadTimestampType>,
    #[serde(borrow)]
    key: Option<Text<'a>>,
    #[serde(borrow)]
    value: Option<Text<'a>>,
    #[serde(default)]
    headers: ReadHeaders,
    #[serde(default)]
    value_schema_metadata: Option<SchemaMetadata>,
}

impl RawRecord<'_> {
    /// An upper bound of the bytes its key and value decode to (base64: 3 bytes per 4 letters).
    fn decoded_len_bound(&self) -> usize {
        let len = |t: &Option<Text>| t.as_ref().map_or(0, |t| t.0.len());
        (len(&self.key) + len(&self.value)) / 4 * 3 + 6
    }

    /// The record, its key and value still to be sliced from the arena's open chunk.
    fn into_record(self, arena: &mut Arena) -> (KafkaRecordIn, [Field; 2]) {
        // A key or value that is not base64 is kept as the raw text sent, for the record's
        // dead-letter row (a bad key must not silently become no key).
        let mut problems = Vec::new();
        let mut decode = |text: Option<Text>, what: &str| {
            let Some(text) = text else { return Field::Absent };
            match arena.base64(&text.0) {
                Ok(field) => field,
                Err(e) => {
                    problems.push(format!("{what} {NOT_BASE64}: {e}"));
                    Field::Owned(Bytes::from(text.0.into_owned()))
                }
            }
        };
        let key = decode(self.key, "key");
        let value = decode(self.value, "value");
        problems.extend(self.headers.problem);
        let value_error = (!problems.is_empty()).then(|| Box::new(problems.join("; ")));
        let record = KafkaRecordIn {
            offset: self.offset,
            timestamp_ms: self.timestamp,
            timestamp_type: self.timestamp_type.and_then(|t| t.0),
            key: None,
            value: None,
            value_error,
            headers: self.headers.headers,
            value_schema: self.value_schema_metadata.map(Box::new),
        };
        (record, [key, value])
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

/// A record's headers as read from the event, and what was wrong with them: a byte outside the
/// signed range is the record's problem (a dead letter naming it), not the event's, and its
/// header is left out.
#[derive(Default)]
struct ReadHeaders {
    headers: Headers,
    problem: Option<String>,
}

/// Strict: a byte outside the signed range is an error.
impl<'de> serde::Deserialize<'de> for Headers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let read = ReadHeaders::deserialize(d)?;
        match read.problem {
            Some(problem) => Err(de::Error::custom(problem)),
            None => Ok(read.headers),
        }
    }
}

/// A record's headers: a list of `{name: [signed bytes]}` objects, read as (name, bytes) pairs
/// in order (a name may repeat, as Kafka allows).
impl<'de> serde::Deserialize<'de> for ReadHeaders {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = ReadHeaders;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of header objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<ReadHeaders, A::Error> {
                let (mut out, mut problem) = (bytes::BytesMut::new(), None);
                while seq.next_element_seed(Object(&mut out, &mut problem))?.is_some() {}
                Ok(ReadHeaders { headers: Headers::from_encoded(out.freeze()), problem })
            }
        }
        /// One `{name: [signed bytes], ..}` object, appended to the list (a header with a byte
        /// out of range is not: it becomes the problem, the first one kept).
        struct Object<'o>(&'o mut bytes::BytesMut, &'o mut Option<String>);
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
                    match map.next_value_seed(SignedBytes)? {
                        Ok(bytes) => headers::write(self.0, &name, &bytes),
                        Err(byte) => {
                            let problem = format!("header `{name}`: {byte} is not a signed byte (-128 to 127); the header is left out");
                            self.1.get_or_insert(problem);
                        }
                    }
                }
                Ok(())
            }
        }
        /// `[signed bytes]` as bytes, into one allocation (serde's `Vec` starts empty and grows:
        /// three reallocations for a 13-byte header, on every record).
        struct SignedBytes;
        /// The bytes, or the first integer outside the signed range.
        type Signed = std::result::Result<Vec<u8>, i64>;
        impl<'de> DeserializeSeed<'de> for SignedBytes {
            type Value = Signed;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Signed, D::Error> {
                d.deserialize_seq(self)
            }
        }
        impl<'de> Visitor<'de> for SignedBytes {
            type Value = Signed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of signed bytes")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Signed, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(32).min(4096));
                let mut outside = None;
                while let Some(b) = seq.next_element::<i64>()? {
                    match i8::try_from(b) {
                        Ok(b) => bytes.push(b as u8),
                        Err(_) => {
                            outside.get_or_insert(b);
                        }
                    }
                }
                Ok(outside.map_or(Ok(bytes), Err))
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
                let (mut out, mut arena) = (BTreeMap::new(), Arena::new());
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    map.next_value_seed(Group { key: &key, out: &mut out, arena: &mut arena })?;
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
    arena: &'g mut Arena,
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
        let mut filing = Filing::new(self.key, self.out, self.arena);
        while let Some(raw) = seq.next_element::<RawRecord<'de>>()? {
            filing.push(raw).map_err(de::Error::custom)?;
        }
        filing.finish();
        Ok(())
    }
}

/// Files one group's records under their own topic-partitions. A group's records share one
/// topic-partition in practice: a run of them is collected and filed once, rather than looking
/// the map up (and allocating a topic) per record.
struct Filing<'g> {
    key: &'g str,
    out: &'g mut BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    run: Option<(TopicPartition, Vec<KafkaRecordIn>)>,
    /// Where the records' bytes go.
    arena: &'g mut Arena,
    /// The keys and values of the run's last records, in the arena's open chunk: they get their
    /// slices when it is frozen, before the run is filed or the chunk fills.
    unsliced: Vec<[Field; 2]>,
}

impl<'g> Filing<'g> {
    fn new(key: &'g str, out: &'g mut BTreeMap<TopicPartition, Vec<KafkaRecordIn>>, arena: &'g mut Arena) -> Self {
        Filing { key, out, run: None, arena, unsliced: Vec::new() }
    }

    fn push(&mut self, raw: RawRecord) -> std::result::Result<(), String> {
        let (topic, partition) = topic_partition(self.key, &raw)?;
        if !matches!(&self.run, Some((tp, _)) if tp.partition == partition && tp.topic == topic) {
            self.slice_fields();
            let tp = TopicPartition { topic: topic.to_owned(), partition };
            if let Some((done, records)) = self.run.replace((tp, Vec::new())) {
                Self::file(self.out, done, records);
            }
        }
        if !self.arena.has_room(raw.decoded_len_bound()) {
            self.slice_fields();
        }
        let (record, fields) = raw.into_record(self.arena);
        if let Some((_, records)) = &mut self.run {
            records.push(record);
            self.unsliced.push(fields);
        }
        if self.arena.is_full() {
            self.slice_fields();
        }
        Ok(())
    }

    /// Freezes the arena's open chunk and hands the run's last records their keys and values.
    fn slice_fields(&mut self) {
        if self.unsliced.is_empty() {
            return;
        }
        let chunk = self.arena.freeze_values();
        if let Some((_, records)) = &mut self.run {
            let first = records.len().saturating_sub(self.unsliced.len());
            for (record, [key, value]) in records[first..].iter_mut().zip(self.unsliced.drain(..)) {
                record.key = key.resolve(&chunk);
                record.value = value.resolve(&chunk);
            }
        }
        self.unsliced.clear();
    }

    fn finish(mut self) {
        self.slice_fields();
        if let Some((done, records)) = self.run.take() {
            Self::file(self.out, done, records);
        }
    }

    /// The first run of a topic-partition moves in whole (no copy of a million records), a
    /// later one is appended.
    fn file(out: &mut BTreeMap<TopicPartition, Vec<KafkaRecordIn>>, tp: TopicPartition, records: Vec<KafkaRecordIn>) {
        match out.entry(tp) {
            Entry::Vacant(slot) => {
                slot.insert(records);
            }
            Entry::Occupied(mut slot) => slot.get_mut().extend(records),
        }
    }
}

/// Topic from the record's own field; else from the group key `topic-partition`, split at the
/// last `-` because topic names may contain dashes.
fn topic_partition<'r>(group_key: &'r str, record: &'r RawRecord) -> std::result::Result<(&'r str, i32), String> {
    let partition = i32::try_from(record.partition).map_err(|_| format!("partition {} out of range", record.partition))?;
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

#[cfg(test)]
mod tests;
