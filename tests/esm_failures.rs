//! Failed invocations against a real broker: the whole batch is retried; once the retries are
//! spent it goes to the on-failure directory and the partition moves on.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use icestream::model::event::parse_event;
use icestream_integration::broker::Broker;
use icestream_integration::esm::{drain, json_ingest_function, produce};
use icestream_integration::*;
use icestream_tools::esm::Function;
use icestream_tools::esm::function::InProcessIngest;
use icestream_tools::produce::{Outgoing, SendOptions, send};

const TOPIC: &str = "vehicle-telemetry";

/// The ingest function behind a switch: fails while `failures_left` > 0, or on any event that
/// holds a record with `poison` in it; records every event it sees.
struct Faulty {
    inner: InProcessIngest,
    failures_left: Cell<u32>,
    poison: Option<String>,
    seen: RefCell<Vec<String>>,
}

impl Faulty {
    async fn new(warehouse: &Path, failures: u32, poison: Option<&[u8]>) -> Self {
        use base64::Engine;
        Self {
            inner: json_ingest_function(warehouse).await,
            failures_left: Cell::new(failures),
            poison: poison.map(|p| base64::engine::general_purpose::STANDARD.encode(p)),
            seen: RefCell::default(),
        }
    }
}

impl Function for Faulty {
    async fn invoke(&self, event: &[u8]) -> anyhow::Result<serde_json::Value> {
        let text = String::from_utf8(event.to_vec())?;
        self.seen.borrow_mut().push(text.clone());
        if self.failures_left.get() > 0 {
            self.failures_left.set(self.failures_left.get() - 1);
            anyhow::bail!("injected failure");
        }
        if self.poison.as_ref().is_some_and(|p| text.contains(&format!("\"{p}\""))) {
            anyhow::bail!("poison record");
        }
        self.inner.invoke(event).await
    }
}

#[tokio::test]
async fn a_function_that_fails_twice_then_succeeds_lands_the_batch_once() {
    // One partition: one batch (each partition has batches of its own).
    let broker = Broker::start(&[(TOPIC, 1)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let (wh, failures) = (dir.path().join("wh"), dir.path().join("failed"));
    let sent = produce(&bootstrap, &["format=json", "count=500", "seed=3"]);
    let function = Faulty::new(&wh, 2, None).await;
    let args = [
        "group=flaky".to_string(),
        "batch_size=10000".into(),
        "batching_window_ms=300000".into(),
        "retries=2".into(),
        format!("on_failure_dir={}", failures.display()),
    ];
    let stats = drain(&bootstrap, TOPIC, &function, &args).await;

    assert_eq!((stats.batches, stats.records, stats.retries, stats.failed_batches), (1, 500, 2, 0), "{stats:?}");
    let seen = function.seen.borrow().clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|e| e == &seen[0]), "every retry sends the whole batch unchanged");
    assert_eq!(telemetry_rows(&wh).await.len(), sent.valid, "landed exactly once");
    assert!(!failures.exists(), "nothing discarded");
    // Committed: the group has nothing left to read.
    assert_eq!(drain(&bootstrap, TOPIC, &function, &args).await.records, 0);
}

#[tokio::test]
async fn a_batch_that_always_fails_goes_to_the_on_failure_directory_and_the_partition_moves_on() {
    let broker = Broker::start(&[(TOPIC, 1)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let (wh, failures) = (dir.path().join("wh"), dir.path().join("failed"));
    let poison = b"poison".to_vec();
    let before = produce(&bootstrap, &["format=json", "count=250", "seed=4"]);
    let opts = SendOptions { bootstrap: bootstrap.clone(), count: None, rate: 0, keyed: true };
    send(&opts, TOPIC, std::iter::once(Outgoing { key: b"p".to_vec(), value: poison.clone() }), &AtomicBool::new(false)).unwrap();
    let after = produce(&bootstrap, &["format=json", "count=250", "seed=5"]);

    let function = Faulty::new(&wh, 0, Some(&poison)).await;
    let args = [
        "group=poisoned".to_string(),
        "batch_size=100".into(),
        "batching_window_ms=300000".into(),
        "retries=1".into(),
        format!("on_failure_dir={}", failures.display()),
    ];
    let stats = drain(&bootstrap, TOPIC, &function, &args).await;
    assert_eq!((stats.failed_batches, stats.retries), (1, 1), "{stats:?}");
    assert_eq!(stats.records + stats.failed_records, 501, "{stats:?}");

    // The discarded batch: one file, an invocation record with the payload as sent.
    let files: Vec<_> = std::fs::read_dir(&failures).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(record["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 2);
    assert_eq!(record["KafkaBatchInfo"]["batchSize"], stats.failed_records);
    let payload = record["payload"].to_string();
    assert_eq!(record["KafkaBatchInfo"]["payloadSize"].as_u64().unwrap() as usize, payload.len());
    let failed = parse_event(payload.as_bytes()).unwrap();
    let failed_offsets: Vec<i64> = failed.partitions.values().flatten().map(|r| r.offset).collect();
    assert!(failed.partitions.values().flatten().any(|r| r.value.as_deref() == Some(&poison[..])));
    assert_eq!(function.seen.borrow().iter().filter(|e| e.contains("\"cG9pc29u\"")).count(), 2, "first try plus one retry");

    // The partition moved on: every other offset is in a table, the discarded ones in neither.
    let rows = telemetry_rows(&wh).await;
    let landed: Vec<i64> = rows.iter().map(|((_, o), _)| *o).chain(dead_letter_offsets(&wh).await.into_iter().map(|(_, o)| o)).collect();
    assert_eq!(landed.len() + failed_offsets.len(), 501);
    assert!(landed.iter().all(|o| !failed_offsets.contains(o)));
    assert!(landed.iter().any(|&o| o > 250), "records after the poison landed");
    assert!(rows.len() < before.valid + after.valid);
    // And the discarded batch was committed: a restart reads nothing.
    assert_eq!(drain(&bootstrap, TOPIC, &function, &args).await.records, 0);
}

/// The group's committed offsets of `partitions` partitions of TOPIC, read as another client
/// of the group would (no join): `None` where nothing is committed.
fn group_client(bootstrap: &str, group: &str) -> rdkafka::consumer::BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("log_level", "3")
        .create()
        .expect("consumer")
}

fn committed(consumer: &rdkafka::consumer::BaseConsumer, partitions: i32) -> Vec<Option<i64>> {
    use rdkafka::consumer::Consumer;
    let mut list = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(TOPIC, p);
    }
    let got = consumer.committed_offsets(list, std::time::Duration::from_secs(30)).expect("committed offsets");
    (0..partitions)
        .map(|p| match got.find_partition(TOPIC, p).map(|e| e.offset()) {
            Some(rdkafka::Offset::Offset(n)) => Some(n),
            _ => None,
        })
        .collect()
}

/// Fails the first attempt at every batch; at every attempt, reads what the group has committed.
struct Watcher {
    client: rdkafka::consumer::BaseConsumer,
    /// Per attempt: the batch's first offset per partition, and what was committed then.
    attempts: RefCell<Vec<(Vec<(i32, i64)>, Vec<Option<i64>>)>>,
}

impl Function for Watcher {
    async fn invoke(&self, event: &[u8]) -> anyhow::Result<serde_json::Value> {
        let parsed = parse_event(event)?;
        let firsts: Vec<(i32, i64)> = parsed.partitions.iter().map(|(tp, list)| (tp.partition, list[0].offset)).collect();
        let now = committed(&self.client, 2);
        // Partitions are delivered concurrently: another batch's attempts may come in between.
        let first_attempt = !self.attempts.borrow().iter().any(|(f, _)| f == &firsts);
        self.attempts.borrow_mut().push((firsts, now));
        if first_attempt {
            anyhow::bail!("injected failure");
        }
        Ok(serde_json::json!({}))
    }
}

#[tokio::test]
async fn offsets_are_committed_only_after_the_batch_succeeded() {
    let broker = Broker::start(&[(TOPIC, 2)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    produce(&bootstrap, &["format=json", "count=900", "seed=7"]);
    let function = Watcher { client: group_client(&bootstrap, "watched"), attempts: RefCell::default() };
    let args = [
        "group=watched".to_string(),
        "batch_size=200".into(),
        "batching_window_ms=300000".into(),
        "retries=1".into(),
        format!("on_failure_dir={}", dir.path().join("failed").display()),
    ];
    let stats = drain(&bootstrap, TOPIC, &function, &args).await;
    assert_eq!((stats.records, stats.retries, stats.failed_batches), (900, stats.batches, 0), "{stats:?}");
    let attempts = function.attempts.borrow();
    assert_eq!(attempts.len() as u64, 2 * stats.batches);
    for (firsts, now) in attempts.iter() {
        for &(partition, first) in firsts {
            // Nothing of this batch (nor later) is committed while it is being invoked, failed or not.
            let committed = now[partition as usize].unwrap_or(0);
            assert_eq!(committed, first, "partition {partition}: committed {committed} while offset {first} was in flight");
        }
    }
    // After the run: everything, exactly once.
    let end = committed(&function.client, 2);
    assert!(end.iter().all(Option::is_some), "{end:?}");
    assert_eq!(end.iter().map(|o| o.unwrap()).sum::<i64>(), 900, "{end:?}");
}

/// The ingest function failing the first attempt at every batch of partition 0, while the
/// other partition's batches go on concurrently.
struct FailsPartitionZeroOnce {
    inner: InProcessIngest,
    failed: RefCell<Vec<i64>>,
}

impl Function for FailsPartitionZeroOnce {
    async fn invoke(&self, event: &[u8]) -> anyhow::Result<serde_json::Value> {
        let parsed = parse_event(event)?;
        if let Some((_, list)) = parsed.partitions.iter().find(|(tp, _)| tp.partition == 0) {
            let first = list[0].offset;
            if !self.failed.borrow().contains(&first) {
                self.failed.borrow_mut().push(first);
                anyhow::bail!("injected failure");
            }
        }
        self.inner.invoke(event).await
    }
}

#[tokio::test]
async fn partitions_delivered_concurrently_with_failures_land_every_record_once_and_commit_all() {
    let broker = Broker::start(&[(TOPIC, 2)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let sent = produce(&bootstrap, &["format=json", "count=1200", "seed=8"]);
    let function = FailsPartitionZeroOnce { inner: json_ingest_function(&wh).await, failed: RefCell::default() };
    let args = [
        "group=concurrent".to_string(),
        "batch_size=100".into(),
        "batching_window_ms=300000".into(),
        "retries=1".into(),
        format!("on_failure_dir={}", dir.path().join("failed").display()),
    ];
    let stats = drain(&bootstrap, TOPIC, &function, &args).await;
    assert_eq!((stats.records, stats.failed_batches), (1200, 0), "{stats:?}");
    assert_eq!(stats.retries as usize, function.failed.borrow().len(), "every batch of partition 0 retried once");
    assert!(stats.most_in_flight >= 2, "{stats:?}");

    let rows = telemetry_rows(&wh).await;
    assert_eq!(rows.len(), sent.valid, "every valid record landed");
    let lineage: std::collections::BTreeSet<(i32, i64)> = rows.iter().map(|(l, _)| *l).collect();
    assert_eq!(lineage.len(), rows.len(), "a record landed twice");
    let end = committed(&group_client(&bootstrap, "concurrent"), 2);
    assert_eq!(end.iter().map(|o| o.unwrap_or(0)).sum::<i64>(), 1200, "{end:?}");
}
