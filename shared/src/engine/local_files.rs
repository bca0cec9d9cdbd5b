//! Whole-file reads and writes for a local warehouse (`file://`), each file in as few blocking
//! tasks as it can be: a read is one task, a write one (written and synced at close; a file over
//! [`FLUSH_BYTES`] one more per step). OpenDAL's fs backend runs every step (make the directory, open, write, sync, close) as a
//! task of its own on the blocking pool (about 55 thread wake-ups a file, measured with
//! `strace`), and its first call builds an HTTP client whose certificate loading is ~19M
//! instructions (callgrind) that a local file never needs. The durability is the same: every
//! file is synced before the commit that lists it, written in place as OpenDAL does. Range
//! reads, deletes, listings and every other scheme stay with OpenDAL.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use iceberg::io::FileWrite;
use iceberg::{Error, ErrorKind, Result};

/// What a streamed local write holds in memory before it writes to the file: a data file of a
/// batch (a few MB at most) is written in one task, a compacted one in steps of this size.
const FLUSH_BYTES: usize = 8 << 20;

/// The absolute local path of a `file://` URI; `None` for any other scheme or a relative path.
pub(crate) fn local_path(uri: &str) -> Option<&Path> {
    uri.strip_prefix("file://").filter(|path| path.starts_with('/')).map(Path::new)
}

/// `io` on the blocking pool, its error naming `what` is done to `path`.
async fn blocking<T: Send + 'static>(what: &str, path: &Path, io: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> Result<T> {
    let failed = |why: String| Error::new(ErrorKind::Unexpected, format!("{what} {}: {why}", path.display()));
    match tokio::task::spawn_blocking(io).await {
        Ok(done) => done.map_err(|e| failed(e.to_string())),
        Err(e) => Err(failed(format!("the task failed: {e}"))),
    }
}

/// The whole file at `path`.
pub(crate) async fn read_whole(path: PathBuf) -> Result<Bytes> {
    let at = path.clone();
    blocking("reading", &at, move || std::fs::read(&path).map(Bytes::from)).await
}

/// Write `bytes` as the whole file at `path`, replacing what is there.
pub(crate) async fn write_whole(path: PathBuf, bytes: Bytes) -> Result<()> {
    let mut writer = LocalWrite::new(path);
    writer.write(bytes).await?;
    writer.close().await
}

/// A file written in steps: created (with its directories) at the first step, synced at close.
pub(crate) struct LocalWrite {
    path: PathBuf,
    file: Option<File>,
    pending: Vec<Bytes>,
    pending_bytes: usize,
    closed: bool,
}

impl LocalWrite {
    pub(crate) fn new(path: PathBuf) -> Self {
        LocalWrite { path, file: None, pending: Vec::new(), pending_bytes: 0, closed: false }
    }

    /// Write what is pending, creating the file first if this is the first step; `sync` last.
    async fn flush(&mut self, sync: bool) -> Result<()> {
        let (path, file, chunks) = (self.path.clone(), self.file.take(), std::mem::take(&mut self.pending));
        self.pending_bytes = 0;
        let file = blocking("writing", &self.path, move || {
            let mut file = match file {
                Some(file) => file,
                None => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    File::create(&path)?
                }
            };
            for chunk in &chunks {
                file.write_all(chunk)?;
            }
            if sync {
                file.sync_all()?;
            }
            Ok(file)
        })
        .await?;
        self.file = Some(file);
        Ok(())
    }
}

#[async_trait::async_trait]
impl FileWrite for LocalWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::Unexpected, format!("writing {}: the file is closed", self.path.display())));
        }
        self.pending_bytes += bs.len();
        self.pending.push(bs);
        if self.pending_bytes >= FLUSH_BYTES {
            self.flush(false).await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.closed, true) {
            return Err(Error::new(ErrorKind::Unexpected, format!("closing {}: the file is closed", self.path.display())));
        }
        self.flush(true).await?;
        // Dropped here, so the file is closed when close returns.
        self.file = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::TestResult;

    #[test]
    fn only_absolute_file_uris_are_local() {
        assert_eq!(local_path("file:///wh/t/data/a.parquet"), Some(Path::new("/wh/t/data/a.parquet")));
        for other in ["s3://bucket/wh/a", "memory://wh/a", "file:relative/a", "file://relative/a", "/wh/a"] {
            assert_eq!(local_path(other), None, "{other}");
        }
    }

    #[tokio::test]
    async fn a_whole_write_makes_its_directories_and_replaces_the_file() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t/data/hour=1/a.parquet");
        write_whole(path.clone(), Bytes::from_static(b"first version")).await?;
        assert_eq!(read_whole(path.clone()).await?, Bytes::from_static(b"first version"));
        write_whole(path.clone(), Bytes::from_static(b"second")).await?;
        assert_eq!(std::fs::read(&path)?, b"second");
        Ok(())
    }

    #[tokio::test]
    async fn a_streamed_write_keeps_every_step_in_order_and_refuses_more_after_close() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t/data/a.parquet");
        let big = vec![7u8; FLUSH_BYTES + 3];
        let mut writer = LocalWrite::new(path.clone());
        writer.write(Bytes::from_static(b"head")).await?;
        // Past the flush size: written to the file before close.
        writer.write(Bytes::from(big.clone())).await?;
        assert_eq!(std::fs::metadata(&path)?.len(), 4 + big.len() as u64);
        writer.write(Bytes::from_static(b"tail")).await?;
        writer.close().await?;
        let expected = [&b"head"[..], &big, b"tail"].concat();
        assert_eq!(std::fs::read(&path)?, expected);
        assert!(writer.write(Bytes::from_static(b"x")).await.is_err());
        assert!(writer.close().await.is_err());
        // Nothing written still leaves the (empty) file, as a closed writer must.
        let empty = dir.path().join("t/data/empty.parquet");
        let mut writer = LocalWrite::new(empty.clone());
        writer.close().await?;
        assert_eq!(std::fs::read(&empty)?, b"");
        Ok(())
    }

    #[tokio::test]
    async fn a_failed_read_or_write_names_the_file() -> TestResult {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("t"), b"a file where a directory should be")?;
        let path = dir.path().join("t/data/a.parquet");
        let error = write_whole(path.clone(), Bytes::from_static(b"x")).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains(&format!("writing {}", path.display())), "{error}");
        let error = read_whole(path.clone()).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains(&format!("reading {}", path.display())), "{error}");
        Ok(())
    }
}
