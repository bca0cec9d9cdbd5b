//! The footers and key page indexes of data files, kept across the batches of a warm process.
//!
//! A data file never changes once written (its path is unique), so what one batch read of its
//! footer and of the page index of its key and read columns serves every later batch: a warm
//! Lambda container's batch then fetches only the pages its keys fall in, and its read cost
//! stops growing with the number of row groups in the table. A cold container reads them once,
//! as [`super::key_reader`] does without a cache. Bounded by `key_index_cache_mb`: the files
//! used least recently go first; a file larger than the bound is not kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use parquet::file::metadata::ParquetMetaData;

/// What is kept of one data file.
#[derive(Clone)]
pub struct FileIndex {
    /// The file's size by its manifest entry: a file rewritten in place under the same path
    /// (no writer here does; a careless one might) is not taken for the one kept.
    pub file_size: u64,
    /// The footer as written (no page index).
    pub footer: Arc<ParquetMetaData>,
    /// The footer with the page index of the row groups in `loaded`: the column index of
    /// `indexed` columns and the offset index of `projected` ones (see `with_page_index`).
    pub paged: Option<Arc<ParquetMetaData>>,
    pub indexed: Vec<usize>,
    pub projected: Vec<usize>,
    /// Per row group: whether `paged` holds its page index.
    pub loaded: Vec<bool>,
}

impl FileIndex {
    fn memory_size(&self) -> usize {
        self.footer.memory_size() + self.paged.as_ref().map_or(0, |p| p.memory_size())
    }
}

struct Entry {
    index: FileIndex,
    size: usize,
    used: u64,
}

#[derive(Default)]
struct Entries {
    by_path: HashMap<String, Entry>,
    size: usize,
    clock: u64,
}

/// Data files' footers and key page indexes by path, up to a memory bound. Shared by the
/// batches of one process; `get` and `put` hold the lock only to copy an `Arc` in or out.
pub struct KeyIndexCache {
    limit: usize,
    entries: Mutex<Entries>,
}

impl KeyIndexCache {
    /// A cache of up to `limit` bytes (0: keeps nothing).
    pub fn new(limit: usize) -> Self {
        Self { limit, entries: Mutex::new(Entries::default()) }
    }

    /// A cache that keeps nothing: every batch reads footers and indexes again.
    pub fn none() -> Arc<Self> {
        Arc::new(Self::new(0))
    }

    /// What is kept of `path`, if anything.
    pub fn get(&self, path: &str) -> Option<FileIndex> {
        let mut entries = self.entries.lock().ok()?;
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries.by_path.get_mut(path)?;
        entry.used = now;
        Some(entry.index.clone())
    }

    /// Keep `index` for `path` (replacing what was kept), then drop the least recently used
    /// files until the cache is within its bound.
    pub fn put(&self, path: &str, index: FileIndex) {
        let size = index.memory_size();
        let Ok(mut entries) = self.entries.lock() else { return };
        if let Some(old) = entries.by_path.remove(path) {
            entries.size -= old.size;
        }
        if size > self.limit {
            return;
        }
        entries.clock += 1;
        let used = entries.clock;
        entries.by_path.insert(path.to_string(), Entry { index, size, used });
        entries.size += size;
        while entries.size > self.limit {
            let Some(oldest) = entries.by_path.iter().min_by_key(|(_, e)| e.used).map(|(p, _)| p.clone()) else { break };
            if let Some(gone) = entries.by_path.remove(&oldest) {
                entries.size -= gone.size;
            }
        }
    }

    /// Bytes kept.
    pub fn size(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.size)
    }
}

#[cfg(test)]
mod tests {
    use parquet::file::metadata::{FileMetaData, ParquetMetaDataBuilder};
    use parquet::schema::types::{SchemaDescriptor, Type};

    use super::*;

    fn index() -> FileIndex {
        let schema = Arc::new(SchemaDescriptor::new(Arc::new(Type::group_type_builder("schema").build().unwrap())));
        let footer = ParquetMetaDataBuilder::new(FileMetaData::new(2, 0, None, None, schema, None)).build();
        FileIndex { file_size: 1, footer: Arc::new(footer), paged: None, indexed: vec![0], projected: vec![0], loaded: vec![] }
    }

    #[test]
    fn the_least_recently_used_files_go_first_and_the_bound_holds() {
        let one = index().memory_size();
        let cache = KeyIndexCache::new(2 * one);
        cache.put("a", index());
        cache.put("b", index());
        assert!(cache.get("a").is_some(), "a is used: b is now the oldest");
        cache.put("c", index());
        assert!(cache.get("b").is_none(), "the least recently used file went");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert_eq!(cache.size(), 2 * one);
        cache.put("a", index());
        assert_eq!(cache.size(), 2 * one, "a replaced, not added twice");
        let none = KeyIndexCache::new(0);
        none.put("a", index());
        assert!(none.get("a").is_none(), "a zero bound keeps nothing");
    }
}
