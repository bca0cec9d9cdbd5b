//! `schema = "infer"` in a pipeline file: what its table has before any value, and what it refuses.

use iceberg::spec::Transform;

use super::file::PipelineSpec;
use crate::model::schema::{Format, SourceSchema};

/// The source of a `schema = "infer"` pipeline: its declared timestamp fields (`event_time`
/// and the partition sources, whose RFC 3339 strings or epoch milliseconds become timestamptz
/// columns); the other columns come from the values. Refused where the columns must be known
/// before any value: a key, an upsert, a registry, another format.
pub(super) fn source(spec: &PipelineSpec, format: Format, registry: bool) -> std::result::Result<SourceSchema, String> {
    let refuse = |key: &str, why: &str| Err(format!("key `{key}`: {why} (schema = \"infer\" takes its columns from the values)"));
    if format != Format::Json {
        return refuse("schema", &format!("\"infer\" only with format = \"json\", not {:?}", spec.format));
    }
    if registry {
        return refuse("registry", "not with schema = \"infer\": a registry's schemas are the values' schemas; allowed is no registry");
    }
    if spec.mode.as_deref().is_some_and(|m| m != "append") {
        return refuse("mode", "only mode = \"append\" with schema = \"infer\": an upsert table needs its key and order columns declared");
    }
    if !spec.key.is_empty() {
        return refuse("key", "not with schema = \"infer\": a key column must be declared in a schema file");
    }
    if spec.unknown_fields.is_some() {
        return refuse("unknown_fields", "not with schema = \"infer\": every field a value has becomes a column");
    }
    let mut timestamps: Vec<String> = spec.event_time.iter().cloned().collect();
    let parsed: Vec<super::partition::PartitionField> =
        spec.partition_by.iter().map(|e| super::partition::parse(e)).collect::<std::result::Result<_, _>>()?;
    for field in &parsed {
        let time = matches!(field.transform, Transform::Year | Transform::Month | Transform::Day | Transform::Hour);
        if time && !timestamps.contains(&field.column) {
            timestamps.push(field.column.clone());
        }
    }
    if let Some(other) = parsed.iter().find(|f| !timestamps.contains(&f.column)) {
        return refuse(
            "partition_by",
            &format!(
                "{:?} is not known before any value: with schema = \"infer\" a partition source is a timestamp field, \
                 the source of year|month|day|hour or `event_time`",
                other.column
            ),
        );
    }
    crate::model::infer::declared(&timestamps).map(SourceSchema::Json).map_err(|e| format!("key `partition_by`: {e}"))
}
