//! A batch's partition values: iceberg-rust's `PartitionValueCalculator` (project each
//! partition field's source column, apply its transform, gather a struct), except that
//! `bucket` of an integer-valued column is hashed here; and its rows grouped by their
//! partition's row-format key ([`group_rows`]).
//!
//! iceberg-rust hashes each value through the `murmur3` crate, which reads its input through
//! `std::io::Read`: 188 instructions a row for the reference pipeline's `bucket(16,
//! vehicle_id)`, half of the partition split (callgrind). The spec's hash of an int, long,
//! date, time or timestamp is Murmur3 x86 32-bit (seed 0) of the value as 8 little-endian
//! bytes, two blocks, which is a dozen multiplies written out. Every other transform and
//! source type stays iceberg-rust's.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowPrimitiveType, Date32Type, Int32Type, Int64Type, Time64MicrosecondType, TimestampMicrosecondType};
use arrow_array::{ArrayRef, RecordBatch, StructArray};
use arrow_row::Rows;
use arrow_schema::{DataType, Fields};
use foldhash::fast::RandomState;
use iceberg::arrow::record_batch_projector::RecordBatchProjector;
use iceberg::arrow::type_to_arrow_type;
use iceberg::spec::{PartitionSpec, SchemaRef, StructType, Transform, Type};
use iceberg::transform::{BoxedTransformFunction, create_transform_function};

use crate::base::error::{Error, Result};

/// Computes the partition values of batches of one schema under one spec.
pub(crate) struct PartitionValues {
    projector: RecordBatchProjector,
    transforms: Vec<PartitionTransform>,
    /// The partition struct's Iceberg type, and its Arrow fields.
    partition_type: StructType,
    fields: Fields,
}

struct PartitionTransform {
    /// `Some(n)` for `bucket[n]`.
    buckets: Option<u32>,
    function: BoxedTransformFunction,
}

impl PartitionValues {
    /// For a partitioned `spec` of `schema` (an unpartitioned spec is an error, as in
    /// iceberg-rust).
    pub(crate) fn try_new(spec: &PartitionSpec, schema: &SchemaRef) -> Result<Self> {
        if spec.is_unpartitioned() {
            return Err(Error::Invariant("partition values of an unpartitioned spec".into()));
        }
        let transforms = spec
            .fields()
            .iter()
            .map(|field| {
                let buckets = match field.transform {
                    Transform::Bucket(n) => Some(n),
                    _ => None,
                };
                Ok(PartitionTransform { buckets, function: create_transform_function(&field.transform)? })
            })
            .collect::<Result<Vec<_>>>()?;
        let sources: Vec<i32> = spec.fields().iter().map(|field| field.source_id).collect();
        let projector = RecordBatchProjector::from_iceberg_schema(Arc::clone(schema), &sources)?;
        let partition_type = spec.partition_type(schema)?;
        let DataType::Struct(fields) = type_to_arrow_type(&Type::Struct(partition_type.clone()))? else {
            return Err(Error::Invariant("a partition type is not a struct".into()));
        };
        Ok(PartitionValues { projector, transforms, partition_type, fields })
    }

    /// The partition struct's Iceberg type.
    pub(crate) fn partition_type(&self) -> &StructType {
        &self.partition_type
    }

    /// The partition values of each row of `batch`, a struct with a column per partition field.
    pub(crate) fn calculate(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        let sources = self.projector.project_column(batch.columns())?;
        let values = sources
            .into_iter()
            .zip(&self.transforms)
            .map(|(source, transform)| match transform.buckets.and_then(|n| buckets_of_integers(&source, n)) {
                Some(buckets) => Ok(buckets),
                None => Ok(transform.function.transform(source)?),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(StructArray::try_new(self.fields.clone(), values, None)?))
    }
}

/// The rows of each distinct key of `keys` (the row format of a batch's partition values): the
/// key's first row and all its rows, keys in the order they first appear. Keys of 8 to 16 bytes
/// all of one width (partitions of ints, dates, hours and buckets: 5 bytes a value) are compared
/// as one `u128` of two overlapping words: hashing each row's bytes was 110 instructions a row
/// (callgrind).
pub(crate) fn group_rows(keys: &Rows) -> Vec<(usize, Vec<u32>)> {
    if let Some(groups) = group_fixed_width(keys) {
        return groups;
    }
    group_by(keys.iter().enumerate().map(|(row, key)| Some((row, key.data())))).unwrap_or_default()
}

/// `None` where the keys are not all of one width from 8 to 16 bytes.
fn group_fixed_width(keys: &Rows) -> Option<Vec<(usize, Vec<u32>)>> {
    let width = keys.iter().next()?.data().len();
    if !(8..=16).contains(&width) {
        return None;
    }
    // The first and the last 8 bytes hold every byte of a key of 8 to 16: one-to-one.
    let packed = |data: &[u8]| {
        let (head, tail) = (data.first_chunk::<8>()?, data.last_chunk::<8>()?);
        (data.len() == width).then(|| u128::from(u64::from_le_bytes(*head)) | (u128::from(u64::from_le_bytes(*tail)) << 64))
    };
    group_by(keys.iter().enumerate().map(|(row, key)| Some((row, packed(key.data())?))))
}

/// Rows by key, in first-seen order of the keys; `None` at the first row without one.
fn group_by<K: std::hash::Hash + Eq>(rows: impl Iterator<Item = Option<(usize, K)>>) -> Option<Vec<(usize, Vec<u32>)>> {
    // foldhash (hashbrown's default, seeded per process), not std's SipHash.
    let mut index: HashMap<K, usize, RandomState> = HashMap::default();
    let mut groups: Vec<(usize, Vec<u32>)> = Vec::new();
    for item in rows {
        let (row, key) = item?;
        let group = *index.entry(key).or_insert_with(|| {
            groups.push((row, Vec::new()));
            groups.len() - 1
        });
        groups[group].1.push(row as u32);
    }
    Some(groups)
}

/// `bucket[n]` of each value of an integer-valued column (null stays null); `None` for a
/// column of another type.
fn buckets_of_integers(column: &ArrayRef, n: u32) -> Option<ArrayRef> {
    match column.data_type() {
        DataType::Int32 => buckets::<Int32Type>(column, n, i64::from),
        DataType::Date32 => buckets::<Date32Type>(column, n, i64::from),
        DataType::Int64 => buckets::<Int64Type>(column, n, |v| v),
        DataType::Time64(arrow_schema::TimeUnit::Microsecond) => buckets::<Time64MicrosecondType>(column, n, |v| v),
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => buckets::<TimestampMicrosecondType>(column, n, |v| v),
        _ => None,
    }
}

fn buckets<T: ArrowPrimitiveType>(column: &ArrayRef, n: u32, long: impl Fn(T::Native) -> i64) -> Option<ArrayRef> {
    let values = column.as_primitive_opt::<T>()?;
    // The spec's `(hash & Integer.MAX_VALUE) % N`, with N as iceberg-rust takes it.
    let modulus = n as i32;
    if modulus <= 0 {
        return None;
    }
    Some(Arc::new(values.unary::<_, Int32Type>(|v| (hash_long(long(v)) & i32::MAX) % modulus)))
}

/// Murmur3 x86 32-bit, seed 0, of `v` as 8 little-endian bytes: the spec's hash of an int
/// (widened), long, date, time or timestamp.
fn hash_long(v: i64) -> i32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    for block in [v as u32, (v >> 32) as u32] {
        h ^= block.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    h ^= 8;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h as i32
}

#[cfg(test)]
mod tests;
