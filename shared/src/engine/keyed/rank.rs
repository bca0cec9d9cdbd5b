//! How the changes of one key are ranked, wherever the order is compared: the guarded apply
//! (changes, live rows, tombstones, truncates), the changelog and both rebuilds. A change's
//! identity is its source position, the Kafka record that carried it; the pipeline's order value
//! ranks changes, and ties (two changes in one `source.ts_ms`) are broken by that position, so
//! an update and a delete of one millisecond are two changes and the same one wins everywhere.

use arrow_array::cast::AsArray;
use arrow_array::{Int32Array, Int64Array, StringArray};
use arrow_schema::DataType;

use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::model::event::TopicPartition;
use crate::model::tables::lineage;

/// The Kafka record a change came from. Ordered by offset, then partition, then topic: within a
/// partition that is the log's order; across partitions any fixed order will do, as long as it
/// is this one everywhere.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub offset: i64,
    pub partition: i32,
    pub topic: String,
}

impl Position {
    pub fn of(tp: &TopicPartition, offset: i64) -> Self {
        Self { offset, partition: tp.partition, topic: tp.topic.clone() }
    }
}

/// A change's rank: its order value, then its position.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    pub order: i64,
    /// `None`: recorded before positions were kept (an older tombstone or truncate); it ranks
    /// below every change of the same order value, as equal order values applied then.
    pub position: Option<Position>,
}

impl Rank {
    pub fn new(order: i64, position: Position) -> Self {
        Self { order, position: Some(position) }
    }
}

/// The order and lineage columns of a batch, read once, for the rank of each row.
pub struct RankColumns {
    orders: Int64Array,
    topics: StringArray,
    partitions: Int32Array,
    offsets: Int64Array,
}

impl RankColumns {
    /// `order`: the order column's name.
    pub fn new(columns: &Columns<'_>, order: &str) -> Result<Self> {
        Ok(Self {
            orders: order_values(columns, order)?,
            topics: columns.strings(lineage::TOPIC)?,
            partitions: columns.i32(lineage::PARTITION)?,
            offsets: columns.i64(lineage::OFFSET)?,
        })
    }

    pub fn order(&self, i: usize) -> i64 {
        self.orders.value(i)
    }

    pub fn offset(&self, i: usize) -> i64 {
        self.offsets.value(i)
    }

    pub fn topic_partition(&self, i: usize) -> TopicPartition {
        TopicPartition { topic: self.topics.value(i).to_string(), partition: self.partitions.value(i) }
    }

    pub fn position(&self, i: usize) -> Position {
        Position { offset: self.offsets.value(i), partition: self.partitions.value(i), topic: self.topics.value(i).to_string() }
    }

    pub fn rank(&self, i: usize) -> Rank {
        Rank::new(self.order(i), self.position(i))
    }
}

/// The order column of `batch` as longs (ints, dates and timestamps are whole numbers).
pub fn order_values(columns: &Columns<'_>, order: &str) -> Result<Int64Array> {
    let array = columns.array(order)?;
    let longs = match array.data_type() {
        DataType::Int64 => array.clone(),
        _ => arrow_cast::cast(array, &DataType::Int64)?,
    };
    Ok(longs.as_primitive::<arrow_array::types::Int64Type>().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_order_values_rank_by_position_and_unknown_positions_rank_lowest() {
        let at = |offset, partition| Rank::new(5, Position { offset, partition, topic: "t".into() });
        assert!(at(3, 0) < at(4, 0) && at(4, 0) < at(4, 1));
        assert!(Rank { order: 5, position: None } < at(0, 0));
        assert!(at(99, 9) < Rank::new(6, Position { offset: 0, partition: 0, topic: "t".into() }));
    }
}
