//! Debezium change events in Protobuf (Confluent's ProtobufConverter, through a schema
//! registry): an envelope message (`before`, `after`, `source`, `op`, `ts_ms`, …) whose
//! `before`/`after` are the row message.
//!
//! The converter keeps Connect's logical types as messages (`confluent.type.Decimal` with its
//! precision and scale in `confluent.field_meta`, `google.type.Date`, `google.type.TimeOfDay`,
//! `google.protobuf.Timestamp`) and writes nullable columns as plain scalars, proto3
//! `optional` (`optional.for.nullables`) or wrappers (`wrapper.for.nullables`). Debezium's own
//! semantic types (`io.debezium.time.MicroTimestamp`, `Date`, `ZonedTimestamp`, `Uuid`, a
//! decimal's `string`/`double` modes) lose their names: the scalar alone is written. So:
//! - a column the table already holds keeps its type wherever one of the Debezium value rules
//!   (`upsert/envelope/values.rs`) reads the writer's representation into it (an int into a
//!   date, a string into a uuid or timestamp, a double into a decimal, …), the unit of an
//!   integer time named by the pipeline's declared row (`declared`) or else milliseconds;
//! - any other field takes the type the converter's representation stands for.
//!
//! Each row field gets the Connect schema the value rules read, as for Avro and JSON events.

use iceberg::spec::{PrimitiveType, Schema};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use super::Prim;
use super::SourceSchema;
use super::avro::AvroSchema;
use super::debezium::envelope_connect;
use super::protobuf::scalar_prim;

/// A Debezium Protobuf envelope, read.
#[derive(Debug)]
pub struct DebeziumProto {
    /// The envelope message (decodes the records).
    pub envelope: MessageDescriptor,
    /// The row in table types.
    pub row: SourceSchema,
    /// The Connect schemas of the row's fields, as [`super::debezium::DebeziumAvro::connect`].
    pub connect: Value,
}

/// How the converter wrote one row field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repr {
    Int,
    Long,
    Float,
    Double,
    Boolean,
    Text,
    Bytes,
    Timestamp,
    Date,
    TimeOfDay,
    Decimal,
}

impl DebeziumProto {
    /// Read `envelope` against the table's columns (`table`: none before the table exists) and
    /// the pipeline's declared row (its fields' Connect schemas by name).
    pub fn parse(envelope: &MessageDescriptor, table: Option<&Schema>, declared: &Map<String, Value>) -> Result<Self, String> {
        let field = |name: &str| envelope.get_field_by_name(name);
        if field("op").is_none() {
            return Err(format!("not a Debezium envelope: message {} has no `op` field", envelope.full_name()));
        }
        let row = ["after", "before"]
            .into_iter()
            .filter_map(field)
            .find_map(|f| match f.kind() {
                Kind::Message(m) if !f.is_list() => Some(m),
                _ => None,
            })
            .ok_or_else(|| format!("not a Debezium envelope: message {} has no `before` or `after` message field", envelope.full_name()))?;
        let mut table_fields = Vec::new();
        let mut connect_fields = Vec::new();
        for fd in row.fields() {
            let name = fd.name();
            let repr = repr(&fd).map_err(|e| format!("row field `{name}`: {e}"))?;
            let column = table.and_then(|t| t.field_by_name(name)).and_then(|f| f.field_type.as_primitive_type().cloned());
            let ty = match column.filter(|c| bridges(repr, c)) {
                Some(column) => table_avro_type(&column),
                None => natural(repr, &fd).map_err(|e| format!("row field `{name}`: {e}"))?,
            };
            table_fields.push(json!({"name": name, "type": ["null", ty], "default": null}));
            let mut connect = connect_schema(repr, declared.get(name));
            connect.insert("field".into(), Value::String(name.to_string()));
            connect_fields.push(Value::Object(connect));
        }
        let record = json!({"type": "record", "name": row.name(), "fields": table_fields});
        let row = AvroSchema::parse(&record.to_string()).map(SourceSchema::Avro).map_err(|e| format!("the row: {e}"))?;
        Ok(Self { envelope: envelope.clone(), row, connect: envelope_connect(connect_fields) })
    }
}

fn repr(fd: &FieldDescriptor) -> Result<Repr, String> {
    if fd.is_list() || fd.is_map() {
        return Err("a repeated field is not a column".into());
    }
    let kind = fd.kind();
    // Scalars and wrappers, by the column type a Protobuf row gives them.
    if let Some(prim) = scalar_prim(&kind) {
        return Ok(match prim {
            Prim::Int => Repr::Int,
            Prim::Long => Repr::Long,
            Prim::Float => Repr::Float,
            Prim::Double => Repr::Double,
            Prim::Boolean => Repr::Boolean,
            Prim::String => Repr::Text,
            _ => Repr::Bytes,
        });
    }
    let Kind::Message(m) = kind else { return Err(format!("{kind:?} is not a column type of the converter")) };
    Ok(match m.full_name() {
        "google.protobuf.Timestamp" => Repr::Timestamp,
        "google.type.Date" => Repr::Date,
        "google.type.TimeOfDay" => Repr::TimeOfDay,
        "confluent.type.Decimal" => Repr::Decimal,
        other => return Err(format!("message {other} is not a column type of the converter")),
    })
}

/// Whether a Debezium value rule reads `repr` into a column of type `column` exactly.
fn bridges(repr: Repr, column: &PrimitiveType) -> bool {
    use PrimitiveType as P;
    match repr {
        Repr::Int | Repr::Long => matches!(column, P::Date | P::Time | P::Timestamp | P::Timestamptz),
        Repr::Text => matches!(column, P::Date | P::Time | P::Timestamp | P::Timestamptz | P::Uuid | P::Decimal { .. }),
        Repr::Float | Repr::Double | Repr::Bytes | Repr::Decimal => matches!(column, P::Decimal { .. }),
        Repr::Timestamp => matches!(column, P::Timestamp | P::Timestamptz),
        Repr::Date => matches!(column, P::Date),
        Repr::TimeOfDay => matches!(column, P::Time),
        Repr::Boolean => false,
    }
}

/// The Avro form of a table column's type (the row schemas are Avro).
fn table_avro_type(column: &PrimitiveType) -> Value {
    use PrimitiveType as P;
    match column {
        P::Date => json!({"type": "int", "logicalType": "date"}),
        P::Time => json!({"type": "long", "logicalType": "time-micros"}),
        P::Timestamp => json!({"type": "long", "logicalType": "local-timestamp-micros"}),
        P::Timestamptz => json!({"type": "long", "logicalType": "timestamp-micros"}),
        P::Uuid => json!({"type": "string", "logicalType": "uuid"}),
        P::Decimal { precision, scale } => json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}),
        // `bridges` names no other column type.
        _ => json!("string"),
    }
}

/// The type the converter's representation stands for.
fn natural(repr: Repr, fd: &FieldDescriptor) -> Result<Value, String> {
    Ok(match repr {
        Repr::Int => json!("int"),
        Repr::Long => json!("long"),
        Repr::Float => json!("float"),
        Repr::Double => json!("double"),
        Repr::Boolean => json!("boolean"),
        Repr::Text => json!("string"),
        Repr::Bytes => json!("bytes"),
        Repr::Timestamp => json!({"type": "long", "logicalType": "timestamp-micros"}),
        Repr::Date => json!({"type": "int", "logicalType": "date"}),
        Repr::TimeOfDay => json!({"type": "long", "logicalType": "time-micros"}),
        Repr::Decimal => {
            let param = |name: &str| field_meta(fd, name).and_then(|v| v.parse::<u32>().ok());
            let scale = param("scale").ok_or("a confluent.type.Decimal without a `scale` in its confluent.field_meta params: declare the column in the pipeline's `schema`")?;
            json!({"type": "bytes", "logicalType": "decimal", "precision": param("precision").unwrap_or(38), "scale": scale})
        }
    })
}

/// A `(confluent.field_meta).params` entry of a field.
fn field_meta(fd: &FieldDescriptor, key: &str) -> Option<String> {
    let extension = fd.parent_pool().get_extension_by_name("confluent.field_meta")?;
    let options = fd.options();
    if !options.has_extension(&extension) {
        return None;
    }
    let meta = options.get_extension(&extension);
    let params = meta.as_message()?.get_field_by_name("params")?;
    let value = params.as_map()?.get(&prost_reflect::MapKey::String(key.to_string()))?.as_str()?.to_string();
    Some(value)
}

/// The Connect schema the value rules read for a field: what the converter's messages become
/// (see `upsert/envelope/protobuf.rs`), else the scalar's type with the declared semantic type
/// when the declared row has the same scalar there.
fn connect_schema(repr: Repr, declared: Option<&Value>) -> Map<String, Value> {
    let (ty, name) = match repr {
        Repr::Int => ("int32", None),
        Repr::Long => ("int64", None),
        Repr::Float => ("float", None),
        Repr::Double => ("double", None),
        Repr::Boolean => ("boolean", None),
        Repr::Text => ("string", None),
        Repr::Bytes => ("bytes", None),
        Repr::Timestamp => ("int64", Some("io.debezium.time.MicroTimestamp")),
        Repr::Date => ("int32", Some("org.apache.kafka.connect.data.Date")),
        Repr::TimeOfDay => ("int64", Some("io.debezium.time.MicroTime")),
        Repr::Decimal => ("struct", Some("io.debezium.data.VariableScaleDecimal")),
    };
    let mut out = Map::from_iter([("type".to_string(), Value::String(ty.into()))]);
    match (name, declared) {
        (Some(name), _) => {
            out.insert("name".into(), Value::String(name.into()));
        }
        (None, Some(declared)) if declared.get("type").and_then(Value::as_str) == Some(ty) => {
            for key in ["name", "parameters"] {
                if let Some(v) = declared.get(key) {
                    out.insert(key.into(), v.clone());
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
#[path = "debezium_proto_tests.rs"]
pub(crate) mod tests;
