use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Date32Array, Int32Array, Int64Array, RecordBatch, StringArray, Time64MicrosecondArray, TimestampMicrosecondArray,
};
use iceberg::arrow::{PartitionValueCalculator, schema_to_arrow_schema};
use iceberg::spec::{NestedField, PartitionSpec, PrimitiveType, Schema, Transform, Type};
use iceberg::transform::create_transform_function;

use super::*;
use crate::testkit::TestResult;

/// The hashes the Iceberg spec lists for its bucket transform ("Appendix B: 32-bit Hash
/// Requirements").
#[test]
fn the_specs_hashes() {
    assert_eq!(hash_long(34), 2017239379, "int and long 34");
    assert_eq!(hash_long(17486), -653330422, "date 2017-11-16");
    assert_eq!(hash_long(81_068_000_000), -662762989, "time 22:31:08");
    assert_eq!(hash_long(1_510_871_468_000_000), -2047944441, "timestamp 2017-11-16T22:31:08");
}

/// Values at the edges of each type, around zero and scattered between, with nulls.
fn longs() -> Vec<Option<i64>> {
    let mut values: Vec<Option<i64>> =
        [i64::MIN, i64::MIN + 1, -1, 0, 1, 34, i64::from(i32::MAX), i64::from(i32::MAX) + 1, i64::MAX].map(Some).to_vec();
    // A fixed scatter over the whole range (an LCG), and nulls among them.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..2000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        values.push(if i % 17 == 0 { None } else { Some((x >> (i % 40)) as i64 ^ -((i % 2) as i64)) });
    }
    values
}

fn columns() -> Vec<ArrayRef> {
    let longs = longs();
    let ints: Vec<Option<i32>> = longs.iter().map(|v| v.map(|v| v as i32)).collect();
    vec![
        Arc::new(Int32Array::from(ints.clone())),
        Arc::new(Date32Array::from(ints)),
        Arc::new(Int64Array::from(longs.clone())),
        Arc::new(Time64MicrosecondArray::from(longs.iter().map(|v| v.map(|v| v.rem_euclid(86_400_000_000))).collect::<Vec<_>>())),
        Arc::new(TimestampMicrosecondArray::from(longs.clone())),
        Arc::new(TimestampMicrosecondArray::from(longs).with_timezone("+00:00")),
    ]
}

#[test]
fn buckets_of_every_integer_type_are_iceberg_rusts() -> TestResult {
    for column in columns() {
        for n in [1, 2, 3, 16, 1000, 1 << 20, i32::MAX as u32] {
            let ours = buckets_of_integers(&column, n).ok_or_else(|| format!("{} not taken", column.data_type()))?;
            let theirs = create_transform_function(&Transform::Bucket(n))?.transform(column.clone())?;
            assert_eq!(ours.to_data(), theirs.to_data(), "bucket[{n}] of {}", column.data_type());
        }
    }
    // Another type is left to iceberg-rust.
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
    assert!(buckets_of_integers(&strings, 16).is_none());
    Ok(())
}

/// The partition struct of a spec with every kind of field: buckets of integers (here), a
/// bucket of strings, hours, an identity and a truncate (iceberg-rust's), equal to what
/// iceberg-rust's calculator computes.
#[test]
fn a_batchs_values_are_iceberg_rusts() -> TestResult {
    let schema = Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "small", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::optional(3, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(4, "name", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()?;
    let spec = PartitionSpec::builder(schema.clone())
        .with_spec_id(0)
        .add_partition_field("id", "id_bucket", Transform::Bucket(16))?
        .add_partition_field("small", "small_bucket", Transform::Bucket(7))?
        .add_partition_field("ts", "ts_hour", Transform::Hour)?
        .add_partition_field("ts", "ts_bucket", Transform::Bucket(5))?
        .add_partition_field("name", "name_bucket", Transform::Bucket(4))?
        .add_partition_field("name", "name_trunc", Transform::Truncate(2))?
        .add_partition_field("small", "small", Transform::Identity)?
        .build()?;
    let longs = longs();
    let names: Vec<Option<String>> = longs.iter().map(|v| v.map(|v| format!("n{v}"))).collect();
    let batch = RecordBatch::try_new(
        Arc::new(schema_to_arrow_schema(&schema)?),
        vec![
            Arc::new(Int64Array::from(longs.clone())),
            Arc::new(Int32Array::from(longs.iter().map(|v| v.map(|v| v as i32)).collect::<Vec<_>>())),
            Arc::new(
                TimestampMicrosecondArray::from(longs.iter().map(|v| v.map(|v| v / 1000)).collect::<Vec<_>>()).with_timezone("+00:00"),
            ),
            Arc::new(StringArray::from(names)),
        ],
    )?;
    let (ours, theirs) = (PartitionValues::try_new(&spec, &Arc::new(schema.clone()))?, PartitionValueCalculator::try_new(&spec, &schema)?);
    assert_eq!(ours.partition_type(), theirs.partition_type());
    let (ours, theirs) = (ours.calculate(&batch)?, theirs.calculate(&batch)?);
    assert_eq!(ours.data_type(), theirs.data_type());
    assert_eq!(ours.to_data(), theirs.to_data());
    Ok(())
}

#[test]
fn an_unpartitioned_spec_is_refused() -> TestResult {
    let schema =
        Schema::builder().with_fields(vec![NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into()]).build()?;
    assert!(PartitionValues::try_new(&PartitionSpec::unpartition_spec(), &Arc::new(schema)).is_err());
    Ok(())
}

/// The rows of each key, keys in first-seen order, as a plain map of the key bytes finds them.
fn grouped_plainly(keys: &arrow_row::Rows) -> Vec<(usize, Vec<u32>)> {
    let mut groups: Vec<(Vec<u8>, usize, Vec<u32>)> = Vec::new();
    for (row, key) in keys.iter().enumerate() {
        match groups.iter_mut().find(|(k, _, _)| k.as_slice() == key.data()) {
            Some((_, _, rows)) => rows.push(row as u32),
            None => groups.push((key.data().to_vec(), row, vec![row as u32])),
        }
    }
    groups.into_iter().map(|(_, first, rows)| (first, rows)).collect()
}

#[test]
fn rows_group_by_key_whatever_its_width() -> TestResult {
    use arrow_row::{RowConverter, SortField};
    let longs = longs();
    let ints: ArrayRef = Arc::new(Int32Array::from(longs.iter().map(|v| v.map(|v| (v % 5) as i32)).collect::<Vec<_>>()));
    let hours: ArrayRef = Arc::new(Int32Array::from(longs.iter().map(|v| v.map(|v| (v % 3) as i32 + 490_000)).collect::<Vec<_>>()));
    let wide: ArrayRef = Arc::new(Int64Array::from(longs.iter().map(|v| v.map(|v| v % 4)).collect::<Vec<_>>()));
    let names: ArrayRef = Arc::new(StringArray::from(longs.iter().map(|v| v.map(|v| format!("n{}", v % 6))).collect::<Vec<_>>()));
    // Widths 5 (one int: plain), 10 (two ints: packed), 14 (an int and a long: packed), 23 (two
    // longs and an int: plain), strings (plain).
    for columns in [
        vec![ints.clone()],
        vec![hours.clone(), ints.clone()],
        vec![ints.clone(), wide.clone()],
        vec![wide.clone(), wide.clone(), hours.clone()],
        vec![names, ints],
    ] {
        let converter = RowConverter::new(columns.iter().map(|c| SortField::new(c.data_type().clone())).collect())?;
        let keys = converter.convert_columns(&columns)?;
        assert_eq!(group_rows(&keys), grouped_plainly(&keys), "{} columns", columns.len());
    }
    // Short strings start in the packed width and leave it: the packed path gives up, the
    // plain one groups them.
    let converter = RowConverter::new(vec![SortField::new(DataType::Utf8)])?;
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["a", "a much longer name", "a"]));
    let keys = converter.convert_columns(&[strings])?;
    assert!((8..=16).contains(&keys.row(0).data().len()), "the first key's width: {}", keys.row(0).data().len());
    assert!(group_fixed_width(&keys).is_none());
    assert_eq!(group_rows(&keys), vec![(0, vec![0, 2]), (1, vec![1])]);
    // Two ints take the packed path.
    let converter = RowConverter::new(vec![SortField::new(DataType::Int32), SortField::new(DataType::Int32)])?;
    let keys = converter.convert_columns(&[hours.clone(), hours])?;
    assert!(group_fixed_width(&keys).is_some());
    Ok(())
}
