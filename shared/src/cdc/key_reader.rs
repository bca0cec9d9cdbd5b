//! Reading the key and order columns of one data file at a cost that does not grow with the
//! file: the footer, then each row group's bloom filters on the key columns (written for upsert
//! tables, `write.parquet.bloom-filter-enabled.column.*`), then only the row groups that may
//! hold a touched key, by range reads. Files without bloom filters are read whole, as before.
//! Every byte fetched is counted.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::DataType;
use bytes::Bytes;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use iceberg::arrow::ArrowFileReader;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::commit::row_delta::{leaf_indices, projection};
use crate::error::Result;

/// An [`AsyncFileReader`] that counts the bytes it fetches.
struct Counting {
    inner: ArrowFileReader,
    size: u64,
    bytes: Arc<AtomicU64>,
}

impl AsyncFileReader for Counting {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.bytes.fetch_add(range.end - range.start, Ordering::Relaxed);
        self.inner.get_bytes(range)
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.bytes.fetch_add(ranges.iter().map(|r| r.end - r.start).sum(), Ordering::Relaxed);
        self.inner.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(&'a mut self, _options: Option<&'a ArrowReaderOptions>) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        Box::pin(async move {
            // Through `self`, so the footer's bytes are counted too.
            let size = self.size;
            let metadata = ParquetMetaDataReader::new().with_prefetch_hint(Some(64 * 1024)).load_and_finish(&mut *self, size).await?;
            Ok(Arc::new(metadata))
        })
    }
}

/// Whether a bloom filter may hold value `i` of `column` (true when the type is not checked).
fn may_contain(filter: &Sbbf, column: &ArrayRef, i: usize) -> bool {
    match column.data_type() {
        DataType::Int32 => filter.check(&column.as_primitive::<Int32Type>().value(i)),
        DataType::Date32 => filter.check(&column.as_primitive::<Date32Type>().value(i)),
        DataType::Int64 => filter.check(&column.as_primitive::<Int64Type>().value(i)),
        DataType::Timestamp(..) => filter.check(&column.as_primitive::<TimestampMicrosecondType>().value(i)),
        DataType::Utf8 => filter.check(column.as_string::<i32>().value(i)),
        DataType::FixedSizeBinary(_) => filter.check(column.as_fixed_size_binary().value(i)),
        _ => true,
    }
}

/// What was read from one data file: its live rows of `columns` (in file order, deletes
/// applied), each row's position, and the bytes fetched.
pub struct KeyRead {
    pub batches: Vec<RecordBatch>,
    pub positions: Vec<i64>,
    pub bytes: u64,
}

/// The live rows of `columns` in the row groups of `file` whose bloom filters on `key` may
/// hold one of the `touched` keys (the key columns of every change, row by row).
pub async fn read_key_rows(
    table: &Table,
    file: &DataFile,
    key: &[&str],
    columns: &[&str],
    touched: &[ArrayRef],
    deleted: &HashSet<i64>,
) -> Result<KeyRead> {
    let path = file.file_path();
    let input = table.file_io().new_input(path)?;
    let metadata = input.metadata().await?;
    let bytes = Arc::new(AtomicU64::new(0));
    let reader = Counting { size: metadata.size, inner: ArrowFileReader::new(metadata, input.reader().await?), bytes: bytes.clone() };
    let mut builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let key_leaves = leaf_indices(table, builder.parquet_schema(), path, key)?;
    let row_groups = builder.metadata().row_groups().iter().map(|g| g.num_rows()).collect::<Vec<_>>();
    let mut selected = Vec::new();
    for group in 0..row_groups.len() {
        let mut filters = Vec::with_capacity(key_leaves.len());
        for leaf in &key_leaves {
            filters.push(builder.get_row_group_column_bloom_filter(group, *leaf).await?);
        }
        let rows = touched.first().map_or(0, |c| c.len());
        let hit = (0..rows).any(|i| filters.iter().zip(touched).all(|(f, column)| f.as_ref().is_none_or(|f| may_contain(f, column, i))));
        if hit {
            selected.push(group);
        }
    }
    // Positions of the selected row groups, in read order.
    let starts: Vec<i64> = row_groups.iter().scan(0i64, |next, n| Some(std::mem::replace(next, *next + n))).collect();
    let mut all_positions = selected.iter().flat_map(|&g| starts[g]..starts[g] + row_groups[g]);
    let mask = projection(table, builder.parquet_schema(), path, columns)?;
    let mut stream = builder.with_projection(mask).with_row_groups(selected.clone()).build()?;
    let (mut batches, mut positions) = (Vec::new(), Vec::new());
    while let Some(batch) = stream.try_next().await? {
        let here: Vec<i64> = all_positions.by_ref().take(batch.num_rows()).collect();
        let keep: arrow_array::BooleanArray = here.iter().map(|p| Some(!deleted.contains(p))).collect();
        positions.extend(here.iter().filter(|p| !deleted.contains(p)));
        batches.push(arrow_select::filter::filter_record_batch(&batch, &keep)?);
    }
    Ok(KeyRead { batches, positions, bytes: bytes.load(Ordering::Relaxed) })
}

#[cfg(test)]
mod tests {
    use arrow_array::Int64Array;
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use parquet::schema::types::ColumnPath;

    use super::*;
    use crate::testkit::LocalTable;

    #[tokio::test]
    async fn only_row_groups_whose_bloom_filters_may_hold_a_key_are_read() {
        let fixture = LocalTable::new().await;
        let table = fixture.load().await;
        let rows = 20_000i64;
        let batch = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef)]).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(1000))
            .set_column_bloom_filter_enabled(ColumnPath::from("id"), true)
            .build();
        let mut buffer = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut buffer, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let size = buffer.len() as u64;
        let path = format!("{}/data/bloom.parquet", table.metadata().location());
        table.file_io().new_output(&path).unwrap().write(buffer.into()).await.unwrap();
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path)
            .file_format(DataFileFormat::Parquet)
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .record_count(rows as u64)
            .file_size_in_bytes(size)
            .build()
            .unwrap();
        let touched: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![4242, 17_001]))];
        let deleted = HashSet::from([17_001]);
        let read = read_key_rows(&table, &file, &["id"], &["id"], &touched, &deleted).await.unwrap();
        assert!(read.positions.contains(&4242) && !read.positions.contains(&17_001), "deleted positions are left out");
        let ids: Vec<i64> = read.batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
        assert_eq!(ids.len(), read.positions.len());
        assert!(ids.iter().zip(&read.positions).all(|(id, pos)| id == pos), "positions line up with the rows");
        assert!(read.positions.len() < 5000, "{} rows read: the other row groups were skipped", read.positions.len());
        assert!(read.bytes < size / 2, "{} of {size} bytes read", read.bytes);
    }
}
