//! The serde path's files against iceberg-rust's writer: the same header, the same blocks byte
//! for byte (sync markers aside), the same manifest-list entry, and iceberg-rust reads back the
//! same entries.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, FormatVersion, Literal, Manifest, ManifestContentType, ManifestFile,
    NestedField, PrimitiveType, Schema, SortOrder, Struct, TableMetadataBuilder, Transform, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};

use super::*;
use crate::testkit::TestResult;

/// Every partition value type the serde path writes, and one (decimal) it leaves to iceberg-rust.
fn schema() -> TestResult<Schema> {
    let field = |id, name: &str, ty| Arc::new(NestedField::optional(id, name, Type::Primitive(ty)));
    Ok(Schema::builder()
        .with_fields(vec![
            field(1, "id", PrimitiveType::Long),
            field(2, "ts", PrimitiveType::Timestamptz),
            field(3, "name", PrimitiveType::String),
            field(4, "ratio", PrimitiveType::Double),
            field(5, "flag", PrimitiveType::Boolean),
            field(6, "day", PrimitiveType::Date),
            field(7, "blob", PrimitiveType::Binary),
            field(8, "small", PrimitiveType::Int),
            field(9, "f", PrimitiveType::Float),
            field(10, "amount", PrimitiveType::Decimal { precision: 9, scale: 2 }),
            field(11, "at", PrimitiveType::Time),
            field(12, "local", PrimitiveType::Timestamp),
        ])
        .build()?)
}

/// Partitioned by `fields` (source column, transform), in that order.
fn table(format: FormatVersion, fields: &[(&str, Transform)]) -> TestResult<Table> {
    let schema = schema()?;
    let mut spec = UnboundPartitionSpec::builder();
    for (i, (column, transform)) in fields.iter().enumerate() {
        let source = schema.field_by_name(column).ok_or("no such column")?.id;
        spec = spec.add_partition_field(source, format!("{column}_p{i}"), *transform)?;
    }
    let metadata = TableMetadataBuilder::new(
        schema,
        spec.build(),
        SortOrder::unsorted_order(),
        "memory:///warehouse/t".into(),
        format,
        HashMap::new(),
    )?
    .build()?
    .metadata;
    Ok(Table::builder()
        .metadata(metadata)
        .identifier(TableIdent::new(NamespaceIdent::new("ns".into()), "t".into()))
        .file_io(FileIO::new_with_memory())
        .metadata_location("memory:///warehouse/t/metadata/v1.json")
        .runtime(iceberg::Runtime::try_current()?)
        .build()?)
}

const ALL_TYPES: &[(&str, Transform)] = &[
    ("name", Transform::Identity),
    ("ts", Transform::Hour),
    ("id", Transform::Bucket(16)),
    ("ratio", Transform::Identity),
    ("flag", Transform::Identity),
    ("day", Transform::Identity),
    ("blob", Transform::Identity),
    ("small", Transform::Identity),
    ("f", Transform::Identity),
    ("name", Transform::Truncate(2)),
    ("id", Transform::Identity),
    ("ts", Transform::Identity),
    ("at", Transform::Identity),
    ("local", Transform::Identity),
];

/// The `i`th file's partition values for [`ALL_TYPES`]: every third value null, NaNs now and then.
fn all_types_partition(i: i64) -> Struct {
    let null_or = |v: Literal| (i % 3 != 1).then_some(v);
    Struct::from_iter([
        null_or(Literal::string(format!("name-{}", i % 5))),
        null_or(Literal::int(490_000 + (i % 7) as i32)),
        null_or(Literal::int((i % 16) as i32)),
        null_or(Literal::double(if i % 4 == 0 { f64::NAN } else { i as f64 / 3.0 })),
        null_or(Literal::bool(i % 2 == 0)),
        null_or(Literal::date(19_000 + i as i32)),
        null_or(Literal::binary(vec![i as u8, 0, 255])),
        null_or(Literal::int(-(i as i32))),
        null_or(Literal::float(if i % 5 == 0 { f32::NAN } else { i as f32 })),
        null_or(Literal::string(format!("na{}", i % 3))),
        null_or(Literal::long(i * 1_000_003 - 5)),
        null_or(Literal::timestamptz(1_780_000_000_000_000 + i * 7_000_000)),
        null_or(Literal::time(3_600_000_000 + i * 1_000)),
        null_or(Literal::timestamp(1_700_000_000_000_000 - i * 9_000_000)),
    ])
}

fn file(table: &Table, i: i64, content: DataContentType, partition: Struct) -> TestResult<DataFile> {
    let counts = |base: u64| HashMap::from([(1, base + i as u64), (3, base * 2), (4, 7)]);
    let mut builder = DataFileBuilder::default();
    builder
        .content(content)
        .file_path(format!("{}/data/file-{i}.parquet", table.metadata().location()))
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(table.metadata().default_partition_spec_id())
        .record_count(100 + i as u64)
        .file_size_in_bytes(4096 + i as u64)
        .column_sizes(counts(1000))
        .value_counts(counts(100))
        .null_value_counts(counts(0))
        .nan_value_counts(HashMap::from([(4, i as u64 % 2)]))
        .lower_bounds(HashMap::from([(1, Datum::long(i)), (3, Datum::string("a")), (4, Datum::double(-1.5))]))
        .upper_bounds(HashMap::from([(1, Datum::long(i * 10)), (3, Datum::string("zz")), (4, Datum::double(2.5))]))
        .split_offsets(Some(vec![4, 4 + i]));
    if i % 2 == 0 {
        builder.sort_order_id(0).key_metadata(Some(vec![1, 2, 3]));
    }
    if content == DataContentType::PositionDeletes {
        builder.referenced_data_file(Some(format!("data/file-{i}.parquet")));
    }
    if content == DataContentType::EqualityDeletes {
        builder.equality_ids(Some(vec![1, 3]));
    }
    Ok(builder.build()?)
}

/// How an entry is added: `add_file`, `add_existing_file` or `add_delete_file`.
#[derive(Clone, Copy)]
enum Add {
    Added(i64),
    Existing,
    Deleted,
}

fn entries(table: &Table, n: i64, content: DataContentType, partition: impl Fn(i64) -> Struct) -> TestResult<Vec<(Add, DataFile)>> {
    (0..n)
        .map(|i| {
            let add = match i % 4 {
                0 => Add::Added(-1),
                1 => Add::Added(5 + i),
                2 => Add::Existing,
                _ => Add::Deleted,
            };
            Ok((add, file(table, i, content, partition(i))?))
        })
        .collect()
}

/// Writes `entries` with `writer` to its path and returns the file's bytes and list entry.
async fn write(
    table: &Table,
    mut writer: ManifestFileWriter,
    path: &str,
    entries: &[(Add, DataFile)],
) -> TestResult<(Vec<u8>, ManifestFile)> {
    for (i, (add, file)) in entries.iter().enumerate() {
        let i = i as i64;
        match *add {
            Add::Added(seq) => writer.add_file(file.clone(), seq)?,
            Add::Existing => writer.add_existing_file(file.clone(), 77, 3 + i, Some(2 + i))?,
            Add::Deleted => writer.add_delete_file(file.clone(), 4 + i, Some(4 + i))?,
        }
    }
    let listed = writer.write_manifest_file().await?;
    let bytes = table.file_io().new_input(path)?.read().await?.to_vec();
    Ok((bytes, listed))
}

/// Both writers' files for the same entries: (ours, iceberg-rust's), each with its list entry.
async fn both(table: &Table, content: ManifestContentType, entries: &[(Add, DataFile)]) -> TestResult<[(Vec<u8>, ManifestFile); 2]> {
    both_for(table, content, entries, Some(42)).await
}

/// [`both`], the manifest owned by `snapshot_id` (None: staged, owned by no snapshot yet).
async fn both_for(
    table: &Table,
    content: ManifestContentType,
    entries: &[(Add, DataFile)],
    snapshot_id: Option<i64>,
) -> TestResult<[(Vec<u8>, ManifestFile); 2]> {
    let schema = table.metadata().current_schema();
    let ours_path = format!("{}/metadata/ours.avro", table.metadata().location());
    let theirs_path = format!("{}/metadata/theirs.avro", table.metadata().location());
    let ours = ManifestFileWriter::new(table, schema, ours_path.clone(), snapshot_id, content)?;
    let spec = table.metadata().default_partition_spec().as_ref().clone();
    let (spec_id, partition_type) = (spec.spec_id(), spec.partition_type(schema)?);
    let builder = ManifestWriterBuilder::new(table.file_io().new_output(&theirs_path)?, snapshot_id, schema.clone(), spec);
    let inner = Inner::Library(library_writer(builder, table.metadata().format_version(), content));
    let theirs = ManifestFileWriter { inner, spec_id, partition_type };
    Ok([write(table, ours, &ours_path, entries).await?, write(table, theirs, &theirs_path, entries).await?])
}

/// A container file's header length and sync marker (the file's last 16 bytes end every block).
fn header_and_marker(bytes: &[u8]) -> TestResult<(usize, [u8; 16])> {
    let marker: [u8; 16] = bytes[bytes.len().saturating_sub(16)..].try_into()?;
    let at = bytes.windows(16).position(|w| w == marker).ok_or("no sync marker")?;
    Ok((at + 16, marker))
}

/// The blocks after the header, with the file's sync marker blanked.
fn blocks(bytes: &[u8]) -> TestResult<Vec<u8>> {
    let (start, marker) = header_and_marker(bytes)?;
    let mut out = bytes[start..].to_vec();
    for i in 0..out.len().saturating_sub(15) {
        if out[i..i + 16] == marker {
            out[i..i + 16].fill(0);
        }
    }
    Ok(out)
}

fn header_parts(bytes: &[u8]) -> TestResult<(String, HashMap<String, Vec<u8>>)> {
    let reader = apache_avro::Reader::new(bytes)?;
    Ok((reader.writer_schema().canonical_form(), reader.user_metadata().clone()))
}

fn assert_same(ours: &(Vec<u8>, ManifestFile), theirs: &(Vec<u8>, ManifestFile)) -> TestResult {
    assert_eq!(header_parts(&ours.0)?, header_parts(&theirs.0)?, "headers differ");
    assert_eq!(blocks(&ours.0)?, blocks(&theirs.0)?, "blocks differ");
    assert_eq!(ours.0.len(), theirs.0.len());
    let mut listed = ours.1.clone();
    listed.manifest_path = theirs.1.manifest_path.clone();
    assert_eq!(listed, theirs.1, "manifest-list entries differ");
    let read = |bytes: &[u8]| Manifest::parse_avro(bytes).map(|m| m.entries().to_vec());
    assert_eq!(read(&ours.0)?, read(&theirs.0)?, "iceberg-rust reads different entries");
    Ok(())
}

/// The error `result` holds, as text; empty if it is none.
fn message<T>(result: Result<T>) -> String {
    result.err().map(|e| e.to_string()).unwrap_or_default()
}

fn is_serde(writer: &ManifestFileWriter) -> bool {
    matches!(writer.inner, Inner::Serde(_))
}

#[tokio::test]
async fn data_manifests_match_iceberg_rust_for_every_partition_type() -> TestResult {
    for format in [FormatVersion::V2, FormatVersion::V3] {
        let table = table(format, ALL_TYPES)?;
        let entries = entries(&table, 12, DataContentType::Data, all_types_partition)?;
        let [ours, theirs] = both(&table, ManifestContentType::Data, &entries).await?;
        assert_same(&ours, &theirs)?;
        let summaries = ours.1.partitions.as_ref().ok_or("no partition summaries")?;
        assert!(summaries[3].contains_nan == Some(true) && summaries[0].contains_null);
    }
    Ok(())
}

#[tokio::test]
async fn staged_manifests_owned_by_no_snapshot_match() -> TestResult {
    let table = table(FormatVersion::V2, &[("ts", Transform::Hour), ("id", Transform::Bucket(16))])?;
    let added: Vec<_> = (0..8)
        .map(|i| {
            let partition = Struct::from_iter([Some(Literal::int(490_000 + i as i32)), Some(Literal::int(i as i32))]);
            Ok((Add::Added(-1), file(&table, i, DataContentType::Data, partition)?))
        })
        .collect::<TestResult<_>>()?;
    let [ours, theirs] = both_for(&table, ManifestContentType::Data, &added, None).await?;
    assert_same(&ours, &theirs)?;
    assert_eq!(ours.1.added_snapshot_id, -1);
    Ok(())
}

#[tokio::test]
async fn many_entries_split_into_the_same_blocks() -> TestResult {
    let table = table(FormatVersion::V2, &[("ts", Transform::Hour), ("id", Transform::Bucket(16))])?;
    let entries = entries(&table, 400, DataContentType::Data, |i| {
        Struct::from_iter([Some(Literal::int(490_000 + (i % 9) as i32)), Some(Literal::int((i % 16) as i32))])
    })?;
    let [ours, theirs] = both(&table, ManifestContentType::Data, &entries).await?;
    let (start, marker) = header_and_marker(&ours.0)?;
    assert!(ours.0[start..].windows(16).filter(|w| *w == marker).count() > 1, "one block only: raise the entry count");
    assert_same(&ours, &theirs)?;
    Ok(())
}

#[tokio::test]
async fn delete_and_unpartitioned_manifests_match() -> TestResult {
    let table = table(FormatVersion::V2, &[("name", Transform::Identity)])?;
    let partition = |i: i64| Struct::from_iter([Some(Literal::string(format!("k{i}")))]);
    for content in [DataContentType::PositionDeletes, DataContentType::EqualityDeletes] {
        let entries = entries(&table, 6, content, partition)?;
        let [ours, theirs] = both(&table, ManifestContentType::Deletes, &entries).await?;
        assert_same(&ours, &theirs)?;
    }
    let unpartitioned = self::table(FormatVersion::V2, &[])?;
    let entries = entries(&unpartitioned, 5, DataContentType::Data, |_| Struct::empty())?;
    let [ours, theirs] = both(&unpartitioned, ManifestContentType::Data, &entries).await?;
    assert_same(&ours, &theirs)
}

#[tokio::test]
async fn v1_and_decimal_partitions_go_through_iceberg_rust() -> TestResult {
    let decimal = table(FormatVersion::V2, &[("amount", Transform::Identity)])?;
    let v1 = table(FormatVersion::V1, &[("name", Transform::Identity)])?;
    let v2 = table(FormatVersion::V2, &[("name", Transform::Identity)])?;
    let new = |t: &Table| {
        let path = format!("{}/metadata/m.avro", t.metadata().location());
        ManifestFileWriter::new(t, t.metadata().current_schema(), path, Some(1), ManifestContentType::Data)
    };
    assert!(!is_serde(&new(&decimal)?) && !is_serde(&new(&v1)?) && is_serde(&new(&v2)?));
    let entries = entries(&decimal, 3, DataContentType::Data, |i| Struct::from_iter([Some(Literal::decimal(12_345 + i as i128))]))?;
    let [ours, theirs] = both(&decimal, ManifestContentType::Data, &entries).await?;
    assert_same(&ours, &theirs)
}

#[tokio::test]
async fn refuses_what_iceberg_rust_refuses() -> TestResult {
    let table = table(FormatVersion::V2, &[("name", Transform::Identity)])?;
    let partition = Struct::from_iter([Some(Literal::string("a"))]);
    let path = format!("{}/metadata/m.avro", table.metadata().location());
    let new = |content| ManifestFileWriter::new(&table, table.metadata().current_schema(), path.clone(), Some(1), content);

    let deletes = file(&table, 0, DataContentType::PositionDeletes, partition.clone())?;
    let err = message(new(ManifestContentType::Data)?.add_file(deletes, -1));
    assert!(err.contains("file-0.parquet") && err.contains("PositionDeletes"), "{err}");

    let data = file(&table, 1, DataContentType::Data, partition.clone())?;
    let err = message(new(ManifestContentType::Data)?.add_existing_file(data.clone(), 1, 2, None));
    assert!(err.contains("file-1.parquet") && err.contains("sequence numbers"), "{err}");

    // A partition value of another type is an error naming it, not a panic.
    let mut writer = new(ManifestContentType::Data)?;
    writer.add_file(file(&table, 2, DataContentType::Data, Struct::from_iter([Some(Literal::int(3))]))?, -1)?;
    let err = message(writer.write_manifest_file().await);
    assert!(err.contains("Int(3)"), "{err}");
    Ok(())
}
