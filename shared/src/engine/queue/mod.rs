//! The commit queue: the request a queued writer sends ([`CommitRequest`]: the table, the staged
//! manifest, the offset range per topic-partition it covers — rows or not: dead letters and dropped
//! duplicates are covered too —, counts and the oldest record's Kafka timestamp), the messages a
//! committer receives ([`Message`]) and the SQS client ([`sqs`]). The writer side (`modes::sink`)
//! and the committer (`services::queued`) both speak it.
//!
//! The staged manifest's name binds the request to it ([`CommitRequest::manifest_uuid`]): a
//! digest of everything the request claims and of the data files the manifest lists.

pub mod sqs;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};
use crate::engine::commit::deduped::DedupedOffsets;
use crate::model::event::TopicPartition;

/// Format version of [`CommitRequest`]; a committer refuses versions it does not know.
/// Version 2: every request names a staged manifest, bound to it by name.
pub const REQUEST_VERSION: u32 = 2;

/// Offsets `first..=last` of one topic-partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRange {
    pub topic: String,
    pub partition: i32,
    pub first: i64,
    pub last: i64,
}

/// What a writer asks the committer to commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRequest {
    pub version: u32,
    pub namespace: String,
    pub table: String,
    /// The staged manifest listing the data files (none when no row is left to add: the
    /// request then only moves the watermarks, which keeps them contiguous), at
    /// `<table location>/staged/<manifest_uuid>.avro`. Never `None` in a request the
    /// committer accepts: the manifest is what ties the ranges to their writer.
    pub manifest: Option<String>,
    pub ranges: Vec<OffsetRange>,
    /// Rows in the staged files.
    pub records: u64,
    pub files: u64,
    pub bytes: u64,
    /// Kafka timestamp of the oldest record covered, epoch milliseconds.
    pub oldest_record_ms: Option<i64>,
    /// Offsets within `ranges` that dedup dropped (no row, no dead letter): the committer
    /// records them with the commit ([`crate::engine::commit::deduped`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deduped: Vec<OffsetRange>,
}

impl CommitRequest {
    /// Parse and check a message body; the error says what is wrong with it.
    pub fn parse(body: &str) -> Result<Self> {
        let request: CommitRequest =
            serde_json::from_str(body).map_err(|e| Error::Event(format!("commit request is not valid JSON of the expected shape: {e}")))?;
        request.check()?;
        Ok(request)
    }

    fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Event(format!("commit request for {}.{}: {what}", self.namespace, self.table)));
        if self.version != REQUEST_VERSION {
            return bad(format!("version {} is not {REQUEST_VERSION}", self.version));
        }
        if self.namespace.is_empty() || self.table.is_empty() {
            return bad("namespace and table must be set".into());
        }
        if self.ranges.is_empty() {
            return bad("no offset range".into());
        }
        if let Some(r) = self.ranges.iter().find(|r| r.first < 0 || r.first > r.last) {
            return bad(format!("range {}-{} {}..={} is not 0 <= first <= last", r.topic, r.partition, r.first, r.last));
        }
        if self.ranges_by_partition().len() != self.ranges.len() {
            return bad("a topic-partition appears twice".into());
        }
        let ranges = self.ranges_by_partition();
        let within = |r: &OffsetRange| {
            let tp = TopicPartition { topic: r.topic.clone(), partition: r.partition };
            r.first <= r.last && ranges.get(&tp).is_some_and(|(first, last)| *first <= r.first && r.last <= *last)
        };
        if let Some(r) = self.deduped.iter().find(|r| !within(r)) {
            return bad(format!(
                "deduplicated offsets {}-{} {}..={} lie outside the request's ranges",
                r.topic, r.partition, r.first, r.last
            ));
        }
        match &self.manifest {
            Some(m) if !m.is_empty() => Ok(()),
            _ => bad(format!("manifest {:?} is missing: every request names its writer's staged manifest", self.manifest)),
        }
    }

    /// The UUID naming this request's staged manifest, which lists `data_files`: a digest of
    /// every claim of the request (table, ranges in order, counts) and of the files. A request
    /// whose manifest is not so named was not made by the writer that staged the manifest
    /// (a replay with other ranges, a forgery naming someone's manifest) and is refused.
    pub fn manifest_uuid<'a>(&self, data_files: impl IntoIterator<Item = &'a str>) -> uuid::Uuid {
        use sha2::{Digest, Sha256};
        #[derive(Serialize)]
        struct Claims<'a> {
            version: u32,
            namespace: &'a str,
            table: &'a str,
            ranges: &'a [OffsetRange],
            records: u64,
            files: u64,
            bytes: u64,
            oldest_record_ms: Option<i64>,
            // Left out when empty: a request without drops is named as before.
            #[serde(skip_serializing_if = "<[OffsetRange]>::is_empty")]
            deduped: &'a [OffsetRange],
            data_files: Vec<&'a str>,
        }
        let mut data_files: Vec<&str> = data_files.into_iter().collect();
        data_files.sort_unstable();
        let claims = Claims {
            version: self.version,
            namespace: &self.namespace,
            table: &self.table,
            ranges: &self.ranges,
            records: self.records,
            files: self.files,
            bytes: self.bytes,
            oldest_record_ms: self.oldest_record_ms,
            deduped: &self.deduped,
            data_files,
        };
        let mut digest = Sha256::new();
        digest.update(b"icestream staged manifest\n");
        // A struct of plain fields: serde_json writes it the same way every time.
        digest.update(serde_json::to_vec(&claims).unwrap_or_default());
        let bytes: [u8; 16] = digest.finalize()[..16].try_into().unwrap_or_default();
        uuid::Builder::from_custom_bytes(bytes).into_uuid()
    }

    /// First and last offset per topic-partition.
    pub fn ranges_by_partition(&self) -> BTreeMap<TopicPartition, (i64, i64)> {
        self.ranges.iter().map(|r| (TopicPartition { topic: r.topic.clone(), partition: r.partition }, (r.first, r.last))).collect()
    }

    /// What dedup dropped, as the request carries it.
    pub fn deduped_from(deduped: &DedupedOffsets) -> Vec<OffsetRange> {
        let ranges = deduped.0.iter().flat_map(|(tp, ranges)| ranges.iter().map(move |r| (tp, r)));
        ranges
            .map(|(tp, (first, last))| OffsetRange { topic: tp.topic.clone(), partition: tp.partition, first: *first, last: *last })
            .collect()
    }

    /// The offsets dedup dropped, as the committer records them.
    pub fn deduped(&self) -> DedupedOffsets {
        let mut out = DedupedOffsets::default();
        for r in &self.deduped {
            let tp = TopicPartition { topic: r.topic.clone(), partition: r.partition };
            out.0.entry(tp).or_default().push((r.first, r.last));
        }
        out
    }

    /// Ranges from the first and last offset per topic-partition.
    pub fn ranges_from(map: &BTreeMap<TopicPartition, (i64, i64)>) -> Vec<OffsetRange> {
        map.iter()
            .map(|(tp, (first, last))| OffsetRange { topic: tp.topic.clone(), partition: tp.partition, first: *first, last: *last })
            .collect()
    }
}

/// One delivered queue message, from a Lambda SQS event or a receive call.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub body: String,
    /// SQS `ApproximateReceiveCount`: 1 on the first delivery.
    pub receive_count: u32,
    /// Receipt handle: to delete a received message, or to make a deferred one visible sooner.
    pub receipt: Option<String>,
}

/// The messages of a Lambda SQS event.
pub fn from_sqs_event(event: aws_lambda_events::event::sqs::SqsEvent) -> Result<Vec<Message>> {
    event
        .records
        .into_iter()
        .map(|m| {
            let id = m.message_id.unwrap_or_default();
            Ok(Message {
                receive_count: receive_count(m.attributes.get("ApproximateReceiveCount").map(String::as_str), &id)?,
                id,
                body: m.body.unwrap_or_default(),
                receipt: m.receipt_handle,
            })
        })
        .collect()
}

/// SQS `ApproximateReceiveCount`. Absent counts as a first delivery (hand-made events); a value
/// that does not parse is an error: taken as 1, a request would wait for a gap forever.
pub fn receive_count(value: Option<&str>, message_id: &str) -> Result<u32> {
    match value {
        None => Ok(1),
        Some(v) => v.parse().map_err(|e| Error::Event(format!("message {message_id}: ApproximateReceiveCount {v:?} is not a count: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> CommitRequest {
        CommitRequest {
            version: REQUEST_VERSION,
            namespace: "bigdata".into(),
            table: "t".into(),
            manifest: Some("file:///w/t/staged/x.avro".into()),
            ranges: vec![OffsetRange { topic: "a.b".into(), partition: 3, first: 10, last: 20 }],
            records: 5,
            files: 1,
            bytes: 100,
            oldest_record_ms: Some(1),
            deduped: vec![OffsetRange { topic: "a.b".into(), partition: 3, first: 12, last: 13 }],
        }
    }

    #[test]
    fn round_trips_and_rejects_what_it_cannot_commit() {
        let r = request();
        assert_eq!(CommitRequest::parse(&serde_json::to_string(&r).unwrap()).unwrap(), r);
        let err = CommitRequest::parse("{\"version\":1}").unwrap_err().to_string();
        assert!(err.contains("not valid JSON"), "{err}");
        for (broken, says) in [
            (CommitRequest { version: 1, ..request() }, "version 1"),
            (CommitRequest { ranges: vec![], ..request() }, "no offset range"),
            (CommitRequest { manifest: None, ..request() }, "is missing"),
            (CommitRequest { manifest: None, records: 0, ..request() }, "is missing"),
            (
                CommitRequest { ranges: vec![OffsetRange { topic: "a".into(), partition: 0, first: 5, last: 4 }], ..request() },
                "first <= last",
            ),
            (CommitRequest { ranges: [request().ranges, request().ranges].concat(), ..request() }, "appears twice"),
            (
                CommitRequest { deduped: vec![OffsetRange { topic: "a.b".into(), partition: 3, first: 20, last: 21 }], ..request() },
                "outside the request's ranges",
            ),
            (
                CommitRequest { deduped: vec![OffsetRange { topic: "a.b".into(), partition: 4, first: 12, last: 12 }], ..request() },
                "outside the request's ranges",
            ),
        ] {
            let err = CommitRequest::parse(&serde_json::to_string(&broken).unwrap()).unwrap_err().to_string();
            assert!(err.contains(says) && err.contains("bigdata.t"), "{err}");
        }
    }

    #[test]
    fn the_manifest_name_binds_every_claim_and_the_files() {
        let r = request();
        let files = ["file:///w/t/data/b.parquet", "file:///w/t/data/a.parquet"];
        let name = r.manifest_uuid(files);
        assert_eq!(name, r.manifest_uuid(files.into_iter().rev()), "file order does not matter");
        assert_eq!(name.get_version_num(), 8);
        let mut far = r.clone();
        far.ranges[0].last = 9_000_000_000_000_000_000;
        let no_drops = CommitRequest { deduped: vec![], ..r.clone() };
        for other in [far, CommitRequest { records: 6, ..r.clone() }, CommitRequest { table: "u".into(), ..r.clone() }, no_drops] {
            assert_ne!(other.manifest_uuid(files), name, "{other:?}");
        }
        assert_ne!(r.manifest_uuid(["file:///w/t/data/a.parquet"]), name);
    }

    #[test]
    fn sqs_event_messages_carry_the_receive_count() {
        let event: aws_lambda_events::event::sqs::SqsEvent = serde_json::from_value(serde_json::json!({"Records": [
            {"messageId": "m1", "body": "{}", "receiptHandle": "r1", "attributes": {"ApproximateReceiveCount": "3"}},
            {"messageId": "m2", "body": "x"}
        ]}))
        .unwrap();
        let messages = from_sqs_event(event).unwrap();
        assert_eq!((messages[0].id.as_str(), messages[0].receive_count), ("m1", 3));
        assert_eq!(messages[0].receipt.as_deref(), Some("r1"));
        assert_eq!((messages[1].body.as_str(), messages[1].receive_count), ("x", 1));
    }

    #[test]
    fn an_unparsable_receive_count_is_an_error_not_a_first_delivery() {
        let event: aws_lambda_events::event::sqs::SqsEvent = serde_json::from_value(serde_json::json!({"Records": [
            {"messageId": "m1", "body": "{}", "attributes": {"ApproximateReceiveCount": "many"}}
        ]}))
        .unwrap();
        let err = from_sqs_event(event).unwrap_err().to_string();
        assert!(err.contains("m1") && err.contains("\"many\""), "{err}");
    }
}
