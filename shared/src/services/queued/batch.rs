//! The committer: one batch of commit requests in, one snapshot per table out.
//!
//! Per table, on every commit attempt (against the table as it is now, so a conflict with
//! maintenance replans), the requests are taken in offset order against running watermarks
//! (the table's, raised by each request taken):
//! * a request whose ranges are all at or below them, and outside the table's open gaps, is
//!   **dropped** (a replay, or a redelivery after a committer crash between commit and
//!   acknowledgement);
//! * one that overlaps them is **trimmed**: its files are rewritten without the rows at or
//!   below the watermark, except those in an open gap (the lineage columns make this exact;
//!   files untouched by the overlap are reused);
//! * one that starts past watermark+1 of a partition waits (**deferred**: reported as a batch
//!   item failure, so SQS delivers it again) for the earlier request SQS may deliver out of
//!   order, until its `commit_gap_patience`-th delivery, when it moves past the gap, unless a
//!   request of the batch starts below it there. A partition with no watermark yet counts as
//!   at -1: its first request must start at offset 0 or wait like any other gap. A gap moved
//!   past is recorded as open ([`crate::engine::commit::gaps`]): a request that comes later with its
//!   offsets is committed, never dropped as a replay;
//! * everything else is **committed**: all files in one new manifest of one snapshot, with all
//!   watermarks, through [`crate::engine::commit::Committer`].
//!
//! Consumed staged manifests (committed and dropped requests) are removed after the commit;
//! their data files never are (they are committed, or unreferenced for orphan removal).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use futures::StreamExt;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use tracing::Instrument;

use super::report::{BatchReport, TableCommitReport};
use super::validate::Admission;
use crate::base::error::Result;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::append::rows_not_held;
use crate::engine::commit::deduped::DedupedOffsets;
use crate::engine::commit::gaps::{GapReason, TakenGaps};
use crate::engine::commit::live_rows::read_data_file;
use crate::engine::commit::staged::remove_staged_manifests;
use crate::engine::commit::{ChangeSet, Planner, Watermarks};
use crate::engine::queue::{CommitRequest, Message};
use crate::engine::writer::write_data_files;
use crate::model::config::{Config, FailPoint};
use crate::model::event::TopicPartition;

/// Snapshot-summary entry: how many commit requests the snapshot holds.
pub const SUMMARY_REQUESTS: &str = "icestream.commit-requests";

/// Commit a batch of messages. Never fails as a whole: what could not be done is reported in
/// `batch_item_failures` (and logged with the reason).
pub async fn commit_batch(catalogs: &Catalogs, config: &Config, messages: &[Message], deadline: Instant) -> BatchReport {
    let started = Instant::now();
    let mut report = BatchReport { messages: messages.len(), ..Default::default() };
    let mut by_table: BTreeMap<(String, String), Vec<Pending>> = BTreeMap::new();
    for message in messages {
        match CommitRequest::parse(&message.body) {
            Ok(request) => by_table.entry((request.namespace.clone(), request.table.clone())).or_default().push(Pending {
                id: message.id.clone(),
                receive_count: message.receive_count,
                request,
            }),
            Err(e) => {
                tracing::error!(message_id = %message.id, error = %e, "unusable commit request");
                report.batch_item_failures.push(message.id.clone());
            }
        }
    }
    for ((namespace, table), pending) in by_table {
        let ident = TableIdent::new(NamespaceIdent::new(namespace), table);
        // Every log line about this table's requests names the table and the offsets (as ingest's).
        let offsets: Vec<String> =
            pending.iter().flat_map(|p| &p.request.ranges).map(|r| format!("{}-{}:{}-{}", r.topic, r.partition, r.first, r.last)).collect();
        let span = tracing::info_span!("batch", table = %ident, offsets = %offsets.join(","));
        let (table_report, failures, deferred, age) = commit_table(catalogs, config, &ident, pending, deadline).instrument(span).await;
        report.batch_item_failures.extend(failures);
        report.batch_item_failures.extend(deferred.iter().cloned());
        report.deferred.extend(deferred);
        report.max_record_age_ms = report.max_record_age_ms.max(age);
        report.tables.push(table_report);
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    report
}

/// Commit one table's requests; returns its report, the message ids that failed and those
/// deferred, and the oldest committed record's age.
async fn commit_table(
    catalogs: &Catalogs,
    config: &Config,
    ident: &TableIdent,
    pending: Vec<Pending>,
    deadline: Instant,
) -> (TableCommitReport, Vec<String>, Vec<String>, i64) {
    let mut report = TableCommitReport { table: ident.to_string(), requests: pending.len(), ..Default::default() };
    let ids: Vec<String> = pending.iter().map(|p| p.id.clone()).collect();
    let mut planner = QueuedAppend::new(pending, config);
    let started = Instant::now();
    let outcome = catalogs.committer.commit(ident, deadline, &mut planner).await;
    report.commit_ms = started.elapsed().as_millis() as u64;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            tracing::error!(table = %ident, error = %e, "commit failed; every request of the table is delivered again");
            report.error = Some(e.to_string());
            return (report, ids, vec![], 0);
        }
    };
    if config.fail_point == FailPoint::AfterCommit {
        crate::base::failpoint::abort("after-commit");
    }
    report.attempts = outcome.attempts;
    report.snapshot_id = outcome.snapshot_id;
    let (mut failures, mut deferred) = (Vec::new(), Vec::new());
    let mut consumed = Vec::new();
    let mut oldest: Option<i64> = None;
    for (p, fate) in planner.pending.iter().zip(&planner.fates) {
        match fate {
            Fate::Commit { trimmed } => {
                report.committed += 1;
                report.trimmed += usize::from(*trimmed);
                consumed.extend(p.request.manifest.as_deref());
                oldest = match (oldest, p.request.oldest_record_ms) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            Fate::Drop => {
                report.dropped += 1;
                consumed.extend(planner.admission.consumed_manifest(&outcome.table, &p.request).await);
            }
            Fate::Defer => {
                report.deferred += 1;
                deferred.push(p.id.clone());
            }
            Fate::Fail => {
                report.failed += 1;
                failures.push(p.id.clone());
            }
        }
    }
    (report.rows, report.files, report.bytes) = (planner.rows, planner.files, planner.bytes);
    (report.gap_offsets_taken, report.gap_offsets_filled) = (planner.gap_offsets_taken, planner.gap_offsets_filled);
    remove_staged_manifests(&outcome.table, consumed).await;
    let now_ms = chrono::Utc::now().timestamp_millis();
    (report, failures, deferred, oldest.map(|t| (now_ms - t).max(0)).unwrap_or(0))
}

struct Pending {
    id: String,
    receive_count: u32,
    request: CommitRequest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Commit { trimmed: bool },
    Drop,
    Defer,
    Fail,
}

/// The [`Planner`] of one table's requests.
struct QueuedAppend {
    pending: Vec<Pending>,
    patience: u32,
    compression: String,
    target_file_size: usize,
    /// Requests whose staged manifest cannot be read: left out of every plan.
    unreadable: HashSet<usize>,
    /// Files per request and per trim (the watermarks it was trimmed at), kept across attempts.
    cache: HashMap<(usize, String), Vec<DataFile>>,
    fates: Vec<Fate>,
    rows: u64,
    files: usize,
    bytes: u64,
    gap_offsets_taken: u64,
    gap_offsets_filled: u64,
    /// What a request must be to be committed ([`super::validate`]).
    admission: Admission,
}

impl QueuedAppend {
    fn new(mut pending: Vec<Pending>, config: &Config) -> Self {
        // Offset order: an earlier range of a partition is taken before a later one.
        pending.sort_by_key(|p| (p.request.ranges.iter().map(|r| r.first).min(), p.id.clone()));
        let n = pending.len();
        Self {
            pending,
            patience: config.commit_gap_patience,
            compression: config.compression.clone(),
            target_file_size: config.target_file_size_bytes,
            unreadable: HashSet::new(),
            cache: HashMap::new(),
            fates: vec![Fate::Defer; n],
            rows: 0,
            files: 0,
            bytes: 0,
            gap_offsets_taken: 0,
            gap_offsets_filled: 0,
            admission: Admission::new(config),
        }
    }

    /// The files request `i` adds when trimmed at `trim` (empty: not trimmed).
    async fn files_of(&mut self, table: &Table, i: usize, trim: &Trim) -> Result<Vec<DataFile>> {
        let key = (i, trim.key());
        if let Some(files) = self.cache.get(&key) {
            return Ok(files.clone());
        }
        let files = self.read_files(table, i, trim).await?;
        self.cache.insert(key, files.clone());
        Ok(files)
    }

    async fn read_files(&self, table: &Table, i: usize, trim: &Trim) -> Result<Vec<DataFile>> {
        let request = &self.pending[i].request;
        let staged = self.admission.staged_files(table, request).await?;
        if trim.is_empty() {
            return Ok(staged);
        }
        trim_files(table, staged, &request.ranges_by_partition(), trim, &self.compression, self.target_file_size).await
    }

    /// The files of every request `decision` commits, read side by side into the cache (each a
    /// staged manifest and its files' checks, a few round trips): read one request after
    /// another, a commit took ~0.4 s longer for each request it folded in at 40 ms a call
    /// (docs/scale.md). What cannot be read is left out of the cache: [`Self::files_of`] reads
    /// it again in order and says why.
    async fn prefetch(&mut self, table: &Table, decision: &Decision) {
        let wanted: Vec<usize> = (0..self.pending.len())
            .filter(|&i| matches!(decision.fates[i], Fate::Commit { .. }) && !self.cache.contains_key(&(i, decision.trims[i].key())))
            .collect();
        let this = &*self;
        // The futures made first: a lazily mapped stream would not be `Send` for every lifetime.
        let reads: Vec<_> = wanted.iter().map(|&i| async move { (i, this.read_files(table, i, &decision.trims[i]).await) }).collect();
        let read: Vec<_> = futures::stream::iter(reads).buffer_unordered(PREFETCH_READS).collect().await;
        for (i, files) in read {
            if let Ok(files) = files {
                self.cache.insert((i, decision.trims[i].key()), files);
            }
        }
    }
}

/// Requests whose staged files the committer reads at once.
const PREFETCH_READS: usize = 16;

/// `staged` without the rows `trim` leaves out: files with no such row are kept as they are,
/// the rows left of the others are written again.
async fn trim_files(
    table: &Table,
    staged: Vec<DataFile>,
    ranges: &BTreeMap<TopicPartition, (i64, i64)>,
    trim: &Trim,
    compression: &str,
    target_file_size: usize,
) -> Result<Vec<DataFile>> {
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let mut files = Vec::new();
    let mut rewrite: Vec<RecordBatch> = Vec::new();
    for file in staged {
        let batches = read_data_file(table, file.file_path(), &[], &schema).await?;
        let kept = batches.iter().map(|b| rows_not_held(b, ranges, &trim.marks, &trim.gaps)).collect::<Result<Vec<_>>>()?;
        if kept.iter().map(RecordBatch::num_rows).sum::<usize>() == batches.iter().map(RecordBatch::num_rows).sum::<usize>() {
            files.push(file);
        } else {
            rewrite.extend(kept.into_iter().filter(|b| b.num_rows() > 0));
        }
    }
    if !rewrite.is_empty() {
        files.extend(write_data_files(table, &rewrite, compression, target_file_size).await?);
    }
    Ok(files)
}

/// What a taken request keeps of its rows: those above `marks` (per partition whose watermark
/// reaches into its range; empty: all rows) and those in `gaps`, offsets the committer moved
/// past before this request came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Trim {
    marks: Watermarks,
    gaps: TakenGaps,
}

impl Trim {
    fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// One key per distinct trim, for the files cache.
    fn key(&self) -> String {
        format!("{:?}/{:?}", self.marks.0, self.gaps.0)
    }
}

/// Each request's fate against the table, what a taken one keeps, and what the commit writes.
#[derive(Debug)]
struct Decision {
    fates: Vec<Fate>,
    trims: Vec<Trim>,
    /// The watermarks of everything taken.
    covers: Watermarks,
    /// The table's open gaps after this commit: taken ones added, filled ones removed.
    gaps: TakenGaps,
    gap_offsets_taken: u64,
    gap_offsets_filled: u64,
}

/// Each request's fate against the table's watermarks and open gaps.
///
/// A request is taken when each of its partitions starts at most one past the running
/// watermark, or when its offsets fall in an open gap (a late request: only those offsets are
/// kept, and the gap shrinks). When nothing moves, a request that has waited `patience`
/// deliveries takes its gaps, recorded as open, unless another request of the batch (waiting,
/// or failing: its offsets are not known to be absent) starts lower on a partition it would
/// skip: that one goes first, or nothing does.
fn decide(
    pending: &[Pending],
    unreadable: &HashSet<usize>,
    table_marks: &Watermarks,
    table_gaps: &TakenGaps,
    patience: u32,
    now_ms: i64,
) -> Decision {
    let mut marks = table_marks.clone();
    let mut gaps = table_gaps.clone();
    let mut fates: Vec<Option<Fate>> = (0..pending.len()).map(|i| unreadable.contains(&i).then_some(Fate::Fail)).collect();
    let mut trims = vec![Trim::default(); pending.len()];
    let mut covers = Watermarks::default();
    let (mut taken_offsets, mut filled_offsets) = (0u64, 0u64);
    let next = |marks: &Watermarks, tp: &TopicPartition| marks.get(tp).map_or(0, |w| w + 1);
    let mut take = |i: usize, marks: &mut Watermarks, gaps: &mut TakenGaps, fates: &mut Vec<Option<Fate>>| {
        let mut trim = Trim::default();
        for (tp, (first, last)) in pending[i].request.ranges_by_partition() {
            if let Some(w) = marks.get(&tp).filter(|w| *w >= first) {
                trim.marks.advance(&tp, w);
                if let Some(open) = gaps.0.get(&tp).filter(|_| gaps.overlaps(&tp, first, last.min(w))) {
                    trim.gaps.0.insert(tp.clone(), open.clone());
                    filled_offsets += open.iter().map(|g| (g.last.min(last).min(w) - g.first.max(first) + 1).max(0) as u64).sum::<u64>();
                }
                gaps.fill(&tp, first, last.min(w));
            }
            let from = next(marks, &tp);
            if first > from {
                tracing::warn!(message_id = %pending[i].id, receives = pending[i].receive_count, topic_partition = %tp, from, to = first - 1,
                    "no request brought these offsets; moving past them, recorded as an open gap a late request still fills");
                gaps.take(&tp, from, first - 1, GapReason::Patience, now_ms);
                taken_offsets += (first - from) as u64;
            }
            marks.advance(&tp, last);
            covers.advance(&tp, last);
        }
        fates[i] = Some(Fate::Commit { trimmed: !trim.is_empty() });
        trims[i] = trim;
    };
    loop {
        let mut progressed = false;
        for i in 0..pending.len() {
            if fates[i].is_some() {
                continue;
            }
            let ranges = pending[i].request.ranges_by_partition();
            let fills = ranges.iter().any(|(tp, (first, last))| gaps.overlaps(tp, *first, *last));
            if !fills && ranges.iter().all(|(tp, (_, last))| marks.covers(tp, *last)) {
                fates[i] = Some(Fate::Drop);
            } else if ranges.iter().any(|(tp, (first, _))| *first > next(&marks, tp)) {
                continue; // an earlier request may still come
            } else {
                take(i, &mut marks, &mut gaps, &mut fates);
            }
            progressed = true;
        }
        if progressed {
            continue;
        }
        // Stuck on gaps: a request that has waited long enough takes its gaps, unless another
        // request not taken starts below it on a partition it would skip.
        let skipped = |i: usize| -> Vec<(TopicPartition, i64)> {
            pending[i]
                .request
                .ranges_by_partition()
                .into_iter()
                .filter(|(tp, (first, _))| *first > next(&marks, tp))
                .map(|(tp, (first, _))| (tp, first))
                .collect()
        };
        let blocked = |i: usize| {
            skipped(i).iter().any(|(tp, first)| {
                (0..pending.len()).any(|j| {
                    j != i
                        && matches!(fates[j], None | Some(Fate::Fail))
                        && pending[j].request.ranges_by_partition().get(tp).is_some_and(|(other, _)| other < first)
                })
            })
        };
        let lowest_skipped = |i: &usize| skipped(*i).iter().map(|(_, first)| *first).min();
        let Some(i) = (0..pending.len())
            .filter(|i| fates[*i].is_none() && pending[*i].receive_count >= patience && !blocked(*i))
            .min_by_key(lowest_skipped)
        else {
            break;
        };
        take(i, &mut marks, &mut gaps, &mut fates);
    }
    let fates = fates.into_iter().map(|f| f.unwrap_or(Fate::Defer)).collect();
    Decision { fates, trims, covers, gaps, gap_offsets_taken: taken_offsets, gap_offsets_filled: filled_offsets }
}

impl Planner for QueuedAppend {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let table_marks = Watermarks::from_properties(table.metadata().properties());
        let table_gaps = TakenGaps::from_properties(table.metadata().properties());
        let now_ms = chrono::Utc::now().timestamp_millis();
        'replan: loop {
            let decision = decide(&self.pending, &self.unreadable, &table_marks, &table_gaps, self.patience, now_ms);
            self.prefetch(table, &decision).await;
            let mut files = Vec::new();
            for i in 0..self.pending.len() {
                if !matches!(decision.fates[i], Fate::Commit { .. }) {
                    continue;
                }
                match self.files_of(table, i, &decision.trims[i]).await {
                    Ok(f) => files.extend(f),
                    Err(e) => {
                        tracing::error!(message_id = %self.pending[i].id, error = %e, "request left out: its files cannot be read");
                        self.unreadable.insert(i);
                        continue 'replan;
                    }
                }
            }
            let taken = decision.fates.iter().filter(|f| matches!(f, Fate::Commit { .. })).count();
            let gap_updates = decision.gaps.property_updates(&table_gaps, now_ms);
            // What dedup dropped from the requests taken, recorded with them.
            let mut deduped = DedupedOffsets::default();
            for (p, _) in self.pending.iter().zip(&decision.fates).filter(|(_, f)| matches!(f, Fate::Commit { .. })) {
                deduped.extend(&p.request.deduped());
            }
            let deduped_updates = DedupedOffsets::from_properties(table.metadata().properties()).property_updates(&deduped);
            self.fates = decision.fates;
            (self.gap_offsets_taken, self.gap_offsets_filled) = (decision.gap_offsets_taken, decision.gap_offsets_filled);
            self.rows = files.iter().map(DataFile::record_count).sum();
            self.files = files.len();
            self.bytes = files.iter().map(DataFile::file_size_in_bytes).sum();
            if taken == 0 || (files.is_empty() && decision.covers.property_updates(&table_marks).is_empty() && gap_updates.is_empty()) {
                return Ok(None);
            }
            let mut change = ChangeSet::append(files);
            change.watermarks = decision.covers;
            change.properties.extend(gap_updates);
            change.properties.extend(deduped_updates);
            change.summary.insert(SUMMARY_REQUESTS.to_string(), taken.to_string());
            return Ok(Some(change));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::queue::{OffsetRange, REQUEST_VERSION};

    fn pending(id: &str, receive_count: u32, ranges: &[(i32, i64, i64)]) -> Pending {
        let ranges =
            ranges.iter().map(|(p, first, last)| OffsetRange { topic: "t".into(), partition: *p, first: *first, last: *last }).collect();
        let request = CommitRequest {
            version: REQUEST_VERSION,
            namespace: "n".into(),
            table: "x".into(),
            manifest: None,
            ranges,
            records: 0,
            files: 0,
            bytes: 0,
            oldest_record_ms: None,
            deduped: Vec::new(),
        };
        Pending { id: id.into(), receive_count, request }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition { topic: "t".into(), partition: p }
    }

    fn marks(list: &[(i32, i64)]) -> Watermarks {
        let mut w = Watermarks::default();
        for (p, o) in list {
            w.advance(&tp(*p), *o);
        }
        w
    }

    #[test]
    fn replays_drop_overlaps_trim_gaps_wait_and_failures_stay_out() {
        let table = marks(&[(0, 99), (1, 49)]);
        let batch = vec![
            pending("replay", 1, &[(0, 0, 99)]),
            pending("overlap", 1, &[(0, 50, 149)]),
            pending("next", 1, &[(0, 150, 199)]),
            pending("inner-replay", 1, &[(0, 120, 140)]),
            pending("gap", 1, &[(1, 60, 80)]),
            pending("new-partition", 1, &[(2, 0, 1100)]),
            pending("unreadable", 1, &[(3, 0, 10)]),
        ];
        let unreadable: HashSet<usize> = [6].into();
        let Decision { fates, trims, covers, .. } = decide(&batch, &unreadable, &table, &TakenGaps::default(), 3, 0);
        let by_id: BTreeMap<&str, Fate> = batch.iter().map(|p| p.id.as_str()).zip(fates.iter().copied()).collect();
        assert_eq!(by_id["replay"], Fate::Drop);
        assert_eq!(by_id["overlap"], Fate::Commit { trimmed: true });
        assert_eq!(trims[1].marks, marks(&[(0, 99)]));
        assert_eq!(by_id["next"], Fate::Commit { trimmed: false });
        assert_eq!(by_id["inner-replay"], Fate::Drop);
        assert_eq!(by_id["gap"], Fate::Defer);
        assert_eq!(by_id["new-partition"], Fate::Commit { trimmed: false });
        assert_eq!(by_id["unreadable"], Fate::Fail);
        assert_eq!(covers, marks(&[(0, 199), (2, 1100)]));
    }

    #[test]
    fn without_a_watermark_requests_delivered_out_of_order_are_a_gap_not_a_replay() {
        let none = Watermarks::default();
        // The later request alone: it waits for the earlier one (which starts at offset 0).
        let Decision { fates, .. } = decide(&[pending("b", 1, &[(0, 100, 199)])], &HashSet::new(), &none, &TakenGaps::default(), 3, 0);
        assert_eq!(fates, [Fate::Defer]);
        // Both in one batch, later first: both committed, nothing dropped.
        let Decision { fates, covers, .. } = decide(
            &[pending("b", 1, &[(0, 100, 199)]), pending("a", 1, &[(0, 0, 99)])],
            &HashSet::new(),
            &none,
            &TakenGaps::default(),
            3,
            0,
        );
        assert_eq!(fates, [Fate::Commit { trimmed: false }; 2]);
        assert_eq!(covers, marks(&[(0, 199)]));
        // A partition whose log starts past 0: taken once patience runs out, lowest first.
        let batch = [pending("d", 3, &[(0, 600, 699)]), pending("c", 3, &[(0, 500, 599)])];
        let Decision { fates, covers, .. } = decide(&batch, &HashSet::new(), &none, &TakenGaps::default(), 3, 0);
        assert_eq!(fates, [Fate::Commit { trimmed: false }; 2]);
        assert_eq!(covers, marks(&[(0, 699)]));
    }

    #[test]
    fn a_gap_is_filled_by_a_later_delivered_request_or_taken_after_patience() {
        let table = marks(&[(0, 99)]);
        // Delivered out of order in one batch: both are taken, in offset order.
        let Decision { fates, covers, .. } = decide(
            &[pending("b", 1, &[(0, 200, 299)]), pending("a", 1, &[(0, 100, 199)])],
            &HashSet::new(),
            &table,
            &TakenGaps::default(),
            3,
            0,
        );
        assert_eq!(fates, [Fate::Commit { trimmed: false }; 2]);
        assert_eq!(covers, marks(&[(0, 299)]));
        // Alone, it waits until its third delivery.
        let Decision { fates, .. } = decide(&[pending("b", 2, &[(0, 200, 299)])], &HashSet::new(), &table, &TakenGaps::default(), 3, 0);
        assert_eq!(fates, [Fate::Defer]);
        let Decision { fates, covers, .. } =
            decide(&[pending("b", 3, &[(0, 200, 299)])], &HashSet::new(), &table, &TakenGaps::default(), 3, 0);
        assert_eq!(fates, [Fate::Commit { trimmed: false }]);
        assert_eq!(covers, marks(&[(0, 299)]));
    }

    fn none() -> (HashSet<usize>, TakenGaps) {
        (HashSet::new(), TakenGaps::default())
    }

    /// Issue 45, defect 3(a): the earlier request is in the batch but cannot be committed (its
    /// files cannot be read now): a later one must not take the gap across it.
    #[test]
    fn a_failing_earlier_request_blocks_the_gap_instead_of_being_skipped() {
        let table = marks(&[(0, 99)]);
        let batch = [pending("a", 5, &[(0, 100, 199)]), pending("b", 5, &[(0, 200, 299)])];
        let unreadable: HashSet<usize> = [0].into();
        let d = decide(&batch, &unreadable, &table, &TakenGaps::default(), 3, 0);
        assert_eq!(d.fates, [Fate::Fail, Fate::Defer]);
        assert_eq!((d.covers, d.gap_offsets_taken), (Watermarks::default(), 0));
    }

    /// Issue 45, defect 3(b): offsets of different partitions are not comparable. x has a real
    /// gap on p1; y needs x first on p0. Only x may take a gap; y then follows in order.
    #[test]
    fn a_gap_is_taken_only_by_a_request_nothing_in_the_batch_precedes() {
        let table = marks(&[(0, 999), (1, 4000)]);
        let batch = [pending("x", 3, &[(0, 1000, 1099), (1, 5000, 5099)]), pending("y", 3, &[(0, 1100, 1199), (3, 0, 10)])];
        let (unreadable, _) = none();
        let d = decide(&batch, &unreadable, &table, &TakenGaps::default(), 3, 7);
        assert_eq!(d.fates, [Fate::Commit { trimmed: false }, Fate::Commit { trimmed: false }]);
        assert_eq!(d.covers, marks(&[(0, 1199), (1, 5099), (3, 10)]));
        // Only p1's gap was taken, and it is recorded.
        assert_eq!(d.gap_offsets_taken, 999);
        assert_eq!(d.gaps.0.keys().cloned().collect::<Vec<_>>(), [tp(1)]);
        assert_eq!((d.gaps.0[&tp(1)][0].first, d.gaps.0[&tp(1)][0].last, d.gaps.0[&tp(1)][0].at_ms), (4001, 4999, 7));
    }

    /// Issue 51: a committer died holding a partition's first request; the next was delivered
    /// three times and took the gap. When the first comes back it fills the gap, once.
    #[test]
    fn a_request_that_comes_after_its_gap_was_taken_is_committed_not_dropped() {
        let (unreadable, no_gaps) = none();
        // The later request alone, patience spent: taken, 0..=330 recorded as an open gap.
        let d = decide(&[pending("b", 3, &[(0, 331, 660)])], &unreadable, &Watermarks::default(), &no_gaps, 3, 0);
        assert_eq!((d.fates[0], d.gap_offsets_taken), (Fate::Commit { trimmed: false }, 331));
        let (table, gaps) = (d.covers, d.gaps);
        // The first request comes back (and a re-cut copy overlapping the taken one): both fill.
        let d = decide(&[pending("a", 2, &[(0, 0, 330)])], &unreadable, &table, &gaps, 3, 0);
        assert_eq!(d.fates, [Fate::Commit { trimmed: true }]);
        assert_eq!(d.trims[0].marks, marks(&[(0, 660)]));
        assert!(d.trims[0].gaps.contains(&tp(0), 0) && d.trims[0].gaps.contains(&tp(0), 330));
        assert_eq!((d.gap_offsets_filled, d.gaps.is_empty() || d.gaps.0[&tp(0)].is_empty()), (331, true));
        // Filled: the same request delivered again is a replay.
        let d = decide(
            &[pending("a", 3, &[(0, 0, 330)])],
            &unreadable,
            &table,
            &TakenGaps::from_properties(&d.gaps.property_updates(&gaps, 0)),
            3,
            0,
        );
        assert_eq!(d.fates, [Fate::Drop]);
        // A re-cut copy reaching into committed offsets keeps only the gap's part.
        let d = decide(&[pending("a2", 1, &[(0, 200, 400)])], &unreadable, &table, &gaps, 3, 0);
        assert_eq!(d.fates, [Fate::Commit { trimmed: true }]);
        assert_eq!((d.gap_offsets_filled, d.gaps.0[&tp(0)][0].last), (131, 199));
    }
}
