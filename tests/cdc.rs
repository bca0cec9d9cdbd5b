//! The accounts feed (the reference file's `accounts` pipeline: DMS changes as CSV lines, key
//! `account_id`, ordered by `seq`) through the generic upsert path, against a pure oracle:
//! every change applied in `seq` order per key, deletes kept as tombstones. Feeds are seeded;
//! the table read back through iceberg-rust (position deletes applied) must equal the oracle in
//! rows, balances and seq per key, whatever the delivery: in order, shuffled across partitions
//! and batches, with duplicate deliveries, replays, re-cut batches, stale changes after
//! deletes, and concurrent writers.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use icestream::dev::generate::accounts::{CdcSimulator, Change, Op, SimulatorOptions};
use icestream::engine::keyed::tombstones::{KeyTombstones, Tombstone};
use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition};
use icestream::services::ingest::IngestPipeline;
use icestream_integration::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const TOPIC: &str = "bank-accounts-cdc";
/// The upsert table, its changelog and its dead letters.
const TABLE: &str = "accounts";
const CHANGELOG: &str = "accounts_changelog";
const DEAD_LETTER: &str = "accounts_dead_letter";

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

/// Account state: (balance, last_updated, seq).
type State = BTreeMap<i64, (i64, i64, i64)>;

/// The oracle: distinct changes per key in `seq` order; a change applies if its seq is at
/// least the key's current one (live or deleted).
fn oracle(changes: &[Change]) -> (State, BTreeMap<i64, i64>) {
    let mut sorted: Vec<&Change> = changes.iter().collect();
    sorted.sort_by_key(|c| (c.account_id, c.seq));
    sorted.dedup_by_key(|c| (c.account_id, c.seq));
    let mut current: BTreeMap<i64, i64> = BTreeMap::new();
    let mut live = State::new();
    let mut tombstones = BTreeMap::new();
    for c in sorted {
        if current.get(&c.account_id).is_some_and(|s| c.seq < *s) {
            continue;
        }
        current.insert(c.account_id, c.seq);
        if c.op == Op::Delete {
            live.remove(&c.account_id);
            tombstones.insert(c.account_id, c.seq);
        } else {
            live.insert(c.account_id, (c.balance_cents.unwrap(), c.last_updated_us, c.seq));
            tombstones.remove(&c.account_id);
        }
    }
    (live, tombstones)
}

fn feed(n: usize, accounts: i64, seed: u64) -> Vec<Change> {
    CdcSimulator::new(SimulatorOptions { accounts, seed, ..Default::default() }).take(n)
}

/// Records of one partition: (offset, change).
type Log = Vec<(i64, Change)>;

/// Unkeyed round-robin over `partitions`, with `dup_share` of changes sent again later
/// (a producer retry: same change, new offset, possibly another partition).
fn produce(changes: &[Change], partitions: i32, dup_share: f64, rng: &mut SmallRng) -> BTreeMap<i32, Log> {
    let mut logs: BTreeMap<i32, Log> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let mut resend: Vec<Change> = Vec::new();
    for (i, c) in changes.iter().enumerate() {
        let log = logs.get_mut(&(i as i32 % partitions)).unwrap();
        log.push((log.len() as i64, c.clone()));
        if rng.random_bool(dup_share) {
            resend.push(c.clone());
        }
        if !resend.is_empty() && rng.random_bool(0.05) {
            let p = rng.random_range(0..partitions);
            let log = logs.get_mut(&p).unwrap();
            log.push((log.len() as i64, resend.remove(0)));
        }
    }
    for c in resend {
        let log = logs.get_mut(&0).unwrap();
        log.push((log.len() as i64, c));
    }
    logs
}

fn event(batches: &[(i32, &[(i64, Change)])]) -> ParsedEvent {
    let mut partitions = BTreeMap::new();
    for (p, records) in batches {
        let tp = TopicPartition { topic: TOPIC.to_string(), partition: *p };
        let recs: &mut Vec<KafkaRecordIn> = partitions.entry(tp).or_default();
        recs.extend(records.iter().map(|(offset, c)| KafkaRecordIn {
            offset: *offset,
            timestamp_ms: c.last_updated_us / 1000,
            timestamp_type: None,
            key: None,
            value: Some(c.to_csv().into()),
            value_error: None,
            headers: Default::default(),
            value_schema: None,
        }));
    }
    ParsedEvent { event_source: Some("aws:kafka".into()), partitions }
}

/// Cut every partition's log into batches of 1..=max records; interleave partitions randomly
/// (each partition stays in order, as the event source mapping keeps it).
fn deliveries(logs: &BTreeMap<i32, Log>, max: usize, rng: &mut SmallRng) -> Vec<(i32, Vec<(i64, Change)>)> {
    let mut queues: Vec<(i32, Vec<Vec<(i64, Change)>>)> = Vec::new();
    for (p, log) in logs {
        let mut cuts = Vec::new();
        let mut start = 0;
        while start < log.len() {
            let len = rng.random_range(1..=max).min(log.len() - start);
            cuts.push(log[start..start + len].to_vec());
            start += len;
        }
        cuts.reverse();
        queues.push((*p, cuts));
    }
    let mut out = Vec::new();
    while queues.iter().any(|(_, q)| !q.is_empty()) {
        let open: Vec<usize> = (0..queues.len()).filter(|i| !queues[*i].1.is_empty()).collect();
        let pick = open[rng.random_range(0..open.len())];
        let (p, q) = &mut queues[pick];
        out.push((*p, q.pop().unwrap()));
    }
    out
}

/// The table as iceberg-rust reads it, asserting one live row per account.
async fn mirror_state(wh: &Path) -> State {
    mirror_state_by(wh, "seq").await
}

/// [`mirror_state`] of a table whose order column is `order`.
async fn mirror_state_by(wh: &Path, order: &str) -> State {
    let mut state = State::new();
    for b in scan(wh, TABLE).await {
        let ids = b.column_by_name("account_id").unwrap().as_primitive::<Int64Type>();
        let bal = b.column_by_name("balance").unwrap().as_primitive::<Int64Type>();
        let at = b.column_by_name("last_updated").unwrap().as_primitive::<TimestampMicrosecondType>();
        let seq = b.column_by_name(order).unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let prev = state.insert(ids.value(i), (bal.value(i), at.value(i), seq.value(i)));
            assert!(prev.is_none(), "account {} has two live rows", ids.value(i));
        }
    }
    state
}

/// Every tombstone of `table`: account id -> the tombstone.
async fn tombstones_of(table: &iceberg::table::Table) -> icestream::Result<BTreeMap<i64, Tombstone>> {
    let Some(t) = KeyTombstones::load_any(table).await? else { return Ok(BTreeMap::new()) };
    let ids = t.codec().decode(t.map.keys().map(Vec::as_slice))?;
    let ids = ids[0].as_primitive::<Int64Type>();
    Ok(t.map.values().enumerate().map(|(i, tombstone)| (ids.value(i), tombstone.clone())).collect())
}

/// account id -> seq of its tombstone.
async fn tombstones(wh: &Path) -> BTreeMap<i64, i64> {
    let table = load(wh, TABLE).await;
    tombstones_of(&table).await.unwrap().into_iter().map(|(k, t)| (k, t.seq)).collect()
}

/// (account_id, seq) of every changelog row, asserting no Kafka record is there twice (a
/// change its producer sent again is another record, at another offset: kept).
async fn changelog_once(wh: &Path) -> HashSet<(i64, i64)> {
    let mut seen = HashSet::new();
    let mut records = HashSet::new();
    for b in scan(wh, CHANGELOG).await {
        let ids = b.column_by_name("account_id").unwrap().as_primitive::<Int64Type>();
        let seq = b.column_by_name("seq").unwrap().as_primitive::<Int64Type>();
        let partitions = b.column_by_name("kafka_partition").unwrap().as_primitive::<arrow_array::types::Int32Type>();
        let offsets = b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let record = (partitions.value(i), offsets.value(i));
            assert!(records.insert(record), "record {record:?} twice in the changelog");
            seen.insert((ids.value(i), seq.value(i)));
        }
    }
    seen
}

async fn assert_matches_oracle(wh: &Path, changes: &[Change]) {
    let (live, dead) = oracle(changes);
    let mirror = mirror_state(wh).await;
    assert_eq!(mirror.len(), live.len(), "live accounts");
    assert_eq!(mirror, live, "mirror differs from the oracle");
    let sum = |s: &State| s.values().map(|v| v.0).sum::<i64>();
    assert_eq!(sum(&mirror), sum(&live));
    assert_eq!(tombstones(wh).await, dead, "tombstones differ from the oracle");
    let distinct: HashSet<(i64, i64)> = changes.iter().map(|c| (c.account_id, c.seq)).collect();
    assert_eq!(changelog_once(wh).await, distinct, "changelog holds every change once");
}

/// The reference `accounts` pipeline with the CSV envelope (`lines` replace its envelope and
/// order) written to `wh`, and opened.
async fn pipeline_with(wh: &Path, schema: &str, lines: &[&str]) -> IngestPipeline {
    std::fs::write(wh.join("account.schema.json"), schema).unwrap();
    let head = ["namespace = \"bigdata\"", "[[pipeline]]", "table = \"accounts\"", &format!("topics = [\"{TOPIC}\"]")];
    let body = [
        "format = \"json\"",
        "schema = \"account.schema.json\"",
        "partition_by = [\"bucket(16, account_id)\"]",
        "mode = \"upsert\"",
        "key = [\"account_id\"]",
        "changelog = true",
    ];
    std::fs::write(wh.join("pipelines.toml"), [&head[..], &body[..], lines].concat().join("\n") + "\n").unwrap();
    open(wh).await
}

/// The shipped account schema.
fn account_schema() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/json/account.schema.json")).unwrap()
}

async fn pipeline(wh: &Path) -> IngestPipeline {
    pipeline_with(wh, &account_schema(), &["envelope = \"csv\"", "order_by = \"seq\""]).await
}

/// Open the pipeline file `pipeline_with` wrote (another function instance of it).
async fn open(wh: &Path) -> IngestPipeline {
    IngestPipeline::new(config(wh, &[&pipelines_arg(wh)])).await.unwrap()
}

fn pipelines_arg(wh: &Path) -> String {
    format!("pipelines={}", wh.join("pipelines.toml").display())
}

async fn rebuild(p: &IngestPipeline) -> icestream::modes::upsert::rebuild::RebuildReport {
    let cfg = p.config();
    icestream::modes::upsert::rebuild::rebuild(
        p.catalogs(),
        &p.pipelines().pipelines[0],
        &cfg.compression,
        cfg.target_file_size_bytes,
        deadline(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_in_order_feed_matches_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let changes = feed(4000, 300, 1);
    let p = pipeline(wh).await;
    let log: Log = changes.iter().cloned().enumerate().map(|(i, c)| (i as i64, c)).collect();
    for chunk in log.chunks(500) {
        let s = p.handle(event(&[(0, chunk)]), deadline()).await.unwrap();
        assert_eq!(s.upsert_stale, 0, "in order, nothing is stale: {s:?}");
    }
    assert_matches_oracle(wh, &changes).await;
    // Merge-on-read: later batches removed rows with position deletes, not by rewriting.
    let report = icestream::services::report::report(&load(wh, TABLE).await).await.unwrap();
    assert!(report.delete_files > 0 && report.position_deletes > 0, "{report:?}");
    // What a reader sees, not the files' row counts (issue 46).
    assert_eq!(report.live_rows, Some(oracle(&changes).0.len() as u64), "{report:?}");
    assert!(report.records > report.live_rows.unwrap_or_default(), "{report:?}");
}

async fn load(wh: &Path, name: &str) -> iceberg::table::Table {
    let cfg = config(wh, &[]);
    let catalogs = icestream::engine::catalog::Catalogs::connect(&cfg).await.unwrap();
    catalogs.catalog().load_table(&catalogs.ident(name)).await.unwrap()
}

#[tokio::test]
async fn shuffled_duplicated_replayed_and_recut_deliveries_match_the_oracle_and_rebuild_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let mut rng = SmallRng::seed_from_u64(7);
    let changes = feed(6000, 400, 2);
    let logs = produce(&changes, 4, 0.02, &mut rng);
    let sent: Vec<Change> = logs.values().flatten().map(|(_, c)| c.clone()).collect();
    assert!(sent.len() > changes.len(), "the feed has duplicate deliveries");
    let p = pipeline(wh).await;
    let mut delivered: Vec<(i32, Vec<(i64, Change)>)> = Vec::new();
    let mut stale = 0;
    for (partition, batch) in deliveries(&logs, 400, &mut rng) {
        stale += p.handle(event(&[(partition, &batch)]), deadline()).await.unwrap().upsert_stale;
        delivered.push((partition, batch));
        // At-least-once: sometimes the mapping sends an earlier batch again, or re-cut to
        // overlap the last two batches of a partition.
        if rng.random_bool(0.15) {
            let (p0, old) = &delivered[rng.random_range(0..delivered.len())];
            let s = p.handle(event(&[(*p0, old)]), deadline()).await.unwrap();
            assert_eq!((s.changelog_written, s.upsert_applied), (0, 0), "a replay changed something: {s:?}");
        }
        if rng.random_bool(0.1) {
            let mine: Vec<&Vec<(i64, Change)>> = delivered.iter().filter(|(q, _)| *q == partition).map(|(_, b)| b).collect();
            if mine.len() >= 2 {
                let mut recut: Vec<(i64, Change)> = mine[mine.len() - 2].clone();
                recut.extend(mine[mine.len() - 1].iter().cloned());
                let half = recut.len() / 2;
                let s = p.handle(event(&[(partition, &recut[half..])]), deadline()).await.unwrap();
                assert_eq!(s.changelog_written, 0, "{s:?}");
            }
        }
    }
    assert!(stale > 0, "shuffling across partitions makes some changes arrive after newer ones");
    assert_matches_oracle(wh, &sent).await;

    let before = (mirror_state(wh).await, tombstones(wh).await);
    let report = rebuild(&p).await;
    assert_eq!(report.live_rows, before.0.len());
    assert_eq!((mirror_state(wh).await, tombstones(wh).await), before, "cdc-rebuild changed the mirror");
    let table = load(wh, TABLE).await;
    let after = icestream::services::report::report(&table).await.unwrap();
    assert_eq!(after.delete_files, 0, "a rebuilt mirror has no deletes to merge: {after:?}");
}

#[tokio::test]
async fn a_stale_insert_or_update_after_a_delete_does_not_resurrect_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let p = pipeline(wh).await;
    let at = 1_764_460_800_000_000;
    let c = |op, seq, balance: Option<i64>| Change { op, account_id: 9, balance_cents: balance, last_updated_us: at + seq, seq };
    // Partition 0 carries insert 1 and delete 5; partition 1 is late with update 3 and insert 2.
    p.handle(event(&[(0, &[(0, c(Op::Insert, 1, Some(100))), (1, c(Op::Delete, 5, None))])]), deadline()).await.unwrap();
    assert!(mirror_state(wh).await.is_empty());
    let s = p.handle(event(&[(1, &[(0, c(Op::Update, 3, Some(300))), (1, c(Op::Insert, 2, Some(200)))])]), deadline()).await.unwrap();
    assert_eq!(s.upsert_stale, 1, "{s:?}");
    assert!(mirror_state(wh).await.is_empty(), "a change older than the delete resurrected the account");
    assert_eq!(tombstones(wh).await, BTreeMap::from([(9, 5)]));
    // A newer insert does bring it back, and clears the tombstone.
    p.handle(event(&[(1, &[(2, c(Op::Insert, 6, Some(600)))])]), deadline()).await.unwrap();
    assert_eq!(mirror_state(wh).await, State::from([(9, (600, at + 6, 6))]));
    assert!(tombstones(wh).await.is_empty());
    assert_eq!(changelog_once(wh).await.len(), 5, "the changelog keeps every change, stale ones too");
}

#[tokio::test]
async fn changes_of_equal_seq_are_ranked_by_position_in_the_mirror_the_changelog_and_the_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let p = pipeline(wh).await;
    let at = 1_764_460_800_000_000;
    let c = |op, account_id, seq, balance: Option<i64>| Change { op, account_id, balance_cents: balance, last_updated_us: at + seq, seq };
    // Account 1: updated and deleted at one seq in one batch. Account 2: the delete of the
    // update's seq comes in the next batch. Account 3: the update of the delete's seq comes
    // later from another partition at a lower offset: the delete ranks last.
    p.handle(
        event(&[(0, &[(0, c(Op::Insert, 1, 1, Some(10))), (1, c(Op::Update, 1, 2, Some(20))), (2, c(Op::Delete, 1, 2, None))])]),
        deadline(),
    )
    .await
    .unwrap();
    p.handle(event(&[(0, &[(3, c(Op::Insert, 2, 1, Some(10))), (4, c(Op::Update, 2, 2, Some(20)))])]), deadline()).await.unwrap();
    p.handle(
        event(&[(0, &[(5, c(Op::Delete, 2, 2, None)), (6, c(Op::Insert, 3, 1, Some(10))), (7, c(Op::Delete, 3, 2, None))])]),
        deadline(),
    )
    .await
    .unwrap();
    let late = p.handle(event(&[(1, &[(0, c(Op::Update, 3, 2, Some(99)))])]), deadline()).await.unwrap();
    assert_eq!(late.upsert_stale, 1, "{late:?}");
    assert!(mirror_state(wh).await.is_empty(), "{:?}", mirror_state(wh).await);
    assert_eq!(tombstones(wh).await, BTreeMap::from([(1, 2), (2, 2), (3, 2)]));
    let rows: usize = scan(wh, CHANGELOG).await.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 9, "every change once, equal seq or not");
    assert_eq!(changelog_once(wh).await.len(), 6);
    // Redelivered: nothing more.
    let again = p.handle(event(&[(0, &[(1, c(Op::Update, 1, 2, Some(20))), (2, c(Op::Delete, 1, 2, None))])]), deadline()).await.unwrap();
    assert_eq!((again.changelog_written, again.upsert_applied), (0, 0), "{again:?}");
    let before = (mirror_state(wh).await, tombstones(wh).await);
    rebuild(&p).await;
    assert_eq!((mirror_state(wh).await, tombstones(wh).await), before, "cdc-rebuild changed the mirror");
}

#[tokio::test]
async fn four_concurrent_writers_on_different_partitions_match_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().to_path_buf();
    let mut rng = SmallRng::seed_from_u64(11);
    let changes = feed(4000, 100, 3);
    let logs = produce(&changes, 4, 0.01, &mut rng);
    let sent: Vec<Change> = logs.values().flatten().map(|(_, c)| c.clone()).collect();
    pipeline(&wh).await; // create the tables once, before the race
    let mut tasks = Vec::new();
    for (partition, log) in logs {
        let wh = wh.clone();
        let cuts: Vec<Log> = log.chunks(150).map(<[_]>::to_vec).collect();
        // Each writer on a thread of its own with its own catalog connection, as separate
        // function instances are.
        tasks.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let p = open(&wh).await;
                let mut attempts = 0;
                for cut in cuts {
                    attempts += p.handle(event(&[(partition, &cut)]), deadline()).await.unwrap().commit_attempts;
                }
                attempts
            })
        }));
    }
    let mut attempts = 0;
    for t in tasks {
        attempts += t.join().unwrap();
    }
    println!("4 writers: {attempts} commit attempts");
    assert_matches_oracle(&wh, &sent).await;
}

#[tokio::test]
async fn a_crash_between_the_changelog_and_the_mirror_is_repaired_by_the_redelivery() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let changes = feed(1500, 100, 4);
    let log: Log = changes.iter().cloned().enumerate().map(|(i, c)| (i as i64, c)).collect();
    let file =
        write_event(wh, "event.json", &icestream::model::event::event_json("aws:kafka", "arn", "b", &event(&[(0, &log)]).partitions));
    let wh_arg = format!("warehouse={}", wh.display());
    pipeline(wh).await;
    let pipelines = pipelines_arg(wh);
    let out = icestream(&["ingest", file.to_str().unwrap(), &wh_arg, &pipelines, "fail_point=after-commit"], &[]);
    assert!(!out.status.success(), "the fail point must crash the process");
    assert_eq!(changelog_once(wh).await.len(), 1500, "the changelog committed before the crash");
    assert!(mirror_state(wh).await.is_empty(), "the upsert table did not");
    let s = summary_of(&icestream(&["ingest", file.to_str().unwrap(), &wh_arg, &pipelines], &[]));
    assert_eq!(s["changelog_written"], 0, "{s}");
    assert_matches_oracle(wh, &changes).await;
}

#[tokio::test]
async fn bad_lines_go_to_the_dead_letter_table_and_dms_json_with_a_named_order_column_applies() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let good = Change { op: Op::Insert, account_id: 1, balance_cents: Some(1999), last_updated_us: 1_764_460_800_000_000, seq: 10 };
    let mut records: Vec<KafkaRecordIn> = Vec::new();
    for (i, value) in [
        good.to_dms_json("scn"),
        r#"{"data":{"account_id":2,"balance":12.5,"last_updated":"2026-11-30 10:00:00","scn":11},"metadata":{"operation":"insert"}}"#
            .into(),
        r#"{"data":{},"metadata":{"record-type":"control","operation":"create-table"}}"#.into(),
        "I,3,100,2026-11-30T10:00:00Z,12".into(),
    ]
    .into_iter()
    .enumerate()
    {
        records.push(KafkaRecordIn {
            offset: i as i64,
            timestamp_ms: 0,
            timestamp_type: None,
            key: None,
            value: Some(value.into()),
            value_error: None,
            headers: Default::default(),
            value_schema: None,
        });
    }
    let tp = TopicPartition { topic: TOPIC.into(), partition: 0 };
    let e = ParsedEvent { event_source: None, partitions: BTreeMap::from([(tp, records)]) };
    let p = pipeline_with(wh, &account_schema().replace("\"seq\"", "\"scn\""), &["envelope = \"dms\"", "order_by = \"scn\""]).await;
    let s = p.handle(e, deadline()).await.unwrap();
    // The control record is neither a row nor a dead letter, and its offset is held.
    assert_eq!((s.records, s.written, s.changelog_written, s.dead_letter), (4, 1, 1, 2), "{s:?}");
    assert_eq!(watermarks(wh, TABLE).await.values().copied().collect::<Vec<_>>(), [3], "{s:?}");
    assert_eq!(mirror_state_by(wh, "scn").await, State::from([(1, (1999, good.last_updated_us, 10))]));
    let errors: Vec<String> = scan(wh, DEAD_LETTER)
        .await
        .iter()
        .flat_map(|b| b.column_by_name("error").unwrap().as_string::<i32>().iter().map(|e| e.unwrap().to_string()).collect::<Vec<_>>())
        .collect();
    assert!(errors.iter().any(|e| e.contains("balance") && e.contains("12.5")), "a fraction of a cent is refused, not rounded: {errors:?}");
    assert!(errors.iter().any(|e| e.contains("not JSON")), "{errors:?}");
}

async fn compact_mirror(wh: &Path) -> icestream::services::maintenance::compact::CompactReport {
    let cfg = config(wh, &[]);
    let catalogs = icestream::engine::catalog::Catalogs::connect(&cfg).await.unwrap();
    let settings = icestream::services::maintenance::MaintenanceSettings::from(&cfg);
    icestream::services::maintenance::compact::compact(&catalogs, &catalogs.ident(TABLE), &settings, false, deadline()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_folds_deletes_in_and_racing_cdc_commits_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().to_path_buf();
    let changes = feed(6000, 200, 5);
    let log: Log = changes.iter().cloned().enumerate().map(|(i, c)| (i as i64, c)).collect();
    let p = Arc::new(pipeline(&wh).await);
    let (first, rest) = log.split_at(2000);
    for chunk in first.chunks(250) {
        p.handle(event(&[(0, chunk)]), deadline()).await.unwrap();
    }
    let before = mirror_state(&wh).await;
    let started = Instant::now();
    assert_eq!(mirror_state(&wh).await, before);
    let read_before = started.elapsed();
    let report = compact_mirror(&wh).await;
    assert!(report.files_with_deletes > 0 && report.groups_committed > 0, "{report:?}");
    let started = Instant::now();
    assert_eq!(mirror_state(&wh).await, before, "compaction changed what readers see");
    println!("mirror read: {read_before:?} before compaction, {:?} after ({report:?})", started.elapsed());
    let table = load(&wh, TABLE).await;
    assert_eq!(icestream::services::report::report(&table).await.unwrap().delete_files, 0);

    // Compactions racing CDC commits: a compaction that read a file before a CDC commit
    // deleted rows in it must not commit (it would bring the rows back).
    let mut stale_groups = 0;
    for chunk in rest.chunks(200) {
        let batch = p.handle(event(&[(0, chunk)]), deadline());
        let (s, r) = tokio::join!(batch, compact_mirror(&wh));
        s.unwrap();
        stale_groups += r.groups_skipped_stale;
    }
    println!("groups found stale at commit: {stale_groups}");
    assert_matches_oracle(&wh, &changes).await;
}

/// Under `glue_maintenance=glue` Glue's optimizer packs small files; ours rewrites only the data
/// files with deletes (folding them in) and leaves every other file where it is.
#[tokio::test]
async fn compaction_for_glue_folds_deletes_and_leaves_small_files_without_deletes_alone() {
    use icestream::services::maintenance::{MaintenanceSettings, compact};
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().to_path_buf();
    let changes = feed(1500, 150, 7);
    let log: Log = changes.iter().cloned().enumerate().map(|(i, c)| (i as i64, c)).collect();
    let p = pipeline(&wh).await;
    for chunk in log.chunks(250) {
        p.handle(event(&[(0, chunk)]), deadline()).await.unwrap();
    }
    let before = mirror_state(&wh).await;
    let cfg = config(&wh, &[]);
    let catalogs = icestream::engine::catalog::Catalogs::connect(&cfg).await.unwrap();
    let ident = catalogs.ident(TABLE);
    let settings = MaintenanceSettings::from(&cfg);
    let ours = compact::compact(&catalogs, &ident, &settings, true, deadline()).await.unwrap();
    assert!(ours.candidate_files > ours.files_with_deletes && ours.files_with_deletes > 0, "{ours:?}");
    let live = |t: &iceberg::table::Table| {
        let t = t.clone();
        async move {
            let r = icestream::engine::commit::live_rows::LiveFiles::of(&t).await.unwrap();
            let with: HashSet<String> = r.deletes_by_data_file.keys().cloned().collect();
            let without: HashSet<String> = r.data.iter().map(|f| f.file_path().to_string()).filter(|f| !with.contains(f)).collect();
            (with, without)
        }
    };
    let (with_deletes, without) = live(&load(&wh, TABLE).await).await;
    let glue = MaintenanceSettings { compact_deletes_only: true, ..settings };
    let report = compact::compact(&catalogs, &ident, &glue, false, deadline()).await.unwrap();
    assert_eq!((report.candidate_files, report.files_with_deletes), (with_deletes.len(), with_deletes.len()), "{report:?}");
    assert!(report.groups_committed > 0, "{report:?}");
    let table = load(&wh, TABLE).await;
    assert_eq!(icestream::services::report::report(&table).await.unwrap().delete_files, 0);
    let (with_after, without_after) = live(&table).await;
    assert!(with_after.is_empty() && without.is_subset(&without_after), "small files without deletes are Glue's to pack");
    assert_eq!(mirror_state(&wh).await, before, "compaction changed what readers see");
}

#[tokio::test]
async fn maintenance_purges_tombstones_past_their_retention_and_keeps_newer_ones() {
    use icestream::engine::commit::{ChangeSet, Planner};
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let p = pipeline(wh).await;
    let at = 1_764_460_800_000_000;
    let c = |op, account_id, seq| Change { op, account_id, balance_cents: (op != Op::Delete).then_some(5), last_updated_us: at, seq };
    let batch = [(0, c(Op::Insert, 1, 1)), (1, c(Op::Insert, 2, 2)), (2, c(Op::Delete, 1, 3)), (3, c(Op::Delete, 2, 4))];
    p.handle(event(&[(0, &batch)]), deadline()).await.unwrap();
    assert_eq!(tombstones(wh).await, BTreeMap::from([(1, 3), (2, 4)]));

    // Age account 1's tombstone past the retention (7 days by default).
    struct Age;
    impl Planner for Age {
        async fn plan(&mut self, table: &iceberg::table::Table, _: u32) -> icestream::Result<Option<ChangeSet>> {
            let mut t = KeyTombstones::load_any(table).await?.expect("tombstones");
            let ids = t.codec().decode(t.map.keys().map(Vec::as_slice))?;
            let at = ids[0].as_primitive::<Int64Type>().values().iter().position(|id| *id == 1).expect("account 1's tombstone");
            let key = t.map.keys().nth(at).cloned().expect("key");
            t.map.get_mut(&key).expect("tombstone").deleted_at_us = chrono_now_us() - 8 * 86_400_000_000;
            let mut change = ChangeSet::new(iceberg::spec::Operation::Replace);
            let (k, v) = t.store(table, "zstd").await?;
            change.properties.insert(k, v);
            Ok(Some(change))
        }
    }
    p.catalogs().committer.commit(&p.catalogs().ident(TABLE), deadline(), &mut Age).await.unwrap();
    let wh_arg = format!("warehouse={}", wh.display());
    let out = summary_of(&icestream(&["maintain", "action=purge-tombstones", "table=accounts", &wh_arg], &[]));
    assert_eq!(out["tables"][0]["purge_tombstones"]["purged"], 1, "{out}");
    assert_eq!(tombstones(wh).await, BTreeMap::from([(2, 4)]));
    // The removed tombstone file is an orphan; the current one is referenced and survives removal.
    let out = summary_of(&icestream(&["maintain", "action=remove-orphans", "table=accounts", "orphan_margin_hours=1", &wh_arg], &[]));
    assert!(out["tables"][0]["error"].is_null(), "{out}");
    assert_eq!(tombstones(wh).await, BTreeMap::from([(2, 4)]));

    // Tombstones live in a table property, which expiry keeps: after every older snapshot is
    // expired, account 2's tombstone still stops a stale insert.
    for (offset, op, seq) in [(4, Op::Insert, 10), (5, Op::Update, 11)] {
        p.handle(event(&[(0, &[(offset, c(op, 3, seq))])]), deadline()).await.unwrap();
    }
    let out = summary_of(&icestream(
        &["maintain", "action=expire", "table=accounts", "snapshot_max_age_hours=0", "min_snapshots_to_keep=1", &wh_arg],
        &[],
    ));
    assert!(out["tables"][0]["expire"]["snapshots_expired"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(tombstones(wh).await, BTreeMap::from([(2, 4)]));
    p.handle(event(&[(0, &[(6, c(Op::Insert, 2, 1))])]), deadline()).await.unwrap();
    let live: Vec<i64> = mirror_state(wh).await.into_keys().collect();
    assert_eq!(live, vec![3], "account 2 came back after expiry");
}

fn chrono_now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64
}

#[tokio::test]
async fn one_invocation_loads_each_table_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(dir.path()).await;
    let insert = |id: i64, seq: i64| Change {
        op: Op::Insert,
        account_id: id,
        balance_cents: Some(100),
        last_updated_us: 1_700_000_000_000_000,
        seq,
    };
    let mut batch = event(&[(0, &[(0, insert(1, 1)), (1, insert(2, 2))])]);
    // One record that does not decode, so the dead-letter table is committed to as well.
    let bad = KafkaRecordIn {
        offset: 2,
        timestamp_ms: 0,
        timestamp_type: None,
        key: None,
        value: Some(b"nonsense".to_vec().into()),
        value_error: None,
        headers: Default::default(),
        value_schema: None,
    };
    batch.partitions.values_mut().next().unwrap().push(bad);
    let before = p.catalogs().calls();
    let s = p.handle(batch, deadline()).await.unwrap();
    assert_eq!((s.dead_letter, s.changelog_written), (1, 2), "{s:?}");
    let used = p.catalogs().calls() - before;
    // Dead letters, changelog, mirror: one load and one swap each (was 6 loads).
    assert_eq!((used.loads, used.swaps, used.other), (3, 3, 0), "{used:?}");
}
