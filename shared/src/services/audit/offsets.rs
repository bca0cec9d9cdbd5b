//! The offsets a table holds, per topic-partition, read from its lineage columns only
//! (`kafka_topic`, `kafka_partition`, `kafka_offset`): Parquet reads those three column chunks
//! and nothing else, whatever the table's width.

use std::collections::{BTreeMap, HashMap};

use futures::TryStreamExt;
use iceberg::table::Table;

use iceberg::spec::DataFileFormat;

use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::engine::commit::live_rows::{LiveFiles, deleted_positions, read_live_rows};
use crate::model::event::TopicPartition;
use crate::model::tables::lineage;

/// The offsets of one topic-partition: one bit per offset in 64Ki-offset chunks (a table's
/// offsets are dense runs, so 10M rows take about 1.3 MB, not the 80 MB of a list), plus the
/// number of extra copies of the rare offset held more than once.
#[derive(Debug, Default, Clone)]
pub struct OffsetSet {
    chunks: BTreeMap<i64, Box<[u64; CHUNK_WORDS]>>,
    repeats: HashMap<i64, u32>,
    rows: u64,
}

const CHUNK_BITS: i64 = 1 << 16;
const COLUMNS: [&str; 3] = [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET];
const CHUNK_WORDS: usize = (CHUNK_BITS / 64) as usize;

impl OffsetSet {
    pub fn insert(&mut self, offset: i64) {
        self.rows += 1;
        let chunk = self.chunks.entry(offset.div_euclid(CHUNK_BITS)).or_insert_with(|| Box::new([0; CHUNK_WORDS]));
        let bit = offset.rem_euclid(CHUNK_BITS) as usize;
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        if chunk[word] & mask == 0 {
            chunk[word] |= mask;
        } else {
            *self.repeats.entry(offset).or_default() += 1;
        }
    }

    /// Rows held (copies included).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn contains(&self, offset: i64) -> bool {
        let bit = offset.rem_euclid(CHUNK_BITS) as usize;
        self.chunks.get(&offset.div_euclid(CHUNK_BITS)).is_some_and(|c| c[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// Distinct offsets in ascending order, with their number of copies.
    pub fn iter(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.chunks.iter().flat_map(move |(chunk, words)| {
            words.iter().enumerate().flat_map(move |(w, bits)| {
                let mut bits = *bits;
                std::iter::from_fn(move || {
                    if bits == 0 {
                        return None;
                    }
                    let bit = i64::from(bits.trailing_zeros());
                    bits &= bits - 1;
                    let offset = chunk * CHUNK_BITS + w as i64 * 64 + bit;
                    Some((offset, 1 + self.repeats.get(&offset).copied().unwrap_or(0)))
                })
            })
        })
    }
}

/// Every offset of a table, per topic-partition.
#[derive(Debug, Default)]
pub struct HeldOffsets(pub BTreeMap<TopicPartition, OffsetSet>);

impl HeldOffsets {
    /// Scan `table`'s lineage columns.
    pub async fn read(table: &Table) -> Result<Self> {
        let mut held = Self::default();
        if table.metadata().current_snapshot().is_none() {
            return Ok(held);
        }
        let source = format!("{} lineage scan", table.identifier());
        // iceberg-rust's scan does not apply deletion vectors (v3): a table with them is read
        // file by file, its deletes applied here.
        let live = LiveFiles::of(table).await?;
        if live.deletes_by_data_file.values().flatten().any(|d| d.file_format() == DataFileFormat::Puffin) {
            for file in &live.data {
                let path = file.file_path();
                let deleted = deleted_positions(table, path, &live.deletes_for(path)).await?;
                let (batches, _) = read_live_rows(table, path, &COLUMNS, &deleted).await?;
                for batch in &batches {
                    held.add(table, batch, &source)?;
                }
            }
            return Ok(held);
        }
        let scan = table.scan().select(COLUMNS).build()?;
        let mut stream = scan.to_arrow().await?;
        while let Some(batch) = stream.try_next().await? {
            held.add(table, &batch, &source)?;
        }
        Ok(held)
    }

    /// The offsets of one batch of lineage columns.
    fn add(&mut self, table: &Table, batch: &arrow_array::RecordBatch, source: &str) -> Result<()> {
        let columns = Columns::new(batch, source).with_schema(table.metadata().current_schema());
        let (topics, partitions, offsets) =
            (columns.strings(lineage::TOPIC)?, columns.i32(lineage::PARTITION)?, columns.i64(lineage::OFFSET)?);
        // Rows of one file mostly share a partition: look the set up again only on a change.
        let mut current: Option<(&str, i32, &mut OffsetSet)> = None;
        for i in 0..batch.num_rows() {
            let (topic, partition) = (topics.value(i), partitions.value(i));
            if !current.as_ref().is_some_and(|(t, p, _)| *p == partition && *t == topic) {
                let tp = TopicPartition { topic: topic.to_string(), partition };
                let set = self.0.entry(tp).or_default();
                current = Some((topic, partition, set));
            }
            if let Some((_, _, set)) = current.as_mut() {
                set.insert(offsets.value(i));
            }
        }
        Ok(())
    }

    /// Insert one offset (tests, and tables read another way).
    pub fn insert(&mut self, tp: &TopicPartition, offset: i64) {
        self.0.entry(tp.clone()).or_default().insert(offset);
    }

    pub fn rows(&self) -> u64 {
        self.0.values().map(OffsetSet::rows).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_iterate_in_order_with_their_copies_across_chunks() {
        let mut set = OffsetSet::default();
        for o in [70_000, 3, 65_535, 65_536, 3, 0, 3, 1 << 40] {
            set.insert(o);
        }
        let all: Vec<(i64, u32)> = set.iter().collect();
        assert_eq!(all, [(0, 1), (3, 3), (65_535, 1), (65_536, 1), (70_000, 1), (1 << 40, 1)]);
        assert_eq!(set.rows(), 8);
        assert!(set.contains(65_536) && !set.contains(4));
    }
}
