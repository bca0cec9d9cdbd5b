//! `icestream produce` and `icestream simulate-cdc`: the library's record streams (telemetry
//! with warts, or CDC changes with hot keys) into a real Kafka topic, at a given rate, with a
//! progress bar and a final throughput line.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use icestream::dev::generate::{Expectation, RECORD_OPTIONS, RecordOptions, RecordStream};
use icestream::model::config::{Allowed, Knob, Settings};
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use crate::kafka::{BOOTSTRAP, client_config, progress_bar, throughput_line};

/// How records are sent, whatever they are.
pub const SEND_OPTIONS: &[Knob] = &[
    BOOTSTRAP,
    Knob {
        key: "count",
        default: "100000",
        allowed: Allowed::Integer { min: 0, max: i64::MAX },
        help: "Records to send (0 = until stopped)",
    },
    Knob {
        key: "rate",
        default: "0",
        allowed: Allowed::Integer { min: 0, max: 100_000_000 },
        help: "Records per second (0 = as fast as the broker takes them)",
    },
];

/// The option lists of `icestream produce` and `icestream simulate-cdc`.
pub const PRODUCE_OPTIONS: &[&[Knob]] = &[RECORD_OPTIONS, SEND_OPTIONS];

/// Parsed [`SEND_OPTIONS`].
#[derive(Debug, Clone)]
pub struct SendOptions {
    pub bootstrap: String,
    /// `None` = until stopped.
    pub count: Option<u64>,
    pub rate: u64,
    /// Send each record's key (else none: the client spreads records over partitions).
    pub keyed: bool,
}

impl SendOptions {
    pub fn from_settings(s: &Settings, keyed: bool) -> Result<Self> {
        let count: u64 = s.parse("count")?;
        Ok(Self { bootstrap: s.get("bootstrap").to_string(), count: (count > 0).then_some(count), rate: s.parse("rate")?, keyed })
    }
}

/// One record to send.
pub struct Outgoing {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// What a send did.
#[derive(Debug, Clone, Default)]
pub struct SendStats {
    pub records: u64,
    pub bytes: u64,
    pub throughput_line: String,
}

/// Counts deliveries that failed; the send reports them at the end.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            self.first_error.lock().expect("not poisoned").get_or_insert_with(|| e.to_string());
        }
    }
}

/// Send records to `topic` until `opts.count` are sent, the records run out, or `stop` is set.
/// Every record carries the header `producer: icestream` (headers travel through the poller).
pub fn send(opts: &SendOptions, topic: &str, mut records: impl Iterator<Item = Outgoing>, stop: &AtomicBool) -> Result<SendStats> {
    let producer: ThreadedProducer<Deliveries> = client_config(&opts.bootstrap)
        .set("linger.ms", "5")
        // Unkeyed records go to a random partition each, not in sticky runs: every partition
        // gets some whatever the batching (a loaded machine batches longer runs).
        .set("sticky.partitioning.linger.ms", "0")
        .set("message.timeout.ms", "30000")
        .create_with_context(Deliveries::default())?;
    let headers = OwnedHeaders::new().insert(Header { key: "producer", value: Some("icestream") });
    let bar = progress_bar(opts.count, &format!("producing to {topic}"));
    let started = Instant::now();
    let mut stats = SendStats::default();
    while opts.count.is_none_or(|n| stats.records < n) && !stop.load(Ordering::Relaxed) {
        let Some(record) = records.next() else { break };
        if opts.rate > 0 {
            let due = started + Duration::from_secs_f64(stats.records as f64 / opts.rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let mut out = BaseRecord::<[u8], [u8]>::to(topic).payload(&record.value).headers(headers.clone());
        if opts.keyed {
            out = out.key(&record.key);
        }
        loop {
            match producer.send(out) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    out = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("sending to {topic} at {}: {e}", opts.bootstrap),
            }
        }
        stats.records += 1;
        stats.bytes += (record.key.len() + record.value.len()) as u64;
        bar.inc(1);
    }
    producer.flush(Duration::from_secs(60))?;
    bar.finish_and_clear();
    let context = producer.context();
    let failed = context.failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = context.first_error.lock().expect("not poisoned").clone().unwrap_or_default();
        bail!("{failed} of {} records were not delivered to {topic} at {}: {first}", stats.records, opts.bootstrap);
    }
    stats.throughput_line = throughput_line("produced", stats.records, stats.bytes, started);
    Ok(stats)
}

/// `icestream produce` (any domain; `simulate-cdc` passes `domain=cdc`). Returns what was sent.
pub fn produce(args: &[String], stop: &AtomicBool) -> Result<(SendStats, Expectation)> {
    let mut settings = Settings::over_lists(PRODUCE_OPTIONS);
    settings.apply_args(args)?;
    let record_opts = RecordOptions::from_settings(&settings)?;
    let send_opts = SendOptions::from_settings(&settings, record_opts.keyed)?;
    let mut expectation = Expectation::default();
    let records = RecordStream::new(&record_opts).map(|r| {
        expectation.count(&r);
        Outgoing { key: r.key(), value: r.value }
    });
    let stats = send(&send_opts, &record_opts.topic, records, stop)?;
    expectation.bytes = stats.bytes as usize;
    Ok((stats, expectation))
}

/// `icestream simulate-cdc`: `produce` with `domain=cdc` (I/U/D changes, hot keys).
pub fn simulate_cdc(args: &[String], stop: &AtomicBool) -> Result<(SendStats, Expectation)> {
    if let Some(word) = args.iter().find(|a| a.starts_with("domain=")) {
        bail!("{word:?}: simulate-cdc always produces domain=cdc (use `icestream produce` for telemetry)");
    }
    let all: Vec<String> = std::iter::once("domain=cdc".to_string()).chain(args.iter().cloned()).collect();
    produce(&all, stop)
}
