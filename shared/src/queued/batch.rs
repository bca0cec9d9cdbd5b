//! The committer: one batch of commit requests in, one snapshot per table out.
//!
//! Per table, on every commit attempt (against the table as it is now, so a conflict with
//! maintenance replans), the requests are taken in offset order against running watermarks
//! (the table's, raised by each request taken):
//! * a request whose ranges are all at or below them is **dropped** (a replay, or a redelivery
//!   after a committer crash between commit and acknowledgement);
//! * one that overlaps them is **trimmed**: its files are rewritten without the rows at or
//!   below the watermark (the lineage columns make this exact; files untouched by the overlap
//!   are reused);
//! * one that starts past watermark+1 of a partition waits (**deferred**: reported as a batch
//!   item failure, so SQS delivers it again) for the earlier request SQS may deliver out of
//!   order, until its `commit_gap_patience`-th delivery, when the gap is taken as a real Kafka
//!   offset gap (transaction markers, compaction). A partition with no watermark yet counts
//!   as at -1: its first request must start at offset 0 or wait like any other gap (else an
//!   earlier request delivered later would be dropped as a replay);
//! * everything else is **committed**: all files in one new manifest of one snapshot, with all
//!   watermarks, through [`crate::commit::Committer`].
//!
//! Consumed staged manifests (committed and dropped requests) are removed after the commit;
//! their data files never are (they are committed, or unreferenced for orphan removal).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use serde::Serialize;
use tracing::Instrument;

use super::validate::Admission;
use super::{CommitRequest, Message};
use crate::catalog::Catalogs;
use crate::commit::append::unseen_rows;
use crate::commit::staged::remove_staged_manifests;
use crate::commit::{ChangeSet, Planner, Watermarks};
use crate::config::{Config, FailPoint};
use crate::error::Result;
use crate::event::TopicPartition;
use crate::commit::row_delta::read_data_file;
use crate::writer::write_data_files;

/// Snapshot-summary entry: how many commit requests the snapshot holds.
pub const SUMMARY_REQUESTS: &str = "icestream.commit-requests";

/// What the committer did with one batch; `batch_item_failures` go back to SQS.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BatchReport {
    pub messages: usize,
    /// Message ids to deliver again (SQS partial batch response).
    pub batch_item_failures: Vec<String>,
    /// Those of them deferred for an offset gap (to come again soon, see `commit_gap_retry_s`).
    pub deferred: Vec<String>,
    pub tables: Vec<TableCommitReport>,
    /// Age of the oldest record committed (Kafka timestamp to commit), milliseconds.
    pub max_record_age_ms: i64,
    pub duration_ms: u64,
}

/// One table's share of a batch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableCommitReport {
    pub table: String,
    pub requests: usize,
    pub committed: usize,
    pub trimmed: usize,
    pub dropped: usize,
    pub deferred: usize,
    /// Requests that cannot be committed (unreadable message or staged manifest).
    pub failed: usize,
    pub rows: u64,
    pub files: usize,
    pub bytes: u64,
    pub snapshot_id: Option<i64>,
    pub attempts: u32,
    pub commit_ms: u64,
    pub error: Option<String>,
}

/// Commit a batch of messages. Never fails as a whole: what could not be done is reported in
/// `batch_item_failures` (and logged with the reason).
pub async fn commit_batch(catalogs: &Catalogs, config: &Config, messages: &[Message], deadline: Instant) -> BatchReport {
    let started = Instant::now();
    let mut report = BatchReport { messages: messages.len(), ..Default::default() };
    let mut by_table: BTreeMap<(String, String), Vec<Pending>> = BTreeMap::new();
    for message in messages {
        match CommitRequest::parse(&message.body) {
            Ok(request) => by_table
                .entry((request.namespace.clone(), request.table.clone()))
                .or_default()
                .push(Pending { id: message.id.clone(), receive_count: message.receive_count, request }),
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
        crate::failpoint::abort("after-commit");
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
    cache: HashMap<(usize, Vec<(TopicPartition, i64)>), Vec<DataFile>>,
    fates: Vec<Fate>,
    rows: u64,
    files: usize,
    bytes: u64,
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
            admission: Admission::new(config),
        }
    }

    /// The files request `i` adds when trimmed at `trim` (empty: not trimmed).
    async fn files_of(&mut self, table: &Table, i: usize, trim: &Watermarks) -> Result<Vec<DataFile>> {
        let key = (i, trim.0.iter().map(|(tp, w)| (tp.clone(), *w)).collect::<Vec<_>>());
        if let Some(files) = self.cache.get(&key) {
            return Ok(files.clone());
        }
        let request = &self.pending[i].request;
        let staged = self.admission.staged_files(table, request).await?;
        let files = if trim.is_empty() {
            staged
        } else {
            trim_files(table, staged, &request.ranges_by_partition(), trim, &self.compression, self.target_file_size).await?
        };
        self.cache.insert(key, files.clone());
        Ok(files)
    }
}

/// `staged` without the rows at or below `trim`: files with no such row are kept as they are,
/// the rows left of the others are written again.
async fn trim_files(
    table: &Table,
    staged: Vec<DataFile>,
    ranges: &BTreeMap<TopicPartition, (i64, i64)>,
    trim: &Watermarks,
    compression: &str,
    target_file_size: usize,
) -> Result<Vec<DataFile>> {
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let mut files = Vec::new();
    let mut rewrite: Vec<RecordBatch> = Vec::new();
    for file in staged {
        let batches = read_data_file(table, file.file_path(), &[], &schema).await?;
        let kept = batches.iter().map(|b| unseen_rows(b, ranges, trim)).collect::<Result<Vec<_>>>()?;
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

/// Each request's fate against the table's watermarks, the watermarks a taken request is
/// trimmed at (only its partitions whose watermark reaches into its range), and the
/// watermarks of everything taken.
fn decide(pending: &[Pending], unreadable: &HashSet<usize>, table_marks: &Watermarks, patience: u32) -> (Vec<Fate>, Vec<Watermarks>, Watermarks) {
    let mut marks = table_marks.clone();
    let mut fates: Vec<Option<Fate>> = (0..pending.len()).map(|i| unreadable.contains(&i).then_some(Fate::Fail)).collect();
    let mut trims = vec![Watermarks::default(); pending.len()];
    let mut covers = Watermarks::default();
    let mut take = |i: usize, marks: &mut Watermarks, fates: &mut Vec<Option<Fate>>| {
        let mut trim = Watermarks::default();
        for (tp, (first, last)) in pending[i].request.ranges_by_partition() {
            if let Some(w) = marks.get(&tp).filter(|w| *w >= first) {
                trim.advance(&tp, w);
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
            if ranges.iter().all(|(tp, (_, last))| marks.covers(tp, *last)) {
                fates[i] = Some(Fate::Drop);
            } else if ranges.iter().any(|(tp, (first, _))| *first > marks.get(tp).unwrap_or(-1) + 1) {
                continue; // an earlier request may still come
            } else {
                take(i, &mut marks, &mut fates);
            }
            progressed = true;
        }
        if progressed {
            continue;
        }
        // Stuck on gaps: of the requests that have waited long enough, the one starting lowest
        // takes its gap as real (a higher one first would make the lower one look replayed).
        let lowest_first = |i: &usize| pending[*i].request.ranges.iter().map(|r| r.first).min();
        let Some(i) = (0..pending.len()).filter(|i| fates[*i].is_none() && pending[*i].receive_count >= patience).min_by_key(lowest_first)
        else {
            break;
        };
        tracing::warn!(message_id = %pending[i].id, receives = pending[i].receive_count, "no request filled the offset gap; taking it as a real Kafka offset gap");
        take(i, &mut marks, &mut fates);
    }
    let fates = fates.into_iter().map(|f| f.unwrap_or(Fate::Defer)).collect();
    (fates, trims, covers)
}

impl Planner for QueuedAppend {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let table_marks = Watermarks::from_properties(table.metadata().properties());
        'replan: loop {
            let (fates, trims, covers) = decide(&self.pending, &self.unreadable, &table_marks, self.patience);
            let mut files = Vec::new();
            for i in 0..self.pending.len() {
                if !matches!(fates[i], Fate::Commit { .. }) {
                    continue;
                }
                match self.files_of(table, i, &trims[i]).await {
                    Ok(f) => files.extend(f),
                    Err(e) => {
                        tracing::error!(message_id = %self.pending[i].id, error = %e, "request left out: its files cannot be read");
                        self.unreadable.insert(i);
                        continue 'replan;
                    }
                }
            }
            let taken = fates.iter().filter(|f| matches!(f, Fate::Commit { .. })).count();
            self.fates = fates;
            self.rows = files.iter().map(DataFile::record_count).sum();
            self.files = files.len();
            self.bytes = files.iter().map(DataFile::file_size_in_bytes).sum();
            if taken == 0 || (files.is_empty() && covers.property_updates(&table_marks).is_empty()) {
                return Ok(None);
            }
            let mut change = ChangeSet::append(files);
            change.watermarks = covers;
            change.summary.insert(SUMMARY_REQUESTS.to_string(), taken.to_string());
            return Ok(Some(change));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queued::{OffsetRange, REQUEST_VERSION};

    fn pending(id: &str, receive_count: u32, ranges: &[(i32, i64, i64)]) -> Pending {
        let ranges = ranges.iter().map(|(p, first, last)| OffsetRange { topic: "t".into(), partition: *p, first: *first, last: *last }).collect();
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
        let (fates, trims, covers) = decide(&batch, &unreadable, &table, 3);
        let by_id: BTreeMap<&str, Fate> = batch.iter().map(|p| p.id.as_str()).zip(fates.iter().copied()).collect();
        assert_eq!(by_id["replay"], Fate::Drop);
        assert_eq!(by_id["overlap"], Fate::Commit { trimmed: true });
        assert_eq!(trims[1], marks(&[(0, 99)]));
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
        let (fates, _, _) = decide(&[pending("b", 1, &[(0, 100, 199)])], &HashSet::new(), &none, 3);
        assert_eq!(fates, [Fate::Defer]);
        // Both in one batch, later first: both committed, nothing dropped.
        let (fates, _, covers) = decide(&[pending("b", 1, &[(0, 100, 199)]), pending("a", 1, &[(0, 0, 99)])], &HashSet::new(), &none, 3);
        assert_eq!(fates, [Fate::Commit { trimmed: false }; 2]);
        assert_eq!(covers, marks(&[(0, 199)]));
        // A partition whose log starts past 0: taken once patience runs out, lowest first.
        let batch = [pending("d", 3, &[(0, 600, 699)]), pending("c", 3, &[(0, 500, 599)])];
        let (fates, _, covers) = decide(&batch, &HashSet::new(), &none, 3);
        assert_eq!(fates, [Fate::Commit { trimmed: false }; 2]);
        assert_eq!(covers, marks(&[(0, 699)]));
    }

    #[test]
    fn a_gap_is_filled_by_a_later_delivered_request_or_taken_after_patience() {
        let table = marks(&[(0, 99)]);
        // Delivered out of order in one batch: both are taken, in offset order.
        let (fates, _, covers) = decide(&[pending("b", 1, &[(0, 200, 299)]), pending("a", 1, &[(0, 100, 199)])], &HashSet::new(), &table, 3);
        assert_eq!(fates, [Fate::Commit { trimmed: false }; 2]);
        assert_eq!(covers, marks(&[(0, 299)]));
        // Alone, it waits until its third delivery.
        let (fates, _, _) = decide(&[pending("b", 2, &[(0, 200, 299)])], &HashSet::new(), &table, 3);
        assert_eq!(fates, [Fate::Defer]);
        let (fates, _, covers) = decide(&[pending("b", 3, &[(0, 200, 299)])], &HashSet::new(), &table, 3);
        assert_eq!(fates, [Fate::Commit { trimmed: false }]);
        assert_eq!(covers, marks(&[(0, 299)]));
    }
}
