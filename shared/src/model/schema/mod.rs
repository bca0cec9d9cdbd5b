//! A pipeline's source schema (Avro, Protobuf or JSON Schema) and the Iceberg schema of the rows
//! it decodes to. Each format module reads its own schema language into a [`Ty`] tree, the
//! format-neutral shape that [`SourceSchema::to_iceberg`] and the decoders'
//! compatibility check (`crate::decode`) both work from.
//!
//! The type mapping (source type → Iceberg type) is in `docs/pipelines.md`.

pub mod avro;
pub mod debezium;
pub mod debezium_proto;
pub mod json_schema;
pub mod protobuf;

use std::path::Path;
use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type};

use crate::base::error::{Error, Result};

/// A pipeline's `format`: `"avro"`, `"protobuf"` or `"json"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Avro,
    Protobuf,
    Json,
}

/// A format's name as pipeline files spell it.
pub fn format_name(format: Format) -> &'static str {
    match format {
        Format::Avro => "avro",
        Format::Protobuf => "protobuf",
        Format::Json => "json",
    }
}

impl std::str::FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "avro" => Ok(Format::Avro),
            "protobuf" => Ok(Format::Protobuf),
            "json" => Ok(Format::Json),
            other => Err(Error::Schema(format!("format `{other}`: expected one of avro, protobuf, json"))),
        }
    }
}

/// The user's schema for a topic's record values, in its own schema language.
#[derive(Debug, Clone)]
pub enum SourceSchema {
    Avro(avro::AvroSchema),
    Protobuf(protobuf::ProtoSchema),
    Json(json_schema::JsonSchema),
}

impl SourceSchema {
    /// Avro: an `.avsc`; protobuf: a `.proto` (compiled in-process, imports resolved from the
    /// file's directory; `message` required) or a descriptor set `.pb`/`.desc` (`message`
    /// required when it holds more than one message); json: a JSON Schema file.
    pub fn load(format: Format, path: &Path, message: Option<&str>) -> Result<SourceSchema> {
        let named = |e: Error| Error::Schema(format!("{}: {}", path.display(), e.to_string().trim_start_matches("schema: ")));
        match format {
            Format::Avro => avro::AvroSchema::parse(&read_text(path)?).map(SourceSchema::Avro).map_err(named),
            Format::Json => json_schema::JsonSchema::parse(&read_text(path)?).map(SourceSchema::Json).map_err(named),
            Format::Protobuf => protobuf::ProtoSchema::load(path, message).map(SourceSchema::Protobuf).map_err(named),
        }
    }

    /// The same from schema text: Avro or JSON Schema JSON, or `.proto` source that imports
    /// nothing beyond the well-known types.
    pub fn from_text(format: Format, text: &str, message: Option<&str>) -> Result<SourceSchema> {
        match format {
            Format::Avro => avro::AvroSchema::parse(text).map(SourceSchema::Avro),
            Format::Json => json_schema::JsonSchema::parse(text).map(SourceSchema::Json),
            Format::Protobuf => protobuf::ProtoSchema::from_source(text, message).map(SourceSchema::Protobuf),
        }
    }

    /// The same fields read from JSON values: how the event source mapping hands over a record
    /// it decoded itself (`EventRecordFormat = JSON`).
    pub fn as_json(&self) -> SourceSchema {
        match self {
            SourceSchema::Json(schema) => SourceSchema::Json(schema.clone()),
            _ => SourceSchema::Json(json_schema::JsonSchema::of_fields(self.fields().to_vec())),
        }
    }

    /// The Protobuf message the values are, if the format is Protobuf.
    pub fn message_name(&self) -> Option<&str> {
        match self {
            SourceSchema::Protobuf(s) => Some(s.message.full_name()),
            _ => None,
        }
    }

    pub fn format(&self) -> Format {
        match self {
            SourceSchema::Avro(_) => Format::Avro,
            SourceSchema::Protobuf(_) => Format::Protobuf,
            SourceSchema::Json(_) => Format::Json,
        }
    }

    /// Top-level `long` columns of the table these values need as `double` (`schema = "infer"`).
    pub fn replaced_columns(&self) -> &[String] {
        match self {
            SourceSchema::Json(s) => &s.replace_long,
            _ => &[],
        }
    }

    /// The decoded rows' columns, format-neutral.
    pub(crate) fn fields(&self) -> &[Field] {
        match self {
            SourceSchema::Avro(s) => &s.fields,
            SourceSchema::Protobuf(s) => &s.fields,
            SourceSchema::Json(s) => &s.fields,
        }
    }

    /// The Iceberg schema of the decoded rows: field ids 1.. in declaration order, depth-first
    /// (a struct's, list's or map's own ids follow its field's id).
    pub fn to_iceberg(&self) -> Result<Schema> {
        let mut next_id = 0;
        let fields: Vec<_> = self.fields().iter().map(|f| iceberg_field(f, &mut next_id)).collect();
        Ok(Schema::builder().with_fields(fields).build()?)
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::Schema(format!("{}: {e}", path.display())))
}

/// A leaf type, named after its Iceberg type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prim {
    Boolean,
    Int,
    Long,
    Float,
    Double,
    String,
    Binary,
    Fixed(usize),
    Decimal {
        precision: u32,
        scale: u32,
    },
    Uuid,
    Date,
    /// Microseconds since midnight.
    Time,
    /// Microseconds since the epoch, no zone.
    Timestamp,
    /// Microseconds since the epoch, UTC.
    Timestamptz,
}

/// The format-neutral shape of a source type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Prim(Prim),
    Struct(Vec<Field>),
    /// The element field is named `element`.
    List(Box<Field>),
    /// Key (`key`, required) and value (`value`) fields.
    Map(Box<Field>, Box<Field>),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub name: String,
    pub optional: bool,
    pub ty: Ty,
    /// The writer's schema gives the field a value when a record lacks it (Avro `default`,
    /// JSON Schema `default`, every protobuf field): a table may add it as a new column.
    pub has_default: bool,
}

impl Field {
    pub fn new(name: impl Into<String>, optional: bool, ty: Ty) -> Self {
        Field { name: name.into(), optional, ty, has_default: false }
    }
    pub fn with_default(self, has_default: bool) -> Self {
        Field { has_default, ..self }
    }
    pub fn element(optional: bool, ty: Ty) -> Self {
        Field::new("element", optional, ty)
    }
    pub fn map(key: Ty, value: Field) -> Ty {
        Ty::Map(Box::new(Field::new("key", false, key)), Box::new(Field { name: "value".into(), ..value }))
    }
}

impl std::fmt::Display for Prim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prim::Fixed(n) => write!(f, "fixed({n})"),
            Prim::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            other => write!(f, "{}", format!("{other:?}").to_lowercase()),
        }
    }
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ty::Prim(p) => p.fmt(f),
            Ty::Struct(fields) => {
                let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
                write!(f, "struct<{}>", names.join(", "))
            }
            Ty::List(e) => write!(f, "list<{}>", e.ty),
            Ty::Map(k, v) => write!(f, "map<{}, {}>", k.ty, v.ty),
        }
    }
}

pub(crate) fn iceberg_field(f: &Field, next_id: &mut i32) -> NestedFieldRef {
    *next_id += 1;
    let id = *next_id;
    let ty = iceberg_type(&f.ty, next_id);
    Arc::new(NestedField::new(id, &f.name, ty, !f.optional))
}

pub(crate) fn iceberg_type(ty: &Ty, next_id: &mut i32) -> Type {
    match ty {
        Ty::Prim(p) => Type::Primitive(match *p {
            Prim::Boolean => PrimitiveType::Boolean,
            Prim::Int => PrimitiveType::Int,
            Prim::Long => PrimitiveType::Long,
            Prim::Float => PrimitiveType::Float,
            Prim::Double => PrimitiveType::Double,
            Prim::String => PrimitiveType::String,
            Prim::Binary => PrimitiveType::Binary,
            Prim::Fixed(n) => PrimitiveType::Fixed(n as u64),
            Prim::Decimal { precision, scale } => PrimitiveType::Decimal { precision, scale },
            Prim::Uuid => PrimitiveType::Uuid,
            Prim::Date => PrimitiveType::Date,
            Prim::Time => PrimitiveType::Time,
            Prim::Timestamp => PrimitiveType::Timestamp,
            Prim::Timestamptz => PrimitiveType::Timestamptz,
        }),
        Ty::Struct(fields) => Type::Struct(StructType::new(fields.iter().map(|f| iceberg_field(f, next_id)).collect())),
        Ty::List(e) => Type::List(ListType::new(iceberg_field(e, next_id))),
        Ty::Map(k, v) => {
            let key = iceberg_field(k, next_id);
            Type::Map(MapType::new(key, iceberg_field(v, next_id)))
        }
    }
}

/// A schema error naming where (`path`, dotted) and what is allowed.
pub(crate) fn unsupported(path: &str, what: impl std::fmt::Display) -> Error {
    Error::Schema(format!("field `{path}`: {what}"))
}

/// `parent.name`, or `name` at the top.
pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() { name.to_string() } else { format!("{parent}.{name}") }
}

#[cfg(test)]
pub(crate) mod tests;
