//! Which partition spec a file's entry belongs to, and its partition values as that spec's
//! partition type holds them: a manifest names one spec, and a file written before another
//! engine evolved the spec (or promoted a partition source column) keeps its own.

use iceberg::spec::{
    DataFile, DataFileBuilder, Literal, NestedFieldRef, PartitionSpecRef, PrimitiveLiteral, PrimitiveType, Struct, StructType,
    TableMetadata,
};

use crate::base::error::{Error, Result};

/// The partition spec `file`'s partition tuple was computed with: the spec its manifest must
/// name. iceberg-rust keeps a data file's spec id private (its writer sets it from the spec it
/// split by, a manifest read from the manifest's spec), so it is found by comparing the file
/// with itself rebuilt under each of the table's spec ids. A tuple without that spec's arity
/// (an unpartitioned write names spec 0, whatever id the table's unpartitioned spec has) is
/// the default spec's if it fits it.
pub fn spec_of<'a>(file: &DataFile, metadata: &'a TableMetadata) -> Result<&'a PartitionSpecRef> {
    let arity = file.partition().fields().len();
    let fits = |spec: &PartitionSpecRef| spec.fields().len() == arity;
    let default = metadata.default_partition_spec();
    if metadata.partition_specs_iter().len() == 1 && fits(default) {
        return Ok(default);
    }
    for spec in metadata.partition_specs_iter() {
        if rebuilt(file, spec.spec_id(), file.partition().clone())? == *file {
            if fits(spec) {
                return Ok(spec);
            }
            break;
        }
    }
    if fits(default) {
        return Ok(default);
    }
    Err(Error::Invariant(format!("{} has {arity} partition value(s): no partition spec of the table fits it", file.file_path())))
}

/// `file` with its partition values as `partition_type` (of spec `spec_id`) holds them: a value
/// written before its source column was promoted (an identity partition of an int column that
/// is a long now) widens as the column did, as Iceberg's readers widen it.
pub(super) fn widened(file: DataFile, spec_id: i32, partition_type: &StructType) -> Result<DataFile> {
    let types = partition_type.fields();
    let values = file.partition().fields();
    let widen = |value: &Option<Literal>, ty: Option<&PrimitiveType>| match (value, ty) {
        (Some(Literal::Primitive(PrimitiveLiteral::Int(v))), Some(PrimitiveType::Long)) => Some(Literal::long(*v)),
        (Some(Literal::Primitive(PrimitiveLiteral::Float(v))), Some(PrimitiveType::Double)) => Some(Literal::double(v.0)),
        _ => None,
    };
    let promoted = |(value, field): (&Option<Literal>, &NestedFieldRef)| widen(value, field.field_type.as_primitive_type());
    if values.len() != types.len() || values.iter().zip(types).all(|pair| promoted(pair).is_none()) {
        return Ok(file);
    }
    let partition = values.iter().zip(types).map(|pair| promoted(pair).or_else(|| pair.0.clone())).collect();
    rebuilt(&file, spec_id, partition)
}

/// `file` with `first_row_id` set, every other field as it is.
pub(crate) fn with_first_row_id(file: &DataFile, spec_id: i32, first_row_id: i64) -> Result<DataFile> {
    rebuilt_with(file, spec_id, file.partition().clone(), Some(first_row_id))
}

/// `file` with partition spec id `spec_id` and `partition`, every other field as it is.
fn rebuilt(file: &DataFile, spec_id: i32, partition: Struct) -> Result<DataFile> {
    rebuilt_with(file, spec_id, partition, file.first_row_id())
}

fn rebuilt_with(file: &DataFile, spec_id: i32, partition: Struct, first_row_id: Option<i64>) -> Result<DataFile> {
    let mut builder = DataFileBuilder::default();
    builder
        .content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(partition)
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .first_row_id(first_row_id)
        .partition_spec_id(spec_id)
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes());
    if let Some(order) = file.sort_order_id() {
        builder.sort_order_id(order);
    }
    builder.build().map_err(|e| Error::Invariant(format!("{}: {e}", file.file_path())))
}
