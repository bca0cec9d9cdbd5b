//! The local event source mapping against a real broker (Tansu on 127.0.0.1): produce, drain
//! with the in-process ingest function, read the tables back; restart; the events themselves.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use icestream::dev::generate::{RECORD_OPTIONS, RecordOptions, RecordStream};
use icestream::model::event::TopicPartition;
use icestream_integration::broker::Broker;
use icestream_integration::esm::{drain, json_ingest_function, produce, words};
use icestream_integration::*;
use icestream_tools::esm::batch::MAX_PAYLOAD_BYTES;
use icestream_tools::esm::function::InProcessIngest;
use icestream_tools::esm::{EsmStats, Function};
use icestream_tools::produce::{Outgoing, SendOptions, send};

const TOPIC: &str = "vehicle-telemetry";

#[tokio::test]
async fn drained_poller_lands_exactly_the_valid_records_and_a_restart_reads_nothing_twice() {
    let broker = Broker::start(&[(TOPIC, 4)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let group_args = words(&["group=g1", "batch_size=1000", "batching_window_ms=300000"]);

    // Many producer batches: Tansu's ListOffsets(LATEST) is then below the true end.
    let first = produce(&bootstrap, &["format=json", "count=20000", "corrupt=true", "seed=1"]);
    assert!(first.corrupt > 0 && first.resends > 0 && first.late > 0, "{first:?}");
    let function = json_ingest_function(&wh).await;
    let stats = drain(&bootstrap, TOPIC, &function, &group_args).await;
    assert_eq!(stats.records, 20_000, "{stats:?}");
    assert_eq!((stats.failed_batches, stats.retries), (0, 0), "{stats:?}");
    assert!(stats.largest_batch_records <= 1000, "{stats:?}");

    let rows = telemetry_rows(&wh).await;
    assert_eq!(rows.len(), first.valid);
    assert_eq!(rows.iter().map(|(_, r)| i64::from(r.speed_kmh)).sum::<i64>(), first.speed_sum);
    assert_eq!(dead_letter_offsets(&wh).await.len(), first.corrupt);
    // Keyed by vehicle: every vehicle's readings sit in one partition.
    let mut partition_of: BTreeMap<i64, i32> = BTreeMap::new();
    for ((partition, _), r) in &rows {
        assert_eq!(*partition_of.entry(r.vehicle_id).or_insert(*partition), *partition, "vehicle {}", r.vehicle_id);
    }
    assert_eq!(partition_of.values().collect::<BTreeSet<_>>().len(), 4);

    // A restarted poller of the same group starts at the committed offsets.
    let second = produce(&bootstrap, &["format=json", "count=3000", "corrupt=true", "seed=2", "start_ms=1700003600000"]);
    let stats = drain(&bootstrap, TOPIC, &function, &group_args).await;
    assert_eq!(stats.records, 3000, "{stats:?}");
    let stats = drain(&bootstrap, TOPIC, &function, &group_args).await;
    assert_eq!(stats, EsmStats::default(), "nothing left to read");

    let rows = telemetry_rows(&wh).await;
    assert_eq!(rows.len(), first.valid + second.valid);
    let lineage: BTreeSet<(i32, i64)> = rows.iter().map(|(l, _)| *l).collect();
    assert_eq!(lineage.len(), rows.len(), "a record landed twice");
    assert_eq!(dead_letter_offsets(&wh).await.len(), first.corrupt + second.corrupt);
}

/// Keeps every event it is sent.
#[derive(Default)]
struct Recorder {
    events: RefCell<Vec<String>>,
}

impl Function for Recorder {
    async fn invoke(&self, event: &[u8]) -> anyhow::Result<serde_json::Value> {
        self.events.borrow_mut().push(String::from_utf8(event.to_vec())?);
        Ok(serde_json::json!({}))
    }
}

fn keys(v: &serde_json::Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn events_are_msk_shaped_byte_for_byte_and_each_partition_arrives_in_order() {
    let broker = Broker::start(&[(TOPIC, 3)]);
    let bootstrap = broker.bootstrap();
    let args = ["format=proto", "count=2000", "keyed=false", "seed=5"];
    produce(&bootstrap, &args);
    let recorder = Recorder::default();
    let stats = drain(&bootstrap, TOPIC, &recorder, &words(&["group=shape", "batch_size=300", "batching_window_ms=300000"])).await;
    assert_eq!(stats.records, 2000);

    let mut values = Vec::new();
    let mut next_offset: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let events = recorder.events.borrow();
    for text in events.iter() {
        let raw: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(keys(&raw), ["bootstrapServers", "eventSource", "eventSourceArn", "records"]);
        assert_eq!(raw["eventSource"], "aws:kafka");
        assert_eq!(raw["bootstrapServers"], bootstrap);
        assert!(raw["eventSourceArn"].as_str().unwrap().starts_with("arn:aws:kafka:"));
        for (group, list) in raw["records"].as_object().unwrap() {
            for r in list.as_array().unwrap() {
                assert_eq!(keys(r), ["headers", "key", "offset", "partition", "timestamp", "timestampType", "topic", "value"]);
                assert_eq!(group, &format!("{}-{}", r["topic"].as_str().unwrap(), r["partition"]));
                assert_eq!(r["key"], serde_json::Value::Null, "produced unkeyed");
                assert_eq!(r["timestampType"], "CREATE_TIME");
                // Header values as the mapping renders them: arrays of signed bytes.
                let producer: Vec<i64> = "icestream".bytes().map(|b| b as i8 as i64).collect();
                assert_eq!(r["headers"], serde_json::json!([{ "producer": producer }]));
            }
        }
        // aws_lambda_events' own type checks the MSK shape; ours reads it exactly.
        let _: aws_lambda_events::event::kafka::KafkaEvent = serde_json::from_str(text).expect("a KafkaEvent");
        let parsed = icestream::model::event::parse_event(text.as_bytes()).unwrap();
        assert!(parsed.record_count() <= 300);
        assert_eq!(parsed.partitions.len(), 1, "each partition has batches of its own");
        for (tp, list) in parsed.partitions {
            for r in list {
                let expected = next_offset.entry(tp.clone()).or_insert(0);
                assert_eq!(r.offset, *expected, "{tp} out of order or with a gap");
                *expected += 1;
                values.push(r.value.unwrap());
            }
        }
    }
    let per_partition: Vec<i64> = next_offset.values().copied().collect();
    assert_eq!(events.len() as i64, per_partition.iter().map(|n| (n + 299) / 300).sum::<i64>(), "{per_partition:?} in batches of 300");
    // The values are exactly what the generator made for these options, base64 round-tripped.
    let mut settings = icestream::model::config::Settings::over(RECORD_OPTIONS);
    settings.apply_args(["format=proto", "seed=5", "start_ms=1700000000000"]).unwrap();
    let mut sent: Vec<Vec<u8>> = RecordStream::new(&RecordOptions::from_settings(&settings).unwrap()).take(2000).map(|r| r.value).collect();
    sent.sort();
    values.sort();
    assert_eq!(values, sent);
    assert_eq!(next_offset.len(), 3, "unkeyed records spread over every partition");
}

#[tokio::test]
async fn maximal_records_are_cut_under_the_payload_cap() {
    let broker = Broker::start(&[(TOPIC, 1)]);
    let bootstrap = broker.bootstrap();
    // 700 kB values: 6 fit in a 6 MB event once base64-encoded, 7 do not.
    let records = (0..20u8).map(|i| Outgoing { key: vec![i], value: (0..700_000u32).map(|j| (j as u8) ^ i).collect() });
    let opts = SendOptions { bootstrap: bootstrap.clone(), count: None, rate: 0, keyed: true };
    assert_eq!(send(&opts, TOPIC, records, &AtomicBool::new(false)).unwrap().records, 20);

    let recorder = Recorder::default();
    let stats = drain(&bootstrap, TOPIC, &recorder, &words(&["group=big", "batch_size=10000", "batching_window_ms=300000"])).await;
    assert_eq!(stats.records, 20);
    let events = recorder.events.borrow();
    let counts: Vec<usize> = events
        .iter()
        .map(|text| {
            assert!(text.len() <= MAX_PAYLOAD_BYTES, "{} bytes", text.len());
            let _: aws_lambda_events::event::kafka::KafkaEvent = serde_json::from_str(text).unwrap();
            let parsed = icestream::model::event::parse_event(text.as_bytes()).unwrap();
            for r in parsed.partitions.values().flatten() {
                let i = r.key.as_ref().unwrap()[0];
                assert_eq!(r.value.as_ref().unwrap()[..3], [i, 1 ^ i, 2 ^ i]);
            }
            parsed.record_count()
        })
        .collect();
    assert_eq!(counts, [6, 6, 6, 2]);
}

#[tokio::test]
async fn simulated_cdc_through_the_poller_fills_the_changelog_and_the_upsert_table() {
    let broker = Broker::start(&[("bank-accounts-cdc", 3)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let cdc_args = words(&[&format!("bootstrap={bootstrap}"), "count=3000", "accounts=200", "seed=8", "start_ms=1700000000000"]);
    // Unkeyed (round-robin): a key's changes arrive out of order across partitions.
    let (_, sent) = icestream_tools::produce::simulate_cdc(&cdc_args, &AtomicBool::new(false)).unwrap();
    assert_eq!(sent.records, 3000);

    // The reference `accounts` pipeline on the simulator's topic, its changes as CSV lines.
    std::fs::create_dir_all(&wh).unwrap();
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/json/account.schema.json");
    let file = wh.join("pipelines.toml");
    let lines = [
        "namespace = \"bigdata\"\n[[pipeline]]\ntable = \"accounts\"\ntopics = [\"bank-accounts-cdc\"]\nformat = \"json\"",
        &format!("schema = {:?}", schema.display().to_string()),
        "partition_by = [\"bucket(16, account_id)\"]\nmode = \"upsert\"\nkey = [\"account_id\"]\nenvelope = \"csv\"\norder_by = \"seq\"\nchangelog = true\n",
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={}", file.display())])).await.unwrap();
    let function = InProcessIngest::new(pipeline);
    let stats = drain(&bootstrap, "bank-accounts-cdc", &function, &words(&["group=cdc", "batch_size=500"])).await;
    assert_eq!((stats.records, stats.failed_batches), (3000, 0), "{stats:?}");

    let changelog: usize = scan(&wh, "accounts_changelog").await.iter().map(|b| b.num_rows()).sum();
    assert_eq!(changelog, 3000);
    // The table holds one row per account alive after the last change, whatever the order.
    let mut settings = icestream::model::config::Settings::over(RECORD_OPTIONS);
    settings.apply_args(["domain=cdc", "accounts=200", "seed=8", "start_ms=1700000000000"]).unwrap();
    let mut alive = BTreeSet::new();
    for change in RecordStream::new(&RecordOptions::from_settings(&settings).unwrap()).take(3000) {
        let text = String::from_utf8(change.value).unwrap();
        if text.starts_with('D') {
            alive.remove(&change.id);
        } else {
            alive.insert(change.id);
        }
    }
    let mirror: usize = scan(&wh, "accounts").await.iter().map(|b| b.num_rows()).sum();
    assert_eq!(mirror, alive.len());
}

/// Two pipelines on two topics (Protobuf and Avro telemetry) behind one poller: each record is
/// routed by its topic, and each table holds exactly its topic's valid records.
#[tokio::test]
async fn two_pipelines_on_two_topics_through_one_poller() {
    let broker = Broker::start(&[("fleet.proto", 2), ("fleet.avro", 2)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    let file = dir.path().join("pipelines.toml");
    std::fs::write(
        &file,
        format!(
            r#"[[pipeline]]
table = "fleet_proto"
topics = ["fleet.proto"]
format = "protobuf"
schema = "{proto}"
message = "icestream.telemetry.v1.VehicleTelemetry"
partition_by = ["hour(event_time)"]

[[pipeline]]
table = "fleet_avro"
topics = ["fleet.avro"]
format = "avro"
schema = "{avro}"
partition_by = ["bucket(4, vehicle_id)"]
"#,
            proto = shared.join("proto/vehicle_telemetry.proto").display(),
            avro = shared.join("avro/VehicleTelemetry.avsc").display()
        ),
    )
    .unwrap();
    let proto = produce(&bootstrap, &["topic=fleet.proto", "format=proto", "count=3000", "corrupt=true", "seed=5"]);
    let avro = produce(&bootstrap, &["topic=fleet.avro", "format=avro", "count=2000", "corrupt=true", "seed=6"]);
    let config = config(&wh, &[&format!("pipelines={}", file.display())]);
    let function = InProcessIngest::new(icestream::IngestPipeline::new(config).await.expect("pipeline"));
    let stats =
        drain(&bootstrap, "fleet.proto,fleet.avro", &function, &words(&["group=two", "batch_size=10000", "batching_window_ms=1000"])).await;
    assert_eq!(stats.records, 5000, "{stats:?}");
    assert!(stats.batches < 5000, "batches carry many records: {stats:?}");
    for (table, sent) in [("fleet_proto", &proto), ("fleet_avro", &avro)] {
        let rows: usize = scan(&wh, table).await.iter().map(|b| b.num_rows()).sum();
        let rejects: usize = scan(&wh, &format!("{table}_dead_letter")).await.iter().map(|b| b.num_rows()).sum();
        assert_eq!((rows, rejects), (sent.valid, sent.corrupt), "{table}");
        assert!(sent.corrupt > 0, "{table}: the producer sent corrupt records");
    }
}

/// Notes, per invocation, its partition and offsets, and which partitions are in flight; an
/// invocation stays in flight until another partition's is too (for a bounded number of
/// turns), so deliveries that can overlap do.
#[derive(Default)]
struct Overlaps {
    in_flight: RefCell<BTreeMap<i32, u32>>,
    most_partitions_at_once: std::cell::Cell<usize>,
    one_partition_twice_at_once: std::cell::Cell<bool>,
    batches: RefCell<Vec<(i32, i64, i64)>>,
}

impl Overlaps {
    fn partitions_in_flight(&self) -> usize {
        self.in_flight.borrow().values().filter(|n| **n > 0).count()
    }
}

impl Function for Overlaps {
    async fn invoke(&self, event: &[u8]) -> anyhow::Result<serde_json::Value> {
        let parsed = icestream::model::event::parse_event(event)?;
        anyhow::ensure!(parsed.partitions.len() == 1, "a batch of several partitions");
        let (tp, list) = parsed.partitions.iter().next().expect("one partition");
        let partition = tp.partition;
        self.batches.borrow_mut().push((partition, list[0].offset, list[list.len() - 1].offset));
        *self.in_flight.borrow_mut().entry(partition).or_default() += 1;
        if self.in_flight.borrow()[&partition] > 1 {
            self.one_partition_twice_at_once.set(true);
        }
        for _ in 0..200 {
            self.most_partitions_at_once.set(self.most_partitions_at_once.get().max(self.partitions_in_flight()));
            if self.partitions_in_flight() > 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // A few turns more, so the other partition's invocation sees this one too.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        *self.in_flight.borrow_mut().get_mut(&partition).expect("counted above") -= 1;
        Ok(serde_json::json!({}))
    }
}

#[tokio::test]
async fn partitions_are_invoked_concurrently_each_one_batch_at_a_time_in_order() {
    let broker = Broker::start(&[(TOPIC, 2)]);
    let bootstrap = broker.bootstrap();
    produce(&bootstrap, &["format=json", "count=1000", "keyed=false", "seed=6"]);
    let function = Overlaps::default();
    let stats = drain(&bootstrap, TOPIC, &function, &words(&["group=lanes", "batch_size=100", "batching_window_ms=300000"])).await;
    assert_eq!((stats.records, stats.failed_batches), (1000, 0), "{stats:?}");
    assert_eq!(function.most_partitions_at_once.get(), 2, "both partitions in flight at once");
    assert!(!function.one_partition_twice_at_once.get(), "a partition had two batches in flight");
    // Each partition's batches in offset order, without gaps.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for &(partition, first, last) in function.batches.borrow().iter() {
        let expected = next.entry(partition).or_insert(0);
        assert_eq!(first, *expected, "partition {partition}: batch from {first}, expected {expected}");
        *expected = last + 1;
    }
    assert_eq!(next.values().sum::<i64>(), 1000);
}
