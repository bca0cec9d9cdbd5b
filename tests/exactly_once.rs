//! Exactly-once under the event source mapping's at-least-once delivery: replays, re-cut
//! batches, crashes at both failure points, and concurrent writer processes.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use icestream::IngestPipeline;
use icestream::dev::generate::{GeneratorOptions, generate};
use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition, event_json, parse_event};
use icestream_integration::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn generated(args: &[&str]) -> (ParsedEvent, icestream::dev::generate::Expectation) {
    let g = generate(&GeneratorOptions::from_args(args).unwrap()).unwrap();
    (parse_event(g.event.to_string().as_bytes()).unwrap(), g.expectation)
}

/// An event holding, per partition, the records with offsets in `range`.
fn cut(full: &ParsedEvent, ranges: &BTreeMap<TopicPartition, (i64, i64)>) -> ParsedEvent {
    let mut partitions = BTreeMap::new();
    for (tp, (lo, hi)) in ranges {
        let records: Vec<KafkaRecordIn> = full.partitions[tp].iter().filter(|r| r.offset >= *lo && r.offset <= *hi).cloned().collect();
        if !records.is_empty() {
            partitions.insert(tp.clone(), records);
        }
    }
    ParsedEvent { event_source: Some("aws:kafka".into()), partitions }
}

async fn pipeline(wh: &Path, extra: &[&str]) -> IngestPipeline {
    IngestPipeline::new(config(wh, extra)).await.unwrap()
}

/// The lineage `(partition, offset)` of every row, asserting none repeats.
async fn lineage_once(wh: &Path) -> Vec<(i32, i64)> {
    let rows = telemetry_rows(wh).await;
    let keys: Vec<_> = rows.iter().map(|(k, _)| *k).collect();
    let set: HashSet<_> = keys.iter().collect();
    assert_eq!(set.len(), keys.len(), "a record landed twice");
    keys
}

#[tokio::test]
async fn the_same_event_twice_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (event, exp) = generated(&["records=5000", "format=proto", "corrupt=true", "seed=11"]);
    let p = pipeline(&wh, &[]).await;
    let first = p.handle(event.clone(), deadline()).await.unwrap();
    assert_eq!(first.written, exp.valid);
    let before = telemetry_rows(&wh).await;
    let dl_before = dead_letter_offsets(&wh).await;
    let again = p.handle(event, deadline()).await.unwrap();
    assert_eq!((again.written, again.dead_letter, again.skipped_replay), (0, 0, exp.records), "{again:?}");
    assert_eq!(telemetry_rows(&wh).await, before);
    assert_eq!(dead_letter_offsets(&wh).await, dl_before);
}

#[tokio::test]
async fn random_recuts_of_a_committed_range_change_nothing_and_overlaps_add_only_new_records() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (full, exp) = generated(&["records=4000", "partitions=4", "corrupt=true", "seed=12"]);
    let p = pipeline(&wh, &[]).await;
    let mut rng = SmallRng::seed_from_u64(99);
    let last: BTreeMap<TopicPartition, i64> = full.partitions.iter().map(|(tp, r)| (tp.clone(), r.last().unwrap().offset)).collect();

    // Deliver in overlapping, re-cut batches that creep forward, as retries do.
    let mut next: BTreeMap<TopicPartition, i64> = last.keys().map(|tp| (tp.clone(), 0)).collect();
    while next.iter().any(|(tp, n)| *n <= last[tp]) {
        let ranges: BTreeMap<_, _> = next
            .iter()
            .map(|(tp, n)| {
                let lo = (*n - rng.random_range(0..50)).max(0);
                (tp.clone(), (lo, lo + rng.random_range(1..400)))
            })
            .collect();
        p.handle(cut(&full, &ranges), deadline()).await.unwrap();
        for (tp, (_, hi)) in ranges {
            next.insert(tp.clone(), (hi + 1).max(next[&tp]));
        }
    }
    let committed = lineage_once(&wh).await;
    assert_eq!(committed.len(), exp.valid);
    let rows = telemetry_rows(&wh).await;
    let dl = dead_letter_offsets(&wh).await;
    assert_eq!(dl.len(), exp.corrupt);

    // 20 random re-cuts of the committed range: nothing changes.
    for _ in 0..20 {
        let ranges: BTreeMap<_, _> = last
            .iter()
            .map(|(tp, hi)| {
                let a = rng.random_range(0..=*hi);
                let b = rng.random_range(a..=*hi);
                (tp.clone(), (a, b))
            })
            .collect();
        let s = p.handle(cut(&full, &ranges), deadline()).await.unwrap();
        assert_eq!((s.written, s.dead_letter), (0, 0), "{s:?}");
    }
    assert_eq!(telemetry_rows(&wh).await, rows);
    assert_eq!(dead_letter_offsets(&wh).await, dl);
    let marks = watermarks(&wh, "vehicle_telemetry").await;
    for (tp, hi) in &last {
        assert_eq!(marks[&tp.to_string()], *hi);
    }
}

/// Run the CLI with a fail point and check it died without committing what it wrote.
fn crash_at(point: &str, event: &Path, wh: &Path) {
    let out = icestream(&["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display())], &[("ICESTREAM_FAIL_POINT", point)]);
    assert!(!out.status.success(), "fail point {point} did not abort");
    assert!(String::from_utf8_lossy(&out.stderr).contains(point));
}

fn parquet_files(dir: &Path) -> usize {
    fn walk(d: &Path, n: &mut usize) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, n)
            } else if p.extension().is_some_and(|x| x == "parquet") {
                *n += 1
            }
        }
    }
    let mut n = 0;
    walk(dir, &mut n);
    n
}

#[tokio::test]
async fn a_crash_after_writing_leaves_only_unreferenced_files_and_redelivery_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let g = generate(&GeneratorOptions::from_args(["records=3000", "corrupt=true", "seed=13"]).unwrap()).unwrap();
    let event = write_event(dir.path(), "e.json", &g.event);
    crash_at("after-write", &event, &wh);
    // Files were written, nothing is visible.
    assert!(parquet_files(&wh) > 0);
    assert_eq!(telemetry_rows(&wh).await.len(), 0);
    let s = summary_of(&icestream(&["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display())], &[]));
    assert_eq!(s["written"], g.expectation.valid as u64);
    assert_eq!(lineage_once(&wh).await.len(), g.expectation.valid);
}

#[tokio::test]
async fn a_crash_after_committing_is_followed_by_a_redelivery_that_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let g = generate(&GeneratorOptions::from_args(["records=3000", "corrupt=true", "seed=14"]).unwrap()).unwrap();
    let event = write_event(dir.path(), "e.json", &g.event);
    crash_at("after-commit", &event, &wh);
    assert_eq!(telemetry_rows(&wh).await.len(), g.expectation.valid, "the commit happened before the crash");
    let s = summary_of(&icestream(&["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display())], &[]));
    assert_eq!((s["written"].as_u64(), s["skipped_replay"].as_u64()), (Some(0), Some(g.expectation.records as u64)), "{s}");
    assert_eq!(lineage_once(&wh).await.len(), g.expectation.valid);
    assert_eq!(dead_letter_offsets(&wh).await.len(), g.expectation.corrupt);
}

#[tokio::test]
async fn eight_writer_processes_on_different_partitions_all_land_exactly_once() {
    const WRITERS: i32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    // Create the tables first so the writers race on commits, not on creation.
    drop(pipeline(&wh, &[]).await);
    let (full, _) = generated(&["records=16000", "partitions=8", "seed=15"]);
    let mut children = Vec::new();
    let mut expected = 0;
    for (i, (tp, records)) in full.partitions.iter().enumerate() {
        expected += records.len();
        let one: BTreeMap<_, _> = [(tp.clone(), records.clone())].into();
        let path = write_event(dir.path(), &format!("p{i}.json"), &event_json("aws:kafka", "arn", "b", &one));
        children.push(
            icestream_command(&["ingest", path.to_str().unwrap(), &format!("warehouse={}", wh.display())])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    assert_eq!(children.len(), WRITERS as usize);
    let mut attempts = 0;
    for child in children {
        let s = summary_of(&child.wait_with_output().unwrap());
        attempts += s["commit_attempts"].as_u64().unwrap();
    }
    assert!(attempts >= WRITERS as u64);
    assert_eq!(lineage_once(&wh).await.len(), expected);
    let marks = watermarks(&wh, "vehicle_telemetry").await;
    assert_eq!(marks.len(), WRITERS as usize);
    for (tp, records) in &full.partitions {
        assert_eq!(marks[&tp.to_string()], records.last().unwrap().offset);
    }
}

#[tokio::test]
async fn window_dedup_drops_cross_batch_resends_and_keeps_distinct_and_late_readings() {
    use icestream::dev::codec::{Reading, encode};
    use icestream::model::config::Source;
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let p = pipeline(&wh, &["dedup=window"]).await;
    let tp = TopicPartition { topic: "vehicle-telemetry".into(), partition: 0 };
    let now_ms = chrono_now_ms();
    let reading = |vehicle: i64, ms: i64, speed: i32| Reading {
        vehicle_id: vehicle,
        event_time_us: ms * 1000,
        model: "M".into(),
        speed_kmh: speed,
        soc_pct: 50,
        odometer_km: 1,
        charging: false,
    };
    let record = |offset: i64, r: &Reading| KafkaRecordIn {
        offset,
        timestamp_ms: now_ms,
        timestamp_type: None,
        key: None,
        value: Some(encode(Source::Proto, r).into()),
        value_error: None,
        headers: Default::default(),
        value_schema: None,
    };
    let first: Vec<Reading> = (0..10).map(|i| reading(i, now_ms - 60_000 + i, 10)).collect();
    let batch1 = ParsedEvent {
        event_source: None,
        partitions: [(tp.clone(), first.iter().enumerate().map(|(i, r)| record(i as i64, r)).collect())].into(),
    };
    assert_eq!(p.handle(batch1, deadline()).await.unwrap().written, 10);

    let mut second = vec![
        record(10, &first[3]),                           // re-send of a reading in the table
        record(11, &first[7]),                           // another
        record(12, &reading(3, now_ms - 30_000, 20)),    // same vehicle, new reading
        record(13, &reading(5, now_ms - 3_600_000, 30)), // one hour late, new
        record(14, &reading(42, now_ms, 40)),            // new vehicle
    ];
    second.push(record(15, &reading(42, now_ms, 40))); // in-batch re-send: the first copy (lowest offset) kept
    let s = p.handle(ParsedEvent { event_source: None, partitions: [(tp, second)].into() }, deadline()).await.unwrap();
    assert_eq!((s.written, s.duplicates), (3, 3), "{s:?}");
    let rows = telemetry_rows(&wh).await;
    assert_eq!(rows.len(), 13);
    let offsets: Vec<i64> = rows.iter().map(|((_, o), _)| *o).filter(|o| *o >= 10).collect();
    assert_eq!(offsets, [12, 13, 14]);
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A batch the table already holds, delivered again with bytes that no longer decode, is
/// skipped before decoding: nothing lands in the dead-letter table, every offset stays in
/// exactly one of the two tables.
#[tokio::test]
async fn a_held_batch_redelivered_with_bytes_that_no_longer_decode_adds_no_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (event, exp) = generated(&["records=2000", "format=proto", "seed=21"]);
    let p = pipeline(&wh, &[]).await;
    let first = p.handle(event.clone(), deadline()).await.unwrap();
    assert_eq!((first.written, first.dead_letter), (exp.valid, exp.corrupt));
    let mut garbled = event.clone();
    for records in garbled.partitions.values_mut() {
        for r in records {
            r.value = Some(b"\xff not protobuf".to_vec().into());
        }
    }
    let again = p.handle(garbled, deadline()).await.unwrap();
    assert_eq!((again.written, again.dead_letter, again.skipped_replay), (0, 0, exp.records), "{again:?}");
    assert_eq!(dead_letter_offsets(&wh).await.len(), exp.corrupt);
    assert_eq!(lineage_once(&wh).await.len(), exp.valid);
}
