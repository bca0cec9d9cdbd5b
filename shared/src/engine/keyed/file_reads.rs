//! Range reads of one data file for the key reader: coalesced here (ranges closer than
//! [`COALESCE_GAP`] go in one request, [`CONCURRENT_READS`] at a time), so every byte and
//! request counted is one storage served; the file's tail, read first for the footer, serves
//! later ranges that fall in it.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, Bytes};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileRead;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::reader::{ChunkReader, Length};

use crate::base::error::Result;

/// Byte ranges of one file closer than this are fetched by one request: a request costs more
/// (an S3 GET's price and latency) than reading a few KiB past what was asked.
const COALESCE_GAP: u64 = 8 * 1024;

/// Range requests of one file in flight at once.
const CONCURRENT_READS: usize = 8;

/// What one key read fetched from storage: bytes transferred and requests made, and the file's
/// last bytes (the footer's suffix read), which often hold the page index too.
#[derive(Default)]
pub(super) struct Fetched {
    bytes: AtomicU64,
    requests: AtomicU64,
    tail: std::sync::Mutex<Option<Span>>,
}

impl Fetched {
    /// `range` out of the tail already read, if it lies in it.
    fn in_tail(&self, range: &Range<u64>) -> Option<Bytes> {
        let tail = self.tail.lock().ok()?;
        let tail = tail.as_ref()?;
        tail.get_bytes(range.start, usize::try_from(range.end - range.start).ok()?).ok()
    }

    /// Bytes transferred and requests made so far.
    pub(super) fn cost(&self) -> (u64, u64) {
        (self.bytes.load(Ordering::Relaxed), self.requests.load(Ordering::Relaxed))
    }
}

/// An [`AsyncFileReader`] over the file's storage that counts every byte and request it makes
/// (ranges are coalesced here, so the count is what was transferred, not what was asked for)
/// and serves ranges of the file's tail from the first read of it.
pub(super) struct Counting {
    inner: Arc<dyn FileRead>,
    size: u64,
    fetched: Arc<Fetched>,
}

impl Counting {
    /// The file's size from its manifest entry: no request to ask storage for it.
    pub(super) async fn open(table: &Table, file: &DataFile, fetched: Arc<Fetched>) -> Result<Self> {
        let input = table.file_io().new_input(file.file_path())?;
        Ok(Self { size: file.file_size_in_bytes(), inner: Arc::from(input.reader().await?), fetched })
    }

    async fn read(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        self.fetched.requests.fetch_add(1, Ordering::Relaxed);
        self.fetched.bytes.fetch_add(range.end - range.start, Ordering::Relaxed);
        self.inner.read(range).await.map_err(|e| ParquetError::External(Box::new(e)))
    }
}

/// `ranges` (sorted by start) merged where they overlap or lie within [`COALESCE_GAP`].
fn coalesce(ranges: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut merged: Vec<Range<u64>> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(COALESCE_GAP) => last.end = last.end.max(r.end),
            _ => merged.push(r.clone()),
        }
    }
    merged
}

impl AsyncFileReader for Counting {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        Box::pin(async move {
            if let Some(bytes) = self.fetched.in_tail(&range) {
                return Ok(bytes);
            }
            let bytes = self.read(range.clone()).await?;
            if range.end == self.size
                && let Ok(mut tail) = self.fetched.tail.lock()
                && tail.is_none()
            {
                *tail = Some(Span { start: range.start, bytes: bytes.clone() });
            }
            Ok(bytes)
        })
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        Box::pin(async move {
            let mut missing: Vec<Range<u64>> = ranges.iter().filter(|r| self.fetched.in_tail(r).is_none()).cloned().collect();
            missing.sort_unstable_by_key(|r| r.start);
            let merged = coalesce(&missing);
            let this = &*self;
            let spans: Vec<Span> = futures::stream::iter(merged.into_iter().map(|r| async move {
                let start = r.start;
                this.read(r).await.map(|bytes| Span { start, bytes })
            }))
            .buffered(CONCURRENT_READS)
            .try_collect()
            .await?;
            ranges
                .iter()
                .map(|r| {
                    if let Some(bytes) = self.fetched.in_tail(r) {
                        return Ok(bytes);
                    }
                    let at = spans.partition_point(|s| s.start <= r.start);
                    let span = at
                        .checked_sub(1)
                        .map(|i| &spans[i])
                        .ok_or_else(|| ParquetError::General("a range read returned too few ranges".into()))?;
                    span.get_bytes(r.start, usize::try_from(r.end - r.start).map_err(|e| ParquetError::External(Box::new(e)))?)
                })
                .collect()
        })
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        Box::pin(async move {
            // Through `self`: the footer's bytes are counted, and its suffix read is kept.
            let size = self.size;
            let metadata = ParquetMetaDataReader::new().with_prefetch_hint(Some(64 * 1024)).load_and_finish(&mut *self, size).await?;
            Ok(Arc::new(metadata))
        })
    }
}

/// Bytes fetched from one range of a file, read by absolute file offsets.
pub(super) struct Span {
    pub(super) start: u64,
    pub(super) bytes: Bytes,
}

impl Length for Span {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for Span {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(self.get_bytes(start, (self.len().saturating_sub(start)) as usize)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let from = start.checked_sub(self.start).map(|f| f as usize).filter(|f| f + length <= self.bytes.len());
        from.map(|f| self.bytes.slice(f..f + length))
            .ok_or_else(|| ParquetError::EOF(format!("bytes {start}+{length} are outside the page index read")))
    }
}
