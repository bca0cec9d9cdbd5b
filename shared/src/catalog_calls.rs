//! Counts of catalog calls (table loads, pointer swaps, the rest), kept for the life of a
//! [`crate::catalog::Catalogs`]: a caller reads them before and after an invocation to see
//! what it cost (each load is also one metadata-file read from storage).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};
use serde::Serialize;

use crate::commit::{PointerSwap, SwapError};

/// Calls made so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CatalogCalls {
    pub loads: u64,
    pub swaps: u64,
    pub other: u64,
}

impl std::ops::Sub for CatalogCalls {
    type Output = CatalogCalls;
    fn sub(self, earlier: Self) -> Self {
        Self { loads: self.loads - earlier.loads, swaps: self.swaps - earlier.swaps, other: self.other - earlier.other }
    }
}

/// The shared counters.
#[derive(Debug, Default)]
pub struct CallCounter {
    loads: AtomicU64,
    swaps: AtomicU64,
    other: AtomicU64,
}

impl CallCounter {
    pub fn snapshot(&self) -> CatalogCalls {
        CatalogCalls {
            loads: self.loads.load(Ordering::Relaxed),
            swaps: self.swaps.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }

    fn other(&self) {
        self.other.fetch_add(1, Ordering::Relaxed);
    }
}

/// A catalog that counts the calls it passes on.
#[derive(Debug)]
pub struct CountingCatalog {
    pub inner: Arc<dyn Catalog>,
    pub counter: Arc<CallCounter>,
}

#[async_trait::async_trait]
impl Catalog for CountingCatalog {
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        self.counter.other();
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> Result<Namespace> {
        self.counter.other();
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.counter.other();
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.counter.other();
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> Result<()> {
        self.counter.other();
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.counter.other();
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.counter.other();
        self.inner.list_tables(namespace).await
    }
    async fn create_table(&self, namespace: &NamespaceIdent, creation: TableCreation) -> Result<Table> {
        self.counter.other();
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.counter.loads.fetch_add(1, Ordering::Relaxed);
        self.inner.load_table(table).await
    }
    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.counter.other();
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.counter.other();
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.counter.other();
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.counter.other();
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.counter.other();
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.counter.other();
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
        self.inner.swap(ident, expected, new_location).await
    }
}
