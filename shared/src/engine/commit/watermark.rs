//! Offset watermarks: the highest Kafka offset per topic-partition whose records a table already
//! holds (or deliberately does not hold: dead letters, dropped duplicates).
//!
//! They live in table properties, written in the same metadata swap as the data files they
//! cover: properties survive snapshot expiry and are read in O(1) from the current metadata,
//! with no walk over snapshots.

use std::collections::{BTreeMap, HashMap};

use crate::model::event::TopicPartition;

/// Property-name prefix; the full name is `icestream.offset.<topic>.<partition>` (Kafka topic
/// names may contain dots, so the partition is split off at the last one).
pub const PROPERTY_PREFIX: &str = "icestream.offset.";

/// Highest committed offset per topic-partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermarks(pub BTreeMap<TopicPartition, i64>);

impl Watermarks {
    /// Read from a table's properties; entries that do not parse are ignored (not ours).
    pub fn from_properties(props: &HashMap<String, String>) -> Self {
        Self(per_partition(props, PROPERTY_PREFIX, |value| value.parse::<i64>().ok()))
    }

    /// Committed offset of one partition; records at or below it are already handled.
    pub fn get(&self, tp: &TopicPartition) -> Option<i64> {
        self.0.get(tp).copied()
    }

    /// Whether the record at `offset` of `tp` is already covered.
    pub fn covers(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.covers_in(tp)(offset)
    }

    /// [`Self::covers`] for the records of one partition: the watermark looked up once.
    pub fn covers_in(&self, tp: &TopicPartition) -> impl Fn(i64) -> bool + use<> {
        let watermark = self.get(tp);
        move |offset| watermark.is_some_and(|w| offset <= w)
    }

    /// Raise to at least `offset`; a watermark never goes down.
    pub fn advance(&mut self, tp: &TopicPartition, offset: i64) {
        let entry = self.0.entry(tp.clone()).or_insert(offset);
        *entry = (*entry).max(offset);
    }

    /// The properties that raise `current` to include `self` (only the ones that change).
    pub fn property_updates(&self, current: &Watermarks) -> HashMap<String, String> {
        self.0
            .iter()
            .filter(|(tp, offset)| current.get(tp).is_none_or(|c| **offset > c))
            .map(|(tp, offset)| (property_name(tp), offset.to_string()))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub fn property_name(tp: &TopicPartition) -> String {
    format!("{PROPERTY_PREFIX}{}.{}", tp.topic, tp.partition)
}

/// The table properties named `<prefix><topic>.<partition>` whose value `parse` reads, by
/// topic-partition (the partition is split off at the last dot: topic names may contain
/// dots). Names or values that do not parse are not ours and are left out.
pub fn per_partition<T>(props: &HashMap<String, String>, prefix: &str, parse: impl Fn(&str) -> Option<T>) -> BTreeMap<TopicPartition, T> {
    props
        .iter()
        .filter_map(|(name, value)| {
            let (topic, partition) = name.strip_prefix(prefix)?.rsplit_once('.')?;
            let tp = TopicPartition { topic: topic.to_string(), partition: partition.parse().ok()? };
            Some((tp, parse(value)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition { topic: t.into(), partition: p }
    }

    #[test]
    fn round_trips_through_properties_with_dotted_and_dashed_topics() {
        let mut w = Watermarks::default();
        w.advance(&tp("fleet.vehicle-telemetry", 3), 41);
        w.advance(&tp("fleet.vehicle-telemetry", 3), 7); // never goes down
        w.advance(&tp("t", 0), 0);
        let mut props: HashMap<String, String> = w.property_updates(&Watermarks::default());
        props.insert("write.format.default".into(), "parquet".into());
        props.insert(format!("{PROPERTY_PREFIX}garbage"), "x".into());
        let back = Watermarks::from_properties(&props);
        assert_eq!(back, w);
        assert!(back.covers(&tp("fleet.vehicle-telemetry", 3), 41));
        assert!(!back.covers(&tp("fleet.vehicle-telemetry", 3), 42));
        assert!(!back.covers(&tp("t", 1), 0));
    }

    #[test]
    fn updates_only_raise() {
        let mut current = Watermarks::default();
        current.advance(&tp("t", 0), 10);
        let mut next = Watermarks::default();
        next.advance(&tp("t", 0), 5);
        next.advance(&tp("t", 1), 5);
        let ups = next.property_updates(&current);
        assert_eq!(ups.len(), 1);
        assert_eq!(ups[&property_name(&tp("t", 1))], "5");
    }
}
