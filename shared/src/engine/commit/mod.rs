//! The commit module: every change icestream makes to a table goes through [`Committer::commit`].
//!
//! One attempt = load the table, ask the [`Planner`] what to change *given what the table holds
//! now* (so watermarks, live files and keys are re-checked on every attempt, never blindly
//! rebased), stage manifests + metadata, and swap the catalog's metadata pointer with a
//! compare-and-set. A lost race reloads and plans again, with jittered exponential backoff
//! bounded by the deadline; an ambiguous swap is settled by reloading and looking for our
//! snapshot, never by committing twice. Ingest, CDC, maintenance and the queued committer all
//! use this one loop.

pub mod append;
pub mod deduped;
pub mod deletes;
pub mod dv;
pub mod gaps;
pub mod live_rows;
pub mod manifest;
pub mod manifest_cache;
pub mod pointer;
pub mod replace_column;
pub mod replayed;
pub mod row_delta;
pub mod row_lineage;
pub mod snapshot;
pub mod staged;
pub mod watermark;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceberg::spec::{DataFile, Operation};
use iceberg::table::Table;
use iceberg::{Catalog, MetadataLocation, TableIdent};
use rand::Rng;

#[cfg(feature = "aws")]
pub use pointer::{GluePointer, S3TablesPointer};
pub use pointer::{PointerSwap, SqlPointer, SwapError};
pub use watermark::Watermarks;

use crate::base::error::{Error, Result};

/// Table property that makes the committer delete metadata files that fall off the log.
pub const DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";

/// What one commit changes. Built by a [`Planner`] against the freshly loaded table.
#[derive(Debug, Clone)]
pub struct ChangeSet {
    pub operation: Operation,
    pub added_data_files: Vec<DataFile>,
    pub added_delete_files: Vec<DataFile>,
    /// Paths of live data or delete files this change removes (replace, overwrite).
    pub removed_files: HashSet<String>,
    /// Offsets this change covers; merged into the table's watermarks (they only go up).
    pub watermarks: Watermarks,
    /// Other table-property updates made in the same swap.
    pub properties: HashMap<String, String>,
    /// Extra snapshot-summary entries.
    pub summary: HashMap<String, String>,
    /// Snapshots to drop from the metadata (expiry). Files are not deleted here: the caller
    /// deletes what became unreachable once the swap succeeded.
    pub removed_snapshot_ids: Vec<i64>,
    /// Rewrite every live data-manifest entry into few new manifests (no data change).
    pub rewrite_manifests: bool,
    /// The table's next schema (evolution), made current in the same swap as the files that
    /// were written with it.
    pub schema: Option<iceberg::spec::Schema>,
    /// A new default sort order (of the current schema's columns).
    pub sort_order: Option<iceberg::spec::SortOrder>,
    /// The table's new format version (an upgrade: metadata only, as the spec allows).
    pub format_version: Option<iceberg::spec::FormatVersion>,
}

impl ChangeSet {
    pub fn new(operation: Operation) -> Self {
        Self {
            operation,
            added_data_files: vec![],
            added_delete_files: vec![],
            removed_files: HashSet::new(),
            watermarks: Watermarks::default(),
            properties: HashMap::new(),
            summary: HashMap::new(),
            removed_snapshot_ids: vec![],
            rewrite_manifests: false,
            schema: None,
            sort_order: None,
            format_version: None,
        }
    }

    /// An append of data files.
    pub fn append(files: Vec<DataFile>) -> Self {
        Self { added_data_files: files, ..Self::new(Operation::Append) }
    }

    pub fn has_files(&self) -> bool {
        !(self.added_data_files.is_empty() && self.added_delete_files.is_empty() && self.removed_files.is_empty())
    }

    /// Whether the change makes a new snapshot (files change or manifests are rewritten).
    pub fn makes_snapshot(&self) -> bool {
        self.has_files() || self.rewrite_manifests
    }
}

/// Decides, for the table as it is now, what to commit. Called once per attempt.
pub trait Planner {
    /// `Ok(None)`: nothing (left) to commit, e.g. the watermarks show it is already there.
    fn plan(&mut self, table: &Table, attempt: u32) -> impl Future<Output = Result<Option<ChangeSet>>> + Send;
}

/// Result of [`Committer::commit`].
#[derive(Debug, Clone)]
pub struct CommitOutcome {
    /// The new snapshot, if the change made one.
    pub snapshot_id: Option<i64>,
    /// Attempts made (1 = no conflict).
    pub attempts: u32,
    /// Whether anything was committed (false when the planner found nothing to do).
    pub committed: bool,
    /// The table as of the end of the commit.
    pub table: Table,
    /// Some attempt's swap had an unknown outcome that its reload did not show as landed: it may
    /// still land (a delayed request), so files written for it must not be deleted by the caller.
    pub unsettled: bool,
}

/// Commits to tables of one catalog.
#[derive(Clone)]
pub struct Committer {
    catalog: Arc<dyn Catalog>,
    pointer: Arc<dyn PointerSwap>,
    /// Per table, what this process's last commit to it left (see [`Committer::commit_to`]).
    landed: Arc<std::sync::Mutex<HashMap<TableIdent, LandedSlot>>>,
}

/// One table's last commit by this process, behind the lock that orders this process's swaps
/// of that table.
type LandedSlot = Arc<tokio::sync::Mutex<Option<Table>>>;

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer").field("pointer", &self.pointer).finish()
    }
}

const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The wait after the `losses`-th lost race in a row, before reloading: a random share (`unit`
/// in 0..1, "full jitter") of a span that starts at the lost attempt's own length and doubles
/// with each loss, up to [`MAX_BACKOFF`]. An attempt's length is how long the table stays
/// taken by one winner (load, stage, swap: 5 round trips); writers that lost the same race wait
/// random parts of it and come back one after another, where a fixed 20 ms sent them all back
/// together to collide again (`make bench-contention`, docs/scale.md).
fn backoff(attempt: Duration, losses: u32, unit: f64) -> Duration {
    let span = attempt.max(FIRST_BACKOFF).saturating_mul(1 << (losses.saturating_sub(1)).min(16)).min(MAX_BACKOFF);
    span.mul_f64(unit.clamp(0.0, 1.0))
}

/// A swap that landed: the snapshot made, the table as of the swap, metadata files to delete.
struct Landed {
    snapshot_id: Option<i64>,
    table: Table,
    expired: Vec<String>,
}

impl Committer {
    pub fn new(catalog: Arc<dyn Catalog>, pointer: Arc<dyn PointerSwap>) -> Self {
        Self { catalog, pointer, landed: Arc::default() }
    }

    /// The same catalog with another pointer swap (tests wrap the real one to inject faults).
    pub fn with_pointer(&self, pointer: Arc<dyn PointerSwap>) -> Self {
        Self { catalog: self.catalog.clone(), pointer, landed: self.landed.clone() }
    }

    fn landed_slot(&self, ident: &TableIdent) -> LandedSlot {
        self.landed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(ident.clone()).or_default().clone()
    }

    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    pub fn pointer(&self) -> &Arc<dyn PointerSwap> {
        &self.pointer
    }

    /// Commit what `planner` decides, retrying lost races until `deadline`.
    pub async fn commit<P: Planner>(&self, ident: &TableIdent, deadline: Instant, planner: &mut P) -> Result<CommitOutcome> {
        let table = self.catalog.load_table(ident).await?;
        self.commit_to(table, deadline, planner).await
    }

    /// [`Self::commit`] starting from `table` as the caller already loaded it (one catalog
    /// read less); attempts after a lost race reload.
    ///
    /// Concurrent commits of this process to one table (the esm invokes partitions
    /// concurrently) plan side by side, but swap one at a time: a commit that finds this
    /// process's last commit newer than the table it planned on plans again on top of that
    /// (committed state: its watermarks are what the table holds, at least) instead of losing
    /// a race to it. A commit by another process still makes the swap conflict, and the
    /// attempt reloads and retries.
    pub async fn commit_to<P: Planner>(&self, table: Table, deadline: Instant, planner: &mut P) -> Result<CommitOutcome> {
        let ident = table.identifier().clone();
        let slot = self.landed_slot(&ident);
        let mut table = Some(table);
        let mut attempt = 0u32;
        let mut unsettled = false;
        loop {
            attempt += 1;
            let started = Instant::now();
            let mut table = match table.take() {
                Some(table) => table,
                None => self.catalog.load_table(&ident).await?,
            };
            let mut planned = planner.plan(&table, attempt).await?;
            let mut last_landed = slot.lock().await;
            if let Some(newer) = last_landed.as_ref().filter(|landed| !is_at_or_after(&table, landed)) {
                table = newer.clone();
                planned = planner.plan(&table, attempt).await?;
            }
            let Some(change) = planned else {
                return Ok(CommitOutcome { snapshot_id: None, attempts: attempt, committed: false, table, unsettled });
            };
            let error = match self.try_once(&table, &change, &mut unsettled).await {
                Ok(landed) => {
                    *last_landed = Some(landed.table.clone());
                    drop(last_landed);
                    delete_quietly(&landed.table, landed.expired).await;
                    return Ok(CommitOutcome {
                        snapshot_id: landed.snapshot_id,
                        attempts: attempt,
                        committed: true,
                        table: landed.table,
                        unsettled,
                    });
                }
                Err(e) => e,
            };
            // Whatever this process landed last is not the table's tip now (or is in doubt):
            // the retry starts from the catalog's.
            *last_landed = None;
            drop(last_landed);
            if !error.is_retryable() {
                return Err(error);
            }
            let now = Instant::now();
            let wait = backoff(now - started, attempt, rand::rng().random_range(0.0..1.0));
            if now + wait >= deadline {
                return Err(Error::CommitGaveUp { table: ident.to_string(), attempts: attempt, last: error.to_string() });
            }
            tracing::debug!(table = %ident, attempt, %error, "commit lost a race; reloading");
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt: stage, write metadata, swap. A swap that did not answer "done" is settled by
    /// reloading and looking for our snapshot or metadata file (see [`holds_commit`]): an unknown
    /// outcome, and a conflict too, since a conflict may answer a retry of a request that
    /// landed (an SDK retry after a lost response; apache/iceberg#7151). Our files are deleted
    /// only when the reload shows the conflict was real; `unsettled` is set when an outcome
    /// stays unknown.
    async fn try_once(&self, table: &Table, change: &ChangeSet, unsettled: &mut bool) -> Result<Landed> {
        let mut staged = snapshot::stage(table, change).await?;
        let current = table.metadata_location_result()?;
        let next = MetadataLocation::from_str(current)?.with_next_version().with_new_metadata(&staged.build.metadata);
        staged.write(table.file_io(), &next).await?;
        let next = next.to_string();
        let expired: Vec<String> = if snapshot::delete_after_commit(&staged.build.metadata) {
            staged.build.expired_metadata_logs.iter().map(|l| l.metadata_file.clone()).collect()
        } else {
            vec![]
        };
        let ident = table.identifier();
        let swap_error = match self.pointer.swap(ident, current, &next).await {
            Ok(()) => {
                let committed = Table::builder()
                    .metadata(staged.build.metadata)
                    .metadata_location(next)
                    .identifier(ident.clone())
                    .file_io(table.file_io().clone())
                    .runtime(iceberg::Runtime::try_current()?)
                    .build()?;
                return Ok(Landed { snapshot_id: staged.snapshot_id, table: committed, expired });
            }
            Err(e) => e,
        };
        let reloaded = self.catalog.load_table(ident).await;
        if let Ok(now) = &reloaded
            && holds_commit(now, staged.snapshot_id, &next)
        {
            tracing::info!(table = %ident, "a swap answered {swap_error:?} had landed");
            return Ok(Landed { snapshot_id: staged.snapshot_id, table: reloaded?, expired });
        }
        match (swap_error, reloaded) {
            (SwapError::Conflict(reason), Ok(_)) => {
                // Refused, and the table does not hold it: our metadata, manifests and list are
                // unreferenced, so remove them now rather than leaving them to orphan removal.
                delete_quietly(table, std::iter::once(next).chain(staged.written).collect()).await;
                Err(Error::CommitConflict { table: ident.to_string(), reason })
            }
            // Outcome unknown: never delete here. If the swap lands later, a later commit may
            // reference our files; orphan removal (with its age margin) is the only cleanup.
            (SwapError::Conflict(reason), Err(reload_error)) => {
                *unsettled = true;
                tracing::warn!(table = %ident, %reason, %reload_error, "swap refused and the table cannot be reloaded");
                Err(Error::CommitConflict { table: ident.to_string(), reason })
            }
            (SwapError::Ambiguous(swap_error), Ok(_)) => {
                *unsettled = true;
                Err(Error::CommitNotLanded { table: ident.to_string(), source: Box::new(swap_error) })
            }
            (SwapError::Ambiguous(swap_error), Err(reload_error)) => {
                *unsettled = true;
                tracing::warn!(table = %ident, %swap_error, %reload_error, "swap outcome unknown and the table cannot be reloaded");
                Err(swap_error)
            }
        }
    }
}

/// Whether `table` is `landed` or a later version of it (its metadata log names `landed`'s
/// file). A log trimmed past it reads as "not after": the caller then tries `landed`, and the
/// conflict that follows makes the retry forget it.
fn is_at_or_after(table: &Table, landed: &Table) -> bool {
    let Some(landed) = landed.metadata_location() else { return false };
    table.metadata_location() == Some(landed) || table.metadata().metadata_log().iter().any(|l| l.metadata_file == landed)
}

/// Whether `table` holds the commit that wrote metadata file `next` (and snapshot `snapshot_id`):
/// it is current, or it is in the metadata log / snapshot list because another writer
/// committed on top of it.
fn holds_commit(table: &Table, snapshot_id: Option<i64>, next: &str) -> bool {
    let metadata = table.metadata();
    table.metadata_location() == Some(next)
        || snapshot_id.is_some_and(|id| metadata.snapshot_by_id(id).is_some())
        || metadata.metadata_log().iter().any(|l| l.metadata_file == next)
}

async fn delete_quietly(table: &Table, paths: Vec<String>) {
    for path in paths {
        if let Err(e) = table.file_io().delete(&path).await {
            tracing::debug!(%path, error = %e, "could not delete an unreferenced file; orphan cleanup will");
        }
    }
}

#[cfg(test)]
mod evolution_tests;
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault;
#[cfg(test)]
mod tests;
