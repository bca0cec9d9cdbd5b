//! Storage calls counted per [`crate::engine::catalog::Catalogs`]: the file IO every catalog and table of
//! ours uses goes through [`CountingStorageFactory`], which wraps iceberg's OpenDAL storage and
//! counts each read (a whole file, a byte range, a file's metadata) and each write (a file
//! written whole, a writer's upload at close, a delete) in the shared [`CallCounter`], in flight
//! while it runs (for the sequential round trips). A local warehouse's whole-file reads and its
//! writes go through `local_files` instead of OpenDAL (a blocking task or two a file, not a
//! dozen).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::Result;
use iceberg::io::{FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig, StorageFactory};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

use crate::engine::catalog_calls::{CallCounter, StorageCall};
use crate::engine::local_files;

/// File IO by URI scheme (`file://`, `s3://`, `memory://`), counted.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct CountingStorageFactory {
    inner: OpenDalResolvingStorageFactory,
    /// Process-local: a factory rebuilt from its serialized form counts afresh.
    #[serde(skip)]
    counter: Arc<CallCounter>,
}

impl CountingStorageFactory {
    pub fn new(counter: Arc<CallCounter>) -> Self {
        Self { inner: OpenDalResolvingStorageFactory::new(), counter }
    }
}

#[typetag::serde]
impl StorageFactory for CountingStorageFactory {
    fn build(&self, config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(CountingStorage { inner: self.inner.build(config)?, counter: self.counter.clone() }))
    }
}

/// A storage that counts the calls it passes on. Not serializable: its counter belongs to this
/// process (serializing it is refused, not silently dropped).
#[derive(Debug, Clone)]
pub struct CountingStorage {
    inner: Arc<dyn Storage>,
    counter: Arc<CallCounter>,
}

impl serde::Serialize for CountingStorage {
    fn serialize<S: serde::Serializer>(&self, _: S) -> std::result::Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("a counting storage is process-local; serialize its factory instead"))
    }
}

impl<'de> serde::Deserialize<'de> for CountingStorage {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> std::result::Result<Self, D::Error> {
        Err(serde::de::Error::custom("a counting storage is process-local; build it from its factory"))
    }
}

#[async_trait::async_trait]
#[typetag::serde]
impl Storage for CountingStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        let _call = self.counter.storage(StorageCall::Read).await;
        self.inner.exists(path).await
    }
    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let _call = self.counter.storage(StorageCall::Read).await;
        self.inner.metadata(path).await
    }
    async fn read(&self, path: &str) -> Result<Bytes> {
        let _call = self.counter.storage(StorageCall::Read).await;
        let bytes = match local_files::local_path(path) {
            Some(local) => local_files::read_whole(local.to_path_buf()).await?,
            None => self.inner.read(path).await?,
        };
        self.counter.bytes_read(&bytes);
        Ok(bytes)
    }
    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        // Opening reads nothing; each range read is a call.
        Ok(Box::new(CountingRead { inner: self.inner.reader(path).await?, counter: self.counter.clone() }))
    }
    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let _call = self.counter.storage(StorageCall::Write).await;
        match local_files::local_path(path) {
            Some(local) => local_files::write_whole(local.to_path_buf(), bs).await,
            None => self.inner.write(path, bs).await,
        }
    }
    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let inner: Box<dyn FileWrite> = match local_files::local_path(path) {
            Some(local) => Box::new(local_files::LocalWrite::new(local.to_path_buf())),
            None => self.inner.writer(path).await?,
        };
        Ok(Box::new(CountingWrite { inner, counter: self.counter.clone() }))
    }
    async fn delete(&self, path: &str) -> Result<()> {
        let _call = self.counter.storage(StorageCall::Write).await;
        self.inner.delete(path).await
    }
    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let _call = self.counter.storage(StorageCall::Write).await;
        self.inner.delete_prefix(path).await
    }
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        let _call = self.counter.storage(StorageCall::Write).await;
        self.inner.delete_stream(paths).await
    }
    // Files opened here read and write through this storage, so their calls count too.
    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }
    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Each range read is one storage read.
struct CountingRead {
    inner: Box<dyn FileRead>,
    counter: Arc<CallCounter>,
}

#[async_trait::async_trait]
impl FileRead for CountingRead {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        let _call = self.counter.storage(StorageCall::Read).await;
        let bytes = self.inner.read(range).await?;
        self.counter.bytes_read(&bytes);
        Ok(bytes)
    }
}

/// A writer buffers what it is given and uploads at close (files up to the writer's chunk
/// size, as ours are, in one PUT): the close is the storage write.
struct CountingWrite {
    inner: Box<dyn FileWrite>,
    counter: Arc<CallCounter>,
}

#[async_trait::async_trait]
impl FileWrite for CountingWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.inner.write(bs).await
    }
    async fn close(&mut self) -> Result<()> {
        let _call = self.counter.storage(StorageCall::Write).await;
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use iceberg::io::FileIOBuilder;

    use super::*;

    /// A local warehouse's files go through `local_files`, counted as any other: a written file
    /// appears only at close (OpenDAL's fs backend creates it as the writer opens), and a read
    /// that fails names the file and what was done to it.
    #[tokio::test]
    async fn local_files_are_written_whole_at_close_and_counted() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let counter = Arc::new(CallCounter::default());
        let io = FileIOBuilder::new(Arc::new(CountingStorageFactory::new(counter.clone()))).build();
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t/data/a.parquet");
        let uri = format!("file://{}", path.display());
        let mut writer = io.new_output(&uri)?.writer().await?;
        writer.write(Bytes::from_static(b"rows")).await?;
        assert!(!path.exists(), "a local file is written at close");
        writer.close().await?;
        assert_eq!(io.new_input(&uri)?.read().await?, Bytes::from_static(b"rows"));
        let missing = dir.path().join("t/missing.parquet");
        let error = io.new_input(format!("file://{}", missing.display()))?.read().await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains(&format!("reading {}", missing.display())), "{error}");
        let calls = counter.snapshot();
        assert_eq!((calls.storage_writes, calls.storage_reads, calls.storage_bytes_read), (1, 2, 4), "{calls:?}");
        Ok(())
    }
}
