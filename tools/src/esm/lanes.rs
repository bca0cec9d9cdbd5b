//! The poller's partitions, each a lane: the batch it fills, the batches cut and waiting, and
//! whether one is in flight. As the MSK mapping scaled out to a poller per partition:
//! partitions are invoked concurrently, each one's batches one at a time and in order.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;
use icestream::model::event::{KafkaRecordIn, TopicPartition};

use super::EsmStats;
use super::batch::{Batch, BatchBuilder, EventSource, MAX_PAYLOAD_BYTES, Rejected};

/// Full batches a partition may hold back while its batch is in flight, before the poller stops
/// reading to wait for it. Fetches bring one partition's records in long runs (16 MB per
/// partition): reading past them keeps the other partitions' invocations going.
pub const READ_AHEAD_BATCHES: usize = 8;

/// One partition's share of the poller.
pub struct Lane {
    builder: BatchBuilder,
    /// When the open batch got its first record (its batching window runs from there).
    opened: Option<Instant>,
    /// Batches cut (full) while one of the partition's was in flight, oldest first.
    ready: VecDeque<Batch>,
    pub busy: bool,
    /// The partition was revoked while its batch was in flight: that batch is not committed.
    pub revoked_in_flight: bool,
}

/// The lanes by partition, and the run's statistics.
pub struct Lanes {
    pub by_partition: BTreeMap<TopicPartition, Lane>,
    pub stats: EsmStats,
    source: EventSource,
    batch_size: usize,
}

/// A batch delivered (accepted or discarded), its offsets not committed yet.
pub struct Delivered {
    pub lane: TopicPartition,
    pub batch: Batch,
    /// What the delivery adds to the run's statistics.
    pub stats: EsmStats,
}

/// Deliveries in flight, polled by the run loop between fetches.
pub type InFlight<'a> = FuturesUnordered<LocalBoxFuture<'a, anyhow::Result<Delivered>>>;

/// What became of a record given to a lane.
pub enum Pushed {
    /// In the open batch.
    Added,
    /// In a new open batch: the full one was cut and queued.
    Cut,
    /// No batch can carry it: everything before it of the partition must be delivered first.
    TooLarge(KafkaRecordIn, usize),
}

impl Lanes {
    pub fn new(source: EventSource, batch_size: usize) -> Self {
        Self { by_partition: BTreeMap::new(), stats: EsmStats::default(), source, batch_size }
    }

    fn lane(&mut self, tp: &TopicPartition) -> &mut Lane {
        let (source, batch_size) = (&self.source, self.batch_size);
        self.by_partition.entry(tp.clone()).or_insert_with(|| Lane {
            builder: BatchBuilder::new(source.clone(), batch_size, MAX_PAYLOAD_BYTES),
            opened: None,
            ready: VecDeque::new(),
            busy: false,
            revoked_in_flight: false,
        })
    }

    /// Add a record to its partition's open batch; a full batch is cut and queued first.
    pub fn push(&mut self, tp: &TopicPartition, record: KafkaRecordIn) -> anyhow::Result<Pushed> {
        let lane = self.lane(tp);
        let record = match lane.builder.push(tp, record) {
            Ok(()) => {
                lane.opened.get_or_insert_with(Instant::now);
                return Ok(Pushed::Added);
            }
            Err(Rejected::TooLarge(record, bytes)) => return Ok(Pushed::TooLarge(record, bytes)),
            Err(Rejected::Full(record)) => record,
        };
        lane.cut();
        lane.builder.push(tp, record).map_err(|_| anyhow::anyhow!("a record under the cap fits an empty batch"))?;
        lane.opened = Some(Instant::now());
        Ok(Pushed::Cut)
    }

    /// Cut `tp`'s open batch (if any) and queue it.
    pub fn cut(&mut self, tp: &TopicPartition) {
        self.lane(tp).cut();
    }

    /// Close the open batches whose window is over (or all, `caught_up`) on idle lanes.
    pub fn close_windows(&mut self, window: Duration, caught_up: bool) {
        for lane in self.by_partition.values_mut().filter(|l| !l.busy && l.ready.is_empty()) {
            if caught_up || lane.builder.is_full() || lane.opened.is_some_and(|t| t.elapsed() >= window) {
                lane.cut();
            }
        }
    }

    /// The next batch of each idle lane, marking the lane busy.
    pub fn take_ready(&mut self) -> Vec<(TopicPartition, Batch)> {
        let mut out = Vec::new();
        for (tp, lane) in self.by_partition.iter_mut().filter(|(_, l)| !l.busy) {
            if let Some(batch) = lane.ready.pop_front() {
                lane.busy = true;
                out.push((tp.clone(), batch));
            }
        }
        out
    }

    /// Whether `tp` has nothing queued or in flight.
    pub fn is_idle(&self, tp: &TopicPartition) -> bool {
        self.by_partition.get(tp).is_none_or(|l| !l.busy && l.ready.is_empty())
    }

    /// Whether `tp` holds back as many cut batches as it may.
    pub fn is_backed_up(&self, tp: &TopicPartition) -> bool {
        self.by_partition.get(tp).is_some_and(|l| l.ready.len() >= READ_AHEAD_BATCHES)
    }

    /// Nothing buffered, queued or in flight anywhere.
    pub fn is_empty(&self) -> bool {
        self.by_partition.values().all(|l| !l.busy && l.ready.is_empty() && l.builder.is_empty())
    }

    /// When the first batching window of an idle lane ends.
    pub fn next_window_end(&self, window: Duration) -> Option<Instant> {
        self.by_partition.values().filter(|l| !l.busy && l.ready.is_empty()).filter_map(|l| l.opened).min().map(|t| t + window)
    }

    /// Forget what is buffered or queued of revoked partitions; a batch of theirs in flight
    /// finishes, but is not committed.
    pub fn revoke(&mut self, revoked: &[i32]) {
        for (tp, lane) in self.by_partition.iter_mut().filter(|(tp, _)| revoked.contains(&tp.partition)) {
            tracing::debug!(partition = %tp, buffered = lane.builder.len(), queued = lane.ready.len(), "revoked");
            lane.builder.retain_partitions(|_| false);
            lane.ready.clear();
            lane.opened = None;
            lane.revoked_in_flight |= lane.busy;
        }
    }

    /// The event for a record no batch can carry.
    pub fn event_for(&mut self, tp: &TopicPartition, record: KafkaRecordIn) -> Batch {
        self.lane(tp).builder.event_for(tp, record)
    }
}

impl Lane {
    fn cut(&mut self) {
        if !self.builder.is_empty() {
            self.ready.push_back(self.builder.take());
        }
        self.opened = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::esm::batch::tests::{record, source, tp};

    /// Two partitions, batches of 2: partition 0 with one batch in flight, one queued and one
    /// open; partition 1 with one batch in flight.
    fn lanes() -> Lanes {
        let mut lanes = Lanes::new(source(), 2);
        for offset in 0..5 {
            lanes.push(&tp(0), record(offset, 10)).unwrap();
        }
        for offset in 0..3 {
            lanes.push(&tp(1), record(offset, 10)).unwrap();
        }
        let started: Vec<(i32, i64)> = lanes.take_ready().iter().map(|(tp, b)| (tp.partition, b.records[tp][0].offset)).collect();
        assert_eq!(started, [(0, 0), (1, 0)], "each partition's first batch, one each");
        lanes
    }

    #[test]
    fn a_partition_has_one_batch_in_flight_and_the_next_in_order_after_it() {
        let mut lanes = lanes();
        assert!(lanes.take_ready().is_empty(), "both partitions are busy");
        lanes.by_partition.get_mut(&tp(0)).unwrap().busy = false;
        let next: Vec<(i32, i64)> = lanes.take_ready().iter().map(|(tp, b)| (tp.partition, b.records[tp][0].offset)).collect();
        assert_eq!(next, [(0, 2)]);
        assert!(!lanes.is_idle(&tp(0)) && !lanes.is_empty());
    }

    #[test]
    fn a_revoked_partition_forgets_what_is_buffered_and_marks_its_batch_in_flight() {
        let mut lanes = lanes();
        lanes.revoke(&[0]);
        let (zero, one) = (&lanes.by_partition[&tp(0)], &lanes.by_partition[&tp(1)]);
        assert!(zero.revoked_in_flight && zero.busy, "its batch in flight finishes, uncommitted");
        assert!(zero.ready.is_empty() && zero.builder.is_empty());
        assert!(!one.revoked_in_flight && !one.builder.is_empty(), "the other partition keeps its records");
    }

    #[test]
    fn a_partition_backs_up_after_its_read_ahead() {
        let mut lanes = Lanes::new(source(), 1);
        lanes.push(&tp(0), record(0, 10)).unwrap();
        lanes.push(&tp(0), record(1, 10)).unwrap();
        assert_eq!(lanes.take_ready().len(), 1);
        for offset in 2..(2 + READ_AHEAD_BATCHES as i64) {
            assert!(!lanes.is_backed_up(&tp(0)));
            lanes.push(&tp(0), record(offset, 10)).unwrap();
        }
        assert!(lanes.is_backed_up(&tp(0)));
    }
}
