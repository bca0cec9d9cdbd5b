//! Where an exactly-once append goes (`commit_mode`): [`AppendSink::Direct`] commits it now
//! (the [`OffsetAppend`] planner through the committer); [`AppendSink::Queued`] writes the data
//! files and a staged manifest under the table location and sends a commit request to the
//! commit queue, succeeding once SQS acknowledges it ([`crate::services::queued`]).
//!
//! Anything that appends rows with Kafka lineage (telemetry, dead letters) goes through here;
//! only writes that must read the current state first (an upsert table's changelog and its
//! guarded apply) commit directly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use iceberg::TableIdent;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::Operation;
use iceberg::table::Table;

use crate::base::error::{Error, Result};
use crate::base::freshness::{Freshness, RecordTimes};
use crate::engine::catalog::Catalogs;
use crate::engine::commit::append::{OffsetAppend, rows_not_held, target_schema};
use crate::engine::commit::deduped::DedupedOffsets;
use crate::engine::commit::gaps::TakenGaps;
use crate::engine::commit::staged::write_staged_manifest;
use crate::engine::commit::{ChangeSet, Planner, Watermarks};
use crate::engine::project::project_batch;
use crate::engine::queue::sqs::CommitQueue;
use crate::engine::queue::{CommitRequest, REQUEST_VERSION};
use crate::engine::writer::{EncodedFiles, encode_data_files};
use crate::model::config::{CommitMode, Config, FailPoint};
use crate::model::event::TopicPartition;
use crate::model::schema::SourceSchema;
use crate::model::tables::kafka::KafkaColumns;

/// What one append did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Rows committed (direct) or staged for the committer (queued).
    pub rows: usize,
    pub files: usize,
    pub bytes: u64,
    /// Rows the table already held.
    pub skipped_replay: usize,
    pub commit_attempts: u32,
    pub snapshot_id: Option<i64>,
    /// Commit requests sent (queued).
    pub requests_sent: usize,
    /// Ages of the records when the snapshot was written (direct, with record times).
    pub freshness: Option<Freshness>,
    /// The table's current schema id after the append (it may have evolved).
    pub schema_id: Option<i32>,
}

/// One append: rows (with lineage columns) for a table, covering `ranges` (first and last
/// offset per topic-partition, whether or not a row is left for them) exactly once.
pub struct Append<'a> {
    pub ident: &'a TableIdent,
    /// The table as the caller already loaded it this invocation: the first commit attempt
    /// starts from it (no second catalog read); `None` loads it.
    pub table: Option<Table>,
    pub rows: RecordBatch,
    pub ranges: &'a BTreeMap<TopicPartition, (i64, i64)>,
    /// Kafka timestamp of the oldest record covered, epoch milliseconds.
    pub oldest_record_ms: Option<i64>,
    /// Kafka timestamps of the records covered: a direct commit records their ages
    /// ([`crate::base::freshness`]) in its snapshot summary.
    pub record_times: Option<&'a RecordTimes>,
    /// The writer schemas of the rows (none for dead letters): the table evolves to take them.
    pub writers: Vec<Arc<SourceSchema>>,
    /// Offsets within `ranges` that dedup dropped: recorded with the commit.
    pub deduped: DedupedOffsets,
}

/// The configured way appends reach their table, built once per process.
#[derive(Clone, Debug)]
pub enum AppendSink {
    Direct,
    Queued(CommitQueue),
}

impl AppendSink {
    pub async fn from_config(config: &Config) -> Self {
        match &config.commit_mode {
            CommitMode::Direct => Self::Direct,
            CommitMode::Queued { queue_url } => Self::Queued(CommitQueue::connect(queue_url).await),
        }
    }

    /// Commit `append` now, or stage it and send its commit request.
    pub async fn append(&self, catalogs: &Catalogs, config: &Config, append: Append<'_>, deadline: Instant) -> Result<Appended> {
        Ok(self.append_all(catalogs, config, vec![append], deadline).await?.remove(0).0)
    }

    /// Several appends, each taking effect only after the ones before it (dead letters before
    /// rows), with the tables as the sink left them (queued: for the next invocation to reuse).
    /// Direct commits them in turn; queued stages them side by side (every file and staged
    /// manifest uploaded at once) and sends their requests in order, a request waiting only for
    /// the acknowledgement of an earlier one that carries rows (one with none loses nothing if
    /// it is lost: its offsets are redelivered).
    pub async fn append_all(
        &self,
        catalogs: &Catalogs,
        config: &Config,
        appends: Vec<Append<'_>>,
        deadline: Instant,
    ) -> Result<Vec<(Appended, Option<Table>)>> {
        match self {
            Self::Direct => {
                let mut out = Vec::with_capacity(appends.len());
                for append in appends {
                    out.push((direct(catalogs, config, append, deadline).await?, None));
                }
                Ok(out)
            }
            Self::Queued(queue) => {
                // Encoding is CPU work, one append after the other; then every file and staged
                // manifest of every table goes up side by side (one round trip).
                let mut staged = Vec::with_capacity(appends.len());
                for append in appends {
                    staged.push(stage(catalogs, config, append, deadline).await?);
                }
                futures::future::try_join_all(staged.iter_mut().map(Staged::upload)).await?;
                if config.fail_point == FailPoint::AfterWrite {
                    crate::base::failpoint::abort("after-write");
                }
                let mut wave = Vec::new();
                for (i, s) in staged.iter().enumerate() {
                    if let Some(request) = &s.request {
                        wave.push(request);
                    }
                    let carries_rows = s.request.as_ref().is_some_and(|r| r.records > 0);
                    if carries_rows || i + 1 == staged.len() {
                        send_all(queue, catalogs, std::mem::take(&mut wave)).await?;
                    }
                }
                Ok(staged.into_iter().map(|s| (s.appended, Some(s.table))).collect())
            }
        }
    }
}

/// Requests sent side by side, once SQS has acknowledged them all.
async fn send_all(queue: &CommitQueue, catalogs: &Catalogs, requests: Vec<&CommitRequest>) -> Result<()> {
    if requests.is_empty() {
        return Ok(());
    }
    let ids = futures::future::try_join_all(requests.iter().map(|r| async move {
        let _call = catalogs.call_counter().queue_send().await;
        queue.send(r).await
    }))
    .await?;
    for (request, message_id) in requests.iter().zip(ids) {
        tracing::debug!(table = %request.table, %message_id, rows = request.records, "commit request sent");
    }
    Ok(())
}

/// A commit that only evolves the schema (queued mode), re-planned against each attempt's table.
/// A commit of the schema that takes `writers`' rows, and nothing else.
pub(crate) struct EvolveSchema<'a> {
    pub writers: &'a [Arc<SourceSchema>],
    /// The Kafka metadata columns the table is to have.
    pub kafka: KafkaColumns,
}

impl Planner for EvolveSchema<'_> {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let (_, evolved, replaced) = target_schema(table, self.writers, self.kafka)?;
        refuse_replacing(&replaced, "a queued writer")?;
        Ok(evolved.map(|schema| ChangeSet { schema: Some(schema), ..ChangeSet::new(Operation::Append) }))
    }
}

/// A commit that is not an ingest's direct append never replaces a column: files staged (or
/// decoded) for the column's old id could land after it and read null there.
pub(crate) fn refuse_replacing(replaced: &[String], who: &str) -> Result<()> {
    match replaced {
        [] => Ok(()),
        columns => Err(Error::Invariant(format!("{who} was asked to replace columns {columns:?}: only a direct ingest commit does"))),
    }
}

async fn direct(catalogs: &Catalogs, config: &Config, append: Append<'_>, deadline: Instant) -> Result<Appended> {
    let Append { ident, table, rows, ranges, writers, record_times, deduped, .. } = append;
    if rows.num_rows() == 0 {
        return Ok(Appended::default());
    }
    let mut planner = OffsetAppend::new(rows, ranges.clone(), &config.compression, config.target_file_size_bytes, config.fail_point)
        .with_writers(writers)
        .with_deduped(deduped);
    planner.record_times = record_times.cloned();
    let outcome = match table {
        Some(table) => catalogs.committer.commit_to(table, deadline, &mut planner).await?,
        None => catalogs.committer.commit(ident, deadline, &mut planner).await?,
    };
    // Nothing committed by us: whatever we planned is not ours to report.
    let ours = outcome.committed;
    Ok(Appended {
        rows: if ours { planner.rows_planned } else { 0 },
        files: if ours { planner.files_planned } else { 0 },
        bytes: if ours { planner.bytes_planned } else { 0 },
        skipped_replay: planner.skipped_replay,
        commit_attempts: outcome.attempts,
        snapshot_id: outcome.snapshot_id,
        requests_sent: 0,
        freshness: if ours { planner.freshness } else { None },
        schema_id: Some(outcome.table.metadata().current_schema_id()),
    })
}

/// One queued append, encoded: its files and manifest not uploaded, its request not sent.
struct Staged {
    appended: Appended,
    request: Option<CommitRequest>,
    table: Table,
    encoded: Option<EncodedFiles>,
}

impl Staged {
    /// Upload the files and, side by side, the manifest listing them (none: an empty one), named
    /// for the request ([`CommitRequest::manifest_uuid`]), which names it in turn.
    async fn upload(&mut self) -> Result<()> {
        let Some(request) = self.request.as_mut() else { return Ok(()) };
        let encoded = self.encoded.take();
        let listed = encoded.as_ref().map(|e| e.files.clone()).unwrap_or_default();
        let name = request.manifest_uuid(listed.iter().map(|f| f.file_path()));
        let table = &self.table;
        let files = async {
            match encoded {
                Some(encoded) => encoded.upload(table).await.map(drop),
                None => Ok(()),
            }
        };
        let (_, manifest) = futures::try_join!(files, write_staged_manifest(&self.table, &listed, &name))?;
        request.manifest = Some(manifest);
        Ok(())
    }
}

async fn stage(catalogs: &Catalogs, config: &Config, append: Append<'_>, deadline: Instant) -> Result<Staged> {
    let Append { ident, table, rows, ranges, oldest_record_ms, writers, deduped, .. } = append;
    let mut table = match table {
        Some(table) => table,
        None => catalogs.catalog().load_table(ident).await?,
    };
    // The committer adds files, never schemas: a schema the rows need is committed first, on
    // its own (new optional columns and widenings are invisible until rows use them).
    let kafka = KafkaColumns::of(rows.schema().fields().iter().map(|f| f.name().as_str()));
    if rows.num_rows() > 0 && target_schema(&table, &writers, kafka)?.1.is_some() {
        table = catalogs.committer.commit_to(table, deadline, &mut EvolveSchema { writers: &writers, kafka }).await?.table;
    }
    let layout = Arc::new(schema_to_arrow_schema(table.metadata().current_schema())?);
    let rows = project_batch(&rows, &layout)?;
    // Committed watermarks: what the table holds for sure, but for the committer's open gaps,
    // whose rows this request must bring (it claims its whole range). The committer checks again.
    let marks = Watermarks::from_properties(table.metadata().properties());
    let gaps = TakenGaps::from_properties(table.metadata().properties());
    if ranges.iter().all(|(tp, (first, last))| marks.covers(tp, *last) && !gaps.overlaps(tp, *first, *last)) {
        let appended = Appended { skipped_replay: rows.num_rows(), ..Default::default() };
        return Ok(Staged { appended, request: None, table, encoded: None });
    }
    let unseen = rows_not_held(&rows, ranges, &marks, &gaps)?;
    let skipped_replay = rows.num_rows() - unseen.num_rows();
    drop(rows);
    let encoded = if unseen.num_rows() == 0 {
        None
    } else {
        let schema = table.metadata().current_schema().clone();
        Some(encode_data_files(&table, schema, std::slice::from_ref(&unseen), &config.compression, config.target_file_size_bytes).await?)
    };
    let files = encoded.as_ref().map_or(&[][..], |e| &e.files[..]);
    let appended = Appended {
        rows: unseen.num_rows(),
        files: files.len(),
        bytes: files.iter().map(|f| f.file_size_in_bytes()).sum(),
        skipped_replay,
        requests_sent: 1,
        schema_id: Some(table.metadata().current_schema_id()),
        ..Default::default()
    };
    let request = CommitRequest {
        version: REQUEST_VERSION,
        namespace: ident.namespace().join("."),
        table: ident.name().to_string(),
        manifest: None,
        ranges: CommitRequest::ranges_from(ranges),
        records: appended.rows as u64,
        files: appended.files as u64,
        bytes: appended.bytes,
        oldest_record_ms,
        deduped: CommitRequest::deduped_from(&deduped),
    };
    Ok(Staged { appended, request: Some(request), table, encoded })
}
