//! Batches exactly as the MSK event source mapping cuts them: up to `batch_size` records,
//! never more than the payload cap counted on the event JSON as sent, records grouped under
//! `topic-partition` in offset order. Sizes are computed, not rendered ([`super::size`]); the
//! event JSON is rendered only when something needs the text (an HTTP invocation, the
//! on-failure destination): the in-process function takes the records as they are.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use icestream::model::event::{KafkaEvent, KafkaRecordIn, ParsedEvent, Records, TopicPartition, event_json, from_kafka_event};

use super::size::{group_key_len, record_json_len};

/// The Lambda synchronous-invocation payload cap the mapping keeps each event under, in bytes.
/// Lambda rejects requests above 6 MiB (6,291,456 bytes); the mapping's "6 MB" is decimal.
pub const MAX_PAYLOAD_BYTES: usize = 6_000_000;

/// Largest batch the MSK mapping allows.
pub const MAX_BATCH_SIZE: usize = 10_000;

/// What identifies the cluster in every event.
#[derive(Debug, Clone)]
pub struct EventSource {
    pub event_source: String,
    pub event_source_arn: String,
    pub bootstrap_servers: String,
}

/// A batch being filled, with the exact size its event JSON will have.
pub struct BatchBuilder {
    source: EventSource,
    batch_size: usize,
    max_bytes: usize,
    records: BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    count: usize,
    /// Bytes of the event JSON as it stands (compact serde_json rendering).
    bytes: usize,
    empty_bytes: usize,
}

/// Why a record did not go into the batch.
#[derive(Debug)]
pub enum Rejected {
    /// The batch is full (by count or bytes): send it, then push the record again.
    Full(KafkaRecordIn),
    /// The record alone is over the cap: no batch can carry it.
    TooLarge(KafkaRecordIn, usize),
}

impl BatchBuilder {
    pub fn new(source: EventSource, batch_size: usize, max_bytes: usize) -> Self {
        let empty_bytes =
            event_json(&source.event_source, &source.event_source_arn, &source.bootstrap_servers, &BTreeMap::new()).to_string().len();
        Self { source, batch_size, max_bytes, records: BTreeMap::new(), count: 0, bytes: empty_bytes, empty_bytes }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the event JSON of the batch has now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_full(&self) -> bool {
        self.count >= self.batch_size
    }

    /// Add a record (records of one partition must come in offset order).
    pub fn push(&mut self, tp: &TopicPartition, record: KafkaRecordIn) -> Result<(), Rejected> {
        let record_bytes = record_json_len(tp, &record);
        // `"topic-partition":[` + `]`, and a comma unless it is the first group.
        let key_bytes = group_key_len(tp);
        let group_bytes = |first_group: bool| key_bytes + 3 + usize::from(!first_group);
        let added = match self.records.get(tp) {
            Some(_) => record_bytes + 1,
            None => record_bytes + group_bytes(self.records.is_empty()),
        };
        if self.empty_bytes + group_bytes(true) + record_bytes > self.max_bytes {
            return Err(Rejected::TooLarge(record, self.empty_bytes + group_bytes(true) + record_bytes));
        }
        if self.is_full() || self.bytes + added > self.max_bytes {
            return Err(Rejected::Full(record));
        }
        match self.records.get_mut(tp) {
            Some(list) => list.push(record),
            None => {
                self.records.insert(tp.clone(), vec![record]);
            }
        }
        self.bytes += added;
        self.count += 1;
        Ok(())
    }

    /// Drop the records of partitions this consumer no longer owns.
    pub fn retain_partitions(&mut self, keep: impl Fn(&TopicPartition) -> bool) {
        let kept: Vec<_> = std::mem::take(&mut self.records).into_iter().filter(|(tp, _)| keep(tp)).collect();
        let source = self.source.clone();
        *self = Self::new(source, self.batch_size, self.max_bytes);
        for (tp, list) in kept {
            for r in list {
                self.push(&tp, r).expect("a subset of a batch fits");
            }
        }
    }

    /// Take the batch, leaving this builder empty.
    pub fn take(&mut self) -> Batch {
        let records = std::mem::take(&mut self.records);
        let bytes = std::mem::replace(&mut self.bytes, self.empty_bytes);
        let count = std::mem::take(&mut self.count);
        Batch { source: self.source.clone(), records, count, bytes, event: OnceLock::new() }
    }

    /// The event for records that no batch can carry (written to the on-failure destination).
    pub fn event_for(&self, tp: &TopicPartition, record: KafkaRecordIn) -> Batch {
        let records = BTreeMap::from([(tp.clone(), vec![record])]);
        let mut batch = Batch { source: self.source.clone(), records, count: 1, bytes: 0, event: OnceLock::new() };
        batch.bytes = batch.event().len();
        batch
    }
}

/// A cut batch: its records (for the invocation, offsets and reports) and the exact size of
/// its event JSON; the JSON itself is rendered on first use.
pub struct Batch {
    source: EventSource,
    pub records: BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    pub count: usize,
    /// Bytes of the event JSON, computed while filling; equals `event().len()`.
    pub bytes: usize,
    event: OnceLock<String>,
}

impl Batch {
    /// The event JSON as the MSK mapping sends it (rendered once, on first use).
    pub fn event(&self) -> &str {
        self.event.get_or_init(|| {
            let s = &self.source;
            event_json(&s.event_source, &s.event_source_arn, &s.bootstrap_servers, &self.records).to_string()
        })
    }

    /// The event as the function's handler receives it after parsing [`Self::event`], built
    /// from the records without the JSON round trip: the same checks and ordering
    /// ([`from_kafka_event`]), and base64 and signed-byte headers decode to the bytes they encode.
    pub fn parsed_event(&self) -> icestream::Result<ParsedEvent> {
        from_kafka_event(KafkaEvent {
            event_source: Some(self.source.event_source.clone()),
            event_source_arn: Some(self.source.event_source_arn.clone()),
            bootstrap_servers: Some(self.source.bootstrap_servers.clone()),
            records: Some(Records(self.records.clone())),
        })
    }

    /// The offset to commit per partition: one past the last record.
    pub fn next_offsets(&self) -> impl Iterator<Item = (&TopicPartition, i64)> {
        self.records.iter().filter_map(|(tp, list)| list.last().map(|r| (tp, r.offset + 1)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use icestream::model::event::KafkaEvent;

    use super::*;

    pub(crate) fn source() -> EventSource {
        EventSource {
            event_source: "aws:kafka".into(),
            event_source_arn: "arn:aws:kafka:us-east-1:123456789012:cluster/icestream-local/x".into(),
            bootstrap_servers: "127.0.0.1:9092".into(),
        }
    }

    pub(crate) fn record(offset: i64, value_len: usize) -> KafkaRecordIn {
        KafkaRecordIn {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset,
            timestamp_type: None,
            key: Some(format!("key-{offset}").into()),
            // Bytes that base64 cannot shorten and that cover every signed-byte value.
            value: Some((0..value_len).map(|i| (i * 7 + offset as usize) as u8).collect()),
            value_error: None,
            headers: icestream::model::event::Headers::from_iter([("h", [0, 127, 128, 255])]),
            value_schema: None,
        }
    }

    pub(crate) fn tp(partition: i32) -> TopicPartition {
        TopicPartition { topic: "vehicle-telemetry".into(), partition }
    }

    /// Fill batches from records of `value_len` bytes over 3 partitions until `total` are cut.
    fn cut_all(batch_size: usize, value_len: usize, total: i64) -> Vec<Batch> {
        let mut builder = BatchBuilder::new(source(), batch_size, MAX_PAYLOAD_BYTES);
        let mut batches = Vec::new();
        for offset in 0..total {
            let (p, r) = (tp((offset % 3) as i32), record(offset, value_len));
            if let Err(Rejected::Full(r)) = builder.push(&p, r) {
                batches.push(builder.take());
                builder.push(&p, r).unwrap();
            }
        }
        batches.push(builder.take());
        batches
    }

    #[test]
    fn maximal_records_respect_the_cap_and_parse_as_kafka_events() {
        // 1 MB values (Kafka's default message.max.bytes): four fit under 6 MB, five do not.
        let batches = cut_all(MAX_BATCH_SIZE, 1_000_000, 9);
        assert_eq!(batches.iter().map(|b| b.count).collect::<Vec<_>>(), [4, 4, 1]);
        for b in &batches {
            assert_eq!(b.event().len(), b.bytes);
            assert!(b.event().len() <= MAX_PAYLOAD_BYTES, "{}", b.event().len());
            let event: KafkaEvent = serde_json::from_str(b.event()).unwrap();
            assert_eq!(event.event_source.as_deref(), Some("aws:kafka"));
            assert_eq!(event.bootstrap_servers.as_deref(), Some("127.0.0.1:9092"));
            let parsed = icestream::model::event::from_kafka_event(event).unwrap();
            assert_eq!(parsed.record_count(), b.count);
            for (tp, list) in &parsed.partitions {
                for r in list {
                    // Timestamps are left out: the parser keeps whole seconds only (see event.rs).
                    let sent = record(r.offset, 1_000_000);
                    assert!(r.key == sent.key && r.value == sent.value && r.headers == sent.headers, "{tp} offset {}", r.offset);
                }
            }
        }
    }

    #[test]
    fn the_byte_count_is_exact_and_small_records_cut_at_the_cap_not_before() {
        // ~3 kB records: the count never reaches 10,000 before the bytes do.
        let batches = cut_all(MAX_BATCH_SIZE, 2_000, 5_000);
        for b in &batches[..batches.len() - 1] {
            assert_eq!(b.event().len(), b.bytes);
            assert!(b.event().len() <= MAX_PAYLOAD_BYTES);
            // The next record (~2.8 kB of JSON) would not have fitted.
            assert!(b.event().len() > MAX_PAYLOAD_BYTES - 3_000, "{}", b.event().len());
        }
        assert_eq!(batches.iter().map(|b| b.count).sum::<usize>(), 5_000);
    }

    #[test]
    fn batch_size_bounds_the_count_and_partitions_keep_offset_order() {
        let batches = cut_all(7, 10, 30);
        assert_eq!(batches.iter().map(|b| b.count).collect::<Vec<_>>(), [7, 7, 7, 7, 2]);
        let mut seen: BTreeMap<i32, i64> = BTreeMap::new();
        for b in &batches {
            // The raw JSON: group keys and the order records are sent in.
            let event: serde_json::Value = serde_json::from_str(b.event()).unwrap();
            for (key, list) in event["records"].as_object().unwrap() {
                for r in list.as_array().unwrap() {
                    let (partition, offset) = (r["partition"].as_i64().unwrap() as i32, r["offset"].as_i64().unwrap());
                    assert_eq!(key, &format!("{}-{partition}", r["topic"].as_str().unwrap()));
                    let last = seen.insert(partition, offset);
                    assert!(last.is_none_or(|l| l < offset));
                }
            }
            for (tp, next) in b.next_offsets() {
                assert_eq!(seen[&tp.partition] + 1, next);
            }
        }
    }

    /// The in-process function skips the JSON: what it gets must be exactly what its handler
    /// would have parsed from the event the Lambda path sends.
    #[test]
    fn the_in_process_event_is_the_parsed_event_json() {
        let mut builder = BatchBuilder::new(source(), 1_000, MAX_PAYLOAD_BYTES);
        for offset in 0..300 {
            let mut r = record(offset, (offset as usize * 13) % 200);
            if offset % 7 == 0 {
                r.key = None;
            }
            if offset % 11 == 0 {
                r.value = None;
                r.headers = Default::default();
            }
            builder.push(&tp((offset % 3) as i32), r).unwrap();
        }
        let b = builder.take();
        let parsed = icestream::model::event::parse_event(b.event().as_bytes()).unwrap();
        let direct = b.parsed_event().unwrap();
        assert_eq!(direct.event_source, parsed.event_source);
        assert_eq!(direct.partitions, parsed.partitions);
        assert_eq!(direct.record_count(), 300);
    }

    #[test]
    fn a_record_over_the_cap_is_rejected_as_too_large() {
        let mut builder = BatchBuilder::new(source(), 100, 1_000);
        builder.push(&tp(0), record(0, 10)).unwrap();
        match builder.push(&tp(0), record(1, 2_000)) {
            Err(Rejected::TooLarge(r, bytes)) => assert!(r.offset == 1 && bytes > 1_000),
            other => panic!("{other:?}"),
        }
        assert_eq!(builder.len(), 1);
    }

    #[test]
    fn dropping_revoked_partitions_keeps_the_byte_count_exact() {
        let mut builder = BatchBuilder::new(source(), 100, MAX_PAYLOAD_BYTES);
        for offset in 0..9 {
            builder.push(&tp((offset % 3) as i32), record(offset, 50)).unwrap();
        }
        builder.retain_partitions(|tp| tp.partition != 1);
        let b = builder.take();
        assert_eq!(b.count, 6);
        assert_eq!(b.event().len(), b.bytes);
    }
}
