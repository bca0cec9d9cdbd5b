//! Scheduled maintenance on the embedded catalog: compaction keeps every row and leaves the hot
//! partition alone, survives concurrent ingest, stops inside its budget and finishes on the next
//! run; expiry deletes exactly the unreachable files; orphan removal respects its margin.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
use futures::TryStreamExt;
use iceberg::spec::{Literal, PrimitiveLiteral};
use iceberg::table::Table;
use icestream::IngestPipeline;
use icestream::dev::generate::{GeneratorOptions, generate};
use icestream::engine::catalog::Catalogs;
use icestream::model::event::parse_event;
use icestream::services::maintenance::{MaintenanceReport, MaintenanceRequest, TableMaintenance, maintain};
use icestream_integration::*;

const TABLE: &str = "vehicle_telemetry";
const HOUR_MS: i64 = 3_600_000;

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// One small ingest of `records` readings on `topic`, starting at `start_ms`. `seq` keeps
/// offsets increasing per topic (so no ingest is taken for a replay).
async fn ingest_small(p: &IngestPipeline, topic: &str, seq: usize, start_ms: i64, records: usize) -> icestream::Summary {
    let g = generate(
        &GeneratorOptions::from_args([
            format!("records={records}"),
            "partitions=4".into(),
            format!("start_offset={}", seq * 1000),
            format!("seed={}", seq + 1),
            format!("start_ms={start_ms}"),
            format!("topic={topic}"),
            "vehicles=200".into(),
        ])
        .unwrap(),
    )
    .unwrap();
    p.handle(parse_event(g.event.to_string().as_bytes()).unwrap(), deadline()).await.unwrap()
}

/// Event start time of the i-th ingest: hours 3 to 6 back, and every tenth in the last minutes.
fn spread_start_ms(i: usize, now: i64) -> i64 {
    if i % 10 == 9 { now - 5 * 60_000 } else { now - (3 + (i % 4) as i64) * HOUR_MS - (i as i64 * 7_000) % HOUR_MS }
}

async fn run(wh: &Path, actions: &[&str], extra: &[&str], deadline: Instant) -> TableMaintenance {
    let cfg = config(wh, extra);
    let catalogs = Catalogs::connect(&cfg).await.unwrap();
    let actions: Vec<String> = actions.iter().map(|s| s.to_string()).collect();
    let request = MaintenanceRequest::new(&actions, &[TABLE.to_string()], false, &cfg).unwrap();
    let mut report: MaintenanceReport = maintain(&catalogs, &request, deadline).await.unwrap();
    let table = report.tables.remove(0);
    assert!(table.error.is_none(), "{:?}", table.error);
    table
}

/// Twelve small commits into one past hour: twelve snapshots, twelve data manifests.
async fn twelve_ingests_three_hours_ago(wh: &Path) {
    let p = IngestPipeline::new(config(wh, &[])).await.unwrap();
    let now = now_ms();
    for i in 0..12 {
        ingest_small(&p, "vehicle-telemetry", i, now - 3 * HOUR_MS, 20).await;
    }
}

async fn load(wh: &Path) -> Table {
    let catalogs = Catalogs::connect(&config(wh, &[])).await.unwrap();
    catalogs.catalog().load_table(&catalogs.ident(TABLE)).await.unwrap()
}

/// Rows as `(topic, partition, offset, event_time_us, speed)`, sorted; read by an iceberg-rust
/// scan of the current snapshot or of `snapshot_id`.
async fn rows(wh: &Path, snapshot_id: Option<i64>) -> Vec<(String, i32, i64, i64, i32)> {
    let table = load(wh).await;
    if table.metadata().current_snapshot().is_none() {
        return vec![];
    }
    let mut scan = table.scan().select_all();
    if let Some(id) = snapshot_id {
        scan = scan.snapshot_id(id);
    }
    let batches: Vec<RecordBatch> = scan.build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches {
        let topic = b.column_by_name("kafka_topic").unwrap().as_string::<i32>().clone();
        let part = b.column_by_name("kafka_partition").unwrap().as_primitive::<Int32Type>().clone();
        let off = b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>().clone();
        let time = b.column_by_name("event_time").unwrap().as_primitive::<TimestampMicrosecondType>().clone();
        let speed = b.column_by_name("speed_kmh").unwrap().as_primitive::<Int32Type>().clone();
        for i in 0..b.num_rows() {
            out.push((topic.value(i).to_string(), part.value(i), off.value(i), time.value(i), speed.value(i)));
        }
    }
    out.sort();
    out
}

/// Row count per event hour and the sum of `speed_kmh`.
fn checksums(rows: &[(String, i32, i64, i64, i32)]) -> (usize, i64, BTreeMap<i64, usize>) {
    let mut per_hour = BTreeMap::new();
    for r in rows {
        *per_hour.entry(r.3.div_euclid(HOUR_MS * 1000)).or_default() += 1;
    }
    (rows.len(), rows.iter().map(|r| r.4 as i64).sum(), per_hour)
}

/// Live data files of the current snapshot with their hour partition value.
async fn live_files(table: &Table) -> Vec<(String, i64)> {
    let Some(current) = table.metadata().current_snapshot() else { return vec![] };
    let list = table.manifest_list_reader(current).load().await.unwrap();
    let mut out = Vec::new();
    for m in list.entries() {
        let manifest = m.load_manifest(table.file_io()).await.unwrap();
        for e in manifest.entries().iter().filter(|e| e.is_alive()) {
            let hour = match e.data_file().partition().fields()[0] {
                Some(Literal::Primitive(PrimitiveLiteral::Int(h))) => h as i64,
                ref other => panic!("hour partition value {other:?}"),
            };
            out.push((e.file_path().to_string(), hour));
        }
    }
    out.sort();
    out
}

/// Files under a directory, as `file://` URIs.
fn files_on_disk(dir: &Path) -> HashSet<String> {
    fn walk(d: &Path, out: &mut HashSet<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out)
            } else {
                out.insert(format!("file://{}", p.display()));
            }
        }
    }
    let mut out = HashSet::new();
    walk(dir, &mut out);
    out
}

fn table_dir(wh: &Path) -> PathBuf {
    wh.canonicalize().unwrap().join("bigdata").join(TABLE)
}

/// Best of three full scans, milliseconds.
async fn full_scan_ms(wh: &Path) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        let n = rows(wh, None).await.len();
        assert!(n > 0);
        best = best.min(started.elapsed().as_secs_f64() * 1000.0);
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_after_200_small_ingests_keeps_every_row_in_far_fewer_files_and_leaves_the_hot_hour() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let p = IngestPipeline::new(config(&wh, &[])).await.unwrap();
    let now = now_ms();
    for i in 0..200 {
        ingest_small(&p, "vehicle-telemetry", i, spread_start_ms(i, now), 25).await;
    }
    let before = rows(&wh, None).await;
    let files_before = live_files(&load(&wh).await).await;
    let scan_before = full_scan_ms(&wh).await;

    // Hot = the current and the previous hour, so an hour turning during the test changes nothing.
    let hot_from = now_ms().div_euclid(HOUR_MS) - 1;
    let report = run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await;
    let compact = report.compact.unwrap();
    let after = rows(&wh, None).await;
    let files_after = live_files(&load(&wh).await).await;
    let scan_after = full_scan_ms(&wh).await;

    assert_eq!(after, before, "compaction changed the rows");
    assert_eq!(checksums(&after), checksums(&before));
    let hot_before: Vec<_> = files_before.iter().filter(|(_, h)| *h >= hot_from).collect();
    let hot_after: Vec<_> = files_after.iter().filter(|(_, h)| *h >= hot_from).collect();
    assert!(!hot_before.is_empty(), "the test must have hot files");
    assert_eq!(hot_after, hot_before, "the hot partitions were touched");
    assert!(compact.hot_partitions_skipped > 0);
    let cold_before = files_before.len() - hot_before.len();
    let cold_after = files_after.len() - hot_after.len();
    assert!(cold_after * 5 < cold_before, "cold files {cold_before} -> {cold_after}");
    assert!(!compact.stopped_by_deadline && compact.groups_left == 0, "{compact:?}");

    // Run again: nothing left to do.
    let again = run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await.compact.unwrap();
    assert_eq!((again.groups_planned, again.commits), (0, 0), "{again:?}");
    assert_eq!(rows(&wh, None).await, before);

    println!(
        "FIGURES 200 small commits: live data files {} -> {} (cold {} -> {}, hot {} untouched); \
         rewrote {} files / {} bytes in {} ms = {:.0} bytes/s ({} commits); full scan {:.1} ms -> {:.1} ms; rows {}",
        files_before.len(),
        files_after.len(),
        cold_before,
        cold_after,
        hot_after.len(),
        compact.files_removed,
        compact.bytes_read,
        compact.rewrite_ms,
        compact.bytes_rewritten_per_sec,
        compact.commits,
        scan_before,
        scan_after,
        after.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_while_four_writers_commit_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let setup = IngestPipeline::new(config(&wh, &[])).await.unwrap();
    let now = now_ms();
    let mut expected = 0usize;
    for i in 0..40 {
        expected += ingest_small(&setup, "seed-topic", i, now - (3 + (i % 3) as i64) * HOUR_MS, 20).await.written;
    }
    // Four writers, each on its own topic (its own offset watermarks), into the same past hours
    // compaction is rewriting. The ingest future is not `Send`, so writers and compaction run
    // interleaved on this task (every await is a point where another commit can land).
    let mut pipelines = Vec::new();
    for _ in 0..4 {
        pipelines.push(IngestPipeline::new(config(&wh, &[])).await.unwrap());
    }
    let writers = futures::future::join_all(pipelines.iter().enumerate().map(|(w, p)| async move {
        let (mut written, mut attempts) = (0, 0);
        for i in 0..15 {
            let s = ingest_small(p, &format!("writer-{w}"), i, now_ms() - (3 + (i % 3) as i64) * HOUR_MS, 20).await;
            written += s.written;
            attempts += s.commit_attempts;
        }
        (written, attempts)
    }));
    let compacting = async {
        let mut reports = Vec::new();
        for _ in 0..4 {
            reports.push(run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await.compact.unwrap());
        }
        reports
    };
    let (results, mut compactions) = futures::future::join(writers, compacting).await;
    let written: usize = results.iter().map(|r| r.0).sum();
    let writer_attempts: u32 = results.iter().map(|r| r.1).sum();
    expected += written;
    compactions.push(run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await.compact.unwrap());

    let got = rows(&wh, None).await;
    let keys: HashSet<_> = got.iter().map(|r| (r.0.clone(), r.1, r.2)).collect();
    assert_eq!(keys.len(), got.len(), "a row landed twice");
    assert_eq!(got.len(), expected, "rows lost");
    let committed: usize = compactions.iter().map(|c| c.groups_committed).sum();
    let compaction_attempts: u32 = compactions.iter().map(|c| c.commit_attempts).sum();
    let compaction_commits: usize = compactions.iter().map(|c| c.commits).sum();
    assert!(committed > 0, "{compactions:?}");
    println!(
        "FIGURES concurrency: 60 writer commits in {writer_attempts} attempts; {compaction_commits} compaction commits \
         in {compaction_attempts} attempts, {committed} groups, {} stale groups dropped; {} rows",
        compactions.iter().map(|c| c.groups_skipped_stale).sum::<usize>(),
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_deletes_exactly_the_unreachable_files_and_kept_snapshots_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let p = IngestPipeline::new(config(&wh, &[])).await.unwrap();
    let now = now_ms();
    for i in 0..30 {
        ingest_small(&p, "vehicle-telemetry", i, now - (3 + (i % 3) as i64) * HOUR_MS, 20).await;
    }
    let before_rows = rows(&wh, None).await;
    let marks_before = watermarks(&wh, TABLE).await;
    run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await;

    // What each snapshot reads, computed here from the manifests (live entries only).
    let table = load(&wh).await;
    let mut snapshots: Vec<_> = table.metadata().snapshots().cloned().collect();
    snapshots.sort_by_key(|s| s.timestamp_ms());
    let kept_ids: HashSet<i64> = snapshots.iter().rev().take(2).map(|s| s.snapshot_id()).collect();
    let mut kept_files = HashSet::new();
    let mut expired_files = HashSet::new();
    for s in &snapshots {
        let target = if kept_ids.contains(&s.snapshot_id()) { &mut kept_files } else { &mut expired_files };
        target.insert(s.manifest_list().to_string());
        let list = table.manifest_list_reader(s).load().await.unwrap();
        for m in list.entries() {
            target.insert(m.manifest_path.clone());
            for e in m.load_manifest(table.file_io()).await.unwrap().entries().iter().filter(|e| e.is_alive()) {
                target.insert(e.file_path().to_string());
            }
        }
    }
    let unreachable: HashSet<String> = expired_files.difference(&kept_files).cloned().collect();
    assert!(!unreachable.is_empty());
    let on_disk_before = files_on_disk(&table_dir(&wh));

    let report = run(&wh, &["expire"], &["snapshot_max_age_hours=0", "min_snapshots_to_keep=2"], deadline()).await;
    let expire = report.expire.unwrap();
    assert_eq!(expire.snapshots_expired, snapshots.len() - 2, "{expire:?}");
    let on_disk_after = files_on_disk(&table_dir(&wh));
    let deleted: HashSet<String> = on_disk_before.difference(&on_disk_after).cloned().collect();
    // Metadata JSON files are managed by the commit's metadata log, not by expiry.
    let deleted_non_json: HashSet<String> = deleted.into_iter().filter(|p| !p.ends_with(".metadata.json")).collect();
    assert_eq!(deleted_non_json, unreachable, "expiry must delete exactly the unreachable files");
    for f in &kept_files {
        assert!(on_disk_after.contains(f), "kept file {f} was deleted");
    }

    let table = load(&wh).await;
    assert_eq!(table.metadata().snapshots().len(), 2);
    for id in &kept_ids {
        assert_eq!(rows(&wh, Some(*id)).await, before_rows, "time travel to kept snapshot {id}");
    }
    assert_eq!(watermarks(&wh, TABLE).await, marks_before, "watermarks must survive expiry");
    // Idempotent: nothing more to expire.
    let again = run(&wh, &["expire"], &["snapshot_max_age_hours=0", "min_snapshots_to_keep=2"], deadline()).await;
    assert_eq!(again.expire.unwrap().snapshots_expired, 0);
}

fn set_age(path: &str, age: Duration) {
    let path = path.strip_prefix("file://").unwrap_or(path);
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_an_aborted_ingest_go_after_the_margin_but_young_or_referenced_files_never() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let wh_arg = format!("warehouse={}", wh.display());
    let g = generate(&GeneratorOptions::from_args(["records=500", "seed=21"]).unwrap()).unwrap();
    let first = write_event(dir.path(), "first.json", &g.event);
    summary_of(&icestream(&["ingest", first.to_str().unwrap(), &wh_arg], &[]));
    let expected = rows(&wh, None).await;
    let referenced_before = files_on_disk(&table_dir(&wh));

    // An ingest that dies after writing its data files: they are referenced by nothing.
    let g2 = generate(&GeneratorOptions::from_args(["records=500", "seed=22", "start_offset=10000"]).unwrap()).unwrap();
    let second = write_event(dir.path(), "second.json", &g2.event);
    let out = icestream(&["ingest", second.to_str().unwrap(), &wh_arg], &[("ICESTREAM_FAIL_POINT", "after-write")]);
    assert!(!out.status.success());
    let crashed: HashSet<String> = files_on_disk(&table_dir(&wh)).difference(&referenced_before).cloned().collect();
    assert!(!crashed.is_empty());
    let (young, old): (Vec<&String>, Vec<&String>) = {
        let mut all: Vec<&String> = crashed.iter().collect();
        all.sort();
        let young = all.split_off(all.len() / 2);
        (young, all)
    };
    assert!(!old.is_empty() && !young.is_empty());
    let four_days = Duration::from_secs(96 * 3600);
    for f in &old {
        set_age(f, four_days);
    }
    // Referenced files made just as old must stay.
    for f in &referenced_before {
        set_age(f, four_days);
    }

    // A dry run finds the old orphans and deletes nothing.
    let cfg = config(&wh, &[]);
    let catalogs = Catalogs::connect(&cfg).await.unwrap();
    let dry_request = MaintenanceRequest::new(&["remove-orphans".into()], &[TABLE.into()], true, &cfg).unwrap();
    let mut dry_report = maintain(&catalogs, &dry_request, deadline()).await.unwrap();
    let dry = dry_report.tables.remove(0).remove_orphans.unwrap();
    assert_eq!((dry.deleted, dry.orphans_too_young), (old.len(), young.len()), "{dry:?}");
    assert_eq!(files_on_disk(&table_dir(&wh)).len(), referenced_before.len() + crashed.len());

    let real = run(&wh, &["remove-orphans"], &[], deadline()).await.remove_orphans.unwrap();
    assert_eq!(real.deleted, old.len(), "{real:?}");
    let on_disk = files_on_disk(&table_dir(&wh));
    for f in &old {
        assert!(!on_disk.contains(*f), "old orphan {f} survived");
    }
    for f in &young {
        assert!(on_disk.contains(*f), "young orphan {f} was deleted");
    }
    for f in &referenced_before {
        assert!(on_disk.contains(f), "referenced file {f} was deleted");
    }
    assert_eq!(rows(&wh, None).await, expected);

    // After the margin the young ones go too (margin lowered to its minimum, 1 hour).
    for f in &young {
        set_age(f, Duration::from_secs(2 * 3600));
    }
    let later = run(&wh, &["remove-orphans"], &["orphan_margin_hours=1"], deadline()).await.remove_orphans.unwrap();
    assert_eq!(later.deleted, young.len(), "{later:?}");
    assert_eq!(rows(&wh, None).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_stopped_by_its_time_budget_finishes_on_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let p = IngestPipeline::new(config(&wh, &[])).await.unwrap();
    let now = now_ms();
    for i in 0..40 {
        ingest_small(&p, "vehicle-telemetry", i, now - (3 + (i % 4) as i64) * HOUR_MS, 20).await;
    }
    let before = rows(&wh, None).await;
    let files_before = live_files(&load(&wh).await).await.len();

    let stopped = run(&wh, &["compact"], &["hot_partition_hours=2"], Instant::now() + Duration::from_millis(50)).await;
    let stopped = stopped.compact.unwrap();
    assert!(stopped.stopped_by_deadline, "{stopped:?}");
    assert!(stopped.groups_left > 0 && stopped.groups_committed == 0, "{stopped:?}");
    assert_eq!(rows(&wh, None).await, before);

    let finished = run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await.compact.unwrap();
    assert!(!finished.stopped_by_deadline && finished.groups_left == 0, "{finished:?}");
    assert_eq!(finished.groups_committed, stopped.groups_left, "{finished:?}");
    assert_eq!(rows(&wh, None).await, before);
    assert!(live_files(&load(&wh).await).await.len() * 3 < files_before);
    let idle = run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()).await.compact.unwrap();
    assert_eq!(idle.groups_planned, 0, "{idle:?}");
}

/// Data manifests of the current snapshot.
async fn data_manifest_count(table: &Table) -> usize {
    let Some(current) = table.metadata().current_snapshot() else { return 0 };
    let list = table.manifest_list_reader(current).load().await.unwrap();
    list.entries().iter().filter(|m| m.content == iceberg::spec::ManifestContentType::Data).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_manifests_merges_per_commit_manifests_without_changing_rows() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    twelve_ingests_three_hours_ago(&wh).await;
    let before = rows(&wh, None).await;
    let files_before = live_files(&load(&wh).await).await;
    assert_eq!(data_manifest_count(&load(&wh).await).await, 12);
    let report = run(&wh, &["rewrite-manifests"], &[], deadline()).await.rewrite_manifests.unwrap();
    assert!(report.committed && report.data_manifests_after == 1, "{report:?}");
    let table = load(&wh).await;
    assert_eq!(data_manifest_count(&table).await, 1);
    assert_eq!(live_files(&table).await, files_before, "a manifest rewrite changes no data file");
    assert_eq!(rows(&wh, None).await, before);
    let again = run(&wh, &["rewrite-manifests"], &[], deadline()).await.rewrite_manifests.unwrap();
    assert!(!again.committed, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_compactions_racing_each_other_rewrite_each_file_once() {
    use icestream::engine::commit::fault::FaultyPointer;
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let p = IngestPipeline::new(config(&wh, &[])).await.unwrap();
    let now = now_ms();
    for i in 0..40 {
        ingest_small(&p, "vehicle-telemetry", i, now - (3 + (i % 2) as i64) * HOUR_MS, 20).await;
    }
    let before = rows(&wh, None).await;
    // The race, made to happen: compaction A has planned and rewritten its groups; before its
    // first swap reaches the catalog, compaction B runs to the end (on its own runtime, as
    // another function instance would).
    let b_report = Arc::new(Mutex::new(None));
    let hook = {
        let (wh, b_report) = (wh.clone(), b_report.clone());
        Box::pin(async move {
            let b = tokio::task::spawn_blocking(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(run(&wh, &["compact"], &["hot_partition_hours=2"], deadline()))
            })
            .await
            .unwrap();
            *b_report.lock().unwrap() = b.compact;
        })
    };
    let cfg = config(&wh, &["hot_partition_hours=2"]);
    let mut catalogs = Catalogs::connect(&cfg).await.unwrap();
    let pointer = FaultyPointer::before_first_swap(&catalogs.committer, hook);
    catalogs.committer = catalogs.committer.with_pointer(pointer.clone());
    let request = MaintenanceRequest::new(&["compact".to_string()], &[TABLE.to_string()], false, &cfg).unwrap();
    let mut report = maintain(&catalogs, &request, deadline()).await.unwrap();
    let a = report.tables.remove(0).compact.unwrap();
    let b = b_report.lock().unwrap().take().expect("B ran");

    assert!(pointer.conflicts.load(Ordering::SeqCst) >= 1, "A's swap did not lose to B: no race");
    assert!(a.groups_planned > 0 && a.groups_skipped_stale > 0, "A found no group stale: {a:?}");
    assert_eq!(rows(&wh, None).await, before, "racing compactions lost or duplicated rows");
    // Every planned group landed once: by B, or was found stale by A.
    assert_eq!((a.groups_committed, a.groups_skipped_stale), (0, a.groups_planned), "{a:?}");
    assert_eq!(b.groups_committed, b.groups_planned, "{b:?}");
    println!(
        "FIGURES racing compactions: committed {} + {}, stale {} + {}, commit attempts {} + {}",
        a.groups_committed, b.groups_committed, a.groups_skipped_stale, b.groups_skipped_stale, a.commit_attempts, b.commit_attempts
    );
}

/// Issue 45, defect 2: compaction's swap times out and the reload does not show it; the request
/// lands just before the retry's swap. The retry must see its own outputs live (a landed
/// commit), not take its groups for stale and delete the outputs the table now references.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_whose_lost_swap_lands_late_keeps_its_outputs() {
    use icestream::engine::commit::fault::{Fault, FaultyPointer};
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    twelve_ingests_three_hours_ago(&wh).await;
    let before = rows(&wh, None).await;
    let cfg = config(&wh, &["hot_partition_hours=2"]);
    let mut catalogs = Catalogs::connect(&cfg).await.unwrap();
    let pointer = FaultyPointer::new(&catalogs.committer, [Fault::LostThenLandsLater], None);
    catalogs.committer = catalogs.committer.with_pointer(pointer.clone());
    let request = MaintenanceRequest::new(&["compact".to_string()], &[TABLE.to_string()], false, &cfg).unwrap();
    let mut report = maintain(&catalogs, &request, deadline()).await.unwrap();
    let table_report = report.tables.remove(0);
    assert!(table_report.error.is_none(), "{:?}", table_report.error);
    let compact = table_report.compact.unwrap();
    assert!(pointer.conflicts.load(Ordering::SeqCst) >= 1, "the late landing did not make the retry conflict");
    let table = load(&wh).await;
    for (path, _) in live_files(&table).await {
        assert!(Path::new(path.trim_start_matches("file://")).exists(), "live file {path} was deleted");
    }
    assert_eq!(rows(&wh, None).await, before, "rows lost or duplicated");
    assert_eq!((compact.groups_committed, compact.groups_skipped_stale), (compact.groups_planned, 0), "{compact:?}");
}

#[tokio::test]
async fn the_cli_runs_every_action_in_order_and_prints_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let wh_arg = format!("warehouse={}", wh.display());
    for (i, seed) in [31, 32, 33, 34, 35, 36].into_iter().enumerate() {
        let start_ms = (now_ms() - 4 * HOUR_MS).to_string();
        let g = generate(
            &GeneratorOptions::from_args([
                "records=300".to_string(),
                format!("seed={seed}"),
                format!("start_offset={}", i * 1000),
                format!("start_ms={start_ms}"),
            ])
            .unwrap(),
        )
        .unwrap();
        let event = write_event(dir.path(), &format!("e{i}.json"), &g.event);
        summary_of(&icestream(&["ingest", event.to_str().unwrap(), &wh_arg], &[]));
    }
    let before = rows(&wh, None).await;
    let report = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["maintain", wh_arg.as_str()];
        all.extend_from_slice(args);
        summary_of(&icestream(&all, &[]))
    };
    let dry = report(&["action=report", "table=vehicle_telemetry"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["tables"][0]["compact"]["groups_committed"], 0);
    assert!(dry["tables"][0]["compact"]["groups_planned"].as_u64().unwrap() > 0, "{dry}");
    assert_eq!(rows(&wh, None).await, before);

    let done = report(&["hot_partition_hours=2", "snapshot_max_age_hours=0", "min_snapshots_to_keep=1"]);
    assert_eq!(done["actions"], serde_json::json!(["purge-tombstones", "compact", "rewrite-manifests", "expire", "remove-orphans"]));
    let names: Vec<&str> = done["tables"].as_array().unwrap().iter().map(|t| t["table"].as_str().unwrap()).collect();
    assert_eq!(names, ["vehicle_telemetry", "vehicle_telemetry_dead_letter"], "no table= means every table");
    let t = &done["tables"][0];
    assert!(t["compact"]["groups_committed"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["expire"]["snapshots_before"].as_u64().unwrap() - t["expire"]["snapshots_expired"].as_u64().unwrap(), 1, "{t}");
    assert_eq!(rows(&wh, None).await, before);
    assert_eq!(load(&wh).await.metadata().snapshots().len(), 1);

    let bad = icestream(&["maintain", &wh_arg, "action=vacuum"], &[]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("rewrite-manifests"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_run_reads_each_manifest_once() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    twelve_ingests_three_hours_ago(&wh).await;
    let cfg = config(&wh, &["hot_partition_hours=2"]);
    let catalogs = Catalogs::connect(&cfg).await.unwrap();
    // Every action in one run: report, compaction, manifest rewrite, expiry, orphan removal.
    let request = MaintenanceRequest::new(&[], &[TABLE.to_string()], false, &cfg).unwrap();
    let report = maintain(&catalogs, &request, deadline()).await.unwrap();
    assert!(report.tables[0].error.is_none(), "{:?}", report.tables[0].error);
    let reads = report.manifest_reads;
    // Without the run's cache every action read the manifests again.
    assert!(reads.saved > 0, "{reads:?}");
    println!(
        "FIGURES maintenance manifest reads: {} from storage, {} saved ({} before)",
        reads.read,
        reads.saved,
        reads.read + reads.saved
    );
}

#[tokio::test]
async fn a_table_not_created_yet_is_skipped_and_reported_not_failed() {
    // Before the first ingest: the schedules already run, and the table is not there yet.
    let wh = tempfile::tempdir().unwrap();
    let cfg = config(wh.path(), &[]);
    let catalogs = Catalogs::connect(&cfg).await.unwrap();
    let request = MaintenanceRequest::new(&[], &["not_ingested_yet".to_string()], false, &cfg).unwrap();
    let report = maintain(&catalogs, &request, deadline()).await.unwrap();
    assert!(report.failures().is_empty(), "{:?}", report.failures());
    assert!(report.tables[0].skipped.iter().any(|s| s.contains("does not exist yet")), "{:?}", report.tables[0].skipped);
}
