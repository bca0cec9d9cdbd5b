//! The fault layer on the library's own seams: a catalog ([`SimCatalog`]) whose tables read and
//! write through a storage that waits at the scheduler's gate for every call ([`SimStorage`]),
//! and a pointer swap ([`SimPointer`]) with the catalogs' swap faults. Each is a wrapper of the
//! real thing (the embedded SQL catalog, iceberg's file IO), swapped into a process's
//! `Catalogs` as its committer's catalog and pointer.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig, StorageFactory};
use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent};
use icestream::engine::commit::{PointerSwap, SwapError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::sched::{Call, Sched, Verdict};

fn sim_error(what: &str) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, format!("sim: {what}")).with_retryable(true)
}

/// Wait at the gate for `call`, run `op` as the verdict says.
async fn gated<T>(sched: &Sched, call: Call, what: &str, op: impl Future<Output = iceberg::Result<T>>) -> iceberg::Result<T> {
    let (verdict, _guard) = sched.gate(call, what).await;
    match verdict {
        Verdict::Go => op.await,
        Verdict::Fail => Err(sim_error(&format!("{call:?} {what} refused (503 SlowDown)"))),
        Verdict::LostAfter => {
            op.await?;
            Err(sim_error(&format!("{call:?} {what}: response lost")))
        }
        Verdict::CrashAfter => {
            let _ = op.await;
            sched.crash_now().await
        }
        Verdict::Crash => sched.crash_now().await,
    }
}

/// File IO whose every call waits at the gate.
#[derive(Clone)]
pub struct SimStorageFactory {
    pub inner: Arc<dyn StorageFactory>,
    pub sched: Arc<Sched>,
    /// The world's virtual time (seconds since the epoch): what a written file's modification
    /// time says, so file ages (the orphan margin) follow the simulation, not the test's speed.
    pub clock: Arc<AtomicU64>,
}

/// Set a local file's modification time to the virtual clock.
fn stamp(path: &str, clock: &AtomicU64) -> iceberg::Result<()> {
    let Some(local) = path.strip_prefix("file://") else { return Ok(()) };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(clock.load(Ordering::Relaxed));
    std::fs::File::options()
        .write(true)
        .open(local)
        .and_then(|f| f.set_modified(at))
        .map_err(|e| sim_error(&format!("stamping {local}: {e}")))
}

impl std::fmt::Debug for SimStorageFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimStorageFactory")
    }
}

macro_rules! process_local {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("the simulation's storage is process-local"))
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
                Err(serde::de::Error::custom("the simulation's storage is process-local"))
            }
        }
    };
}
process_local!(SimStorageFactory);
process_local!(SimStorage);

#[typetag::serde]
impl StorageFactory for SimStorageFactory {
    fn build(&self, config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(SimStorage { inner: self.inner.build(config)?, sched: self.sched.clone(), clock: self.clock.clone() }))
    }
}

#[derive(Clone)]
pub struct SimStorage {
    inner: Arc<dyn Storage>,
    sched: Arc<Sched>,
    clock: Arc<AtomicU64>,
}

impl std::fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimStorage")
    }
}

/// The last path segment, for the log.
fn short(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[async_trait::async_trait]
#[typetag::serde]
impl Storage for SimStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        gated(&self.sched, Call::Read, short(path), self.inner.exists(path)).await
    }
    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        gated(&self.sched, Call::Read, short(path), self.inner.metadata(path)).await
    }
    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        gated(&self.sched, Call::Read, short(path), self.inner.read(path)).await
    }
    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        let inner = gated(&self.sched, Call::Read, short(path), self.inner.reader(path)).await?;
        Ok(Box::new(SimRead { inner }))
    }
    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        let op = async {
            self.inner.write(path, bs).await?;
            stamp(path, &self.clock)
        };
        gated(&self.sched, Call::Write, short(path), op).await
    }
    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let inner = self.inner.writer(path).await?;
        Ok(Box::new(SimWrite { inner, sched: self.sched.clone(), path: path.to_string(), clock: self.clock.clone() }))
    }
    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        gated(&self.sched, Call::Delete, short(path), self.inner.delete(path)).await
    }
    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        gated(&self.sched, Call::Delete, short(path), self.inner.delete_prefix(path)).await
    }
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        gated(&self.sched, Call::Delete, "many", self.inner.delete_stream(paths)).await
    }
    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }
    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct SimRead {
    inner: Box<dyn FileRead>,
}

#[async_trait::async_trait]
impl FileRead for SimRead {
    // Range reads are not gates: a Parquet reader runs several at once, one waiting on
    // another's buffer, so taking turns between them could stall the reader; the open is one.
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        self.inner.read(range).await
    }
}

/// A writer uploads at close (one PUT): the close is the call.
struct SimWrite {
    inner: Box<dyn FileWrite>,
    sched: Arc<Sched>,
    path: String,
    clock: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl FileWrite for SimWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        self.inner.write(bs).await
    }
    async fn close(&mut self) -> iceberg::Result<()> {
        let (path, clock) = (self.path.clone(), self.clock.clone());
        let op = async {
            self.inner.close().await?;
            stamp(&path, &clock)
        };
        gated(&self.sched, Call::Write, short(&path), op).await
    }
}

/// A catalog whose calls wait at the gate and whose tables' file IO is a [`SimStorage`].
#[derive(Debug)]
pub struct SimCatalog {
    pub inner: Arc<dyn Catalog>,
    pub storage: SimStorageFactory,
}

impl SimCatalog {
    /// `table` with its file IO through the gates.
    fn wrap(&self, table: Table) -> iceberg::Result<Table> {
        let io = FileIOBuilder::new(Arc::new(self.storage.clone()))
            .with_props(table.file_io().config().props().iter().map(|(k, v)| (k.clone(), v.clone())))
            .build();
        let mut builder = Table::builder()
            .file_io(io)
            .metadata(table.metadata_ref())
            .identifier(table.identifier().clone())
            .runtime(iceberg::Runtime::try_current()?);
        if let Some(location) = table.metadata_location() {
            builder = builder.metadata_location(location);
        }
        builder.build()
    }

    async fn call<T>(&self, what: &str, op: impl Future<Output = iceberg::Result<T>>) -> iceberg::Result<T> {
        gated(&self.storage.sched, Call::Catalog, what, op).await
    }
}

#[async_trait::async_trait]
impl Catalog for SimCatalog {
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.call("list namespaces", self.inner.list_namespaces(parent)).await
    }
    async fn create_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> iceberg::Result<Namespace> {
        self.call("create namespace", self.inner.create_namespace(namespace, properties)).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.call("get namespace", self.inner.get_namespace(namespace)).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.call("namespace exists", self.inner.namespace_exists(namespace)).await
    }
    async fn update_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> iceberg::Result<()> {
        self.call("update namespace", self.inner.update_namespace(namespace, properties)).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.call("drop namespace", self.inner.drop_namespace(namespace)).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.call("list tables", self.inner.list_tables(namespace)).await
    }
    async fn create_table(&self, namespace: &NamespaceIdent, creation: TableCreation) -> iceberg::Result<Table> {
        let table = self.call("create table", self.inner.create_table(namespace, creation)).await?;
        self.wrap(table)
    }
    async fn load_table(&self, ident: &TableIdent) -> iceberg::Result<Table> {
        let table = gated(&self.storage.sched, Call::Load, ident.name(), self.inner.load_table(ident)).await?;
        self.wrap(table)
    }
    async fn drop_table(&self, ident: &TableIdent) -> iceberg::Result<()> {
        self.call("drop table", self.inner.drop_table(ident)).await
    }
    async fn purge_table(&self, ident: &TableIdent) -> iceberg::Result<()> {
        self.call("purge table", self.inner.purge_table(ident)).await
    }
    async fn table_exists(&self, ident: &TableIdent) -> iceberg::Result<bool> {
        self.call("table exists", self.inner.table_exists(ident)).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.call("rename table", self.inner.rename_table(src, dest)).await
    }
    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> iceberg::Result<Table> {
        let table = self.call("register table", self.inner.register_table(ident, metadata_location)).await?;
        self.wrap(table)
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        let table = self.call("update table", self.inner.update_table(commit)).await?;
        self.wrap(table)
    }
}

/// What a swap does, chosen by the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapFault {
    None,
    /// Lands; the response is lost.
    LandedLost,
    /// Lands; the response is lost and an SDK retry of the same update is refused.
    LandedThenRetryRefused,
    /// Lost before it lands.
    Lost,
    /// Lost, and lands just before the next swap reaches the catalog.
    LandsLater,
    Throttled,
    /// The actor dies at the swap, before or after it lands.
    CrashBefore,
    CrashAfter,
}

/// The catalog's real swap, waiting at the gate, with the seed's faults.
pub struct SimPointer {
    pub inner: Arc<dyn PointerSwap>,
    pub sched: Arc<Sched>,
    rng: Mutex<SmallRng>,
    /// Percent of swaps that get a fault.
    pub fault_rate: u32,
    pub crashes: Mutex<bool>,
    /// No faults at all (the last checks).
    pub calm: std::sync::atomic::AtomicBool,
    delayed: Mutex<Option<(TableIdent, String, String)>>,
    log: Arc<Mutex<Vec<String>>>,
    /// Fault classes left out (`SIM_SKIP_FAULTS=LandsLater,...`), to see what the others find.
    skipped: Vec<String>,
}

impl std::fmt::Debug for SimPointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimPointer")
    }
}

impl SimPointer {
    pub fn new(inner: Arc<dyn PointerSwap>, sched: Arc<Sched>, seed: u64, fault_rate: u32, log: Arc<Mutex<Vec<String>>>) -> Self {
        let skipped = std::env::var("SIM_SKIP_FAULTS").unwrap_or_default().split(',').map(str::to_string).collect();
        Self {
            inner,
            sched,
            rng: Mutex::new(SmallRng::seed_from_u64(seed ^ 0x5eed)),
            fault_rate,
            crashes: Mutex::new(true),
            calm: Default::default(),
            delayed: Mutex::new(None),
            log,
            skipped,
        }
    }

    /// A swap answered as lost that has not landed yet lands now: the end of a step bounds how
    /// late a request reaches the catalog (seconds, in a real catalog: far below the orphan
    /// margin that protects its metadata file).
    pub async fn land_delayed(&self) {
        let delayed = self.delayed.lock().unwrap().take();
        if let Some((table, from, to)) = delayed {
            let landed = self.inner.swap(&table, &from, &to).await.is_ok();
            self.log.lock().unwrap().push(format!("  delayed swap landed at the step's end: {landed}"));
        }
    }

    fn choose(&self) -> SwapFault {
        let mut rng = self.rng.lock().unwrap();
        if rng.random_range(0..100) >= self.fault_rate || self.calm.load(Ordering::Relaxed) {
            return SwapFault::None;
        }
        let crashes = *self.crashes.lock().unwrap();
        let fault = match rng.random_range(0..if crashes { 8 } else { 6 }) {
            0 => SwapFault::LandedLost,
            1 => SwapFault::LandedThenRetryRefused,
            2 => SwapFault::Lost,
            3 => SwapFault::LandsLater,
            4 | 5 => SwapFault::Throttled,
            6 => SwapFault::CrashBefore,
            _ => SwapFault::CrashAfter,
        };
        if self.skipped.iter().any(|s| *s == format!("{fault:?}")) { SwapFault::None } else { fault }
    }
}

fn timeout() -> SwapError {
    SwapError::Ambiguous(icestream::Error::Aws { message: "sim: response lost (timeout)".into(), retryable: true })
}

#[async_trait::async_trait]
impl PointerSwap for SimPointer {
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> Result<(), SwapError> {
        let (_, _guard) = self.sched.gate(Call::Swap, ident.name()).await;
        let delayed = self.delayed.lock().unwrap().take();
        if let Some((table, from, to)) = delayed {
            let landed = self.inner.swap(&table, &from, &to).await.is_ok();
            self.log.lock().unwrap().push(format!("  delayed swap landed: {landed}"));
        }
        // Outside an actor (the other engine's commits, the checks) nothing is faulted.
        let fault = if Sched::in_actor() { self.choose() } else { SwapFault::None };
        if fault != SwapFault::None {
            self.log.lock().unwrap().push(format!("  swap fault {fault:?}"));
        }
        match fault {
            SwapFault::None => self.inner.swap(ident, expected, new_location).await,
            SwapFault::LandedLost => {
                self.inner.swap(ident, expected, new_location).await?;
                Err(timeout())
            }
            SwapFault::LandedThenRetryRefused => {
                self.inner.swap(ident, expected, new_location).await?;
                self.inner.swap(ident, expected, new_location).await
            }
            SwapFault::Lost => Err(timeout()),
            SwapFault::LandsLater => {
                *self.delayed.lock().unwrap() = Some((ident.clone(), expected.to_string(), new_location.to_string()));
                Err(timeout())
            }
            SwapFault::Throttled => Err(SwapError::Ambiguous(icestream::Error::Aws {
                message: "sim: ThrottlingException Rate exceeded".into(),
                retryable: true,
            })),
            SwapFault::CrashBefore => self.sched.crash_now().await,
            SwapFault::CrashAfter => {
                let _ = self.inner.swap(ident, expected, new_location).await;
                self.sched.crash_now().await
            }
        }
    }

    fn round_trips(&self, ident: &TableIdent, expected: &str) -> u64 {
        self.inner.round_trips(ident, expected)
    }
}
