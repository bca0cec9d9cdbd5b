//! `icestream esm`: the local event source mapping. It consumes a topic (or several) with a consumer
//! group, cuts batches like the MSK mapping ([`batch`]), invokes a [`Function`], commits the
//! offsets only after success, and after `retries` failed attempts writes the batch to the
//! on-failure directory and moves on. Each partition has at most one batch in flight, so its
//! records are processed in order; partitions are invoked concurrently.
//!
//! Caught up (`drain=true`) is judged from what fetches return, never from ListOffsets:
//! librdkafka reports a partition's end when its fetch position reaches the high watermark
//! carried in the fetch response. Tansu answers ListOffsets(LATEST) with the base offset of
//! the last batch + 1, which would stop a drain early (see shared/LOCAL-STACK.md).

pub mod batch;
pub mod command;
pub mod failure;
pub mod function;
pub mod lanes;
pub mod options;
pub mod size;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::BytesMut;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use icestream::model::event::{Headers, KafkaRecordIn, LOCAL_CLUSTER_ARN, TimestampType, TopicPartition};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers as _, Message};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use serde::Serialize;

use crate::kafka::client_config;
use batch::{Batch, EventSource, MAX_PAYLOAD_BYTES};
use failure::{Condition, write_failed_batch};
pub use function::Function;
use lanes::{Delivered, InFlight, Lanes, Pushed};
pub use options::{ESM_OPTIONS, EsmOptions, Invoke};

/// How long one poll waits when no batch is open (also how often `stop` and drain are checked).
const IDLE_WAIT: Duration = Duration::from_millis(200);
/// First retry delay; doubles per attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Messages taken from librdkafka's queue per wake-up (then the window and drain are checked).
const MAX_TAKEN_AT_ONCE: usize = 10_000;

/// What a run did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct EsmStats {
    /// Batches the function accepted.
    pub batches: u64,
    /// Records in those batches.
    pub records: u64,
    /// Bytes of their event JSON.
    pub bytes: u64,
    /// Invocations that failed and were retried.
    pub retries: u64,
    /// Batches written to the on-failure directory.
    pub failed_batches: u64,
    pub failed_records: u64,
    /// Largest batch sent, records and bytes.
    pub largest_batch_records: u64,
    pub largest_batch_bytes: u64,
    /// Most batches in flight at once (at most one per partition).
    pub most_in_flight: u64,
}

impl EsmStats {
    /// Fold in what one delivery did.
    fn add(&mut self, other: &EsmStats) {
        self.batches += other.batches;
        self.records += other.records;
        self.bytes += other.bytes;
        self.retries += other.retries;
        self.failed_batches += other.failed_batches;
        self.failed_records += other.failed_records;
        self.largest_batch_records = self.largest_batch_records.max(other.largest_batch_records);
        self.largest_batch_bytes = self.largest_batch_bytes.max(other.largest_batch_bytes);
        self.most_in_flight = self.most_in_flight.max(other.most_in_flight);
    }
}

/// Remembers revoked partitions so records already buffered for them are dropped (the new
/// owner re-reads them from the committed offset).
#[derive(Default)]
pub struct EsmContext {
    revoked: Mutex<Vec<i32>>,
    rebalanced: AtomicBool,
    /// When the first assignment arrived (the group join done).
    assigned_at: Mutex<Option<Instant>>,
}

impl ClientContext for EsmContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // A partition's end is how drain works, not an error.
        if !matches!(error, KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            tracing::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for EsmContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            self.revoked.lock().expect("not poisoned").extend(list.elements().iter().map(|e| e.partition()));
            self.rebalanced.store(true, Ordering::Release);
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance
            && list.count() > 0
        {
            self.assigned_at.lock().expect("not poisoned").get_or_insert_with(Instant::now);
        }
    }
}

/// Where a run's time went (logged at its end, `esm phases`).
#[derive(Debug, Clone, Default)]
struct Phases {
    /// Waiting for the broker: the group join before the first records, fetches after.
    wait: Duration,
    /// Fetched messages taken from librdkafka, turned into records and counted into batches.
    build: Duration,
    /// Invocations, retries included (the in-process function's ingest and commit).
    invoke: Duration,
    /// Synchronous offset commits.
    commit: Duration,
    /// The function's own `duration_ms` and `commit_ms` (its table commits), summed.
    function: Duration,
    function_commit: Duration,
}

/// The consumer's librdkafka settings.
fn consumer_config(opts: &EsmOptions) -> ClientConfig {
    let mut config = client_config(&opts.bootstrap);
    config
        .set("group.id", &opts.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // TRIM_HORIZON: a new group starts at the beginning (Tansu's LATEST is wrong anyway).
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        // Brokers refuse a session below their minimum (6 s on Kafka); Tansu holds a new group's
        // join for half of it. Heartbeats go well inside it, from librdkafka's own thread, so a
        // long invocation does not miss them.
        .set("session.timeout.ms", opts.session_timeout.as_millis().to_string())
        .set("heartbeat.interval.ms", "200")
        // Invocations and their retries happen between polls; never leave the group for it.
        .set("max.poll.interval.ms", "86400000")
        // Fetch in large pieces and keep up to a million records per partition queued, so
        // the next batch is already here when an invocation ends (defaults: 1 MB per
        // partition, 100k records). Not a shorter fetch.wait.max.ms: at 50 ms a drain of a
        // partition whose last batch was discarded never saw its end against Tansu.
        .set("max.partition.fetch.bytes", "16777216")
        .set("fetch.max.bytes", "67108864")
        .set("queued.min.messages", "1000000");
    config
}

/// An error the consumer delivered: a broker hiccup is logged (librdkafka reconnects and
/// refetches on its own); what the broker refuses at every attempt stops the poller, where
/// librdkafka would retry forever and a drain never end: a session timeout outside the broker's
/// bounds (each JoinGroup fails).
fn consumer_error(error: &KafkaError, opts: &EsmOptions) -> Result<()> {
    if error.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidSessionTimeout) {
        anyhow::bail!(
            "the broker at {} refused session_timeout_ms={} for group {}: it allows from its \
             group.min.session.timeout.ms to its group.max.session.timeout.ms (6000 to 1800000 on Apache Kafka \
             by default); set session_timeout_ms within them",
            opts.bootstrap,
            opts.session_timeout.as_millis(),
            opts.group,
        );
    }
    tracing::warn!("kafka: {error}");
    Ok(())
}

/// A connected poller.
pub struct Poller {
    opts: EsmOptions,
    consumer: StreamConsumer<EsmContext>,
    source: EventSource,
    connected: Instant,
    phases: Mutex<Phases>,
}

impl Poller {
    /// Join the group and subscribe (the assignment arrives with the first polls).
    pub fn connect(opts: EsmOptions) -> Result<Self> {
        let consumer: StreamConsumer<EsmContext> = consumer_config(&opts)
            .create_with_context(EsmContext::default())
            .with_context(|| format!("Kafka consumer for {}", opts.bootstrap))?;
        // Several topics (comma-separated) make one poller feed events that carry them all,
        // each record routed by the function to the pipeline that claims its topic.
        let topics: Vec<&str> = opts.topic.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
        consumer.subscribe(&topics).with_context(|| format!("subscribing to {}", opts.topic))?;
        let source = EventSource {
            event_source: "aws:kafka".into(),
            event_source_arn: LOCAL_CLUSTER_ARN.into(),
            bootstrap_servers: opts.bootstrap.clone(),
        };
        Ok(Self { opts, consumer, source, connected: Instant::now(), phases: Mutex::default() })
    }

    pub fn options(&self) -> &EsmOptions {
        &self.opts
    }

    /// Poll, batch and invoke until `stop` resolves (or, with `drain`, until caught up).
    /// Each partition fills its own batches and has at most one in flight ([`lanes`]); a
    /// partition's offsets are committed once its batch is done. A batch not yet invoked at
    /// `stop` is not committed (the next run re-reads it); batches in flight finish first.
    pub async fn run<F: Function>(&self, function: &F, stop: impl Future<Output = ()>) -> Result<EsmStats> {
        let mut lanes = Lanes::new(self.source.clone(), self.opts.batch_size);
        let mut in_flight: InFlight<'_> = FuturesUnordered::new();
        let mut at_end: BTreeSet<i32> = BTreeSet::new();
        // The topic-partition of the last message: most messages repeat it (no new String each).
        let mut last_tp: Option<TopicPartition> = None;
        tokio::pin!(stop);
        loop {
            let window =
                lanes.next_window_end(self.opts.batching_window).map_or(IDLE_WAIT, |end| end.saturating_duration_since(Instant::now()));
            // Draining with a partition at its end: a quiet poll is what confirms caught up, so it
            // must not wait out an open window (the ends can arrive in the same wake-up as the
            // last records, and nothing more comes: the drain sat out a 300 s window).
            let wait = if self.opts.drain && !at_end.is_empty() { window.min(IDLE_WAIT) } else { window };
            let waited = Instant::now();
            let polled = tokio::select! {
                biased;
                _ = &mut stop => {
                    while let Some(done) = in_flight.next().await {
                        self.settle(done?, &mut lanes)?;
                    }
                    return Ok(lanes.stats);
                }
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    self.settle(done?, &mut lanes)?;
                    None
                }
                polled = tokio::time::timeout(wait, self.consumer.recv()) => polled.ok(),
            };
            self.phases.lock().expect("not poisoned").wait += waited.elapsed();
            let mut may_be_caught_up = true;
            let mut next = polled;
            // Then what librdkafka already holds, without a timer each.
            let mut taken = 0;
            // Timed per wake-up, with invocations started on the way left out: two clock reads
            // a message were a tenth of this thread's time.
            let mut build = Duration::ZERO;
            let mut started = Instant::now();
            while let Some(result) = next.take() {
                match result {
                    Ok(message) => {
                        may_be_caught_up = false;
                        let record = record_of(&message);
                        let tp = match last_tp.take() {
                            Some(tp) if tp.partition == message.partition() && tp.topic == message.topic() => tp,
                            _ => TopicPartition { topic: message.topic().to_string(), partition: message.partition() },
                        };
                        drop(message);
                        at_end.remove(&tp.partition);
                        let pushed = lanes.push(&tp, record)?;
                        if !matches!(pushed, Pushed::Added) {
                            build += started.elapsed();
                            self.follow(pushed, &mut lanes, &mut in_flight, &tp, function).await?;
                            started = Instant::now();
                        }
                        last_tp = Some(tp);
                    }
                    Err(KafkaError::PartitionEOF(partition)) => {
                        at_end.insert(partition);
                    }
                    Err(e) => consumer_error(&e, &self.opts)?,
                }
                // Callbacks (a revocation among them) are served inside `recv`.
                self.drop_revoked(&mut lanes, &mut at_end);
                taken += 1;
                if taken < MAX_TAKEN_AT_ONCE {
                    next = self.consumer.recv().now_or_never();
                }
            }
            build += started.elapsed();
            self.phases.lock().expect("not poisoned").build += build;
            self.drop_revoked(&mut lanes, &mut at_end);
            let caught_up = self.opts.drain && may_be_caught_up && self.caught_up(&at_end)?;
            lanes.close_windows(self.opts.batching_window, caught_up);
            self.dispatch_ready(&mut lanes, &mut in_flight, function)?;
            if caught_up && in_flight.is_empty() && lanes.is_empty() {
                return Ok(lanes.stats);
            }
        }
    }

    /// Invoke the next batch of every idle partition, and poll the deliveries once: new
    /// invocations start now rather than after the messages at hand are batched.
    fn dispatch_ready<'a, F: Function>(&'a self, lanes: &mut Lanes, in_flight: &mut InFlight<'a>, function: &'a F) -> Result<()> {
        loop {
            for (tp, batch) in lanes.take_ready() {
                in_flight.push(Box::pin(self.deliver(tp, batch, function)));
            }
            lanes.stats.most_in_flight = lanes.stats.most_in_flight.max(in_flight.len() as u64);
            match in_flight.next().now_or_never() {
                Some(Some(done)) => self.settle(done?, lanes)?,
                _ => return Ok(()),
            }
        }
    }

    /// Settle deliveries (committing each one's offsets, invoking what is next) until `done`.
    async fn settle_until<'a, F: Function>(
        &'a self,
        lanes: &mut Lanes,
        in_flight: &mut InFlight<'a>,
        function: &'a F,
        done: impl Fn(&Lanes) -> bool,
    ) -> Result<()> {
        loop {
            self.dispatch_ready(lanes, in_flight, function)?;
            if done(lanes) {
                return Ok(());
            }
            let delivered = in_flight.next().await.context("waiting for a partition that has nothing in flight")?;
            self.settle(delivered?, lanes)?;
        }
    }

    /// A delivery finished: commit its offsets (unless its partition was revoked meanwhile:
    /// the new owner re-reads them) and free its lane.
    fn settle(&self, done: Delivered, lanes: &mut Lanes) -> Result<()> {
        let lane = lanes.by_partition.get_mut(&done.lane);
        if lane.as_ref().is_some_and(|l| l.revoked_in_flight) {
            tracing::info!(partition = %done.lane, "partition revoked while its batch was in flight: offsets left to the new owner");
        } else {
            self.commit(&done.batch)?;
        }
        if let Some(lane) = lane {
            lane.busy = false;
            lane.revoked_in_flight = false;
        }
        lanes.stats.add(&done.stats);
        Ok(())
    }

    /// Forget what is buffered of partitions revoked since the last look.
    fn drop_revoked(&self, lanes: &mut Lanes, at_end: &mut BTreeSet<i32>) {
        if self.consumer.context().rebalanced.swap(false, Ordering::AcqRel) {
            let revoked: Vec<i32> = std::mem::take(&mut *self.consumer.context().revoked.lock().expect("not poisoned"));
            lanes.revoke(&revoked);
            at_end.retain(|p| !revoked.contains(p));
        }
    }

    /// Where the run's time went, one line: `phases: group join N ms, waiting for fetches N ms, ...`.
    pub fn phases_line(&self) -> String {
        let p = self.phases.lock().expect("not poisoned").clone();
        let assigned = self.consumer.context().assigned_at.lock().expect("not poisoned").map(|t| t.duration_since(self.connected));
        let ms = |d: Duration| d.as_millis();
        format!(
            "phases: group join {} ms (from connect to the first assignment), waiting for the broker {} ms (the join included), \
             records and batches {} ms, invocations {} ms summed over concurrent ones (the function's own duration_ms {} ms, of which table commits {} ms), \
             offset commits {} ms",
            assigned.map_or_else(|| "-".to_string(), |d| ms(d).to_string()),
            ms(p.wait),
            ms(p.build),
            ms(p.invoke),
            ms(p.function),
            ms(p.function_commit),
            ms(p.commit),
        )
    }

    /// Every assigned partition has reported its end since its last record.
    fn caught_up(&self, at_end: &BTreeSet<i32>) -> Result<bool> {
        let assignment = self.consumer.assignment()?;
        let assigned = assignment.elements();
        Ok(!assigned.is_empty() && assigned.iter().all(|e| at_end.contains(&e.partition())))
    }

    /// What a record pushed to its partition's lane leads to: a cut batch invoked, or a record
    /// too large for any event discarded.
    async fn follow<'a, F: Function>(
        &'a self,
        pushed: Pushed,
        lanes: &mut Lanes,
        in_flight: &mut InFlight<'a>,
        tp: &TopicPartition,
        function: &'a F,
    ) -> Result<()> {
        match pushed {
            Pushed::Added => {}
            Pushed::Cut => {
                self.dispatch_ready(lanes, in_flight, function)?;
                if lanes.is_backed_up(tp) {
                    self.settle_until(lanes, in_flight, function, |l| !l.is_backed_up(tp)).await?;
                }
            }
            Pushed::TooLarge(record, bytes) => {
                // Earlier records of the partition go first: offsets commit in order.
                lanes.cut(tp);
                self.settle_until(lanes, in_flight, function, |l| l.is_idle(tp)).await?;
                let batch = lanes.event_for(tp, record);
                let error = format!("the record alone makes a {bytes}-byte event, over the {MAX_PAYLOAD_BYTES}-byte payload cap");
                self.discard(&batch, Condition::PayloadTooLarge, 0, &error, &mut lanes.stats)?;
                self.commit(&batch)?;
            }
        }
        Ok(())
    }

    /// Invoke until success or `retries` retries are spent (then discard the batch to the
    /// on-failure directory). The caller commits the offsets.
    async fn deliver<F: Function>(&self, lane: TopicPartition, batch: Batch, function: &F) -> Result<Delivered> {
        let mut stats = EsmStats::default();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let started = Instant::now();
            let result = function.invoke_batch(&batch).await;
            {
                let mut phases = self.phases.lock().expect("not poisoned");
                phases.invoke += started.elapsed();
                // What the function says of its own time (the ingest summary's fields).
                if let Ok(reply) = &result {
                    let ms = |key: &str| Duration::from_millis(reply.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0));
                    phases.function += ms("duration_ms");
                    phases.function_commit += ms("commit_ms");
                }
            }
            match result {
                Ok(reply) => {
                    tracing::debug!(records = batch.count, bytes = batch.bytes, %reply, "batch done");
                    stats.batches += 1;
                    stats.records += batch.count as u64;
                    stats.bytes += batch.bytes as u64;
                    stats.largest_batch_records = batch.count as u64;
                    stats.largest_batch_bytes = batch.bytes as u64;
                    break;
                }
                Err(e) if attempts <= self.opts.retries => {
                    stats.retries += 1;
                    let backoff = FIRST_BACKOFF.saturating_mul(1 << (attempts - 1).min(16)).min(MAX_BACKOFF);
                    tracing::warn!("batch of {} records failed (attempt {attempts}), retrying in {backoff:?}: {e:#}", batch.count);
                    tokio::time::sleep(backoff).await;
                }
                Err(e) => {
                    self.discard(&batch, Condition::RetryAttemptsExhausted, attempts, &format!("{e:#}"), &mut stats)?;
                    break;
                }
            }
        }
        Ok(Delivered { lane, batch, stats })
    }

    fn discard(&self, batch: &Batch, condition: Condition, attempts: u32, error: &str, stats: &mut EsmStats) -> Result<()> {
        let path = write_failed_batch(&self.opts.on_failure_dir, "ingest", batch, condition, attempts, error)?;
        tracing::error!("batch of {} records discarded ({condition:?}) to {}: {error}", batch.count, path.display());
        stats.failed_batches += 1;
        stats.failed_records += batch.count as u64;
        Ok(())
    }

    fn commit(&self, batch: &Batch) -> Result<()> {
        let started = Instant::now();
        let mut list = TopicPartitionList::new();
        for (tp, next) in batch.next_offsets() {
            list.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(next))?;
        }
        let committed = self
            .consumer
            .commit(&list, CommitMode::Sync)
            .with_context(|| format!("committing offsets of group {} (the batch was processed and will be re-read)", self.opts.group));
        self.phases.lock().expect("not poisoned").commit += started.elapsed();
        committed
    }
}

/// A fetched message as the event carries it. Its key, value and headers are copied into one
/// buffer, shared by their `Bytes`: one allocation rather than one per part, and the clone each
/// in-process invocation takes of its batch counts references instead of allocating.
fn record_of(m: &BorrowedMessage<'_>) -> KafkaRecordIn {
    let (key, value, headers) = (m.key(), m.payload(), m.headers());
    let header_bytes: usize = headers.map_or(0, |hs| hs.iter().map(|h| Headers::encoded_len(h.key, h.value.unwrap_or_default())).sum());
    let mut buffer = BytesMut::with_capacity(key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len) + header_bytes);
    let headers = headers.map(|hs| Headers::from_buffer(&mut buffer, hs.iter().map(|h| (h.key, h.value.unwrap_or_default()))));
    let mut copy = |bytes: &[u8]| {
        buffer.extend_from_slice(bytes);
        buffer.split().freeze()
    };
    KafkaRecordIn {
        offset: m.offset(),
        timestamp_ms: m.timestamp().to_millis().unwrap_or(0),
        timestamp_type: Some(match m.timestamp() {
            rdkafka::Timestamp::CreateTime(_) => TimestampType::CreateTime,
            rdkafka::Timestamp::LogAppendTime(_) => TimestampType::LogAppendTime,
            rdkafka::Timestamp::NotAvailable => TimestampType::NoTimestampType,
        }),
        key: key.map(&mut copy),
        value: value.map(&mut copy),
        value_error: None,
        headers: headers.unwrap_or_default(),
        value_schema: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(words: &[&str]) -> EsmOptions {
        EsmOptions::from_args(&words.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap().0
    }

    #[test]
    fn the_session_timeout_reaches_the_consumer() {
        assert_eq!(consumer_config(&options(&["group=g"])).get("session.timeout.ms"), Some("6000"));
        assert_eq!(consumer_config(&options(&["session_timeout_ms=2000"])).get("session.timeout.ms"), Some("2000"));
    }

    #[test]
    fn a_refused_session_timeout_stops_the_poller_naming_the_knob() {
        let opts = options(&["session_timeout_ms=2000", "group=g"]);
        let join_failed = KafkaError::MessageConsumption(RDKafkaErrorCode::InvalidSessionTimeout);
        let message = consumer_error(&join_failed, &opts).expect_err("a refused session stops the poller").to_string();
        for needle in ["session_timeout_ms=2000", "group g", "group.min.session.timeout.ms"] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        let hiccup = KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure);
        assert!(consumer_error(&hiccup, &opts).is_ok(), "a broker hiccup is retried");
    }
}
