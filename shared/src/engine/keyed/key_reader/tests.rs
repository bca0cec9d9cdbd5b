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
    let found =
        |r: &KeyRead| -> Vec<i64> { r.batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect() };
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
