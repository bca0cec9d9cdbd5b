//! Offsets that `dedup` dropped: records whose key repeated one the batch (or, with `window`,
//! the table) already had. Neither table holds them, so without a record of them the audit
//! would see gaps it can only explain by asking the broker. The writer knows them exactly: they
//! go into the data table's property `icestream.deduped.<topic>.<partition>` (offset ranges,
//! `"5,17-20"`) in the same metadata swap as the rows kept beside them — the direct commit, or
//! the queued committer's commit of the request that carries them — and the audit lists them
//! as `deduplicated`.
//!
//! Bounded: the latest [`KEPT_RANGES`] ranges of a partition are kept (a few KB); drops older
//! than those are reported as gaps again, which the broker still explains (`bootstrap=`).

use std::collections::{BTreeMap, HashMap};

use super::replayed::{read_ranges, write_ranges};
use crate::model::event::TopicPartition;

/// Property-name prefix; the partition is split off at the last dot, as for watermarks.
pub const PROPERTY_PREFIX: &str = "icestream.deduped.";

/// Ranges kept per partition, the highest offsets first kept.
pub const KEPT_RANGES: usize = 256;

/// Dropped offsets per topic-partition: sorted, disjoint, non-adjacent ranges `first..=last`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DedupedOffsets(pub BTreeMap<TopicPartition, Vec<(i64, i64)>>);

impl DedupedOffsets {
    /// Read from a table's properties; values that do not parse are ignored (not ours).
    pub fn from_properties(props: &HashMap<String, String>) -> Self {
        Self(super::watermark::per_partition(props, PROPERTY_PREFIX, |v| read_ranges(v).map(normalized)))
    }

    /// From single offsets, in any order.
    pub fn of(offsets: impl IntoIterator<Item = (TopicPartition, i64)>) -> Self {
        let mut by_tp: BTreeMap<TopicPartition, Vec<(i64, i64)>> = BTreeMap::new();
        for (tp, o) in offsets {
            by_tp.entry(tp).or_default().push((o, o));
        }
        Self(by_tp.into_iter().map(|(tp, ranges)| (tp, normalized(ranges))).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(Vec::is_empty)
    }

    pub fn contains(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.0.get(tp).is_some_and(|ranges| ranges.iter().any(|(a, b)| *a <= offset && offset <= *b))
    }

    /// Add `other`'s ranges.
    pub fn extend(&mut self, other: &DedupedOffsets) {
        for (tp, ranges) in &other.0 {
            let mine = self.0.entry(tp.clone()).or_default();
            mine.extend(ranges.iter().copied());
            *mine = normalized(std::mem::take(mine));
        }
    }

    /// The properties that add `added` to `self` (the table's): changed partitions only, each
    /// cut to its latest [`KEPT_RANGES`] ranges.
    pub fn property_updates(&self, added: &DedupedOffsets) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for (tp, ranges) in added.0.iter().filter(|(_, r)| !r.is_empty()) {
            let before = self.0.get(tp).cloned().unwrap_or_default();
            let mut all = normalized(before.iter().chain(ranges).copied().collect());
            let cut = all.len().saturating_sub(KEPT_RANGES);
            all.drain(..cut);
            if all != before {
                out.insert(format!("{PROPERTY_PREFIX}{}.{}", tp.topic, tp.partition), write_ranges(&all));
            }
        }
        out
    }
}

/// Sorted, overlapping and adjacent ranges merged.
fn normalized(mut ranges: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    ranges.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some((_, end)) if a <= end.saturating_add(1) => *end = (*end).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition { topic: "shop.orders".into(), partition: p }
    }

    #[test]
    fn dropped_offsets_round_trip_as_merged_ranges_and_stay_bounded() {
        let added = DedupedOffsets::of([(tp(0), 7), (tp(0), 5), (tp(0), 6), (tp(0), 9), (tp(1), 3)]);
        let props = DedupedOffsets::default().property_updates(&added);
        assert_eq!(props["icestream.deduped.shop.orders.0"], "5-7,9");
        assert_eq!(props["icestream.deduped.shop.orders.1"], "3");
        let table = DedupedOffsets::from_properties(&props);
        assert_eq!(table, added);
        assert!(table.contains(&tp(0), 6) && !table.contains(&tp(0), 8) && !table.contains(&tp(2), 3));
        // The same drops again (a retried commit) change nothing; an adjacent one merges.
        assert!(table.property_updates(&added).is_empty());
        assert_eq!(table.property_updates(&DedupedOffsets::of([(tp(0), 8)]))["icestream.deduped.shop.orders.0"], "5-9");
        // Past KEPT_RANGES ranges, the oldest are dropped.
        let many = DedupedOffsets::of((0..KEPT_RANGES as i64 + 10).map(|i| (tp(0), 100 + 2 * i)));
        let kept = DedupedOffsets::from_properties(&table.property_updates(&many));
        assert_eq!(kept.0[&tp(0)].len(), KEPT_RANGES);
        assert!(!kept.contains(&tp(0), 5) && kept.contains(&tp(0), 100 + 2 * (KEPT_RANGES as i64 + 9)));
    }
}
