//! The record loop of appends (direct and queued ingest, dead-letter replay and recovery): each
//! record the tables do not hold yet decoded into rows with their lineage, or a dead letter.

use std::collections::{BTreeMap, HashMap, HashSet};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::base::error::Result;
use crate::base::freshness::RecordTimes;
use crate::decode::RecordDecoder;
use crate::engine::commit::Watermarks;
use crate::engine::commit::gaps::{self, TakenGaps};
use crate::model::event::{KafkaRecordIn, TopicPartition};
use crate::model::pipeline::{Pipeline, format_name};
use crate::model::tables::kafka::KafkaColumns;
use crate::modes::dead_letter::{DeadLetterBuilder, Reject};
use crate::modes::kafka_columns::{KafkaColumnsBuilder, without_kafka_columns};
use crate::modes::lineage::Lineage;
use crate::modes::writer_plan::{Framed, WriterPlan};

/// What the tables already hold, as far as decoding needs to know.
pub struct Marks<'a> {
    /// Offsets at or below these are in the pipeline table (or were deliberately dropped),
    pub data: &'a Watermarks,
    /// except those in the queued committer's open gaps: their requests may still come, and a
    /// redelivery of them must bring the records (see [`crate::engine::commit::gaps`]).
    pub open_gaps: &'a TakenGaps,
    /// Queued mode: the dead-letter table's own watermarks and open gaps. Its commits are
    /// requests of their own, so the pipeline table holding an offset does not mean the
    /// dead-letter table holds its dead letter yet (its request may wait in the queue): an
    /// offset is held only when both say so, or a redelivery would claim the dead-letter
    /// table's offsets without their dead letters.
    pub dead_letter: Option<(&'a Watermarks, &'a TakenGaps)>,
    /// Offsets past the data watermark that the dead-letter table holds (after a crash between
    /// the two commits).
    pub dead_lettered: &'a HashMap<TopicPartition, HashSet<i64>>,
}

impl Marks<'_> {
    /// Whether one of the tables holds an offset of `tp` already. Looked up once per partition:
    /// each record then costs a comparison, not two map lookups keyed by topic name.
    pub fn of(&self, tp: &TopicPartition) -> impl Fn(i64) -> bool + use<'_> {
        let (covered, dead_lettered) = (self.data.covers_in(tp), self.dead_lettered.get(tp));
        let open = self.open_gaps.0.get(tp);
        let dead_letter = self.dead_letter.map(|(marks, gaps)| (marks.covers_in(tp), gaps.0.get(tp)));
        move |offset| {
            let in_data = covered(offset) && !gaps::in_any(open, offset);
            let in_dead_letters = dead_letter.as_ref().is_none_or(|(covered, open)| covered(offset) && !gaps::in_any(*open, offset));
            (in_data && in_dead_letters) || dead_lettered.is_some_and(|held| held.contains(&offset))
        }
    }
}

/// One pipeline's records decoded: rows (without lineage yet), rejects, and what was skipped.
pub struct DecodedPartitions {
    decoder: RecordDecoder,
    lineage: Lineage,
    /// The Kafka metadata columns of the rows (`kafka_columns`).
    kafka: KafkaColumnsBuilder,
    pub rejects: DeadLetterBuilder,
    pub skipped_replay: usize,
    /// Null values (Kafka tombstones): skipped (counted in the invocation summary).
    pub tombstones: usize,
    /// Records rejected because the table cannot take their writer schema.
    pub schema_rejects: usize,
    /// First and last offset per topic-partition in the event.
    pub ranges: BTreeMap<TopicPartition, (i64, i64)>,
    pub oldest_timestamp_ms: Option<i64>,
    /// Kafka timestamps of every record of the event (freshness at commit).
    pub record_times: RecordTimes,
}

impl DecodedPartitions {
    /// The decoded rows with their lineage, in the table's column order.
    pub fn rows(&mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let decoded = self.decoder.finish()?;
        if KafkaColumns::of(schema.fields().iter().map(|f| f.name().as_str())).is_empty() {
            return self.lineage.batch(schema, decoded);
        }
        let rows = self.lineage.batch(without_kafka_columns(&schema), decoded)?;
        self.kafka.complete(schema, &rows)
    }
}

/// A reason for a value a pipeline without `registry` could not decode, with what it suggests:
/// a registry frame the value starts with, or for raw Avro that the value may be another
/// schema version's (a datum names no writer schema: see docs/pipelines.md, "Schema evolution").
fn unregistered_hint(pipeline: &Pipeline, value: &[u8], reason: String) -> String {
    if pipeline.registry.is_some() {
        return reason;
    }
    match crate::model::registry::frame::unexpected_frame_hint(value) {
        Some(hint) => format!("{reason}; {hint}"),
        None if pipeline.format == crate::model::schema::Format::Avro => format!(
            "{reason}; raw Avro carries no writer schema: a value written with another version of the schema does not decode with the pipeline's (use a schema registry to evolve)"
        ),
        None => reason,
    }
}

/// Decode every record the tables do not hold yet: a record at or below the data watermark,
/// or already dead-lettered, is skipped undecoded (replays cost nothing), so every offset
/// lands in exactly one of the two tables.
pub fn decode_partitions(
    pipeline: &Pipeline,
    plan: &WriterPlan,
    mut decoder: RecordDecoder,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    marks: &Marks<'_>,
    rejected_at_us: i64,
) -> Result<DecodedPartitions> {
    let records: usize = partitions.values().map(Vec::len).sum();
    decoder.reserve(records);
    let mut out = DecodedPartitions {
        decoder,
        lineage: Lineage::with_capacity(records),
        kafka: KafkaColumnsBuilder::new(pipeline.kafka_columns),
        rejects: DeadLetterBuilder::new(rejected_at_us, format_name(pipeline.format)),
        skipped_replay: 0,
        tombstones: 0,
        schema_rejects: 0,
        ranges: BTreeMap::new(),
        oldest_timestamp_ms: None,
        record_times: RecordTimes::with_capacity(records),
    };
    for (tp, records) in partitions {
        if let (Some(first), Some(last)) = (records.first(), records.last()) {
            out.ranges.insert(tp.clone(), (first.offset, last.offset));
        }
        for record in records {
            out.oldest_timestamp_ms = Some(out.oldest_timestamp_ms.map_or(record.timestamp_ms, |o| o.min(record.timestamp_ms)));
            out.record_times.push(record.timestamp_ms);
        }
    }
    let mut taker = Appended { pipeline, plan, out };
    taker.out.skipped_replay = take_new_records(partitions, |tp| marks.of(tp), &mut taker);
    let out = taker.out;
    Ok(out)
}

/// An append pipeline's records as rows of its writer plan.
struct Appended<'a> {
    pipeline: &'a Pipeline,
    plan: &'a WriterPlan,
    out: DecodedPartitions,
}

impl TakeRecords for Appended<'_> {
    fn take(&mut self, tp: &TopicPartition, record: &KafkaRecordIn) -> std::result::Result<(), String> {
        let (pipeline, out) = (self.pipeline, &mut self.out);
        let value = match (&record.value, &record.value_error) {
            (_, Some(e)) => return Err(e.to_string()),
            (Some(v), None) => &v[..],
            (None, None) => {
                out.tombstones += 1;
                return Ok(());
            }
        };
        match self.plan.read(pipeline, record, value) {
            Framed::Reader(reader, payload) => {
                out.decoder.append_as(reader, &payload).map_err(|e| unregistered_hint(pipeline, value, e))?
            }
            Framed::Reject(reason) => {
                if reason.starts_with("schema:") {
                    out.schema_rejects += 1;
                }
                return Err(reason);
            }
        }
        out.lineage.append(tp, record.offset);
        out.kafka.append(record.into());
        Ok(())
    }

    fn rejects(&mut self) -> &mut DeadLetterBuilder {
        &mut self.out.rejects
    }
}

/// What the record loop hands each record the tables do not hold yet.
pub trait TakeRecords {
    /// Take one record into the batch; an error is the reason of its dead letter.
    fn take(&mut self, tp: &TopicPartition, record: &KafkaRecordIn) -> std::result::Result<(), String>;
    /// The batch's dead letters.
    fn rejects(&mut self) -> &mut DeadLetterBuilder;
}

/// The one record loop of every mode (append, upsert; replay and recover through them): each
/// record in order; one the tables hold (`held(tp)`, looked up once per partition, then a
/// comparison per record) is skipped undecoded, so replays cost nothing; the rest are taken,
/// or dead-lettered with the reason `take` gives, so every offset lands in exactly one of the
/// two tables. Returns how many were held.
pub fn take_new_records<H: Fn(i64) -> bool>(
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    held: impl Fn(&TopicPartition) -> H,
    taker: &mut impl TakeRecords,
) -> usize {
    let mut skipped = 0;
    for (tp, records) in partitions {
        let holds = held(tp);
        for record in records {
            if holds(record.offset) {
                skipped += 1;
                continue;
            }
            if let Err(error) = taker.take(tp, record) {
                taker.rejects().append(Reject::of(tp, record, &error));
            }
        }
    }
    skipped
}
