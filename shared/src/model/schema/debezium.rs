//! Debezium change events in Avro (the AvroConverter, through a schema registry): an envelope
//! record (`before`, `after`, `source`, `op`, `ts_ms`, …) whose `before`/`after` are the row.
//!
//! From the envelope's registered schema come:
//! - the row's schema in table types: Debezium's semantic types (`connect.name`) become the Avro
//!   logical types they stand for, so a table made from a Debezium topic holds dates, times,
//!   timestamps, decimals and uuids rather than their integer or text encodings;
//! - each row field's Connect schema (`name`, `type`, `parameters`), in the shape the JSON
//!   converter embeds: what the value rewrites (`upsert/envelope/values.rs`) read, so Avro and JSON
//!   events of one table land alike.

use serde_json::{Map, Value, json};

use super::SourceSchema;
use super::avro::AvroSchema;

/// A Debezium Avro envelope schema, read.
#[derive(Debug)]
pub struct DebeziumAvro {
    /// The envelope as the writer wrote it (decodes the records).
    pub writer: apache_avro::Schema,
    /// The row in table types.
    pub row: SourceSchema,
    /// `{"fields": [{"field": "before", "fields": [..]}, {"field": "after", "fields": [..]}]}`.
    pub connect: Value,
}

impl DebeziumAvro {
    /// Read a registered envelope schema; `Err` says why it is not one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let writer = apache_avro::Schema::parse_str(text).map_err(|e| format!("not an Avro schema: {e}"))?;
        let envelope: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let (row, connect_fields) = row_schemas(row_record(&envelope)?, envelope.get("namespace"))?;
        Ok(Self { writer, row, connect: envelope_connect(connect_fields) })
    }
}

/// The envelope's Connect schema as the JSON converter embeds it, from the row's fields'
/// (`before` and `after` alike).
pub(crate) fn envelope_connect(row_fields: Vec<Value>) -> Value {
    let side = |name: &str| json!({"field": name, "type": "struct", "fields": row_fields.clone()});
    json!({"type": "struct", "fields": [side("before"), side("after")]})
}

/// A row record as Debezium's AvroConverter registers `after` (`connect.name` semantic types
/// or Avro logical types): the row in table types and each field's Connect schema by name.
/// (A Debezium Protobuf pipeline declares its row so: Protobuf cannot say date, uuid, decimal
/// or a timestamp's unit.)
pub fn declared_row(text: &str) -> Result<(SourceSchema, Map<String, Value>), String> {
    let record: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let record = record.as_object().filter(|o| o.get("type") == Some(&json!("record"))).ok_or("not an Avro record schema")?;
    let (row, connect) = row_schemas(record, None)?;
    let by_name = connect.into_iter().filter_map(|f| Some((f.get("field")?.as_str()?.to_string(), f))).collect();
    Ok((row, by_name))
}

/// The row in table types, and each field's Connect schema (with its `field` name).
fn row_schemas(row: &Map<String, Value>, namespace: Option<&Value>) -> Result<(SourceSchema, Vec<Value>), String> {
    let namespace = row.get("namespace").or(namespace).cloned().unwrap_or(Value::Null);
    let fields = row.get("fields").and_then(Value::as_array).ok_or("the row record has no `fields`")?;
    let mut table_fields = Vec::with_capacity(fields.len());
    let mut connect_fields = Vec::with_capacity(fields.len());
    for field in fields {
        let name = field.get("name").and_then(Value::as_str).ok_or("a row field without a `name`")?;
        let ty = field.get("type").ok_or_else(|| format!("row field `{name}` has no `type`"))?;
        let mut table_field = field.as_object().cloned().unwrap_or_default();
        table_field.insert("type".into(), table_type(ty).map_err(|e| format!("row field `{name}`: {e}"))?);
        table_fields.push(Value::Object(table_field));
        let mut connect = connect_schema(non_null(ty));
        connect.insert("field".into(), Value::String(name.to_string()));
        connect_fields.push(Value::Object(connect));
    }
    let mut table_row = json!({"type": "record", "name": row.get("name").cloned().unwrap_or(json!("Value")), "fields": table_fields});
    if !namespace.is_null() {
        table_row["namespace"] = namespace;
    }
    let row = AvroSchema::parse(&table_row.to_string()).map(SourceSchema::Avro).map_err(|e| format!("the row: {e}"))?;
    Ok((row, connect_fields))
}

/// The row record: the record type of `before` or `after` (the other may name it).
fn row_record(envelope: &Value) -> Result<&Map<String, Value>, String> {
    let fields = envelope.get("fields").and_then(Value::as_array).ok_or("not a Debezium envelope: not a record")?;
    let field = |name: &str| fields.iter().find(|f| f.get("name").and_then(Value::as_str) == Some(name));
    if field("op").is_none() {
        return Err("not a Debezium envelope: no `op` field".into());
    }
    ["before", "after"]
        .into_iter()
        .filter_map(|side| field(side)?.get("type"))
        .find_map(|ty| match ty {
            Value::Array(members) => members.iter().find_map(|m| m.as_object().filter(|o| o.get("type") == Some(&json!("record")))),
            Value::Object(o) if o.get("type") == Some(&json!("record")) => Some(o),
            _ => None,
        })
        .ok_or_else(|| "not a Debezium envelope: neither `before` nor `after` declares the row record".into())
}

/// The non-null member of `["null", T]`, or the type itself.
fn non_null(ty: &Value) -> &Value {
    match ty {
        Value::Array(members) => members.iter().find(|m| m.as_str() != Some("null")).unwrap_or(ty),
        _ => ty,
    }
}

/// The Avro type a column of a Debezium semantic type holds, in table terms.
fn table_type(ty: &Value) -> Result<Value, String> {
    if let Value::Array(members) = ty {
        return members.iter().map(table_type).collect::<Result<Vec<_>, _>>().map(Value::Array);
    }
    let Some(semantic) = ty.get("connect.name").and_then(Value::as_str) else { return Ok(ty.clone()) };
    Ok(match semantic {
        "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => json!({"type": "int", "logicalType": "date"}),
        "io.debezium.time.Time" | "org.apache.kafka.connect.data.Time" => json!({"type": "int", "logicalType": "time-millis"}),
        "io.debezium.time.MicroTime" | "io.debezium.time.NanoTime" | "io.debezium.time.ZonedTime" => {
            json!({"type": "long", "logicalType": "time-micros"})
        }
        // A database timestamp without a zone, in ms, µs or ns.
        "io.debezium.time.Timestamp"
        | "org.apache.kafka.connect.data.Timestamp"
        | "io.debezium.time.MicroTimestamp"
        | "io.debezium.time.NanoTimestamp" => {
            json!({"type": "long", "logicalType": "local-timestamp-micros"})
        }
        "io.debezium.time.ZonedTimestamp" => json!({"type": "long", "logicalType": "timestamp-micros"}),
        "io.debezium.data.Uuid" => json!({"type": "string", "logicalType": "uuid"}),
        "org.apache.kafka.connect.data.Decimal" => {
            let parameter = |name: &str| ty.pointer(&format!("/connect.parameters/{name}")).and_then(|v| v.as_str()?.parse::<u64>().ok());
            let scale =
                parameter("scale").or_else(|| ty.get("scale").and_then(Value::as_u64)).ok_or("a Connect Decimal without a scale")?;
            // Debezium names the column's precision when the database has one; 38 holds any other.
            let precision = parameter("connect.decimal.precision").or_else(|| ty.get("precision").and_then(Value::as_u64)).unwrap_or(38);
            json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
        }
        _ => ty.clone(),
    })
}

/// A field's Connect schema, as the JSON converter embeds it.
fn connect_schema(ty: &Value) -> Map<String, Value> {
    let avro_type = match ty {
        Value::String(s) => s.as_str(),
        other => other.get("type").and_then(Value::as_str).unwrap_or("struct"),
    };
    let connect_type = match avro_type {
        "int" => "int32",
        "long" => "int64",
        "float" => "float",
        "double" => "double",
        "boolean" => "boolean",
        "bytes" | "fixed" => "bytes",
        "string" | "enum" => "string",
        "array" => "array",
        "map" => "map",
        _ => "struct",
    };
    let mut out = Map::from_iter([("type".to_string(), Value::String(connect_type.into()))]);
    let semantic = ty.get("connect.name").cloned().or_else(|| {
        // Avro logical types another producer set, as the Connect types the rewrites know.
        let name = match ty.get("logicalType")?.as_str()? {
            "decimal" => "org.apache.kafka.connect.data.Decimal",
            "date" => "org.apache.kafka.connect.data.Date",
            "time-millis" => "org.apache.kafka.connect.data.Time",
            "time-micros" => "io.debezium.time.MicroTime",
            "timestamp-millis" | "local-timestamp-millis" => "org.apache.kafka.connect.data.Timestamp",
            "timestamp-micros" | "local-timestamp-micros" => "io.debezium.time.MicroTimestamp",
            _ => return None,
        };
        Some(Value::String(name.into()))
    });
    if let Some(name) = semantic {
        out.insert("name".into(), name);
    }
    let parameters = ty.get("connect.parameters").cloned().or_else(|| ty.get("scale").map(|s| json!({"scale": s.to_string()})));
    if let Some(parameters) = parameters {
        out.insert("parameters".into(), parameters);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::schema::{Prim, Ty};

    /// An envelope as Debezium's AvroConverter registers it for a PostgreSQL table.
    pub(crate) const ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"db.public.orders","fields":[
      {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
        {"name":"id","type":"long"},
        {"name":"price","type":["null",{"type":"bytes","scale":2,"precision":12,"connect.version":1,
          "connect.parameters":{"scale":"2","connect.decimal.precision":"12"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
        {"name":"born","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null},
        {"name":"seen","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},
        {"name":"at","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null},
        {"name":"uid","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}],"default":null},
        {"name":"note","type":["null","string"],"default":null}],
        "connect.name":"db.public.orders.Value"}],"default":null},
      {"name":"after","type":["null","Value"],"default":null},
      {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
        {"name":"lsn","type":["null","long"],"default":null}]}},
      {"name":"op","type":"string"},
      {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

    #[test]
    fn the_row_takes_table_types_and_the_fields_keep_their_connect_schemas() {
        let schema = DebeziumAvro::parse(ENVELOPE).unwrap();
        let types: Vec<(String, bool, Ty)> = schema.row.fields().iter().map(|f| (f.name.clone(), f.optional, f.ty.clone())).collect();
        assert_eq!(
            types,
            [
                ("id".to_string(), false, Ty::Prim(Prim::Long)),
                ("price".to_string(), true, Ty::Prim(Prim::Decimal { precision: 12, scale: 2 })),
                ("born".to_string(), true, Ty::Prim(Prim::Date)),
                ("seen".to_string(), true, Ty::Prim(Prim::Timestamp)),
                ("at".to_string(), true, Ty::Prim(Prim::Timestamptz)),
                ("uid".to_string(), true, Ty::Prim(Prim::Uuid)),
                ("note".to_string(), true, Ty::Prim(Prim::String)),
            ]
        );
        let after = &schema.connect["fields"][1];
        assert_eq!(after["field"], "after");
        let price = after["fields"].as_array().unwrap().iter().find(|f| f["field"] == "price").unwrap();
        assert_eq!(
            price,
            &json!({"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2", "connect.decimal.precision": "12"}})
        );
        assert_eq!(after["fields"][3]["name"], "io.debezium.time.MicroTimestamp");
    }

    #[test]
    fn schemas_that_are_not_envelopes_say_why() {
        let err = |text: &str| DebeziumAvro::parse(text).unwrap_err();
        assert!(err("{").contains("not an Avro schema"));
        assert!(err(r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#).contains("no `op` field"));
        let no_row = r#"{"type":"record","name":"E","fields":[{"name":"after","type":["null","string"]},{"name":"op","type":"string"}]}"#;
        assert!(err(no_row).contains("neither `before` nor `after` declares the row record"));
        let bad_decimal = ENVELOPE
            .replace(
                r#""connect.parameters":{"scale":"2","connect.decimal.precision":"12"},"#,
                r#""connect.parameters":{"connect.decimal.precision":"50"},"#,
            )
            .replace(r#""scale":2,"precision":12,"#, r#""scale":2,"precision":50,"#);
        assert!(err(&bad_decimal).contains("price"), "{}", err(&bad_decimal));
    }
}
