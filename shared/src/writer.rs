//! Partitioned Parquet data files through iceberg-rust's writers: the partition splitter
//! computes partition values (arrow kernels) and groups the rows by them (a per-row key, then one
//! filter per partition), one rolling data-file writer per partition takes its rows, and the
//! writers close side by side, so each file's upload overlaps the others' (one sequential round
//! trip, not one per file). Every file name
//! carries a fresh UUID so retries and concurrent writers never collide.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, SchemaRef, Struct};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{DefaultFileNameGenerator, DefaultLocationGenerator};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::unpartitioned_writer::UnpartitionedWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::error::{Error, Result};
use crate::tables::{BLOOM_FILTER_PROPERTY_PREFIX, DICTIONARY_SIZE_PROPERTY, PAGE_ROW_LIMIT_PROPERTY};

/// Rows handed to the rolling writer at a time (how often it checks the file size).
const ROLL_CHECK_ROWS: usize = 8192;

/// Parquet writer properties for a codec name from the `compression` knob. iceberg-rust does
/// not apply the table's compression property itself, so every writer goes through here.
pub fn writer_properties(compression: &str) -> Result<WriterProperties> {
    let codec = match compression {
        "zstd" => Compression::ZSTD(ZstdLevel::default()),
        "snappy" => Compression::SNAPPY,
        "lz4" => Compression::LZ4_RAW,
        "gzip" => Compression::GZIP(GzipLevel::default()),
        "none" => Compression::UNCOMPRESSED,
        other => return Err(Error::Config(format!("unknown compression {other:?}"))),
    };
    Ok(WriterProperties::builder().set_compression(codec).build())
}

/// [`writer_properties`] plus what the table's Iceberg properties ask of Parquet files: bloom
/// filters on columns, a row limit per page and a dictionary size limit (upsert tables ask for
/// all three, so a batch reads only the row groups and pages that may hold a touched key, and a
/// key column's dictionary, read with any of its pages, stays small).
pub(crate) fn table_writer_properties(compression: &str, properties: &std::collections::HashMap<String, String>) -> Result<WriterProperties> {
    let columns: Vec<&str> =
        properties.iter().filter(|(_, v)| v.as_str() == "true").filter_map(|(k, _)| k.strip_prefix(BLOOM_FILTER_PROPERTY_PREFIX)).collect();
    let page_rows = positive(properties, PAGE_ROW_LIMIT_PROPERTY)?;
    let dictionary_bytes = positive(properties, DICTIONARY_SIZE_PROPERTY)?;
    if columns.is_empty() && page_rows.is_none() && dictionary_bytes.is_none() {
        return writer_properties(compression);
    }
    let mut builder = writer_properties(compression)?.into_builder();
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
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec().clone();
    // Rows go out in the table's sort order (upsert tables: by key); the split keeps it.
    let in_order = crate::sort_order::sorted(&schema, metadata.default_sort_order(), batches)?;
    let batches = in_order.as_ref().map_or(batches, std::slice::from_ref);
    let rolling = RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(table_writer_properties(compression, metadata.properties())?, schema.clone()),
        target_file_size,
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata)?,
        DefaultFileNameGenerator::new(uuid::Uuid::new_v4().to_string(), None, DataFileFormat::Parquet),
    );
    let batches = batches.iter().filter(|b| b.num_rows() > 0);
    // An unpartitioned table (one created by another engine, or `partition_by = []`) has no
    // partition key to split by: one rolling writer takes every row.
    if spec.is_unpartitioned() {
        let mut writer = UnpartitionedWriter::new(DataFileWriterBuilder::new(rolling));
        for batch in batches {
            for slice in roll_slices(batch) {
                writer.write(slice).await?;
            }
        }
        return Ok(writer.close().await?);
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec)?;
    let builder = DataFileWriterBuilder::new(rolling);
    let mut writers = Vec::new();
    let mut by_key: HashMap<Struct, usize> = HashMap::new();
    for batch in batches {
        for (key, part) in splitter.split(batch)? {
            let i = match by_key.get(key.data()) {
                Some(&i) => i,
                None => {
                    by_key.insert(key.data().clone(), writers.len());
                    writers.push(builder.build(Some(key)).await?);
                    writers.len() - 1
                }
            };
            for slice in roll_slices(&part) {
                writers[i].write(slice).await?;
            }
        }
    }
    // Encoding is done; the closes upload (S3: one PUT each) and may overlap.
    let closed = futures::future::try_join_all(writers.iter_mut().map(|w| w.close())).await?;
    let files: Vec<DataFile> = closed.into_iter().flatten().collect();
    debug_assert!(files.iter().all(|f| f.content_type() == DataContentType::Data));
    Ok(files)
}

/// The rolling writer checks the size between writes: hand it slices so a large partition
/// rolls near the target instead of landing in one oversized file.
fn roll_slices(batch: &RecordBatch) -> impl Iterator<Item = RecordBatch> + '_ {
    (0..batch.num_rows()).step_by(ROLL_CHECK_ROWS).map(|start| batch.slice(start, ROLL_CHECK_ROWS.min(batch.num_rows() - start)))
}
