//! The Parquet writer properties of a write: the table's codec and what its Iceberg properties
//! ask for, no dictionary for columns of distinct values (judged on a sample of the write), no
//! codec for columns of one short value or nulls only (in the whole write, or in each file: an
//! identity partition's source column).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::ByteArrayType;
use arrow_array::{Array, ArrayRef, GenericByteArray, RecordBatch, Scalar};
use arrow_buffer::ArrowNativeType;
use arrow_ord::cmp::eq;
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;
use foldhash::fast::RandomState;
use iceberg::spec::{PartitionSpec, Schema, Transform};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::base::error::{Error, Result};
use crate::model::tables::{BLOOM_FILTER_PROPERTY_PREFIX, DICTIONARY_SIZE_PROPERTY, PAGE_ROW_LIMIT_PROPERTY, ROW_GROUP_SIZE_PROPERTY};

/// Rows of the input sampled to judge whether a column's values are distinct.
const DISTINCT_SAMPLE_ROWS: usize = 1024;

/// A column of one value at most this long (bytes; a fixed-width type by its width) is written
/// without the codec ([`uniform_columns`]).
const UNIFORM_VALUE_BYTES: usize = 64;

/// Rows of a column compared with its first before all of them are ([`uniform_columns`]).
const UNIFORM_QUICK_ROWS: usize = 16;

/// Parquet writer properties for writing `batches` with the codec named by the `compression`
/// knob. iceberg-rust does not apply the table's compression property itself, so every writer
/// goes through here.
///
/// A column whose values are distinct ([`distinct_columns`]: timestamps, ids, the lineage
/// offset) is written without a dictionary. parquet-rs keeps a dictionary until it outgrows its
/// page limit, so such a column paid for hashing every value, a dictionary page holding each
/// value once and an index per row: the offset column of 1M records (32 files) took 3.1 MB with
/// it and 1.2 MB plain. A column with repeats keeps its dictionary. A column of one short value
/// or of nulls only ([`uniform_columns`]) is written without the codec.
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
    let distinct = distinct_columns(batches);
    if codec != Compression::UNCOMPRESSED {
        for column in uniform_columns(batches, &distinct) {
            builder = builder.set_column_compression(ColumnPath::from(column), Compression::UNCOMPRESSED);
        }
    }
    for column in distinct {
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

/// Top-level columns that hold one value in every row of `batches`, or only nulls, and so in
/// every file of the write: such a chunk is a dictionary page of that value and a data page of
/// run-length zeros, tens of bytes that a codec cannot shrink (zstd's frame adds some), while
/// every compressed chunk makes its codec: parquet-rs builds a zstd compression and a
/// decompression context for each (`ZSTDCodec::new`), and each context reads `cpuid` three times,
/// a VM exit on an x86 guest such as Firecracker. The lineage topic is one in every ingest, an
/// optional field no record of a batch set another. A column without a dictionary (`distinct`,
/// or a boolean: its plain values are what the codec shrinks) or of a long value keeps its
/// codec, and so does a column that differs within its first [`UNIFORM_QUICK_ROWS`] rows
/// (most do, and are judged there).
fn uniform_columns(batches: &[&RecordBatch], distinct: &[String]) -> Vec<String> {
    let Some(first) = batches.iter().find(|b| b.num_rows() > 0) else { return Vec::new() };
    let mut uniform = Vec::new();
    for (index, field) in first.schema().fields().iter().enumerate() {
        let value = first.column(index).slice(0, 1);
        let eligible =
            value.is_null(0) || (!distinct.contains(field.name()) && field.data_type() != &DataType::Boolean && short_values(&value));
        if field.data_type().is_nested() || !eligible {
            continue;
        }
        let quick = first.column(index).slice(0, first.num_rows().min(UNIFORM_QUICK_ROWS));
        if all_equal(&quick, &value) && batches.iter().all(|b| all_equal(b.column(index), &value)) {
            uniform.push(field.name().clone());
        }
    }
    uniform
}

/// Whether every value of `column` equals `value` (one row), or every one is null where `value`
/// is (arrow-ord's `eq`; a type it cannot compare is not uniform).
fn all_equal(column: &ArrayRef, value: &ArrayRef) -> bool {
    if value.is_null(0) {
        return column.null_count() == column.len();
    }
    if column.null_count() > 0 {
        return false;
    }
    // `eq` compares a string a row at a time (~30 instructions); one value repeated is checked
    // on the buffers instead, then its first row compared.
    let repeated = match column.data_type() {
        DataType::Utf8 => Some(repeats_one_value(column.as_string::<i32>())),
        DataType::LargeUtf8 => Some(repeats_one_value(column.as_string::<i64>())),
        DataType::Binary => Some(repeats_one_value(column.as_binary::<i32>())),
        DataType::LargeBinary => Some(repeats_one_value(column.as_binary::<i64>())),
        _ => None,
    };
    let compared = if repeated.is_some() { column.slice(0, column.len().min(1)) } else { Arc::clone(column) };
    repeated.unwrap_or(true) && eq(&compared, &Scalar::new(Arc::clone(value))).is_ok_and(|same| same.true_count() == compared.len())
}

/// Whether every value of a string or binary array is its first: every length is the first's and
/// the values' bytes repeat with that period (each byte equals the one a value before it).
fn repeats_one_value<T: ByteArrayType>(array: &GenericByteArray<T>) -> bool {
    let offsets = array.value_offsets();
    let (Some(&start), Some(&end)) = (offsets.first(), offsets.last()) else { return true };
    let width = offsets.get(1).map_or(0, |&next| (next - start).as_usize());
    let bytes = &array.value_data()[start.as_usize()..end.as_usize()];
    offsets.windows(2).all(|pair| (pair[1] - pair[0]).as_usize() == width) && bytes.get(width..) == bytes.get(..bytes.len() - width)
}

/// Whether every value of `values` is at most [`UNIFORM_VALUE_BYTES`] long: fixed-width types
/// by their width, strings and binaries by each length; other types (and booleans, which have
/// no dictionary) are not.
fn short_values(values: &ArrayRef) -> bool {
    let short = |len: usize| len <= UNIFORM_VALUE_BYTES;
    match values.data_type() {
        DataType::Boolean => false,
        DataType::Utf8 => values.as_string::<i32>().offsets().lengths().all(short),
        DataType::LargeUtf8 => values.as_string::<i64>().offsets().lengths().all(short),
        DataType::Binary => values.as_binary::<i32>().offsets().lengths().all(short),
        DataType::LargeBinary => values.as_binary::<i64>().offsets().lengths().all(short),
        DataType::Utf8View => values.as_string_view().views().iter().all(|view| short(*view as u32 as usize)),
        DataType::BinaryView => values.as_binary_view().views().iter().all(|view| short(*view as u32 as usize)),
        DataType::FixedSizeBinary(width) => usize::try_from(*width).is_ok_and(short),
        other => other.primitive_width().is_some_and(short),
    }
}

/// `properties` for the data files of a table partitioned by `spec`: each identity partition's
/// source column (top-level, of short values in `batches`) gets a dictionary and no codec. A file
/// holds one partition, so there the column is one value or nulls ([`uniform_columns`]), whatever
/// the write's sample judged of it over all partitions.
pub(crate) fn with_identity_columns(
    properties: WriterProperties,
    spec: &PartitionSpec,
    schema: &Schema,
    batches: &[&RecordBatch],
) -> WriterProperties {
    let columns: Vec<&str> = spec
        .fields()
        .iter()
        .filter(|f| f.transform == Transform::Identity)
        .filter_map(|f| schema.as_struct().field_by_id(f.source_id))
        .map(|field| field.name.as_str())
        .filter(|name| batches.iter().all(|b| b.schema().index_of(name).is_ok_and(|i| short_values(b.column(i)))))
        .collect();
    if columns.is_empty() {
        return properties;
    }
    let mut builder = properties.into_builder();
    for name in columns {
        builder = builder
            .set_column_dictionary_enabled(ColumnPath::from(name), true)
            .set_column_compression(ColumnPath::from(name), Compression::UNCOMPRESSED);
    }
    builder.build()
}

/// A table property that must be a whole number above 0, if set.
fn positive(properties: &std::collections::HashMap<String, String>, key: &str) -> Result<Option<usize>> {
    properties
        .get(key)
        .map(|v| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| Error::Config(format!("table property {key} = {v:?} is not allowed: a whole number above 0")))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray};
    use bytes::Bytes;

    use super::*;

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
        use crate::model::tables::lineage;
        use arrow_array::{StructArray, TimestampMicrosecondArray};
        use arrow_schema::Field;
        let rows = 3000i64;
        let point = StructArray::from(vec![(
            Arc::new(Field::new("x", DataType::Int64, false)),
            Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
        )]);
        let batch = RecordBatch::try_from_iter([
            (lineage::OFFSET, Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef),
            (
                "event_time",
                Arc::new(TimestampMicrosecondArray::from_iter_values((0..rows).map(|i| 1_700_000_000_000_000 + i * 1000))) as ArrayRef,
            ),
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

    /// Parquet files of `batch` as `properties` write them: each column chunk's codec and size.
    fn chunks(batch: &RecordBatch, properties: WriterProperties) -> Vec<(String, Compression, i64)> {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let mut file = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(Bytes::from(file)).unwrap();
        reader.metadata().row_group(0).columns().iter().map(|c| (c.column_path().string(), c.compression(), c.compressed_size())).collect()
    }

    /// Columns of one short value, or of nulls only, go uncompressed and take no more room than
    /// compressed; a column of repeats, one of distinct values, a constant boolean, a constant
    /// long text, a column that differs after the first rows, or in a later batch only, and a
    /// struct's leaves keep the codec.
    #[test]
    fn uniform_columns_are_written_uncompressed() {
        use arrow_array::{BooleanArray, Int32Array, StructArray};
        use arrow_schema::Field;
        let rows = 3000usize;
        let point = StructArray::from(vec![(
            Arc::new(Field::new("x", DataType::Int64, false)),
            Arc::new(Int64Array::from(vec![7; rows])) as ArrayRef,
        )]);
        let batch = RecordBatch::try_from_iter([
            ("topic", Arc::new(StringArray::from(vec!["vehicle-telemetry"; rows])) as ArrayRef),
            ("partition", Arc::new(Int32Array::from(vec![3; rows])) as ArrayRef),
            ("nothing", Arc::new(Int64Array::from(vec![None; rows])) as ArrayRef),
            ("model", Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["a", "b"][i % 2]))) as ArrayRef),
            ("offset", Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef),
            ("charging", Arc::new(BooleanArray::from(vec![true; rows])) as ArrayRef),
            ("note", Arc::new(StringArray::from(vec!["n".repeat(UNIFORM_VALUE_BYTES + 1); rows])) as ArrayRef),
            // The same for the quick check's rows, then not.
            ("late", Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| i / 1000))) as ArrayRef),
            ("region", Arc::new(StringArray::from_iter_values((0..rows).map(|i| if i < 2000 { "eu" } else { "us" }))) as ArrayRef),
            ("blank", Arc::new(StringArray::from(vec![""; rows])) as ArrayRef),
            ("point", Arc::new(point) as ArrayRef),
        ])
        .unwrap();
        let zstd = Compression::ZSTD(ZstdLevel::default());
        let expect = |uncompressed: &[&str]| -> Vec<(String, Compression)> {
            ["topic", "partition", "nothing", "model", "offset", "charging", "note", "late", "region", "blank", "point.x"]
                .iter()
                .map(|c| (c.to_string(), if uncompressed.contains(c) { Compression::UNCOMPRESSED } else { zstd }))
                .collect()
        };
        let codecs = |batch: &RecordBatch, properties: WriterProperties| -> Vec<(String, Compression)> {
            chunks(batch, properties).into_iter().map(|(column, codec, _)| (column, codec)).collect()
        };
        let properties = writer_properties("zstd", &[&batch]).unwrap();
        assert_eq!(codecs(&batch, properties.clone()), expect(&["topic", "partition", "nothing", "blank"]));
        assert_eq!(
            codecs(&batch, table_writer_properties("zstd", &HashMap::new(), &[&batch]).unwrap()),
            expect(&["topic", "partition", "nothing", "blank"])
        );
        // No bigger than the same chunks compressed.
        let compressed = WriterProperties::builder().set_compression(zstd).build();
        for ((column, codec, size), (_, _, zstd_size)) in chunks(&batch, properties).into_iter().zip(chunks(&batch, compressed)) {
            if codec == Compression::UNCOMPRESSED {
                assert!(size <= zstd_size, "{column}: {size} bytes uncompressed, {zstd_size} compressed");
            }
        }
        // A later batch with another topic: not one value in the write.
        let other = batch.slice(0, 10);
        let mut columns = other.columns().to_vec();
        columns[0] = Arc::new(StringArray::from(vec!["other"; 10]));
        let other = RecordBatch::try_new(batch.schema(), columns).unwrap();
        assert_eq!(codecs(&batch, writer_properties("zstd", &[&batch, &other]).unwrap()), expect(&["partition", "nothing", "blank"]));
        // Nothing to judge, or no codec to leave off.
        assert_eq!(codecs(&batch, writer_properties("zstd", &[&batch.slice(0, 0)]).unwrap()), expect(&[]));
        assert!(
            chunks(&batch, writer_properties("none", &[&batch]).unwrap()).iter().all(|(_, codec, _)| *codec == Compression::UNCOMPRESSED)
        );
    }
}
