//! Freshness: how old the records a commit covers are when it lands (Kafka timestamp to commit
//! time), and how long the commit took. Each append snapshot records the figures in its summary
//! (`icestream.record-age-*`, `icestream.commit-latency-ms`), so `icestream status` reads them
//! from the table; the EMF line reports them per table for the dashboard and alarms.

use std::collections::HashMap;

use serde::Serialize;

/// Snapshot-summary keys.
pub mod summary {
    pub const AGE_P50: &str = "icestream.record-age-p50-ms";
    pub const AGE_P99: &str = "icestream.record-age-p99-ms";
    pub const AGE_MAX: &str = "icestream.record-age-max-ms";
    pub const NEWEST_AGE: &str = "icestream.newest-record-age-ms";
    pub const NEWEST_RECORD: &str = "icestream.newest-record-ms";
    pub const COMMIT_LATENCY: &str = "icestream.commit-latency-ms";
}

/// Kafka timestamps (epoch ms) of the records one append covers.
#[derive(Debug, Clone, Default)]
pub struct RecordTimes(Vec<i64>);

impl RecordTimes {
    pub fn with_capacity(records: usize) -> Self {
        RecordTimes(Vec::with_capacity(records))
    }

    pub fn push(&mut self, timestamp_ms: i64) {
        self.0.push(timestamp_ms);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The figures at `now_ms` with `commit_latency_ms` spent committing so far; `None` without
    /// records.
    pub fn at(&self, now_ms: i64, commit_latency_ms: u64) -> Option<Freshness> {
        let oldest = *self.0.iter().min()?;
        let newest = *self.0.iter().max()?;
        // Nearest rank on ages, which run opposite to timestamps: the k-th smallest age is the
        // k-th largest timestamp, k = ceil(pct * n / 100), at index n - k in ascending order.
        let n = self.0.len();
        let index = |pct: usize| n - (pct * n).div_ceil(100).max(1);
        let (p50, p99) = (index(50), index(99));
        // Selected, not sorted: a sort of a 300k-record commit's times cost ~190 instructions
        // a record. The p99 index is at most the p50 one, so it is selected among the times
        // the first selection left below it.
        let mut times = self.0.clone();
        let (below, &mut at_p50, _) = times.select_nth_unstable(p50);
        let at_p99 = if p99 < p50 { *below.select_nth_unstable(p99).1 } else { at_p50 };
        let age = |t: i64| (now_ms - t).max(0);
        Some(Freshness {
            age_p50_ms: age(at_p50),
            age_p99_ms: age(at_p99),
            age_max_ms: age(oldest),
            newest_age_ms: age(newest),
            newest_record_ms: newest,
            commit_latency_ms: commit_latency_ms as i64,
        })
    }
}

/// Ages of the records of one commit when it landed, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Freshness {
    pub age_p50_ms: i64,
    pub age_p99_ms: i64,
    /// The oldest record's age.
    pub age_max_ms: i64,
    /// The newest record's age: how far behind the table is.
    pub newest_age_ms: i64,
    /// The newest record's Kafka timestamp (epoch ms): freshness at any later time.
    pub newest_record_ms: i64,
    /// From the first commit attempt to the snapshot being written.
    pub commit_latency_ms: i64,
}

impl Freshness {
    pub fn summary_properties(&self) -> HashMap<String, String> {
        [
            (summary::AGE_P50, self.age_p50_ms),
            (summary::AGE_P99, self.age_p99_ms),
            (summary::AGE_MAX, self.age_max_ms),
            (summary::NEWEST_AGE, self.newest_age_ms),
            (summary::NEWEST_RECORD, self.newest_record_ms),
            (summary::COMMIT_LATENCY, self.commit_latency_ms),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Read back from a snapshot summary; `None` when the snapshot has none (not an append of
    /// ours, or written before these figures existed).
    pub fn from_summary(props: &HashMap<String, String>) -> Option<Self> {
        let get = |k: &str| props.get(k).and_then(|v| v.parse::<i64>().ok());
        Some(Self {
            age_p50_ms: get(summary::AGE_P50)?,
            age_p99_ms: get(summary::AGE_P99)?,
            age_max_ms: get(summary::AGE_MAX)?,
            newest_age_ms: get(summary::NEWEST_AGE)?,
            newest_record_ms: get(summary::NEWEST_RECORD)?,
            commit_latency_ms: get(summary::COMMIT_LATENCY)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_nearest_rank_percentiles_at_commit_time() {
        let mut times = RecordTimes::default();
        assert!(times.at(0, 0).is_none());
        // 100 records, 1..=100 seconds old at now = 1000 s.
        for s in 1..=100 {
            times.push((1000 - s) * 1000);
        }
        let f = times.at(1_000_000, 42).unwrap();
        assert_eq!((f.age_max_ms, f.newest_age_ms, f.newest_record_ms), (100_000, 1_000, 999_000));
        assert_eq!((f.age_p50_ms, f.age_p99_ms, f.commit_latency_ms), (50_000, 99_000, 42));
        assert_eq!(Freshness::from_summary(&f.summary_properties()), Some(f));
        // A record from the future (producer clock ahead) is age 0, not negative.
        let mut ahead = RecordTimes::default();
        ahead.push(2_000_000);
        assert_eq!(ahead.at(1_000_000, 0).unwrap().age_max_ms, 0);
    }

    proptest::proptest! {
        /// The selections give the figures a sort gives, for any times in any order.
        #[test]
        fn percentiles_are_those_of_the_sorted_times(times in proptest::collection::vec(-50i64..50, 1..300)) {
            let mut sorted = times.clone();
            sorted.sort_unstable();
            let n = sorted.len();
            let age_at = |pct: usize| (100 - sorted[n - (pct * n).div_ceil(100).max(1)]).max(0);
            let f = RecordTimes(times).at(100, 0).ok_or_else(|| proptest::test_runner::TestCaseError::fail("no figures for some times"))?;
            proptest::prop_assert_eq!((f.age_p50_ms, f.age_p99_ms), (age_at(50), age_at(99)));
            proptest::prop_assert_eq!((f.age_max_ms, f.newest_record_ms), (100 - sorted[0], sorted[n - 1]));
        }
    }
}
