//! Counts of catalog calls (table loads, pointer swaps, the rest) and of storage calls
//! (`crate::engine::storage_calls`), kept for the life of a [`crate::engine::catalog::Catalogs`]: a caller
//! reads them before and after an invocation to see what it cost. `sequential` counts the
//! round trips on the critical path: a call that starts while no other is in flight waits on
//! its own, calls that overlap one in flight ride along (written in parallel). A table load is
//! two sequential round trips: the catalog's lookup, then the metadata file it names (read
//! inside the load, so it is not counted again).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};
use serde::Serialize;

use crate::engine::commit::{PointerSwap, SwapError};

/// Calls made so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CatalogCalls {
    pub loads: u64,
    pub swaps: u64,
    pub other: u64,
    /// Storage reads (whole files, ranges, metadata of a file).
    pub storage_reads: u64,
    /// Bytes those reads returned.
    pub storage_bytes_read: u64,
    /// Storage writes (a file written whole or through a writer; deletes).
    pub storage_writes: u64,
    /// Commit requests sent to the commit queue (`commit_mode=queued`).
    pub queue_sends: u64,
    /// Round trips on the critical path: catalog, storage and queue together (see the module doc).
    pub sequential: u64,
}

impl CatalogCalls {
    /// Catalog calls of every kind.
    pub fn catalog(&self) -> u64 {
        self.loads + self.swaps + self.other
    }
}

impl std::ops::Sub for CatalogCalls {
    type Output = CatalogCalls;
    fn sub(self, earlier: Self) -> Self {
        Self {
            loads: self.loads - earlier.loads,
            swaps: self.swaps - earlier.swaps,
            other: self.other - earlier.other,
            storage_reads: self.storage_reads - earlier.storage_reads,
            storage_bytes_read: self.storage_bytes_read - earlier.storage_bytes_read,
            storage_writes: self.storage_writes - earlier.storage_writes,
            queue_sends: self.queue_sends - earlier.queue_sends,
            sequential: self.sequential - earlier.sequential,
        }
    }
}

/// The shared counters.
#[derive(Debug, Default)]
pub struct CallCounter {
    loads: AtomicU64,
    swaps: AtomicU64,
    other: AtomicU64,
    storage_reads: AtomicU64,
    storage_bytes_read: AtomicU64,
    storage_writes: AtomicU64,
    queue_sends: AtomicU64,
    sequential: AtomicU64,
    in_flight: AtomicU64,
    /// Added to every call (tests, benchmarks): local files and SQLite answer in microseconds,
    /// so calls issued together would not overlap as S3 and Glue calls do.
    latency_us: AtomicU64,
}

/// Storage call kinds, for [`CallCounter::storage`].
#[derive(Debug, Clone, Copy)]
pub enum StorageCall {
    Read,
    Write,
}

impl CallCounter {
    pub fn snapshot(&self) -> CatalogCalls {
        CatalogCalls {
            loads: self.loads.load(Ordering::Relaxed),
            swaps: self.swaps.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
            storage_reads: self.storage_reads.load(Ordering::Relaxed),
            storage_bytes_read: self.storage_bytes_read.load(Ordering::Relaxed),
            storage_writes: self.storage_writes.load(Ordering::Relaxed),
            queue_sends: self.queue_sends.load(Ordering::Relaxed),
            sequential: self.sequential.load(Ordering::Relaxed),
        }
    }

    /// Make every call take at least `latency` longer, as a network round trip would.
    pub fn simulate_latency(&self, latency: std::time::Duration) {
        self.latency_us.store(latency.as_micros() as u64, Ordering::Relaxed);
    }

    /// One call in flight until the guard drops; `steps` sequential round trips if it starts
    /// while nothing else is in flight.
    async fn start(&self, steps: u64) -> InFlight<'_> {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            self.sequential.fetch_add(steps, Ordering::Relaxed);
        }
        let guard = InFlight(self);
        let latency_us = self.latency_us.load(Ordering::Relaxed);
        if latency_us > 0 {
            tokio::time::sleep(std::time::Duration::from_micros(latency_us)).await;
        }
        guard
    }

    async fn other(&self) -> InFlight<'_> {
        self.other.fetch_add(1, Ordering::Relaxed);
        self.start(1).await
    }

    /// One storage call: counted, and in flight until the guard drops.
    pub async fn storage(&self, call: StorageCall) -> InFlight<'_> {
        match call {
            StorageCall::Read => &self.storage_reads,
            StorageCall::Write => &self.storage_writes,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.start(1).await
    }

    /// `bytes` returned by a storage read.
    pub fn bytes_read(&self, bytes: &Bytes) {
        self.storage_bytes_read.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
}

impl CallCounter {
    /// One message sent to the commit queue: counted, and in flight until the guard drops.
    pub async fn queue_send(&self) -> InFlight<'_> {
        self.queue_sends.fetch_add(1, Ordering::Relaxed);
        self.start(1).await
    }
}

/// A call in flight (see [`CallCounter::start`]).
pub struct InFlight<'c>(&'c CallCounter);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A catalog that counts the calls it passes on. Tables are loaded by the catalog's pointer
/// where it loads them itself ([`PointerSwap::load`]: Glue and S3 Tables keep the version read).
#[derive(Debug)]
pub struct CountingCatalog {
    pub inner: Arc<dyn Catalog>,
    pub pointer: Arc<dyn PointerSwap>,
    pub counter: Arc<CallCounter>,
}

#[async_trait::async_trait]
impl Catalog for CountingCatalog {
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        let _call = self.counter.other().await;
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> Result<Namespace> {
        let _call = self.counter.other().await;
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let _call = self.counter.other().await;
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let _call = self.counter.other().await;
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> Result<()> {
        let _call = self.counter.other().await;
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let _call = self.counter.other().await;
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let _call = self.counter.other().await;
        self.inner.list_tables(namespace).await
    }
    async fn create_table(&self, namespace: &NamespaceIdent, creation: TableCreation) -> Result<Table> {
        let _call = self.counter.other().await;
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.counter.loads.fetch_add(1, Ordering::Relaxed);
        // The lookup, then the metadata file read inside it.
        let _call = self.counter.start(2).await;
        match self.pointer.load(table).await {
            Some(loaded) => loaded,
            None => self.inner.load_table(table).await,
        }
    }
    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        let _call = self.counter.other().await;
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        let _call = self.counter.other().await;
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        let _call = self.counter.other().await;
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        let _call = self.counter.other().await;
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        let _call = self.counter.other().await;
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let _call = self.counter.other().await;
        self.inner.update_table(commit).await
    }
}

/// A pointer swap that counts its calls.
#[derive(Debug)]
pub struct CountingPointer {
    pub inner: Arc<dyn PointerSwap>,
    pub counter: Arc<CallCounter>,
}

#[async_trait::async_trait]
impl PointerSwap for CountingPointer {
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> std::result::Result<(), SwapError> {
        self.counter.swaps.fetch_add(1, Ordering::Relaxed);
        let _call = self.counter.start(self.inner.round_trips(ident, expected)).await;
        self.inner.swap(ident, expected, new_location).await
    }

    fn round_trips(&self, ident: &TableIdent, expected: &str) -> u64 {
        self.inner.round_trips(ident, expected)
    }

    async fn load(&self, ident: &TableIdent) -> Option<Result<Table>> {
        self.inner.load(ident).await
    }
}
