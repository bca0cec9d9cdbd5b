//! Partitioned Parquet data files through iceberg-rust's writers: partition values computed with
//! the spec's transforms on whole columns, rows grouped by them (row-format keys, one `take` per
//! partition), one rolling data-file writer per partition in turn (one writer's buffers in
//! memory at a time), and the encoded files uploaded side by side (one sequential round trip,
//! not one per file). Every file name carries a fresh UUID so retries and concurrent writers
//! never collide.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;
use arrow_select::take::take_record_batch;
use bytes::Bytes;
use foldhash::fast::RandomState;
use iceberg::arrow::arrow_struct_to_literal;
use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, Literal, PartitionKey, PartitionSpecRef, SchemaRef};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{DefaultFileNameGenerator, DefaultLocationGenerator};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::error::{Error, Result};
use crate::partition_values::{PartitionValues, group_rows};
use crate::tables::{BLOOM_FILTER_PROPERTY_PREFIX, DICTIONARY_SIZE_PROPERTY, PAGE_ROW_LIMIT_PROPERTY, ROW_GROUP_SIZE_PROPERTY};

/// Rows handed to the rolling writer at a time (how often it checks the file size).
const ROLL_CHECK_ROWS: usize = 8192;

/// Inputs up to this size (Arrow memory) are encoded in memory and uploaded side by side; an
/// ingest batch is far below it, a compaction's input is not.
const IN_MEMORY_INPUT_BYTES: usize = 256 << 20;

/// Encoded files held in memory before they are uploaded (side by side) to make room.
const UPLOAD_BATCH_BYTES: u64 = 16 << 20;

/// Rows of the input sampled to judge whether a column's values are distinct.
const DISTINCT_SAMPLE_ROWS: usize = 1024;

/// Parquet writer properties for writing `batches` with the codec named by the `compression`
/// knob. iceberg-rust does not apply the table's compression property itself, so every writer
/// goes through here.
///
/// A column whose values are distinct ([`distinct_columns`]: timestamps, ids, the lineage
/// offset) is written without a dictionary. parquet-rs keeps a dictionary until it outgrows its
/// page limit, so such a column paid for hashing every value, a dictionary page holding each
/// value once and an index per row: the offset column of 1M records (32 files) took 3.1 MB with
/// it and 1.2 MB plain. A column with repeats keeps its dictionary.
pub fn writer_properties(compression: &str, batches: &[&RecordBatch]) -> Result<WriterProperties> {
    let codec = match compression {
        "zstd" => Compression::ZSTD(ZstdLevel::default()),
        "snappy" => Compression::SNAPPY,
        "lz4" => Compression::LZ4_RAW,
        "gzip" => Compression::GZIP(GzipLevel::default()),
        "none" => Compression::UNCOMPRESSED,
        other => return Err(Error::Config(format!("unknown compression {other:?}"))),
    };
    let mut builder = WriterProperties::builder().set_compression(codec);
    for column in distinct_columns(batches) {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(column), false);
    }
    Ok(builder.build())
}

/// Top-level columns whose values are distinct in a sample of `batches` (the first
/// [`DISTINCT_SAMPLE_ROWS`] rows): at least nine in ten of the non-null values differ. A
/// dictionary of such a column costs about as much as the plain values it replaces plus an
/// index per row. A column that repeats only over spans longer than the sample is judged
/// distinct; a dictionary would have saved it little. Nested columns, booleans (parquet-rs gives them
/// no dictionary) and a type the row format cannot take keep the default: the sample is a
/// judgement, never a reason to fail a write.
fn distinct_columns(batches: &[&RecordBatch]) -> Vec<String> {
    let Some(first) = batches.iter().find(|b| b.num_rows() > 0) else { return Vec::new() };
    let rows = first.num_rows().min(DISTINCT_SAMPLE_ROWS);
    let mut distinct = Vec::new();
    for (field, column) in first.schema().fields().iter().zip(first.columns()) {
        if field.data_type().is_nested() || field.data_type() == &DataType::Boolean {
            continue;
        }
        let sample = column.slice(0, rows);
        let values = rows - sample.null_count();
        if values == 0 {
            continue;
        }
        let converter = RowConverter::new(vec![SortField::new(field.data_type().clone())]);
        let Ok(encoded) = converter.and_then(|c| c.convert_columns(&[Arc::clone(&sample)])) else { continue };
        let mut seen = HashSet::with_capacity_and_hasher(values, RandomState::default());
        let mut repeats = 0;
        // A low-cardinality column stops at its first few dozen rows.
        let is_distinct = (0..rows).filter(|&i| sample.is_valid(i)).all(|i| {
            repeats += usize::from(!seen.insert(encoded.row(i).data()));
            repeats * 10 <= values
        });
        if is_distinct {
            distinct.push(field.name().clone());
        }
    }
    distinct
}

/// [`writer_properties`] plus what the table's Iceberg properties ask of Parquet files: bloom
/// filters on columns, a row limit per page, a dictionary size limit and a row group size
/// (upsert tables ask for all four, so a batch reads only the row groups and pages that may
/// hold a touched key, and a key column's dictionary, read with any of its pages, stays small).
pub(crate) fn table_writer_properties(
    compression: &str,
    properties: &HashMap<String, String>,
    batches: &[&RecordBatch],
) -> Result<WriterProperties> {
    let columns: Vec<&str> =
        properties.iter().filter(|(_, v)| v.as_str() == "true").filter_map(|(k, _)| k.strip_prefix(BLOOM_FILTER_PROPERTY_PREFIX)).collect();
    let page_rows = positive(properties, PAGE_ROW_LIMIT_PROPERTY)?;
    let dictionary_bytes = positive(properties, DICTIONARY_SIZE_PROPERTY)?;
    let row_group_bytes = positive(properties, ROW_GROUP_SIZE_PROPERTY)?;
    if columns.is_empty() && page_rows.is_none() && dictionary_bytes.is_none() && row_group_bytes.is_none() {
        return writer_properties(compression, batches);
    }
    let mut builder = writer_properties(compression, batches)?.into_builder();
    for column in columns {
        builder = builder.set_column_bloom_filter_enabled(ColumnPath::from(column), true);
    }
    if let Some(rows) = page_rows {
        // The writer checks the page's row count once per write batch.
        builder = builder.set_data_page_row_count_limit(rows).set_write_batch_size(rows.min(1024));
    }
    if let Some(bytes) = dictionary_bytes {
        builder = builder.set_dictionary_page_size_limit(bytes);
    }
    if let Some(bytes) = row_group_bytes {
        builder = builder.set_max_row_group_bytes(Some(bytes));
    }
    Ok(builder.build())
}

/// A table property that must be a whole number above 0, if set.
fn positive(properties: &std::collections::HashMap<String, String>, key: &str) -> Result<Option<usize>> {
    properties
        .get(key)
        .map(|v| v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| Error::Config(format!("table property {key} = {v:?} is not allowed: a whole number above 0"))))
        .transpose()
}

/// Write `batches` (rows of `table`'s current schema) as data files, split by the table's
/// default partition spec and rolled at `target_file_size` bytes. Nothing is committed.
pub async fn write_data_files(
    table: &Table,
    batches: &[RecordBatch],
    compression: &str,
    target_file_size: usize,
) -> Result<Vec<DataFile>> {
    write_data_files_as(table, table.metadata().current_schema().clone(), batches, compression, target_file_size).await
}

/// [`write_data_files`] with `schema` (the table's next schema, when the commit evolves it):
/// the files carry its field ids.
pub async fn write_data_files_as(
    table: &Table,
    schema: SchemaRef,
    batches: &[RecordBatch],
    compression: &str,
    target_file_size: usize,
) -> Result<Vec<DataFile>> {
    encode_data_files(table, schema, batches, compression, target_file_size).await?.upload(table).await
}

/// Data files encoded: their entries are final, the last of their bytes may still wait for
/// [`EncodedFiles::upload`] (so a caller can upload them side by side with what lists them).
#[derive(Debug)]
pub struct EncodedFiles {
    pub files: Vec<DataFile>,
    /// Encoded in memory, not uploaded yet: (path, bytes).
    pending: Vec<(String, Bytes)>,
}

impl EncodedFiles {
    /// Upload what is still in memory, all files side by side (one round trip).
    pub async fn upload(self, table: &Table) -> Result<Vec<DataFile>> {
        upload_all(table, self.pending).await?;
        Ok(self.files)
    }
}

async fn upload_all(table: &Table, pending: Vec<(String, Bytes)>) -> Result<()> {
    let io = table.file_io();
    futures::future::try_join_all(pending.into_iter().map(|(path, bytes)| async move {
        io.new_output(&path)?.write(bytes).await.map_err(|e| Error::Storage { path, source: e })
    }))
    .await?;
    Ok(())
}

/// Encode `batches` as [`write_data_files_as`] does, one partition after another: one Parquet
/// writer (and its column buffers) open at a time. Small inputs are encoded in memory and
/// uploaded together (at [`UPLOAD_BATCH_BYTES`], or by [`EncodedFiles::upload`]); larger ones
/// (compaction) stream to storage, a file's upload at its close.
pub async fn encode_data_files(
    table: &Table,
    schema: SchemaRef,
    batches: &[RecordBatch],
    compression: &str,
    target_file_size: usize,
) -> Result<EncodedFiles> {
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec().clone();
    // Rows go out in the table's sort order (upsert tables: by key); the split keeps it.
    let in_order = crate::sort_order::sorted(&schema, metadata.default_sort_order(), batches)?;
    let batches = in_order.as_ref().map_or(batches, std::slice::from_ref);
    let batches: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
    let in_memory = batches.iter().map(|b| b.get_array_memory_size()).sum::<usize>() <= IN_MEMORY_INPUT_BYTES;
    let io = if in_memory { FileIO::new_with_memory() } else { table.file_io().clone() };
    let rolling = RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(table_writer_properties(compression, metadata.properties(), &batches)?, schema.clone()),
        target_file_size,
        io.clone(),
        DefaultLocationGenerator::new(metadata)?,
        DefaultFileNameGenerator::new(uuid::Uuid::new_v4().to_string(), None, DataFileFormat::Parquet),
    );
    let builder = DataFileWriterBuilder::new(rolling);
    let mut out = EncodedFiles { files: Vec::new(), pending: Vec::new() };
    let mut pending_bytes = 0u64;
    // An unpartitioned table (one created by another engine, or `partition_by = []`) has no
    // partition key to split by: one writer takes every row.
    let groups = if spec.is_unpartitioned() {
        vec![(None, batches.iter().map(|b| (*b, None)).collect())]
    } else {
        split_by_partition(&schema, &spec, &batches)?
    };
    for (key, parts) in groups {
        let mut writer = builder.build(key).await?;
        for (batch, rows) in parts {
            // One `take` per partition and batch; the rows are copied once.
            let part = match rows {
                Some(rows) => take_record_batch(batch, &rows)?,
                None => batch.clone(),
            };
            for slice in roll_slices(&part) {
                writer.write(slice).await?;
            }
        }
        let closed = writer.close().await?;
        if in_memory {
            for file in &closed {
                let bytes = io.new_input(file.file_path())?.read().await?;
                io.delete(file.file_path()).await?;
                pending_bytes += bytes.len() as u64;
                out.pending.push((file.file_path().to_string(), bytes));
            }
            if pending_bytes >= UPLOAD_BATCH_BYTES {
                upload_all(table, std::mem::take(&mut out.pending)).await?;
                pending_bytes = 0;
            }
        }
        out.files.extend(closed);
    }
    debug_assert!(out.files.iter().all(|f| f.content_type() == DataContentType::Data));
    Ok(out)
}

/// Row indices of one partition in one batch (`None`: every row).
type Rows<'a> = Vec<(&'a RecordBatch, Option<UInt32Array>)>;

/// Rows grouped by partition, in order of first appearance: partition values computed per
/// column with the spec's transforms (arrow kernels), rows grouped by their row-format key
/// (bytes, no per-row value objects), one partition key built per group.
fn split_by_partition<'a>(schema: &SchemaRef, spec: &PartitionSpecRef, batches: &[&'a RecordBatch]) -> Result<Vec<(Option<PartitionKey>, Rows<'a>)>> {
    let calculator = PartitionValues::try_new(spec, schema)?;
    let mut groups: Vec<(Option<PartitionKey>, Rows<'a>)> = Vec::new();
    // Each batch's groups by their key's bytes, across batches (rows are grouped per batch by
    // `group_rows`).
    let mut index: HashMap<Vec<u8>, usize, RandomState> = HashMap::default();
    for &batch in batches {
        let values = calculator.calculate(batch)?;
        let values = values.as_struct_opt().ok_or_else(|| Error::Invariant("partition values are not a struct".into()))?;
        let converter = RowConverter::new(values.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        let keys = converter.convert_columns(values.columns())?;
        for (first, rows) in group_rows(&keys) {
            let key = keys.row(first).data();
            let group = match index.get(key) {
                Some(&g) => g,
                None => {
                    let first: ArrayRef = Arc::new(values.slice(first, 1));
                    let value = match arrow_struct_to_literal(&first, calculator.partition_type())?.pop().flatten() {
                        Some(Literal::Struct(value)) => value,
                        _ => return Err(Error::Invariant("a partition value is not a struct".into())),
                    };
                    index.insert(key.to_vec(), groups.len());
                    groups.push((Some(PartitionKey::new(spec.as_ref().clone(), schema.clone(), value)), Vec::new()));
                    groups.len() - 1
                }
            };
            let rows = if rows.len() == batch.num_rows() { None } else { Some(UInt32Array::from(rows)) };
            groups[group].1.push((batch, rows));
        }
    }
    Ok(groups)
}

/// The rolling writer checks the size between writes: hand it slices so a large partition
/// rolls near the target instead of landing in one oversized file.
fn roll_slices(batch: &RecordBatch) -> impl Iterator<Item = RecordBatch> + '_ {
    (0..batch.num_rows()).step_by(ROLL_CHECK_ROWS).map(|start| batch.slice(start, ROLL_CHECK_ROWS.min(batch.num_rows() - start)))
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray};
    use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};

    use super::*;

    /// The split agrees with iceberg-rust's own splitter (per row literals, one filter per
    /// partition) on every batch, including null partition values, and merges batches.
    #[test]
    fn rows_group_by_partition_as_iceberg_splits_them_across_batches() {
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
                ])
                .build()
                .unwrap(),
        );
        let spec = UnboundPartitionSpec::builder()
            .with_spec_id(0)
            .add_partition_field(1, "id_bucket", Transform::Bucket(4))
            .unwrap()
            .add_partition_field(2, "name", Transform::Identity)
            .unwrap()
            .build()
            .bind(schema.clone())
            .unwrap();
        let spec = Arc::new(spec);
        let arrow = Arc::new(schema_to_arrow_schema(&schema).unwrap());
        let batch = |ids: Vec<i64>, names: Vec<Option<&str>>| {
            RecordBatch::try_new(arrow.clone(), vec![Arc::new(Int64Array::from(ids)), Arc::new(StringArray::from(names))]).unwrap()
        };
        let a = batch((0..40).collect(), (0..40).map(|i| [Some("x"), Some("y"), None][i % 3]).collect());
        let b = batch(vec![7, 7], vec![Some("x"), Some("x")]);
        let groups = split_by_partition(&schema, &spec, &[&a, &b]).unwrap();

        let reference = RecordBatchPartitionSplitter::try_new_with_computed_values(schema.clone(), spec.clone()).unwrap();
        for input in [&a, &b] {
            let mut ours: Vec<(String, RecordBatch)> = groups
                .iter()
                .flat_map(|(key, parts)| parts.iter().map(move |(batch, rows)| (key, batch, rows)))
                .filter(|(_, batch, _)| std::ptr::eq(**batch, input))
                .map(|(key, batch, rows)| {
                    let part = rows.as_ref().map_or_else(|| (*batch).clone(), |rows| take_record_batch(batch, rows).unwrap());
                    (format!("{:?}", key.as_ref().unwrap().data()), part)
                })
                .collect();
            let mut theirs: Vec<(String, RecordBatch)> =
                reference.split(input).unwrap().into_iter().map(|(key, part)| (format!("{:?}", key.data()), part)).collect();
            ours.sort_by(|x, y| x.0.cmp(&y.0));
            theirs.sort_by(|x, y| x.0.cmp(&y.0));
            assert_eq!(ours, theirs);
        }
        // One group per distinct key, in order of first appearance; `b`'s rows join `a`'s group.
        let keys: Vec<String> = groups.iter().map(|(key, _)| format!("{:?}", key.as_ref().unwrap().data())).collect();
        assert_eq!(keys.len(), keys.iter().collect::<std::collections::HashSet<_>>().len());
        let first_rows: Vec<(bool, u32)> =
            groups.iter().map(|(_, parts)| (std::ptr::eq(parts[0].0, &b), parts[0].1.as_ref().map_or(0, |rows| rows.value(0)))).collect();
        assert!(first_rows.is_sorted(), "{first_rows:?}");
        let from_b = groups.iter().map(|(_, parts)| parts.iter().filter(|(batch, _)| std::ptr::eq(*batch, &b)).count());
        assert_eq!(from_b.sum::<usize>(), 1);
    }

    /// Parquet files of `batch` as `properties` write them: which columns have a dictionary page.
    fn dictionaries(batch: &RecordBatch, properties: WriterProperties) -> Vec<(String, bool)> {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let mut file = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(Bytes::from(file)).unwrap();
        reader.metadata().row_group(0).columns().iter().map(|c| (c.column_path().string(), c.dictionary_page_offset().is_some())).collect()
    }

    /// Columns of distinct values (the offset, a timestamp, a string id, one with nulls between
    /// distinct values) go without a dictionary, under every writer's properties and the
    /// table's; columns with repeats keep theirs, at 85% distinct as at 2%, and so do a column of
    /// nulls only and the leaves of a struct.
    #[test]
    fn columns_of_distinct_values_are_written_without_a_dictionary() {
        use arrow_array::{StructArray, TimestampMicrosecondArray};
        use arrow_schema::Field;
        use crate::tables::lineage;
        let rows = 3000i64;
        let point = StructArray::from(vec![(
            Arc::new(Field::new("x", DataType::Int64, false)),
            Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
        )]);
        let batch = RecordBatch::try_from_iter([
            (lineage::OFFSET, Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef),
            ("event_time", Arc::new(TimestampMicrosecondArray::from_iter_values((0..rows).map(|i| 1_700_000_000_000_000 + i * 1000))) as ArrayRef),
            ("order_id", Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("order-{i:08}")))) as ArrayRef),
            ("coupon", Arc::new(StringArray::from_iter((0..rows).map(|i| (i % 3 == 0).then(|| format!("c{i}"))))) as ArrayRef),
            ("model", Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["a", "b"][i as usize % 2]))) as ArrayRef),
            // 85 distinct values in every 100 rows: under nine in ten.
            ("odometer", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i / 100 * 100 + (i % 100).min(84)))) as ArrayRef),
            ("nothing", Arc::new(Int64Array::from(vec![None; rows as usize])) as ArrayRef),
            ("point", Arc::new(point) as ArrayRef),
        ])
        .unwrap();
        let expected: Vec<(String, bool)> = [
            (lineage::OFFSET, false),
            ("event_time", false),
            ("order_id", false),
            ("coupon", false),
            ("model", true),
            ("odometer", true),
            ("nothing", true),
            ("point.x", true),
        ]
        .into_iter()
        .map(|(c, d)| (c.to_string(), d))
        .collect();
        assert_eq!(dictionaries(&batch, writer_properties("zstd", &[&batch]).unwrap()), expected);
        let bloom = [(format!("{BLOOM_FILTER_PROPERTY_PREFIX}model"), "true".to_string())].into();
        assert_eq!(dictionaries(&batch, table_writer_properties("zstd", &bloom, &[&batch]).unwrap()), expected);
        // Nothing to sample: every column keeps the default.
        let empty = batch.slice(0, 0);
        assert!(dictionaries(&batch, writer_properties("zstd", &[&empty]).unwrap()).iter().all(|(_, dictionary)| *dictionary));
    }

    /// The table's writer samples the rows it writes: a partitioned table's files of distinct
    /// ids have no dictionary, its files of repeated ids have one.
    #[tokio::test]
    async fn the_table_writer_samples_the_rows_it_writes() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let fixture = crate::testkit::LocalTable::keyed_in_buckets(4).await;
        let table = fixture.load().await;
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap());
        for (ids, dictionary) in [((0..3000).collect::<Vec<i64>>(), false), ((0..3000).map(|i| i % 50).collect(), true)] {
            let batch = RecordBatch::try_new(arrow.clone(), vec![Arc::new(Int64Array::from(ids)) as ArrayRef]).unwrap();
            let files = write_data_files(&table, &[batch], "zstd", 1 << 30).await.unwrap();
            assert_eq!(files.len(), 4);
            for file in files {
                let bytes = table.file_io().new_input(file.file_path()).unwrap().read().await.unwrap();
                let reader = SerializedFileReader::new(bytes).unwrap();
                assert_eq!(reader.metadata().row_group(0).column(0).dictionary_page_offset().is_some(), dictionary, "{}", file.file_path());
            }
        }
    }
}
