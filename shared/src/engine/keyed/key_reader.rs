//! Reading the key and order columns of one data file at a cost bounded by the batch, not the
//! file: the footer; the row groups whose key statistics may hold a touched key; the page index
//! of those row groups only; then the pages whose key bounds may hold one, by range reads (row
//! groups without a page index: those whose bloom filters on the key columns,
//! `write.parquet.bloom-filter-enabled.column.*`, may hold one). Upsert tables write their files
//! sorted by key in small pages (`write.parquet.page-row-limit`), so a touched key falls in one
//! page of one row group. Files other engines wrote are read the same way, pruning by whatever
//! statistics they carry. Every byte fetched is counted.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Int32Type, Int64Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, TimeUnit};
use futures::TryStreamExt;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, RowSelection};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
#[allow(deprecated)] // the per-row-group decoders: see `with_page_index`
use parquet::file::page_index::index_reader::{read_columns_indexes, read_offset_indexes};
use parquet::file::page_index::offset_index::OffsetIndexMetaData;

use super::file_reads::{Counting, Fetched, Span};
use super::key_index::{FileIndex, KeyIndexCache};
use super::keys::KeyCodec;
use crate::base::error::{Error, Result};
use crate::engine::commit::live_rows::{leaf_indices, projection};

/// Whether a bloom filter may hold value `i` of `column` (true when the type is not checked).
fn may_contain(filter: &Sbbf, column: &ArrayRef, i: usize) -> bool {
    match column.data_type() {
        DataType::Int32 => filter.check(&column.as_primitive::<Int32Type>().value(i)),
        DataType::Date32 => filter.check(&column.as_primitive::<Date32Type>().value(i)),
        DataType::Int64 => filter.check(&column.as_primitive::<Int64Type>().value(i)),
        DataType::Timestamp(TimeUnit::Second, _) => filter.check(&column.as_primitive::<TimestampSecondType>().value(i)),
        DataType::Timestamp(TimeUnit::Millisecond, _) => filter.check(&column.as_primitive::<TimestampMillisecondType>().value(i)),
        DataType::Timestamp(TimeUnit::Microsecond, _) => filter.check(&column.as_primitive::<TimestampMicrosecondType>().value(i)),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => filter.check(&column.as_primitive::<TimestampNanosecondType>().value(i)),
        DataType::Utf8 => filter.check(column.as_string::<i32>().value(i)),
        DataType::FixedSizeBinary(_) => filter.check(column.as_fixed_size_binary().value(i)),
        _ => true,
    }
}

/// The keys of a batch that one file may hold, for pruning: their columns (for bloom filters)
/// and their row encodings in key order (for statistics).
pub struct TouchedKeys<'a> {
    pub codec: &'a KeyCodec,
    /// The key columns, row by row.
    pub columns: Vec<ArrayRef>,
    sorted: Vec<Vec<u8>>,
}

impl<'a> TouchedKeys<'a> {
    /// `columns`: the key columns of the touched rows (repeats allowed).
    pub fn new(codec: &'a KeyCodec, columns: Vec<ArrayRef>) -> Result<Self> {
        let encoded = codec.encode(&columns)?;
        let mut sorted: Vec<Vec<u8>> = encoded.iter().map(|row| row.data().to_vec()).collect();
        sorted.sort_unstable();
        sorted.dedup();
        Ok(Self { codec, columns, sorted })
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Which of some row ranges (row groups, page segments) may hold a touched key, given each
    /// key column's minimum and maximum per range (null: unknown). A range's per-column
    /// minimums are, as a tuple, at or below every row of it in key order (and the maximums at
    /// or above), whether or not the file is sorted; so a range with no touched key between
    /// them holds none.
    fn may_hold(&self, mins: &[ArrayRef], maxes: &[ArrayRef]) -> Result<Vec<bool>> {
        let n = mins.first().map_or(0, |m| m.len());
        let cast = |arrays: &[ArrayRef]| -> Option<Vec<ArrayRef>> {
            arrays.iter().zip(self.codec.fields()).map(|(a, f)| arrow_cast::cast(a, f.data_type()).ok()).collect()
        };
        // Statistics of a type the key cannot be compared with prune nothing.
        let (Some(mins), Some(maxes)) = (cast(mins), cast(maxes)) else { return Ok(vec![true; n]) };
        let (lows, highs) = (self.codec.encode(&mins)?, self.codec.encode(&maxes)?);
        Ok((0..n)
            .map(|i| {
                if mins.iter().chain(&maxes).any(|a| a.is_null(i)) {
                    return true;
                }
                let first = self.sorted.partition_point(|k| k.as_slice() < lows.row(i).data());
                self.sorted.get(first).is_some_and(|k| k.as_slice() <= highs.row(i).data())
            })
            .collect())
    }

    /// Whether row `i` of some touched key could pass all `filters` (one per key column). A
    /// filter holds the hashes of the file's values in the file's type (a column promoted since,
    /// int to long, has int hashes in older files): keys are checked as that type, and one that
    /// does not fit it is not in the file.
    fn in_filters(&self, filters: &[Option<Sbbf>], file_types: &[Option<DataType>]) -> bool {
        let rows = self.columns.first().map_or(0, |c| c.len());
        let as_file: Vec<Option<ArrayRef>> = self
            .columns
            .iter()
            .zip(file_types)
            .map(|(column, ty)| match ty {
                // Integers of another width, timestamps of another unit: other hashes. (Strings
                // hash their bytes in any representation.)
                Some(ty)
                    if ty != column.data_type()
                        && (ty.is_integer() && column.data_type().is_integer()
                            || matches!((ty, column.data_type()), (DataType::Timestamp(..), DataType::Timestamp(..)))) =>
                {
                    arrow_cast::cast(column, ty).ok()
                }
                _ => Some(column.clone()),
            })
            .collect();
        (0..rows).any(|i| {
            filters.iter().zip(&as_file).all(|(f, column)| match (f, column) {
                (Some(f), Some(column)) => column.is_valid(i) && may_contain(f, column, i),
                _ => true,
            })
        })
    }
}

/// What was read from one data file: its live rows of `columns` (in file order, deletes
/// applied), each row's position, and the bytes fetched.
pub struct KeyRead {
    pub batches: Vec<RecordBatch>,
    pub positions: Vec<i64>,
    pub bytes: u64,
    /// Range requests made.
    pub requests: u64,
}

fn key_read(fetched: &Fetched, batches: Vec<RecordBatch>, positions: Vec<i64>) -> KeyRead {
    let (bytes, requests) = fetched.cost();
    KeyRead { batches, positions, bytes, requests }
}

/// The row ranges of row group `group` (relative to it) whose pages may hold a touched key, by
/// the page index of the key columns (`leaves`); `None` when the file has none for them.
fn pages_to_read(
    metadata: &ParquetMetaData,
    converters: &[StatisticsConverter<'_>],
    leaves: &[usize],
    group: usize,
    keys: &TouchedKeys<'_>,
) -> Result<Option<Vec<Range<usize>>>> {
    let (Some(column_index), Some(offset_index)) = (metadata.column_index(), metadata.offset_index()) else { return Ok(None) };
    let rows = metadata.row_group(group).num_rows() as usize;
    // Each key column's pages start at their own rows: cut the row group into segments that
    // lie in one page of every key column, bounded by those pages' statistics.
    let starts: Vec<Vec<usize>> = leaves
        .iter()
        .map(|&leaf| {
            offset_index[group]
                .get(leaf)
                .map(|o| o.page_locations().iter().map(|p| p.first_row_index as usize).collect())
                .unwrap_or_default()
        })
        .collect();
    if starts.iter().any(|s: &Vec<usize>| s.first() != Some(&0)) {
        return Ok(None);
    }
    let mut cuts: Vec<usize> = starts.iter().flatten().copied().collect();
    cuts.sort_unstable();
    cuts.dedup();
    let segments: Vec<Range<usize>> = cuts.iter().zip(cuts.iter().skip(1).chain([&rows])).map(|(&a, &b)| a..b).collect();
    let (mut mins, mut maxes) = (Vec::new(), Vec::new());
    for (converter, column_starts) in converters.iter().zip(&starts) {
        let page_of: UInt32Array = segments.iter().map(|s| (column_starts.partition_point(|&p| p <= s.start) - 1) as u32).collect();
        // Statistics this reader cannot convert prune nothing.
        let (Ok(page_mins), Ok(page_maxes)) = (
            converter.data_page_mins(column_index, offset_index, [&group]),
            converter.data_page_maxes(column_index, offset_index, [&group]),
        ) else {
            return Ok(None);
        };
        mins.push(arrow_select::take::take(&page_mins, &page_of, None)?);
        maxes.push(arrow_select::take::take(&page_maxes, &page_of, None)?);
    }
    let keep = keys.may_hold(&mins, &maxes)?;
    // Neighbouring segments merge into one range (one read).
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for (segment, _) in segments.into_iter().zip(keep).filter(|(_, k)| *k) {
        match ranges.last_mut() {
            Some(last) if last.end == segment.start => last.end = segment.end,
            _ => ranges.push(segment),
        }
    }
    Ok(Some(ranges))
}

/// The byte range of one column chunk's index (`of`: its offset and length), if it has one.
fn index_range(chunk: &ColumnChunkMetaData, of: impl Fn(&ColumnChunkMetaData) -> Option<(i64, i32)>) -> Option<Range<u64>> {
    let (offset, length) = of(chunk)?;
    let start = u64::try_from(offset).ok()?;
    Some(start..start + u64::try_from(length).ok()?)
}

/// `base` (a footer, with the page index of some row groups or none) with the page index of row
/// groups `groups` added: the column index of the key columns (`indexed`) and the offset index
/// of the columns read (`projected`), each fetched by its own range read, all side by side.
/// Other columns and row groups keep empty entries, which the reader never consults (it uses
/// the offset index of projected columns of the selected row groups only). A file's index is
/// written for all its row groups and columns together: loading it whole would cost in
/// proportion to the file and its width, not to the batch's keys.
#[allow(deprecated)] // the per-row-group decoders are parquet's only public way to decode part of an index
async fn with_page_index(
    reader: &mut Counting,
    base: &ParquetMetaData,
    groups: &[usize],
    indexed: &[usize],
    projected: &[usize],
) -> Result<ParquetMetaData> {
    let footer = base;
    let missing = |g: usize| Error::Invariant(format!("row group {g} was taken for one with a page index"));
    let mut wanted = Vec::with_capacity(groups.len() * (indexed.len() + projected.len()));
    for &g in groups {
        let columns = footer.row_group(g).columns();
        for &leaf in indexed {
            wanted.push(
                index_range(&columns[leaf], |c| Some((c.column_index_offset()?, c.column_index_length()?))).ok_or_else(|| missing(g))?,
            );
        }
        for &leaf in projected {
            wanted.push(
                index_range(&columns[leaf], |c| Some((c.offset_index_offset()?, c.offset_index_length()?))).ok_or_else(|| missing(g))?,
            );
        }
    }
    let fetched = reader.get_byte_ranges(wanted.clone()).await?;
    let mut column_indexes = base.column_index().cloned().unwrap_or_else(|| vec![Vec::new(); footer.num_row_groups()]);
    let mut offset_indexes = base.offset_index().cloned().unwrap_or_else(|| vec![Vec::new(); footer.num_row_groups()]);
    let mut next = 0;
    for &g in groups {
        let columns = footer.row_group(g).columns();
        let mut at = || {
            next += 1;
            Span { start: wanted[next - 1].start, bytes: fetched[next - 1].clone() }
        };
        column_indexes[g] = vec![ColumnIndexMetaData::NONE; columns.len()];
        for &leaf in indexed {
            let decoded = read_columns_indexes(&at(), &columns[leaf..=leaf])?.and_then(|mut v| v.pop());
            column_indexes[g][leaf] = decoded.ok_or_else(|| missing(g))?;
        }
        offset_indexes[g] = vec![OffsetIndexMetaData { page_locations: Vec::new(), unencoded_byte_array_data_bytes: None }; columns.len()];
        for &leaf in projected {
            let decoded = read_offset_indexes(&at(), &columns[leaf..=leaf])?.and_then(|mut v| v.pop());
            offset_indexes[g][leaf] = decoded.ok_or_else(|| missing(g))?;
        }
    }
    Ok(footer.clone().into_builder().set_column_index(Some(column_indexes)).set_offset_index(Some(offset_indexes)).build())
}

/// The live rows of `columns` in the pages of `file` that may hold one of the touched keys.
/// The file's footer and the page index read come from `cache` when it has them, and go into it.
pub async fn read_key_rows(
    table: &Table,
    file: &DataFile,
    keys: &TouchedKeys<'_>,
    columns: &[&str],
    deleted: &HashSet<i64>,
    cache: &KeyIndexCache,
) -> Result<KeyRead> {
    let path = file.file_path();
    let fetched = Arc::new(Fetched::default());
    let mut reader = Counting::open(table, file, fetched.clone()).await?;
    let cached = cache.get(path).filter(|kept| kept.file_size == file.file_size_in_bytes());
    let footer = match &cached {
        Some(kept) => kept.footer.clone(),
        None => reader.get_metadata(None).await?,
    };
    let arrow = ArrowReaderMetadata::try_new(footer.clone(), ArrowReaderOptions::new())?;
    let names: Vec<&str> = keys.codec.names().collect();
    let leaves = leaf_indices(table, arrow.parquet_schema(), path, &names)?;
    // Key columns whose statistics this reader cannot convert (a file of another engine) prune
    // nothing: every row group is read.
    let converters = leaves
        .iter()
        .map(|&leaf| StatisticsConverter::try_new(arrow.parquet_schema().column(leaf).name(), arrow.schema(), arrow.parquet_schema()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .ok();

    // Row groups: by statistics from the footer; then those with a page index on the key
    // columns by their pages, the others by their bloom filters (a row group's filter is read
    // whole: larger than the few pages a key needs).
    let groups = footer.row_groups();
    let bounds = converters.as_ref().and_then(|cs| {
        let mins = cs.iter().map(|c| c.row_group_mins(groups)).collect::<std::result::Result<Vec<_>, _>>().ok()?;
        let maxes = cs.iter().map(|c| c.row_group_maxes(groups)).collect::<std::result::Result<Vec<_>, _>>().ok()?;
        Some((mins, maxes))
    });
    let by_statistics = match &bounds {
        Some((mins, maxes)) => keys.may_hold(mins, maxes)?,
        None => vec![true; groups.len()],
    };
    // The columns read: the key columns and the order column.
    let projected = leaf_indices(table, arrow.parquet_schema(), path, columns)?;
    // A row group with a column index on the key columns and an offset index on the columns read.
    let indexed = |g: usize| {
        leaves.iter().all(|&l| groups[g].column(l).column_index_offset().is_some())
            && projected.iter().all(|&l| groups[g].column(l).offset_index_offset().is_some())
    };
    let file_types: Vec<Option<DataType>> = leaves
        .iter()
        .map(|&leaf| arrow.schema().field_with_name(arrow.parquet_schema().column(leaf).name()).ok().map(|f| f.data_type().clone()))
        .collect();
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, arrow.clone());
    let mut selected = Vec::new();
    for group in (0..groups.len()).filter(|g| by_statistics[*g]) {
        if indexed(group) {
            selected.push(group);
            continue;
        }
        let mut filters = Vec::with_capacity(leaves.len());
        for leaf in &leaves {
            filters.push(builder.get_row_group_column_bloom_filter(group, *leaf).await?);
        }
        if keys.in_filters(&filters, &file_types) {
            selected.push(group);
        }
    }
    // What the cache keeps of this file for these columns (a footer read now starts afresh);
    // it goes back into the cache only when this read added to it.
    let (mut kept, mut grew) = match cached.filter(|k| k.indexed == leaves && k.projected == projected) {
        Some(kept) => (kept, false),
        None => {
            let fresh = FileIndex {
                file_size: file.file_size_in_bytes(),
                footer: footer.clone(),
                paged: None,
                indexed: leaves.clone(),
                projected: projected.clone(),
                loaded: vec![false; groups.len()],
            };
            (fresh, true)
        }
    };
    if selected.is_empty() {
        if grew {
            cache.put(path, kept);
        }
        return Ok(key_read(&fetched, vec![], vec![]));
    }

    // Pages: the page index of the selected row groups only (when each has one), so a batch
    // reads the index of the parts of the file its keys fall in, not of the whole file; and of
    // those only the row groups whose index is not kept from an earlier batch.
    drop(builder);
    let mut reader = Counting::open(table, file, fetched.clone()).await?;
    let paged = converters.is_some() && selected.iter().all(|&g| indexed(g));
    let metadata = if paged {
        let missing: Vec<usize> = selected.iter().copied().filter(|&g| !kept.loaded[g]).collect();
        // Every selected row group is loaded once this holds, so `paged` is set.
        if !missing.is_empty() {
            let base = kept.paged.clone().unwrap_or_else(|| footer.clone());
            kept.paged = Some(Arc::new(with_page_index(&mut reader, &base, &missing, &leaves, &projected).await?));
            missing.iter().for_each(|&g| kept.loaded[g] = true);
            grew = true;
        }
        kept.paged.clone().unwrap_or_else(|| footer.clone())
    } else {
        footer.clone()
    };
    if grew {
        cache.put(path, kept);
    }
    let mut ranges: Vec<(usize, Vec<Range<usize>>)> = Vec::with_capacity(selected.len());
    for &group in &selected {
        let rows = groups[group].num_rows() as usize;
        let pages = match &converters {
            Some(converters) if paged => pages_to_read(&metadata, converters, &leaves, group, keys)?,
            _ => None,
        };
        ranges.push((group, pages.unwrap_or_else(|| std::iter::once(0..rows).collect())));
    }
    ranges.retain(|(_, r)| !r.is_empty());
    let selected: Vec<usize> = ranges.iter().map(|(g, _)| *g).collect();
    if selected.is_empty() {
        return Ok(key_read(&fetched, vec![], vec![]));
    }

    // The selection counts rows of the selected row groups only, in order.
    let mut offset = 0;
    let mut relative = Vec::new();
    for (group, group_ranges) in &ranges {
        relative.extend(group_ranges.iter().map(|r| r.start + offset..r.end + offset));
        offset += groups[*group].num_rows() as usize;
    }
    let selection = RowSelection::from_consecutive_ranges(relative.into_iter(), offset);
    let starts: Vec<i64> = groups.iter().scan(0i64, |next, g| Some(std::mem::replace(next, *next + g.num_rows()))).collect();
    let mut file_ranges = Vec::new();
    for (group, group_ranges) in &ranges {
        file_ranges.extend(group_ranges.iter().map(|r| starts[*group] + r.start as i64..starts[*group] + r.end as i64));
    }
    let mut all_positions = file_ranges.into_iter().flatten();

    let builder =
        ParquetRecordBatchStreamBuilder::new_with_metadata(reader, ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new())?);
    let mask = projection(table, builder.parquet_schema(), path, columns)?;
    let mut stream = builder.with_projection(mask).with_row_groups(selected).with_row_selection(selection).build()?;
    let (mut batches, mut positions) = (Vec::new(), Vec::new());
    while let Some(batch) = stream.try_next().await? {
        let here: Vec<i64> = all_positions.by_ref().take(batch.num_rows()).collect();
        let keep: arrow_array::BooleanArray = here.iter().map(|p| Some(!deleted.contains(p))).collect();
        positions.extend(here.iter().filter(|p| !deleted.contains(p)));
        batches.push(arrow_select::filter::filter_record_batch(&batch, &keep)?);
    }
    Ok(key_read(&fetched, batches, positions))
}

#[cfg(test)]
mod tests;
