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
mod tests {
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::{Field, FieldRef};
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat};
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    use parquet::schema::types::ColumnPath;

    use super::*;
    use crate::testkit::LocalTable;

    /// `batch` written as one data file of `table` with `props`.
    async fn data_file(table: &Table, name: &str, batch: &RecordBatch, props: WriterProperties) -> DataFile {
        let mut buffer = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut buffer, batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        let size = buffer.len() as u64;
        let path = format!("{}/data/{name}.parquet", table.metadata().location());
        table.file_io().new_output(&path).unwrap().write(buffer.into()).await.unwrap();
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path)
            .file_format(DataFileFormat::Parquet)
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .record_count(batch.num_rows() as u64)
            .file_size_in_bytes(size)
            .build()
            .unwrap()
    }

    fn codec(fields: &[(&str, DataType)]) -> KeyCodec {
        KeyCodec::of_fields(fields.iter().map(|(n, t)| FieldRef::new(Field::new(*n, t.clone(), false))).collect()).unwrap()
    }

    /// Reads `file` of `fixture`'s table for the keys in `touched` (key columns), and checks
    /// that the bytes and requests the read reports are those storage served.
    async fn read(fixture: &LocalTable, file: &DataFile, codec: &KeyCodec, touched: &[ArrayRef], deleted: &HashSet<i64>) -> KeyRead {
        let table = fixture.load().await;
        let names: Vec<&str> = codec.names().collect();
        let before = fixture.catalogs.calls();
        let keys = TouchedKeys::new(codec, touched.to_vec()).unwrap();
        let read = read_key_rows(&table, file, &keys, &names, deleted, &KeyIndexCache::new(0)).await.unwrap();
        let served = fixture.catalogs.calls() - before;
        assert_eq!((read.bytes, read.requests), (served.storage_bytes_read, served.storage_reads), "bytes and requests reported vs served");
        read
    }

    /// `ids` as column `id` of a file of row groups of 5,000 rows with bloom filters on `id`,
    /// chunk statistics and no page index (as some engines write).
    async fn bloom_file(table: &Table, name: &str, ids: ArrayRef) -> DataFile {
        let batch = RecordBatch::try_from_iter([("id", ids)]).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(5000))
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_column_bloom_filter_enabled(ColumnPath::from("id"), true)
            .build();
        data_file(table, name, &batch, props).await
    }

    /// A file written when the key column was an int (its bloom filters hash 4-byte values),
    /// probed with the long keys of the column promoted since: the key's row is found.
    #[tokio::test]
    async fn bloom_filters_of_a_file_from_before_the_key_was_promoted_still_find_the_key() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        let rows = 20_000i32;
        let ids = Int32Array::from_iter_values((0..rows).map(|i| (i * 7919) % rows));
        let file = bloom_file(&table, "int-bloom", Arc::new(ids.clone())).await;
        let touched: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![4242, 1 << 40]))];
        let read = read(&fixture, &file, &codec(&[("id", DataType::Int64)]), &touched, &HashSet::new()).await;
        let at = (0..rows).find(|&p| ids.value(p as usize) == 4242).unwrap() as i64;
        assert!(read.positions.contains(&at), "the key's row is read");
        assert!(read.positions.len() <= 5000, "{} rows read: the other row groups were skipped", read.positions.len());
    }

    #[tokio::test]
    async fn only_row_groups_whose_bloom_filters_may_hold_a_key_are_read() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        // A permutation: every row group's bounds span nearly all ids, and no page index (as
        // some engines write): only the bloom filters can tell the row groups apart.
        let rows = 100_000i64;
        let ids = Int64Array::from_iter_values((0..rows).map(|i| (i * 7919) % rows));
        let file = bloom_file(&table, "bloom", Arc::new(ids.clone())).await;
        let touched: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![4242, 17_001]))];
        let deleted_at = (0..rows).find(|&p| ids.value(p as usize) == 17_001).unwrap();
        let read = read(&fixture, &file, &codec(&[("id", DataType::Int64)]), &touched, &HashSet::from([deleted_at])).await;
        assert!(!read.positions.contains(&deleted_at), "deleted positions are left out");
        let found: Vec<i64> = read.batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
        assert_eq!(found.len(), read.positions.len());
        assert!(found.iter().zip(&read.positions).all(|(id, pos)| *id == ids.value(*pos as usize)), "positions line up with the rows");
        assert!(found.contains(&4242));
        assert!(read.positions.len() < 20_000, "{} rows read: the other row groups were skipped", read.positions.len());
        assert!(read.bytes < file.file_size_in_bytes() / 2, "{} of {} bytes read", read.bytes, file.file_size_in_bytes());
    }

    #[tokio::test]
    async fn in_a_key_sorted_file_only_the_pages_that_may_hold_a_key_are_read() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        let rows = 1_000_000i64;
        let tenants = StringArray::from_iter_values((0..rows).map(|i| ["acme", "globex"][(i * 2 / rows) as usize]));
        let ids = Int64Array::from_iter_values((0..rows).map(|i| i % (rows / 2)));
        let amounts = Int64Array::from_iter_values((0..rows).map(|i| i * 3));
        let batch = RecordBatch::try_from_iter([
            ("tenant", Arc::new(tenants) as ArrayRef),
            ("id", Arc::new(ids) as ArrayRef),
            ("amount", Arc::new(amounts) as ArrayRef),
        ])
        .unwrap();
        // The properties the writer gives an upsert table.
        let mut properties = std::collections::HashMap::new();
        crate::model::tables::add_upsert_properties(&mut properties, &["tenant", "id"]);
        let props = crate::engine::writer::table_writer_properties("zstd", &properties, &[&batch]).unwrap();
        let file = data_file(&table, "sorted", &batch, props).await;
        let codec = codec(&[("tenant", DataType::Utf8), ("id", DataType::Int64)]);
        // Two keys that exist and one that does not (between the tenants' ranges).
        let touched: Vec<ArrayRef> =
            vec![Arc::new(StringArray::from(vec!["acme", "globex", "bogus"])), Arc::new(Int64Array::from(vec![777, 499_999, 5]))];
        let read = read(&fixture, &file, &codec, &touched, &HashSet::new()).await;
        let positions: HashSet<i64> = read.positions.iter().copied().collect();
        assert!(positions.contains(&777) && positions.contains(&999_999), "both live keys are found");
        assert!(read.positions.len() <= 4 * 256, "{} rows read: only the keys' pages", read.positions.len());
        assert!(read.bytes < file.file_size_in_bytes() / 4, "{} of {} bytes read", read.bytes, file.file_size_in_bytes());
    }

    #[tokio::test]
    async fn the_page_index_is_read_for_the_key_and_read_columns_only() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        let rows = 200_000i64;
        // Sorted keys, then twelve wide columns nobody looks up: their page statistics are most
        // of the file's page index.
        let mut columns: Vec<(String, ArrayRef)> = vec![
            ("id".into(), Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef),
            ("seq".into(), Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i * 2))) as ArrayRef),
        ];
        for c in 0..12 {
            let text = StringArray::from_iter_values((0..rows).map(|i| format!("{c:02}-{i:038}")));
            columns.push((format!("wide{c}"), Arc::new(text) as ArrayRef));
        }
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let props = WriterProperties::builder()
            .set_data_page_row_count_limit(256)
            .set_write_batch_size(256)
            .set_max_row_group_row_count(Some(rows as usize))
            .set_statistics_enabled(EnabledStatistics::Page)
            // A dictionary page is read with any page of its chunk: none here (upsert tables
            // keep theirs at 2 KiB).
            .set_dictionary_enabled(false)
            .build();
        let file = data_file(&table, "wide", &batch, props).await;
        let codec = codec(&[("id", DataType::Int64)]);
        let touched: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![123_456]))];
        let keys = TouchedKeys::new(&codec, touched).unwrap();
        let read = read_key_rows(&table, &file, &keys, &["id", "seq"], &HashSet::new(), &KeyIndexCache::new(0)).await.unwrap();
        assert!(read.positions.contains(&123_456) && read.positions.len() <= 256, "the key's page: {} rows", read.positions.len());

        let bytes = table.file_io().new_input(file.file_path()).unwrap().read().await.unwrap();
        let metadata = ParquetMetaDataReader::new().parse_and_finish(&bytes).unwrap();
        let chunks = metadata.row_group(0).columns();
        let length = |c: &ColumnChunkMetaData, column: bool| {
            (if column { c.column_index_length() } else { c.offset_index_length() }).unwrap_or(0) as u64
        };
        let whole_index: u64 = chunks.iter().map(|c| length(c, true) + length(c, false)).sum();
        let needed = length(&chunks[0], true) + length(&chunks[0], false) + length(&chunks[1], false);
        // The footer's suffix read: 64 KiB, or the whole footer when it is longer.
        let metadata_length = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap()) as u64;
        let footer = (64 * 1024u64).max(metadata_length + 8);
        assert!(read.bytes < footer + needed + 64 * 1024, "{} bytes read; the index of the key and read columns is {needed}", read.bytes);
        assert!(whole_index > 4 * (needed + 64 * 1024), "the test file's index ({whole_index}) is mostly the wide columns'");
    }

    #[tokio::test]
    async fn pruning_by_pages_never_misses_a_key_in_an_unsorted_file() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        let rows = 30_000usize;
        // Composite keys in a scrambled order, pages of 100 rows.
        let ids: Vec<i64> = (0..rows as i64).map(|i| (i * 7919) % rows as i64).collect();
        let tenants: Vec<String> = ids.iter().map(|id| format!("t{}", id % 7)).collect();
        let batch = RecordBatch::try_from_iter([
            ("tenant", Arc::new(StringArray::from(tenants.clone())) as ArrayRef),
            ("id", Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_data_page_row_count_limit(100)
            .set_write_batch_size(100)
            .set_max_row_group_row_count(Some(7000))
            .build();
        let file = data_file(&table, "scrambled", &batch, props).await;
        let codec = codec(&[("tenant", DataType::Utf8), ("id", DataType::Int64)]);
        let wanted: Vec<usize> = (0..rows).step_by(997).collect();
        let touched: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(wanted.iter().map(|&p| tenants[p].clone()))),
            Arc::new(Int64Array::from_iter_values(wanted.iter().map(|&p| ids[p]))),
        ];
        let read = read(&fixture, &file, &codec, &touched, &HashSet::new()).await;
        let positions: HashSet<i64> = read.positions.iter().copied().collect();
        for p in wanted {
            assert!(positions.contains(&(p as i64)), "row {p} ({}, {}) was missed", tenants[p], ids[p]);
        }
    }

    #[tokio::test]
    async fn a_warm_read_fetches_the_pages_only_and_finds_the_same_rows() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        let rows = 400_000i64;
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef),
            ("seq", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i * 2))) as ArrayRef),
        ])
        .unwrap();
        let mut properties = std::collections::HashMap::new();
        crate::model::tables::add_upsert_properties(&mut properties, &["id"]);
        // Four row groups, so a batch can touch some of them.
        let props = crate::engine::writer::table_writer_properties("zstd", &properties, &[&batch])
            .unwrap()
            .into_builder()
            .set_max_row_group_row_count(Some(100_000))
            .build();
        let file = data_file(&table, "warm", &batch, props).await;
        let codec = codec(&[("id", DataType::Int64)]);
        let cache = KeyIndexCache::new(64 << 20);
        let read = |ids: Vec<i64>| {
            let (table, file, codec, cache) = (&table, &file, &codec, &cache);
            async move {
                let keys = TouchedKeys::new(codec, vec![Arc::new(Int64Array::from(ids)) as ArrayRef]).unwrap();
                read_key_rows(table, file, &keys, &["id", "seq"], &HashSet::new(), cache).await.unwrap()
            }
        };
        let found = |r: &KeyRead| -> Vec<i64> {
            r.batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect()
        };
        let cold = read(vec![10, 150_000]).await;
        let warm = read(vec![10, 150_000]).await;
        assert_eq!((found(&warm), &warm.positions), (found(&cold), &cold.positions), "the same rows at the same positions");
        assert!(found(&cold).contains(&10) && found(&cold).contains(&150_000));
        // The footer (64 KiB suffix read) and the two row groups' page index are not read again.
        assert!(cold.bytes - warm.bytes >= 64 * 1024, "cold {} bytes, warm {}", cold.bytes, warm.bytes);
        assert!(warm.requests < cold.requests, "cold {} requests, warm {}", cold.requests, warm.requests);
        // A key in a row group not read before: its page index is read once, then kept.
        let other = read(vec![350_000]).await;
        let again = read(vec![350_000]).await;
        assert!(found(&other).contains(&350_000) && found(&again) == found(&other));
        assert!(other.bytes < cold.bytes, "the footer is kept: {} bytes, cold {}", other.bytes, cold.bytes);
        assert!(again.requests < other.requests && again.bytes < other.bytes, "{} / {} requests", again.requests, other.requests);
        assert!(cache.size() > 0);

        // The same path written again with other rows (a careless engine's retry): its new size
        // tells it from the file kept, and it is read afresh.
        let other_rows = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from_iter_values(0..1000)) as ArrayRef),
            ("seq", Arc::new(Int64Array::from_iter_values((0..1000).map(|i| -i))) as ArrayRef),
        ])
        .unwrap();
        let props = crate::engine::writer::table_writer_properties("zstd", &properties, &[&other_rows]).unwrap();
        let rewritten = data_file(&table, "warm", &other_rows, props).await;
        assert_eq!(rewritten.file_path(), file.file_path());
        let keys = TouchedKeys::new(&codec, vec![Arc::new(Int64Array::from(vec![10])) as ArrayRef]).unwrap();
        let read = read_key_rows(&table, &rewritten, &keys, &["id", "seq"], &HashSet::new(), &cache).await.unwrap();
        let seqs: Vec<i64> = read.batches.iter().flat_map(|b| b.column(1).as_primitive::<Int64Type>().values().to_vec()).collect();
        assert!(seqs.contains(&-10), "the rewritten file's row: {seqs:?}");
    }
}
