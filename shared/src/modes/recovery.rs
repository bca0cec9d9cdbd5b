//! After a crash between a pipeline's two commits (dead letters first, then rows), the
//! dead-letter watermark runs ahead of the data watermark. The offsets in between were either
//! dead-lettered or meant for the data table; only the dead-letter table can tell which, so
//! the redelivery reads its lineage for exactly that range, and only then. Normal invocations
//! read nothing here.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::TryStreamExt;
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::Datum;
use iceberg::table::Table;

use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::engine::commit::Watermarks;
use crate::model::event::{KafkaRecordIn, TopicPartition};
use crate::model::tables::lineage;

/// Per topic-partition, the offsets of the records of `partitions` that are past the data
/// watermark but already in the dead-letter table.
pub async fn dead_lettered_offsets(
    dead_letter: &Table,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    data_marks: &Watermarks,
    dead_letter_marks: &Watermarks,
) -> Result<HashMap<TopicPartition, HashSet<i64>>> {
    let mut found: HashMap<TopicPartition, HashSet<i64>> = HashMap::new();
    for (tp, records) in partitions {
        let Some(dead_letter_mark) = dead_letter_marks.get(tp) else { continue };
        let above = data_marks.get(tp).unwrap_or(i64::MIN);
        let in_gap = |r: &&KafkaRecordIn| r.offset > above && r.offset <= dead_letter_mark;
        let (Some(low), Some(high)) =
            (records.iter().filter(in_gap).map(|r| r.offset).min(), records.iter().filter(in_gap).map(|r| r.offset).max())
        else {
            continue;
        };
        let predicate: Predicate = Reference::new(lineage::TOPIC)
            .equal_to(Datum::string(&tp.topic))
            .and(Reference::new(lineage::PARTITION).equal_to(Datum::int(tp.partition)))
            .and(Reference::new(lineage::OFFSET).greater_than_or_equal_to(Datum::long(low)))
            .and(Reference::new(lineage::OFFSET).less_than_or_equal_to(Datum::long(high)));
        let scan = dead_letter.scan().select([lineage::TOPIC, lineage::PARTITION, lineage::OFFSET]).with_filter(predicate).build()?;
        let mut stream = scan.to_arrow().await?;
        while let Some(batch) = stream.try_next().await? {
            let columns =
                Columns::new(&batch, format!("{} scan", dead_letter.identifier())).with_schema(dead_letter.metadata().current_schema());
            let (topics, partitions, offsets) =
                (columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?);
            for i in 0..batch.num_rows() {
                let (topic, partition, offset) = (topics.value(i), partitions.value(i), offsets.value(i));
                // The scan filters by file statistics; check rows exactly.
                if topic == tp.topic && partition == tp.partition && (low..=high).contains(&offset) {
                    found.entry(tp.clone()).or_default().insert(offset);
                }
            }
        }
    }
    Ok(found)
}
