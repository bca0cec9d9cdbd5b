//! The mark a replayed dead letter gets: its offset in the data table's property
//! `icestream.replayed.<topic>.<partition>`, a sorted list of offset ranges (`"5,17-20"`).
//!
//! The mark is set in the same metadata swap as the replayed rows, so a row and its mark land
//! together or not at all, and every replay attempt re-reads the marks before it plans: a second
//! replay (or a concurrent one) finds the offsets marked and adds nothing. The dead letter itself
//! stays (nothing is deleted from the dead-letter table); the audit counts an offset held by both
//! tables once when the data table's mark names it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::event::TopicPartition;

/// Property-name prefix; the partition is split off at the last dot, as for watermarks.
pub const PROPERTY_PREFIX: &str = "icestream.replayed.";

/// Replayed offsets per topic-partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayedOffsets(pub BTreeMap<TopicPartition, BTreeSet<i64>>);

impl ReplayedOffsets {
    /// Read from a table's properties; values that do not parse are ignored (not ours).
    pub fn from_properties(props: &HashMap<String, String>) -> Self {
        Self(crate::engine::commit::watermark::per_partition(props, PROPERTY_PREFIX, parse_ranges))
    }

    pub fn contains(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.0.get(tp).is_some_and(|set| set.contains(&offset))
    }

    pub fn insert(&mut self, tp: &TopicPartition, offset: i64) {
        self.0.entry(tp.clone()).or_default().insert(offset);
    }

    pub fn len(&self) -> usize {
        self.0.values().map(BTreeSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The property updates that add `added` to `self` (only the partitions that change).
    pub fn property_updates(&self, added: &ReplayedOffsets) -> HashMap<String, String> {
        added
            .0
            .iter()
            .filter(|(tp, offsets)| !offsets.iter().all(|o| self.contains(tp, *o)))
            .map(|(tp, offsets)| {
                let mut all = self.0.get(tp).cloned().unwrap_or_default();
                all.extend(offsets.iter().copied());
                (format!("{PROPERTY_PREFIX}{}.{}", tp.topic, tp.partition), format_ranges(&all))
            })
            .collect()
    }
}

/// `"5,17-20"` for {5, 17, 18, 19, 20}.
fn format_ranges(offsets: &BTreeSet<i64>) -> String {
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    for o in offsets {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == *o => *end = *o,
            _ => ranges.push((*o, *o)),
        }
    }
    write_ranges(&ranges)
}

fn parse_ranges(text: &str) -> Option<BTreeSet<i64>> {
    let mut out = BTreeSet::new();
    for (a, b) in read_ranges(text)? {
        if b - a > 10_000_000 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// `"5,17-20"` for the ranges 5..=5 and 17..=20 (the form of every offset-list property).
pub(super) fn write_ranges(ranges: &[(i64, i64)]) -> String {
    let parts: Vec<String> = ranges.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    parts.join(",")
}

/// The ranges of `"5,17-20"`; `None` when it is not such a list (not ours).
pub(super) fn read_ranges(text: &str) -> Option<Vec<(i64, i64)>> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // A leading '-' would be a negative offset, which Kafka never has.
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i64>().ok()?, b.parse::<i64>().ok()?),
            None => {
                let o = part.parse::<i64>().ok()?;
                (o, o)
            }
        };
        if a > b {
            return None;
        }
        out.push((a, b));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition { topic: "fleet.telemetry".into(), partition: p }
    }

    #[test]
    fn marks_round_trip_through_properties_as_ranges() {
        let mut added = ReplayedOffsets::default();
        for o in [5, 17, 18, 19, 20, 40] {
            added.insert(&tp(1), o);
        }
        let props = ReplayedOffsets::default().property_updates(&added);
        assert_eq!(props.get("icestream.replayed.fleet.telemetry.1").map(String::as_str), Some("5,17-20,40"));
        let read = ReplayedOffsets::from_properties(&props);
        assert_eq!(read, added);
        assert!(read.contains(&tp(1), 18) && !read.contains(&tp(1), 21) && !read.contains(&tp(2), 5));
        // Adding what is there changes nothing; adding more merges.
        assert!(read.property_updates(&added).is_empty());
        let mut more = ReplayedOffsets::default();
        more.insert(&tp(1), 21);
        assert_eq!(read.property_updates(&more)["icestream.replayed.fleet.telemetry.1"], "5,17-21,40");
    }

    #[test]
    fn values_that_are_not_ours_are_ignored() {
        let props: HashMap<String, String> = [
            ("icestream.replayed.t.x", "1"),
            ("icestream.replayed.t.0", "a-b"),
            ("icestream.replayed.t.1", "9-3"),
            ("icestream.replayed.t.2", "3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let read = ReplayedOffsets::from_properties(&props);
        assert_eq!(read.len(), 1);
        assert!(read.contains(&TopicPartition { topic: "t".into(), partition: 2 }, 3));
    }
}
