//! Partitioned Parquet data files through iceberg-rust's writers: partition values computed with
//! the spec's transforms on whole columns, rows grouped by them (row-format keys, one `take` per
//! partition), one rolling data-file writer per partition in turn (one writer's buffers in
//! memory at a time), and the encoded files uploaded side by side (one sequential round trip,
//! not one per file). Every file name carries a fresh UUID so retries and concurrent writers
//! never collide.

mod location;
mod properties;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_select::take::take_record_batch;
use bytes::Bytes;
use foldhash::fast::RandomState;
use iceberg::arrow::arrow_struct_to_literal;
use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, Literal, PartitionKey, PartitionSpecRef, SchemaRef};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};

pub use self::location::{DataLocations, MAX_PARTITION_DIR};
pub use self::properties::writer_properties;
pub(crate) use self::properties::{table_writer_properties, with_identity_columns};
use crate::base::error::{Error, Result};
use crate::engine::partition_values::{PartitionValues, group_rows};

/// Rows handed to the rolling writer at a time (how often it checks the file size).
const ROLL_CHECK_ROWS: usize = 8192;

/// Inputs up to this size (Arrow memory) are encoded in memory and uploaded side by side; an
/// ingest batch is far below it, a compaction's input is not.
const IN_MEMORY_INPUT_BYTES: usize = 256 << 20;

/// Encoded files held in memory before they are uploaded (side by side) to make room.
const UPLOAD_BATCH_BYTES: u64 = 16 << 20;

/// Write `batches` (rows of `table`'s current schema) as data files, split by the table's
/// default partition spec and rolled at `target_file_size` bytes. Nothing is committed.
pub async fn write_data_files(table: &Table, batches: &[RecordBatch], compression: &str, target_file_size: usize) -> Result<Vec<DataFile>> {
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
    futures::future::try_join_all(
        pending
            .into_iter()
            .map(|(path, bytes)| async move { io.new_output(&path)?.write(bytes).await.map_err(|e| Error::Storage { path, source: e }) }),
    )
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
    let in_order = crate::model::sort_order::sorted(&schema, metadata.default_sort_order(), batches)?;
    let batches = in_order.as_ref().map_or(batches, std::slice::from_ref);
    let batches: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
    let in_memory = batches.iter().map(|b| b.get_array_memory_size()).sum::<usize>() <= IN_MEMORY_INPUT_BYTES;
    let io = if in_memory { FileIO::new_with_memory() } else { table.file_io().clone() };
    let properties = table_writer_properties(compression, metadata.properties(), &batches)?;
    let rolling = RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(with_identity_columns(properties, &spec, &schema, &batches), schema.clone()),
        target_file_size,
        io.clone(),
        DataLocations::new(metadata, spec.partition_type(&schema)?)?,
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
fn split_by_partition<'a>(
    schema: &SchemaRef,
    spec: &PartitionSpecRef,
    batches: &[&'a RecordBatch],
) -> Result<Vec<(Option<PartitionKey>, Rows<'a>)>> {
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
    use parquet::basic::{Compression, ZstdLevel};

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

    /// The table's writer samples the rows it writes: a partitioned table's files of distinct
    /// ids have no dictionary, its files of repeated ids have one, a file of one id is not
    /// compressed.
    #[tokio::test]
    async fn the_table_writer_samples_the_rows_it_writes() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let fixture = crate::testkit::LocalTable::keyed_in_buckets(4).await;
        let table = fixture.load().await;
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap());
        let zstd = Compression::ZSTD(ZstdLevel::default());
        let cases = [
            ((0..3000).collect::<Vec<i64>>(), 4, false, zstd),
            ((0..3000).map(|i| i % 50).collect(), 4, true, zstd),
            // One id: one file, its column uncompressed.
            (vec![7; 3000], 1, true, Compression::UNCOMPRESSED),
        ];
        for (ids, files, dictionary, codec) in cases {
            let batch = RecordBatch::try_new(arrow.clone(), vec![Arc::new(Int64Array::from(ids)) as ArrayRef]).unwrap();
            let written = write_data_files(&table, &[batch], "zstd", 1 << 30).await.unwrap();
            assert_eq!(written.len(), files);
            for file in written {
                let bytes = table.file_io().new_input(file.file_path()).unwrap().read().await.unwrap();
                let reader = SerializedFileReader::new(bytes).unwrap();
                let column = reader.metadata().row_group(0).column(0);
                assert_eq!((column.dictionary_page_offset().is_some(), column.compression()), (dictionary, codec), "{}", file.file_path());
            }
        }
    }

    /// An identity partition's source column is one value in each file: it gets a dictionary
    /// and no codec there, though its values are distinct over the write.
    #[tokio::test]
    async fn an_identity_partition_column_is_a_dictionary_without_codec() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let fixture = crate::testkit::LocalTable::partitioned_by(Transform::Identity).await;
        let table = fixture.load().await;
        let arrow = Arc::new(schema_to_arrow_schema(table.metadata().current_schema()).unwrap());
        let batch = RecordBatch::try_new(arrow, vec![Arc::new(Int64Array::from_iter_values(0..50)) as ArrayRef]).unwrap();
        let written = write_data_files(&table, &[batch], "zstd", 1 << 30).await.unwrap();
        assert_eq!(written.len(), 50);
        for file in written {
            let bytes = table.file_io().new_input(file.file_path()).unwrap().read().await.unwrap();
            let reader = SerializedFileReader::new(bytes).unwrap();
            let column = reader.metadata().row_group(0).column(0);
            assert_eq!(
                (column.dictionary_page_offset().is_some(), column.compression()),
                (true, Compression::UNCOMPRESSED),
                "{}",
                file.file_path()
            );
        }
    }
}
