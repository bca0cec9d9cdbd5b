use super::*;
use crate::model::schema::{Prim, Ty};

/// The envelope Confluent's ProtobufConverter registers for a Debezium PostgreSQL table, with
/// each way it writes a nullable column (plain, `optional`, a wrapper) and its logical types.
pub(crate) const ENVELOPE: &str = r#"syntax = "proto3"; package db.public.orders;
import "confluent/meta.proto"; import "confluent/type/decimal.proto"; import "google/type/date.proto";
import "google/type/timeofday.proto"; import "google/protobuf/timestamp.proto"; import "google/protobuf/wrappers.proto";
message Envelope {
  Value before = 1; Value after = 2; Source source = 3; string op = 4; optional int64 ts_ms = 5;
  message Value {
    int64 id = 1;
    confluent.type.Decimal price = 2 [(confluent.field_meta) = { params: [{key: "precision", value: "12"}, {key: "scale", value: "2"}] }];
    google.type.Date born = 3;
    google.protobuf.Timestamp seen = 4;
    optional string at = 5;
    google.protobuf.StringValue uid = 6;
    string note = 7;
    google.type.TimeOfDay opens = 8;
    optional int32 day = 9;
    optional int64 micros = 10;
    optional double cost = 11;
    optional int64 nanos = 12;
    optional int64 millis = 13;
    optional string total = 14;
    Kind kind = 15;
  }
  enum Kind { KIND_UNSPECIFIED = 0; RETAIL = 1; }
  message Source { optional int64 lsn = 1; string file = 2; optional int64 pos = 3; }
}"#;

pub(crate) fn envelope() -> MessageDescriptor {
    let compiled = crate::model::schema::protobuf::ProtoSchema::from_source(ENVELOPE, Some("db.public.orders.Envelope")).unwrap();
    compiled.message
}

fn types(schema: &DebeziumProto) -> Vec<(String, Ty)> {
    schema.row.fields().iter().map(|f| (f.name.clone(), f.ty.clone())).collect()
}

#[test]
fn without_a_table_each_field_takes_the_type_its_representation_stands_for() {
    let schema = DebeziumProto::parse(&envelope(), None, &Map::new()).unwrap();
    let p = |name: &str, prim: Prim| (name.to_string(), Ty::Prim(prim));
    assert_eq!(
        types(&schema),
        [
            p("id", Prim::Long),
            p("price", Prim::Decimal { precision: 12, scale: 2 }),
            p("born", Prim::Date),
            p("seen", Prim::Timestamptz),
            p("at", Prim::String),
            p("uid", Prim::String),
            p("note", Prim::String),
            p("opens", Prim::Time),
            p("day", Prim::Int),
            p("micros", Prim::Long),
            p("cost", Prim::Double),
            p("nanos", Prim::Long),
            p("millis", Prim::Long),
            p("total", Prim::String),
            p("kind", Prim::String),
        ]
    );
    let after = &schema.connect["fields"][1]["fields"];
    assert_eq!(after[1], json!({"field": "price", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}));
    assert_eq!(after[3]["name"], "io.debezium.time.MicroTimestamp");
}

#[test]
fn a_table_column_keeps_its_type_where_a_debezium_rule_reads_the_representation() {
    let declared_avsc = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"price","type":["null",{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}]},
        {"name":"at","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
        {"name":"uid","type":["null",{"type":"string","logicalType":"uuid"}]},
        {"name":"day","type":["null",{"type":"int","connect.name":"io.debezium.time.Date"}]},
        {"name":"micros","type":["null",{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}]},
        {"name":"cost","type":["null",{"type":"bytes","logicalType":"decimal","precision":10,"scale":3}]},
        {"name":"note","type":["null","long"]}]}"#;
    let (row, declared) = crate::model::schema::debezium::declared_row(declared_avsc).unwrap();
    let table = row.to_iceberg().unwrap();
    let schema = DebeziumProto::parse(&envelope(), Some(&table), &declared).unwrap();
    let ty = |name: &str| types(&schema).into_iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(ty("at"), Ty::Prim(Prim::Timestamptz), "ZonedTimestamp text into the table's timestamptz");
    assert_eq!(ty("uid"), Ty::Prim(Prim::Uuid));
    assert_eq!(ty("day"), Ty::Prim(Prim::Date), "int days into the table's date");
    assert_eq!(ty("micros"), Ty::Prim(Prim::Timestamp));
    assert_eq!(ty("cost"), Ty::Prim(Prim::Decimal { precision: 10, scale: 3 }), "a double-mode decimal");
    assert_eq!(ty("note"), Ty::Prim(Prim::String), "no rule reads text into a long: the writer's type (evolution refuses it)");
    let after = &schema.connect["fields"][1]["fields"];
    let connect = |name: &str| after.as_array().unwrap().iter().find(|f| f["field"] == name).unwrap().clone();
    assert_eq!(
        connect("micros"),
        json!({"field": "micros", "type": "int64", "name": "io.debezium.time.MicroTimestamp"}),
        "the declared unit"
    );
    assert_eq!(connect("at"), json!({"field": "at", "type": "string"}), "a declared long's unit says nothing of text");
}

#[test]
fn messages_that_are_not_envelopes_say_why() {
    let compile = |source: &str, name: &str| crate::model::schema::protobuf::ProtoSchema::from_source(source, Some(name)).unwrap().message;
    let no_op = compile(r#"syntax = "proto3"; message E { R after = 1; } message R { int64 id = 1; }"#, "E");
    assert!(DebeziumProto::parse(&no_op, None, &Map::new()).unwrap_err().contains("no `op` field"));
    let no_row = compile(r#"syntax = "proto3"; message E { string after = 1; string op = 2; }"#, "E");
    assert!(DebeziumProto::parse(&no_row, None, &Map::new()).unwrap_err().contains("no `before` or `after` message field"));
    let nested = compile(
        r#"syntax = "proto3"; message E { R after = 1; string op = 2; } message R { R2 inner = 1; } message R2 { int64 x = 1; }"#,
        "E",
    );
    assert!(DebeziumProto::parse(&nested, None, &Map::new()).unwrap_err().contains("row field `inner`"));
    let bare = compile(
        r#"syntax = "proto3"; import "confluent/type/decimal.proto"; message E { R after = 1; string op = 2; } message R { confluent.type.Decimal d = 1; }"#,
        "E",
    );
    assert!(DebeziumProto::parse(&bare, None, &Map::new()).unwrap_err().contains("without a `scale`"));
}

#[test]
fn a_serialized_descriptor_keeps_the_decimals_precision_and_scale() {
    use base64::Engine;
    // How confluent-kafka's serializers register a schema: the base64 FileDescriptorProto.
    let file = envelope().parent_file().encode_to_vec();
    let registered = base64::engine::general_purpose::STANDARD.encode(file);
    let compiled = crate::model::schema::protobuf::ProtoSchema::from_source(&registered, Some("db.public.orders.Envelope")).unwrap();
    let schema = DebeziumProto::parse(&compiled.message, None, &Map::new()).unwrap();
    assert_eq!(types(&schema)[1], ("price".to_string(), Ty::Prim(Prim::Decimal { precision: 12, scale: 2 })));
}
