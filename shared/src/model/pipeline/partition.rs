//! `partition_by` entries of the pipeline file: `identity(c)`, `year|month|day|hour(c)`,
//! `bucket(N, c)`, `truncate(W, c)` (Spark's plural spellings `years`, `days`, … too), bound
//! to the table schema's columns; `c` may be a dotted path into structs (`event.ts`).

use std::sync::OnceLock;

use iceberg::spec::{Schema, Transform, UnboundPartitionSpec};
use regex::Regex;

/// What `partition_by` allows, for error messages.
pub const ALLOWED: &str =
    "identity(c) | year(c) | month(c) | day(c) | hour(c) | bucket(N, c) | truncate(W, c), c a column or a dotted path into structs";

/// One parsed entry: the transform, the source column (a dotted path for a field inside
/// structs) and the partition field's name (the path's `.` as `_`: manifests are Avro, whose
/// names have no `.`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionField {
    pub transform: Transform,
    pub column: String,
    pub name: String,
}

/// Parse one entry such as `bucket(16, customer_id)` or `day(event.ts)`.
pub fn parse(entry: &str) -> Result<PartitionField, String> {
    static SYNTAX: OnceLock<Regex> = OnceLock::new();
    let syntax = SYNTAX.get_or_init(|| {
        Regex::new(r"^\s*([a-z]+)\s*\(\s*(?:(\d+)\s*,\s*)?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\)\s*$")
            .expect("valid regex")
    });
    let caps = syntax.captures(entry).ok_or_else(|| format!("{entry:?} is not a partition transform: allowed are {ALLOWED}"))?;
    let (name, arg, column) = (&caps[1], caps.get(2).map(|m| m.as_str()), caps[3].to_string());
    let number = |what: &str| -> Result<u32, String> {
        let n = arg.ok_or_else(|| format!("{entry:?}: {name} needs a {what}, as in {name}(16, {column})"))?;
        n.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| format!("{entry:?}: {what} {n} must be a whole number from 1"))
    };
    let no_number = || match arg {
        Some(n) => Err(format!("{entry:?}: {name} takes only a column, not {n}")),
        None => Ok(()),
    };
    let (transform, suffix) = match name {
        "identity" => (no_number().map(|_| Transform::Identity)?, None),
        "year" | "years" => (no_number().map(|_| Transform::Year)?, Some("year")),
        "month" | "months" => (no_number().map(|_| Transform::Month)?, Some("month")),
        "day" | "days" => (no_number().map(|_| Transform::Day)?, Some("day")),
        "hour" | "hours" => (no_number().map(|_| Transform::Hour)?, Some("hour")),
        "bucket" => (Transform::Bucket(number("bucket count")?), Some("bucket")),
        "truncate" => (Transform::Truncate(number("width")?), Some("trunc")),
        other => return Err(format!("{entry:?}: unknown transform {other:?}: allowed are {ALLOWED}")),
    };
    let flat = column.replace('.', "_");
    let name = match suffix {
        Some(s) => format!("{flat}_{s}"),
        None => flat,
    };
    Ok(PartitionField { transform, column, name })
}

/// The partition spec of `entries` over `schema`: each column must be a primitive the transform
/// applies to, at the top level or inside structs (not lists or maps: a row has one value).
pub fn spec(entries: &[String], schema: &Schema) -> Result<UnboundPartitionSpec, String> {
    let mut builder = UnboundPartitionSpec::builder().with_spec_id(0);
    let mut names = std::collections::BTreeSet::new();
    for entry in entries {
        let field = parse(entry)?;
        let column = source_field(schema, &field.column).map_err(|e| format!("{entry:?}: {e}"))?;
        let primitive = column
            .field_type
            .as_primitive_type()
            .ok_or_else(|| format!("{entry:?}: column {:?} is {}, not a primitive", field.column, column.field_type))?;
        field
            .transform
            .result_type(&iceberg::spec::Type::Primitive(primitive.clone()))
            .map_err(|_| format!("{entry:?}: {} does not apply to column {:?} of type {primitive}", field.transform, field.column))?;
        if !names.insert(field.name.clone()) {
            return Err(format!("{entry:?}: partition field {:?} appears twice", field.name));
        }
        builder = builder.add_partition_field(column.id, field.name, field.transform).map_err(|e| format!("{entry:?}: {e}"))?;
    }
    Ok(builder.build())
}

/// The field a dotted `path` names, through structs only.
fn source_field<'a>(schema: &'a Schema, path: &str) -> Result<&'a iceberg::spec::NestedFieldRef, String> {
    let mut fields = schema.as_struct();
    let mut walked = String::new();
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let found = fields.field_by_name(part).ok_or_else(|| match walked.is_empty() {
            true => format!("no top-level column {part:?} in the schema"),
            false => format!("struct `{walked}` has no field {part:?}"),
        })?;
        walked = crate::model::schema::join(&walked, part);
        if parts.peek().is_none() {
            return Ok(found);
        }
        fields = match &*found.field_type {
            iceberg::spec::Type::Struct(inner) => inner,
            other => {
                return Err(format!(
                    "`{walked}` is {other}, not a struct: a partition source is a column or a field inside structs (not lists or maps)"
                ));
            }
        };
    }
    Err(format!("{path:?} is not a column"))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, Type};

    use super::*;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields([
                NestedField::required(1, "created_at", Type::Primitive(PrimitiveType::Timestamptz)).into(),
                NestedField::required(2, "customer_id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(3, "flag", Type::Primitive(PrimitiveType::Boolean)).into(),
            ])
            .build()
            .unwrap()
    }

    #[test]
    fn parses_every_transform_and_names_fields_like_the_reference_tables() {
        assert_eq!(parse("hour(event_time)").unwrap().name, "event_time_hour");
        assert_eq!(
            parse("bucket(16, vehicle_id)").unwrap(),
            PartitionField { transform: Transform::Bucket(16), column: "vehicle_id".into(), name: "vehicle_id_bucket".into() }
        );
        assert_eq!(parse(" truncate( 4 ,code )").unwrap().transform, Transform::Truncate(4));
        assert_eq!(parse("days(d)").unwrap().transform, Transform::Day);
        assert_eq!(parse("identity(region)").unwrap().name, "region");
    }

    #[test]
    fn bad_entries_name_what_is_allowed() {
        for (entry, needle) in [
            ("hour event_time", "allowed are identity(c)"),
            ("minute(t)", "unknown transform \"minute\""),
            ("bucket(c)", "needs a bucket count"),
            ("bucket(0, c)", "from 1"),
            ("day(3, c)", "takes only a column"),
        ] {
            let e = parse(entry).unwrap_err();
            assert!(e.contains(needle), "{entry}: {e}");
        }
    }

    #[test]
    fn spec_checks_columns_and_types() {
        let s = schema();
        let spec = spec(&["day(created_at)".into(), "bucket(16, customer_id)".into()], &s).unwrap();
        spec.bind(s.clone()).unwrap();
        assert!(super::spec(&["day(missing)".into()], &s).unwrap_err().contains("no top-level column"));
        // A path into a column that is not a struct names it.
        let e = super::spec(&["identity(customer_id.country)".into()], &s).unwrap_err();
        assert!(e.contains("`customer_id` is long, not a struct"), "{e}");
        assert!(super::spec(&["hour(customer_id)".into()], &s).unwrap_err().contains("does not apply"));
        assert!(super::spec(&["day(created_at)".into(), "days(created_at)".into()], &s).unwrap_err().contains("twice"));
    }

    #[test]
    fn sources_inside_structs_are_paths_checked_at_start() {
        use iceberg::spec::{ListType, StructType};
        let s = Schema::builder()
            .with_fields([
                NestedField::optional(
                    1,
                    "event",
                    Type::Struct(StructType::new(vec![NestedField::required(2, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into()])),
                )
                .into(),
                NestedField::optional(
                    3,
                    "customer",
                    Type::Struct(StructType::new(vec![NestedField::optional(4, "country", Type::Primitive(PrimitiveType::String)).into()])),
                )
                .into(),
                NestedField::optional(
                    5,
                    "tags",
                    Type::List(ListType::new(
                        NestedField::list_element(
                            6,
                            Type::Struct(StructType::new(vec![
                                NestedField::optional(7, "k", Type::Primitive(PrimitiveType::String)).into(),
                            ])),
                            false,
                        )
                        .into(),
                    )),
                )
                .into(),
            ])
            .build()
            .unwrap();
        let bound = spec(&["day(event.ts)".into(), "identity(customer.country)".into()], &s).unwrap().bind(s.clone()).unwrap();
        let fields: Vec<_> = bound.fields().iter().map(|f| (f.source_id, f.name.as_str())).collect();
        assert_eq!(fields, [(2, "event_ts_day"), (4, "customer_country")]);
        for (entry, needle) in [
            ("day(event.when)", "struct `event` has no field \"when\""),
            ("identity(tags.k)", "`tags` is list, not a struct"),
            ("identity(customer)", "is struct"),
            ("hour(customer.country)", "does not apply"),
        ] {
            let e = spec(&[entry.into()], &s).unwrap_err();
            assert!(e.contains(needle), "{entry}: {e}");
        }
    }
}
