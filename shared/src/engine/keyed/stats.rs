//! What a guarded apply did ([`super::apply::KeyedApply`]): reported by ingest, replays and
//! the benchmarks.

use serde::Serialize;

/// What the last plan did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ApplyStats {
    /// Keys whose newest change applied.
    pub applied: usize,
    /// Keys whose newest change was older than the table's state (and was ignored).
    pub stale: usize,
    /// Live rows removed (position deletes written).
    pub rows_deleted: usize,
    pub rows_added: usize,
    pub data_files: usize,
    pub delete_files: usize,
    /// Data files removed whole because none of their rows stayed live.
    pub files_dropped: usize,
    /// Data files read to find the touched keys' rows.
    pub files_read: usize,
    /// Bytes read of those files and of their delete files, and the range requests made.
    pub bytes_read: u64,
    pub read_requests: u64,
    pub tombstones: usize,
    /// Live rows a truncate removed (`allow_truncate`).
    pub rows_truncated: usize,
    /// Changes the table already held (offsets at or below its watermarks).
    pub skipped_replay: usize,
}
