//! The offsets a table holds, per topic-partition, read from its lineage columns only
//! (`kafka_topic`, `kafka_partition`, `kafka_offset`): Parquet reads those three column chunks
//! and nothing else, whatever the table's width.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::table::Table;

use crate::columns::Columns;
use crate::error::Result;
use crate::event::TopicPartition;
use crate::tables::lineage;

/// Every offset of a table, per topic-partition, sorted (repeats kept: they are what the audit
/// looks for).
#[derive(Debug, Default)]
pub struct HeldOffsets(pub BTreeMap<TopicPartition, Vec<i64>>);

impl HeldOffsets {
    /// Scan `table`'s lineage columns.
    pub async fn read(table: &Table) -> Result<Self> {
        let mut held: BTreeMap<TopicPartition, Vec<i64>> = BTreeMap::new();
        if table.metadata().current_snapshot().is_none() {
            return Ok(Self(held));
        }
        let scan = table.scan().select([lineage::TOPIC, lineage::PARTITION, lineage::OFFSET]).build()?;
        let mut stream = scan.to_arrow().await?;
        let source = format!("{} lineage scan", table.identifier());
        while let Some(batch) = stream.try_next().await? {
            let columns = Columns::new(&batch, &source).with_schema(table.metadata().current_schema());
            let (topics, partitions, offsets) = (columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?);
            // Rows of one file mostly share a partition: look the list up again only on a change.
            let mut current: Option<(TopicPartition, Vec<i64>)> = None;
            for i in 0..batch.num_rows() {
                let (topic, partition) = (topics.value(i), partitions.value(i));
                let same = current.as_ref().is_some_and(|(tp, _)| tp.partition == partition && tp.topic == topic);
                if !same {
                    if let Some((tp, list)) = current.take() {
                        held.insert(tp, list);
                    }
                    let tp = TopicPartition { topic: topic.to_string(), partition };
                    let list = held.remove(&tp).unwrap_or_default();
                    current = Some((tp, list));
                }
                if let Some((_, list)) = current.as_mut() {
                    list.push(offsets.value(i));
                }
            }
            if let Some((tp, list)) = current {
                held.insert(tp, list);
            }
        }
        for list in held.values_mut() {
            list.sort_unstable();
        }
        Ok(Self(held))
    }

    pub fn rows(&self) -> u64 {
        self.0.values().map(|l| l.len() as u64).sum()
    }
}
