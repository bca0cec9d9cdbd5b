//! Every branch of the commit loop, against the embedded SQLite catalog in a tempdir, with the
//! faults injected by [`super::fault::FaultyPointer`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use iceberg::table::Table;

use super::fault::{Fault, FaultyPointer};
use super::*;
use crate::model::event::TopicPartition;
use crate::testkit::{LocalTable as Fixture, data_file};

async fn fixture() -> Fixture {
    Fixture::new().await
}

fn tp() -> TopicPartition {
    TopicPartition { topic: "topic".into(), partition: 0 }
}

/// Appends one (fictitious) data file covering offset `offset` of `tp`, unless the watermark
/// shows it.
struct AppendOffset {
    tp: TopicPartition,
    offset: i64,
    plans: u32,
}

impl Planner for AppendOffset {
    async fn plan(&mut self, table: &Table, attempt: u32) -> Result<Option<ChangeSet>> {
        self.plans += 1;
        if Watermarks::from_properties(table.metadata().properties()).covers(&self.tp, self.offset) {
            return Ok(None);
        }
        let file = data_file(table, &format!("{}-{}-{attempt}-{}", self.tp.partition, self.offset, self.plans));
        let mut change = ChangeSet::append(vec![file]);
        change.watermarks.advance(&self.tp, self.offset);
        Ok(Some(change))
    }
}

fn planner(offset: i64) -> AppendOffset {
    AppendOffset { tp: tp(), offset, plans: 0 }
}

fn planner_on(partition: i32, offset: i64) -> AppendOffset {
    AppendOffset { tp: TopicPartition { partition, ..tp() }, offset, plans: 0 }
}

/// A committer of another process on the same catalog: it knows nothing of our commits.
fn other_process(f: &Fixture) -> Committer {
    Committer::new(f.catalogs.committer.catalog().clone(), f.catalogs.committer.pointer().clone())
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

impl Fixture {
    fn faulty(&self, script: impl IntoIterator<Item = Fault>, after: Option<Fault>) -> (Committer, Arc<FaultyPointer>) {
        let pointer = FaultyPointer::new(&self.catalogs.committer, script, after);
        (self.catalogs.committer.with_pointer(pointer.clone()), pointer)
    }
}

/// Every file a snapshot needs (manifest list, manifests) exists: the table is readable.
async fn assert_readable(table: &Table) {
    let snapshot = table.metadata().current_snapshot().expect("a snapshot");
    let io = table.file_io();
    assert!(io.exists(snapshot.manifest_list()).await.unwrap(), "manifest list {} deleted", snapshot.manifest_list());
    for manifest in table.manifest_list_reader(snapshot).load().await.unwrap().entries() {
        assert!(io.exists(&manifest.manifest_path).await.unwrap(), "manifest {} deleted", manifest.manifest_path);
    }
    assert!(io.exists(table.metadata_location().unwrap()).await.unwrap());
}

/// The table holds one snapshot, the one `out` made, and can be read.
async fn assert_only_our_snapshot(f: &Fixture, out: &CommitOutcome) {
    let table = f.load().await;
    assert_eq!(table.metadata().current_snapshot_id(), out.snapshot_id);
    assert_eq!(table.metadata().snapshots().count(), 1);
    assert_readable(&table).await;
}

fn metadata_files(table: &Table) -> usize {
    let dir = table.metadata().location().trim_start_matches("file://").to_string() + "/metadata";
    std::fs::read_dir(dir).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".metadata.json")).count()
}

#[tokio::test]
async fn a_clean_swap_commits_in_one_attempt_and_returns_the_new_table_without_reloading() {
    let f = fixture().await;
    let out = f.catalogs.committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap();
    assert_eq!((out.attempts, out.committed), (1, true));
    let loaded = f.load().await;
    assert_eq!(out.table.metadata_location(), loaded.metadata_location());
    assert_eq!(loaded.metadata().current_snapshot_id(), out.snapshot_id);
    assert_readable(&loaded).await;
}

#[tokio::test]
async fn nothing_to_do_commits_nothing() {
    let f = fixture().await;
    f.catalogs.committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap();
    let out = f.catalogs.committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap();
    assert_eq!((out.attempts, out.committed, out.snapshot_id), (1, false, None));
}

#[tokio::test]
async fn a_lost_race_reloads_plans_again_and_removes_the_losing_attempts_files() {
    let f = fixture().await;
    let (committer, pointer) = f.faulty([Fault::Conflict], None);
    let mut p = planner(5);
    let before = metadata_files(&f.load().await);
    let out = committer.commit(&f.ident, soon(), &mut p).await.unwrap();
    // The race happened: a real conflict from the catalog, then a second plan.
    assert_eq!(pointer.conflicts.load(Ordering::SeqCst), 1);
    assert_eq!((out.attempts, p.plans), (2, 2));
    let table = f.load().await;
    assert_eq!(table.metadata().properties().get("test.other-writer").map(String::as_str), Some("1"));
    assert_readable(&table).await;
    // Other writer's metadata + our winning one; the losing attempt's metadata was removed.
    assert_eq!(metadata_files(&table), before + 2);
}

#[tokio::test]
async fn throttling_backs_off_and_retries() {
    let f = fixture().await;
    let (committer, pointer) = f.faulty([Fault::Throttled, Fault::Throttled], None);
    let out = committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap();
    assert_eq!((out.attempts, pointer.swaps.load(Ordering::SeqCst)), (3, 3));
    assert_readable(&f.load().await).await;
}

#[tokio::test]
async fn an_ambiguous_swap_that_landed_is_a_success_not_a_second_commit() {
    let f = fixture().await;
    let (committer, _) = f.faulty([Fault::AmbiguousLanded], None);
    let mut p = planner(5);
    let out = committer.commit(&f.ident, soon(), &mut p).await.unwrap();
    assert_eq!((out.attempts, p.plans, out.committed), (1, 1, true));
    assert_only_our_snapshot(&f, &out).await;
}

#[tokio::test]
async fn an_ambiguous_swap_overtaken_by_another_writer_keeps_our_committed_files() {
    let f = fixture().await;
    let (committer, pointer) = f.faulty([Fault::LandedThenOvertaken], None);
    let mut p = planner(5);
    let out = committer.commit(&f.ident, soon(), &mut p).await.unwrap();
    assert_eq!(pointer.overtakes.load(Ordering::SeqCst), 1, "the other writer committed on top");
    assert_eq!((out.attempts, p.plans, out.committed), (1, 1, true));
    // The other writer's metadata is current and still references our snapshot and files.
    assert_only_our_snapshot(&f, &out).await;
}

#[tokio::test]
async fn a_conflict_answered_to_a_retry_of_a_landed_swap_is_a_success_and_deletes_nothing() {
    // Glue's `UpdateTable` lands, its response is lost, the SDK's retry of the same update is
    // refused (the version moved): the table points at our metadata, which must not be deleted.
    let f = fixture().await;
    let (committer, pointer) = f.faulty([Fault::LandedThenConflict], None);
    let mut p = planner(5);
    let out = committer.commit(&f.ident, soon(), &mut p).await.unwrap();
    assert_eq!(pointer.conflicts.load(Ordering::SeqCst), 1, "the catalog answered a conflict");
    assert_eq!((out.attempts, p.plans, out.committed), (1, 1, true));
    assert_only_our_snapshot(&f, &out).await;
}

#[tokio::test]
async fn an_ambiguous_swap_that_was_lost_retries_and_deletes_nothing() {
    let f = fixture().await;
    let (committer, _) = f.faulty([Fault::AmbiguousLost], None);
    let mut p = planner(5);
    let before = metadata_files(&f.load().await);
    let out = committer.commit(&f.ident, soon(), &mut p).await.unwrap();
    assert_eq!((out.attempts, p.plans), (2, 2));
    let table = f.load().await;
    assert_eq!(table.metadata().snapshots().count(), 1);
    assert_readable(&table).await;
    // The unknown attempt's metadata stays for orphan removal (it might still have landed).
    assert_eq!(metadata_files(&table), before + 2);
}

#[tokio::test]
async fn a_refused_swap_fails_at_once_and_deletes_nothing() {
    let f = fixture().await;
    let (committer, _) = f.faulty([Fault::Denied], None);
    let before = metadata_files(&f.load().await);
    let err = committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap_err();
    assert!(matches!(err, Error::CommitNotLanded { .. }), "{err}");
    assert!(err.to_string().contains("access denied"), "{err}");
    assert_eq!(metadata_files(&f.load().await), before + 1);
}

#[tokio::test]
async fn endless_conflicts_give_up_at_the_deadline() {
    let f = fixture().await;
    let (committer, pointer) = f.faulty([], Some(Fault::Conflict));
    let started = Instant::now();
    let err = committer.commit(&f.ident, Instant::now() + Duration::from_millis(300), &mut planner(5)).await.unwrap_err();
    let Error::CommitGaveUp { attempts, .. } = err else { panic!("{err}") };
    assert!(attempts >= 2, "{attempts}");
    assert_eq!(pointer.conflicts.load(Ordering::SeqCst), attempts);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn commit_to_uses_the_callers_table_for_the_first_attempt() {
    let f = fixture().await;
    let table = f.load().await;
    let out = f.catalogs.committer.commit_to(table, soon(), &mut planner(5)).await.unwrap();
    assert_eq!(out.attempts, 1);
    // A stale table (another process committed since): the first attempt conflicts, the
    // second reloads.
    let stale = out.table.clone();
    other_process(&f).commit(&f.ident, soon(), &mut planner(6)).await.unwrap();
    let out = f.catalogs.committer.commit_to(stale, soon(), &mut planner(7)).await.unwrap();
    assert_eq!(out.attempts, 2);
}

#[tokio::test]
async fn concurrent_commits_of_one_process_swap_in_turn_instead_of_losing_races() {
    let f = fixture().await;
    let table = f.load().await;
    let committer = &f.catalogs.committer;
    let (mut first, mut second) = (planner_on(0, 5), planner_on(1, 7));
    // Both plan on the same table; the second swaps on top of the first.
    let (a, b) = tokio::join!(committer.commit_to(table.clone(), soon(), &mut first), committer.commit_to(table, soon(), &mut second));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.attempts, b.attempts), (1, 1), "no race lost");
    let loaded = f.load().await;
    assert_eq!(loaded.metadata().snapshots().count(), 2);
    let marks = Watermarks::from_properties(loaded.metadata().properties());
    assert!(marks.covers(&planner_on(0, 5).tp, 5) && marks.covers(&planner_on(1, 7).tp, 7), "{marks:?}");
    assert_readable(&loaded).await;
}

#[tokio::test]
async fn a_commit_by_another_process_still_conflicts_and_a_fresher_table_is_used_as_given() {
    let f = fixture().await;
    let committer = &f.catalogs.committer;
    let ours = committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap().table;
    other_process(&f).commit(&f.ident, soon(), &mut planner(6)).await.unwrap();
    // Our last commit is no longer the table's tip: the swap conflicts, the retry reloads.
    let mut p = planner(7);
    let out = committer.commit_to(ours, soon(), &mut p).await.unwrap();
    assert_eq!((out.attempts, p.plans), (2, 2));
    // A table loaded after another process's commit is newer than our last: used as given.
    other_process(&f).commit(&f.ident, soon(), &mut planner(8)).await.unwrap();
    let out = committer.commit_to(f.load().await, soon(), &mut planner(9)).await.unwrap();
    assert_eq!(out.attempts, 1);
    let loaded = f.load().await;
    assert_eq!(loaded.metadata().snapshots().count(), 5, "every commit landed once");
    assert!(Watermarks::from_properties(loaded.metadata().properties()).covers(&tp(), 9));
}

/// Sets one table property, nothing else.
struct SetProperty(&'static str, &'static str);

impl Planner for SetProperty {
    async fn plan(&mut self, _table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let mut change = ChangeSet::new(iceberg::spec::Operation::Append);
        change.properties.insert(self.0.to_string(), self.1.to_string());
        Ok(Some(change))
    }
}

#[tokio::test]
async fn a_conflict_forgets_this_processs_last_commit_even_when_the_log_no_longer_names_it() {
    let f = fixture().await;
    let committer = &f.catalogs.committer;
    // A metadata log of one entry: the table's log soon stops naming our last commit.
    committer.commit(&f.ident, soon(), &mut SetProperty("write.metadata.previous-versions-max", "1")).await.unwrap();
    committer.commit(&f.ident, soon(), &mut planner(5)).await.unwrap();
    other_process(&f).commit(&f.ident, soon(), &mut planner(6)).await.unwrap();
    other_process(&f).commit(&f.ident, soon(), &mut planner(7)).await.unwrap();
    // Our last commit looks newer than the table given: tried, conflicts, then forgotten.
    let out = committer.commit_to(f.load().await, soon(), &mut planner(8)).await.unwrap();
    assert_eq!(out.attempts, 2);
    assert!(Watermarks::from_properties(f.load().await.metadata().properties()).covers(&tp(), 8));
}

/// Adds one data file and one position-delete file (a row delta's shape).
struct DataAndDeletes;

impl Planner for DataAndDeletes {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let deletes = iceberg::spec::DataFileBuilder::default()
            .content(iceberg::spec::DataContentType::PositionDeletes)
            .file_path(format!("{}/data/deletes.parquet", table.metadata().location()))
            .file_format(iceberg::spec::DataFileFormat::Parquet)
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .record_count(1)
            .file_size_in_bytes(10)
            .build()
            .map_err(|e| Error::Invariant(e.to_string()))?;
        let mut change = ChangeSet::new(Operation::Overwrite);
        change.added_data_files = vec![data_file(table, "rows")];
        change.added_delete_files = vec![deletes];
        Ok(Some(change))
    }
}

/// A change's data and delete manifests go up side by side. With every call 20 ms, as over a
/// network: the load (lookup, then its metadata file), both manifests at once, the manifest list
/// with the metadata file, the swap: 5 (6 when the manifests went one after the other).
#[tokio::test]
async fn data_and_delete_manifests_are_one_round_trip() -> Result<()> {
    let f = fixture().await;
    f.catalogs.call_counter().simulate_latency(Duration::from_millis(20));
    let before = f.catalogs.calls();
    let out = f.catalogs.committer.commit(&f.ident, soon(), &mut DataAndDeletes).await?;
    let used = f.catalogs.calls() - before;
    assert!(out.committed);
    assert_eq!(used.sequential, 5, "{used:?}");
    let table = f.load().await;
    let current = table.metadata().current_snapshot().ok_or_else(|| Error::Invariant("no snapshot".into()))?;
    let listed = table.manifest_list_reader(current).load().await?;
    let contents: Vec<_> = listed.entries().iter().map(|m| m.content).collect();
    assert_eq!(contents, [iceberg::spec::ManifestContentType::Data, iceberg::spec::ManifestContentType::Deletes]);
    Ok(())
}

/// After a lost race a writer waits a random share of a span that starts at the lost attempt's
/// length and doubles with each loss, capped: writers that lost together come back spread over
/// about one winner's attempt. (The wait was 10–30 ms after the first loss, whatever the
/// attempt's length: with 200 ms attempts every loser came back inside the same 20 ms.)
#[test]
fn the_wait_after_a_lost_race_follows_the_attempts_length_with_full_jitter() {
    let attempt = Duration::from_millis(200);
    assert_eq!(backoff(attempt, 1, 0.0), Duration::ZERO, "full jitter reaches zero");
    assert_eq!(backoff(attempt, 1, 0.5), Duration::from_millis(100));
    assert_eq!(backoff(attempt, 2, 0.5), Duration::from_millis(200), "doubles with each loss");
    assert_eq!(backoff(attempt, 3, 1.0), Duration::from_millis(800));
    assert_eq!(backoff(attempt, 30, 1.0), MAX_BACKOFF, "capped");
    assert_eq!(backoff(Duration::from_millis(1), 1, 1.0), FIRST_BACKOFF, "never shorter a span than the first backoff");
    assert_eq!(backoff(attempt, 1, 7.0), attempt, "a share is at most the whole span");
}

/// Eight processes commit to one table at once, every call 20 ms: each commit lands once (its
/// snapshot, its watermark), and together they make fewer attempts than racers coming back in
/// lockstep (8 + 7 + ... + 1 = 36: one winner a round).
#[tokio::test]
async fn racing_processes_each_land_once_in_fewer_attempts_than_lockstep() {
    let f = fixture().await;
    f.catalogs.call_counter().simulate_latency(Duration::from_millis(20));
    let writers: Vec<Committer> = (0..8).map(|_| other_process(&f)).collect();
    let ident = &f.ident;
    let outcomes = futures::future::join_all(
        writers
            .iter()
            .enumerate()
            .map(|(p, committer)| async move { committer.commit(ident, soon(), &mut planner_on(p as i32, 10)).await }),
    )
    .await;
    let attempts: u32 = outcomes.iter().map(|o| o.as_ref().map_or(0, |o| o.attempts)).sum();
    assert!(outcomes.iter().all(|o| o.as_ref().is_ok_and(|o| o.committed)), "{outcomes:?}");
    let table = f.load().await;
    assert_eq!(table.metadata().snapshots().count(), 8, "one snapshot per commit");
    let marks = Watermarks::from_properties(table.metadata().properties());
    assert!((0..8).all(|p| marks.covers(&planner_on(p, 10).tp, 10)), "{marks:?}");
    assert!(attempts < 36, "{attempts} attempts for 8 commits");
    assert_readable(&table).await;
}
