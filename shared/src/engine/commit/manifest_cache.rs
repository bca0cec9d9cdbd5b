//! Manifests and manifest lists read once per maintenance run. Both are immutable files (their
//! names are unique per write), so a copy read earlier in the run is the file: every action of
//! the run (report, compaction, expiry, orphan removal) reads it from here instead of storage.
//!
//! The cache lives for one [`scope`]; outside one (ingest, CDC) [`manifest`] and
//! [`manifest_list`] read storage as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use iceberg::spec::{Manifest, ManifestFile, SnapshotRef};
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::Result;

/// Storage reads made and saved within a scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ManifestReads {
    pub read: u64,
    pub saved: u64,
}

#[derive(Default)]
struct Cache {
    manifests: Mutex<HashMap<String, Arc<Manifest>>>,
    lists: Mutex<HashMap<String, Arc<Vec<ManifestFile>>>>,
    read: AtomicU64,
    saved: AtomicU64,
}

tokio::task_local! {
    static CACHE: Arc<Cache>;
}

/// Run `work` with one cache for every manifest it reads (on this task); returns what it
/// returns and the reads made and saved.
pub async fn scope<F: Future>(work: F) -> (F::Output, ManifestReads) {
    let cache = Arc::new(Cache::default());
    let out = CACHE.scope(cache.clone(), work).await;
    let reads = ManifestReads { read: cache.read.load(Ordering::Relaxed), saved: cache.saved.load(Ordering::Relaxed) };
    (out, reads)
}

fn current() -> Option<Arc<Cache>> {
    CACHE.try_with(Arc::clone).ok()
}

/// The manifest `file` names, from the scope's cache or storage.
pub async fn manifest(table: &Table, file: &ManifestFile) -> Result<Arc<Manifest>> {
    let Some(cache) = current() else { return Ok(Arc::new(file.load_manifest(table.file_io()).await?)) };
    if let Some(hit) = cache.manifests.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&file.manifest_path).cloned() {
        cache.saved.fetch_add(1, Ordering::Relaxed);
        return Ok(hit);
    }
    let loaded = Arc::new(file.load_manifest(table.file_io()).await?);
    cache.read.fetch_add(1, Ordering::Relaxed);
    cache.manifests.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(file.manifest_path.clone(), loaded.clone());
    Ok(loaded)
}

/// The manifest files of `snapshot`, from the scope's cache or storage.
pub async fn manifest_list(table: &Table, snapshot: &SnapshotRef) -> Result<Arc<Vec<ManifestFile>>> {
    let load = || async {
        Ok::<_, crate::base::error::Error>(
            table.manifest_list_reader(snapshot).load().await?.consume_entries().into_iter().collect::<Vec<_>>(),
        )
    };
    let Some(cache) = current() else { return Ok(Arc::new(load().await?)) };
    let key = snapshot.manifest_list().to_string();
    if let Some(hit) = cache.lists.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&key).cloned() {
        cache.saved.fetch_add(1, Ordering::Relaxed);
        return Ok(hit);
    }
    let loaded = Arc::new(load().await?);
    cache.read.fetch_add(1, Ordering::Relaxed);
    cache.lists.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(key, loaded.clone());
    Ok(loaded)
}
