//! Offset gaps the queued committer took: offsets of a partition that it moved the watermark
//! past without any request bringing them (it waited `commit_gap_patience` deliveries for an
//! earlier request and none came).
//!
//! Such a gap is usually real (transaction markers, a compacted topic, a log that starts past
//! 0), but it may also be a request still in flight: held by a committer that died, waiting
//! for its visibility timeout, or in the dead-letter queue until a redrive. So a taken gap is
//! recorded in the table, in the same metadata swap that moves the watermark past it, and it
//! stays open: a request that later brings offsets inside it is committed (those offsets
//! only), and the gap shrinks in the same swap, so a redelivery of that request adds nothing.
//! What is still recorded is what the audit reports as skipped.
//!
//! One table property per partition, `icestream.gaps.<topic>.<partition>`, a JSON list of
//! `{"first","last","reason","at_ms"}`. Gaps older than any request can be
//! ([`crate::services::maintenance::orphans::STAGED_RETENTION`]'s 15 days) are dropped when the property
//! is next written, so a topic with a marker between every two batches does not grow the
//! metadata for ever.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::model::event::TopicPartition;

/// Property-name prefix; the full name is `icestream.gaps.<topic>.<partition>`.
pub const PROPERTY_PREFIX: &str = "icestream.gaps.";

/// How long a taken gap can still be filled: no request outlives SQS's retention (14 days,
/// counted from the first enqueue) plus a day.
const KEPT_MS: i64 = 15 * 24 * 3600 * 1000;

/// Why the committer moved past offsets no request brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GapReason {
    /// A later request waited `commit_gap_patience` deliveries and no earlier one came: not a
    /// proof that the offsets hold no record.
    Patience,
}

/// Offsets `first..=last` the committer moved past, why, and when (epoch milliseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakenGap {
    pub first: i64,
    pub last: i64,
    pub reason: GapReason,
    pub at_ms: i64,
}

/// The open gaps of a table, per topic-partition, each list sorted and disjoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TakenGaps(pub BTreeMap<TopicPartition, Vec<TakenGap>>);

impl TakenGaps {
    /// Read from a table's properties; entries that do not parse are ignored (not ours).
    pub fn from_properties(props: &HashMap<String, String>) -> Self {
        let parse = |value: &str| {
            let mut gaps = serde_json::from_str::<Vec<TakenGap>>(value).ok().filter(|g| !g.is_empty())?;
            gaps.sort_by_key(|g| g.first);
            Some(gaps)
        };
        Self(super::watermark::per_partition(props, PROPERTY_PREFIX, parse))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `offset` of `tp` lies in an open gap.
    pub fn contains(&self, tp: &TopicPartition, offset: i64) -> bool {
        in_any(self.0.get(tp), offset)
    }

    /// Whether any offset of `first..=last` of `tp` lies in an open gap.
    pub fn overlaps(&self, tp: &TopicPartition, first: i64, last: i64) -> bool {
        self.0.get(tp).is_some_and(|gaps| gaps.iter().any(|g| g.first <= last && first <= g.last))
    }

    /// Record `first..=last` of `tp` as taken (empty ranges are ignored).
    pub fn take(&mut self, tp: &TopicPartition, first: i64, last: i64, reason: GapReason, at_ms: i64) {
        if first > last {
            return;
        }
        let gaps = self.0.entry(tp.clone()).or_default();
        gaps.push(TakenGap { first, last, reason, at_ms });
        gaps.sort_by_key(|g| g.first);
    }

    /// `first..=last` of `tp` arrived: remove it from the open gaps (splitting a gap it falls
    /// inside).
    pub fn fill(&mut self, tp: &TopicPartition, first: i64, last: i64) {
        let Some(gaps) = self.0.get_mut(tp) else { return };
        let mut left = Vec::with_capacity(gaps.len() + 1);
        for g in gaps.drain(..) {
            if g.last < first || last < g.first {
                left.push(g);
                continue;
            }
            if g.first < first {
                left.push(TakenGap { last: first - 1, ..g.clone() });
            }
            if last < g.last {
                left.push(TakenGap { first: last + 1, ..g });
            }
        }
        *gaps = left;
    }

    /// The properties that turn `before` into `self` (changed partitions only; a partition
    /// whose gaps are all filled gets an empty list). Gaps older than a request can be are
    /// left out of what is written.
    pub fn property_updates(&self, before: &TakenGaps, now_ms: i64) -> HashMap<String, String> {
        let empty = Vec::new();
        let mut out = HashMap::new();
        for tp in self.0.keys().chain(before.0.keys()) {
            let (now, then) = (self.0.get(tp).unwrap_or(&empty), before.0.get(tp).unwrap_or(&empty));
            if now == then {
                continue;
            }
            let kept: Vec<&TakenGap> = now.iter().filter(|g| now_ms - g.at_ms <= KEPT_MS).collect();
            out.insert(property_name(tp), serde_json::to_string(&kept).unwrap_or_else(|_| "[]".into()));
        }
        out
    }
}

pub fn property_name(tp: &TopicPartition) -> String {
    format!("{PROPERTY_PREFIX}{}.{}", tp.topic, tp.partition)
}

/// Whether `offset` lies in one of a partition's gaps (looked up once per partition by callers
/// that test every record).
pub fn in_any(gaps: Option<&Vec<TakenGap>>, offset: i64) -> bool {
    gaps.is_some_and(|gaps| gaps.iter().any(|g| g.first <= offset && offset <= g.last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition { topic: "fleet.telemetry".into(), partition: p }
    }

    #[test]
    fn taken_gaps_round_trip_through_properties_and_fill_splits_them() {
        let mut gaps = TakenGaps::default();
        gaps.take(&tp(0), 0, 330, GapReason::Patience, 1_000);
        gaps.take(&tp(0), 500, 500, GapReason::Patience, 2_000);
        gaps.take(&tp(1), 7, 6, GapReason::Patience, 2_000); // empty: ignored
        let props = gaps.property_updates(&TakenGaps::default(), 3_000);
        assert_eq!(props.len(), 1, "{props:?}");
        let back = TakenGaps::from_properties(&props);
        assert_eq!(back, gaps);
        assert!(back.contains(&tp(0), 0) && back.contains(&tp(0), 330) && back.contains(&tp(0), 500));
        assert!(!back.contains(&tp(0), 331) && !back.contains(&tp(1), 7));
        assert!(back.overlaps(&tp(0), 300, 400) && !back.overlaps(&tp(0), 331, 499));

        let mut filled = back.clone();
        filled.fill(&tp(0), 100, 199);
        filled.fill(&tp(0), 450, 600);
        assert_eq!(filled.0[&tp(0)].iter().map(|g| (g.first, g.last)).collect::<Vec<_>>(), [(0, 99), (200, 330)]);
        filled.fill(&tp(0), 0, 400);
        let props = filled.property_updates(&back, 3_000);
        assert_eq!(props[&property_name(&tp(0))], "[]");
        assert!(TakenGaps::from_properties(&props).is_empty());
    }

    #[test]
    fn gaps_older_than_any_request_are_not_written_again() {
        let mut gaps = TakenGaps::default();
        gaps.take(&tp(0), 0, 9, GapReason::Patience, 0);
        gaps.take(&tp(0), 20, 29, GapReason::Patience, KEPT_MS);
        let props = gaps.property_updates(&TakenGaps::default(), KEPT_MS + 1);
        let back = TakenGaps::from_properties(&props);
        assert_eq!(back.0[&tp(0)].iter().map(|g| g.first).collect::<Vec<_>>(), [20]);
    }
}
