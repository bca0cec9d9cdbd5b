use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use prost_reflect::{DynamicMessage, Value as Proto};
use serde_json::json;

use super::super::{Unwrapped, Unwrapper};
use super::*;
use crate::model::pipeline::upsert::{DecimalHandling, Envelope, Order, SourceField};
use crate::model::schema::debezium_proto::DebeziumProto;
use crate::model::schema::debezium_proto::tests::envelope;
use crate::modes::upsert::envelope::Op;
use crate::modes::upsert::registry_envelopes::WriterEnvelope;

/// The table a pipeline declared (`schema_avsc`) for the test envelope's row.
const DECLARED: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},
    {"name":"price","type":["null",{"type":"bytes","logicalType":"decimal","precision":12,"scale":3}]},
    {"name":"born","type":["null",{"type":"int","logicalType":"date"}]},
    {"name":"seen","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
    {"name":"at","type":["null",{"type":"long","logicalType":"local-timestamp-micros"}]},
    {"name":"uid","type":["null",{"type":"string","logicalType":"uuid"}]},
    {"name":"note","type":["null","string"]},
    {"name":"opens","type":["null",{"type":"long","logicalType":"time-micros"}]},
    {"name":"day","type":["null",{"type":"int","connect.name":"io.debezium.time.Date"}]},
    {"name":"micros","type":["null",{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}]},
    {"name":"cost","type":["null",{"type":"bytes","logicalType":"decimal","precision":10,"scale":3}]},
    {"name":"nanos","type":["null",{"type":"long","connect.name":"io.debezium.time.NanoTimestamp"}]},
    {"name":"millis","type":["null",{"type":"long","connect.name":"io.debezium.time.Timestamp"}]},
    {"name":"total","type":["null",{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}]},
    {"name":"kind","type":["null","string"]}]}"#;

fn unwrapper() -> Unwrapper {
    let table = ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(12, 3), true),
        Field::new("born", DataType::Date32, true),
        Field::new("seen", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("uid", DataType::FixedSizeBinary(16), true),
        Field::new("note", DataType::Utf8, true),
        Field::new("opens", DataType::Time64(TimeUnit::Microsecond), true),
        Field::new("day", DataType::Date32, true),
        Field::new("micros", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("cost", DataType::Decimal128(10, 3), true),
        Field::new("nanos", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("millis", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("total", DataType::Decimal128(10, 2), true),
        Field::new("kind", DataType::Utf8, true),
    ]);
    Unwrapper::new(Envelope::Debezium, &Order::Source(SourceField::Lsn), &table, &["id".into()], DecimalHandling::default())
}

fn writer() -> WriterEnvelope {
    let (row, declared) = crate::model::schema::debezium::declared_row(DECLARED).unwrap();
    WriterEnvelope::Protobuf(DebeziumProto::parse(&envelope(), Some(&row.to_iceberg().unwrap()), &declared).unwrap())
}

fn message(name: &str, fields: &[(&str, Proto)]) -> Proto {
    let descriptor = envelope().parent_pool().get_message_by_name(name).unwrap();
    let mut m = DynamicMessage::new(descriptor);
    for (field, value) in fields {
        m.set_field_by_name(field, value.clone());
    }
    Proto::Message(m)
}

/// A change `op` of `after` (fields of the row message) at `lsn`, encoded.
fn record(op: &str, after: &[(&str, Proto)], lsn: i64) -> Vec<u8> {
    let Proto::Message(m) = message(
        "db.public.orders.Envelope",
        &[
            ("after", message("db.public.orders.Envelope.Value", after)),
            ("source", message("db.public.orders.Envelope.Source", &[("lsn", Proto::I64(lsn))])),
            ("op", Proto::String(op.into())),
        ],
    ) else {
        unreachable!()
    };
    prost::Message::encode_to_vec(&m)
}

fn row(after: &[(&str, Proto)]) -> Result<Value, String> {
    match unwrapper().debezium_framed(&writer(), &record("c", after, 7))? {
        Unwrapped::Upsert { row, op: Op::Insert, position: Some(7) } => Ok(serde_json::from_slice(&row).unwrap()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_protobuf_representation_lands_in_the_columns_type_exactly() {
    let decimal = |unscaled: &[u8], scale: i32| {
        message(
            "confluent.type.Decimal",
            &[("value", Proto::Bytes(unscaled.to_vec().into())), ("scale", Proto::I32(scale)), ("precision", Proto::U32(12))],
        )
    };
    let image = row(&[
        ("id", Proto::I64(9)),
        // -12345 at scale 2 into a decimal(12, 3) column: -123.450.
        ("price", decimal(&(-12345i16).to_be_bytes(), 2)),
        ("born", message("google.type.Date", &[("year", Proto::I32(2024)), ("month", Proto::I32(2)), ("day", Proto::I32(29))])),
        ("seen", message("google.protobuf.Timestamp", &[("seconds", Proto::I64(1_764_460_800)), ("nanos", Proto::I32(123_456_000))])),
        ("at", Proto::String("2026-12-01T10:00:00.5+02:00".into())),
        ("uid", message("google.protobuf.StringValue", &[("value", Proto::String("0b7d4c4e-7f3a-4d3c-9a53-1a2b3c4d5e6f".into()))])),
        ("note", Proto::String("ünï".into())),
        (
            "opens",
            message("google.type.TimeOfDay", &[("hours", Proto::I32(9)), ("minutes", Proto::I32(30)), ("nanos", Proto::I32(250_000_000))]),
        ),
        ("day", Proto::I32(19_000)),
        ("micros", Proto::I64(1_764_460_800_123_456)),
        ("cost", Proto::F64(12.5)),
        ("nanos", Proto::I64(1_764_460_800_123_456_000)),
        ("millis", Proto::I64(1_764_460_800_123)),
        ("total", Proto::String("-0.05".into())),
        ("kind", Proto::EnumNumber(1)),
    ])
    .unwrap();
    assert_eq!(
        image,
        json!({"id": 9, "price": "-123.450", "born": "2024-02-29", "seen": "2025-11-30T00:00:00.123456Z", "at": "2026-12-01T08:00:00.500",
            "uid": "0b7d4c4e-7f3a-4d3c-9a53-1a2b3c4d5e6f", "note": "ünï", "opens": "09:30:00.250000", "day": "2022-01-08",
            "micros": "2025-11-30T00:00:00.123456", "cost": "12.500", "nanos": "2025-11-30T00:00:00.123456",
            "millis": "2025-11-30T00:00:00.123", "total": "-0.05", "kind": "RETAIL"})
    );
    // Absent fields with presence are null; a plain scalar is its zero value, as proto3 reads it.
    let sparse = row(&[("id", Proto::I64(1))]).unwrap();
    assert_eq!(sparse["price"], Value::Null);
    assert_eq!(sparse["day"], Value::Null);
    assert_eq!(sparse["note"], json!(""));
}

#[test]
fn what_a_column_cannot_hold_exactly_is_refused_naming_the_field() {
    let err = |field: &str, value: Proto| row(&[("id", Proto::I64(1)), (field, value)]).unwrap_err();
    let decimal =
        |scale: i32| message("confluent.type.Decimal", &[("value", Proto::Bytes(vec![0x30, 0x39].into())), ("scale", Proto::I32(scale))]);
    assert!(err("price", decimal(4)).contains("field `price`"), "4 digits after the point into scale 3");
    assert!(err("cost", Proto::F64(0.1234)).contains("field `cost`"));
    let nanos = message("google.protobuf.Timestamp", &[("seconds", Proto::I64(1)), ("nanos", Proto::I32(1))]);
    assert!(err("seen", nanos).contains("finer than the column's microseconds"));
    assert!(err("nanos", Proto::I64(1_001)).contains("field `nanos`"), "a NanoTimestamp finer than µs");
    let feb30 = message("google.type.Date", &[("year", Proto::I32(2023)), ("month", Proto::I32(2)), ("day", Proto::I32(30))]);
    assert!(err("born", feb30).contains("not a calendar date"));
}

#[test]
fn truncated_or_foreign_payloads_are_refused() {
    let bytes = record("u", &[("id", Proto::I64(3)), ("note", Proto::String("x".into()))], 5);
    assert!(unwrapper().debezium_framed(&writer(), &bytes[..bytes.len() - 1]).is_err());
    let Unwrapped::Upsert { op: Op::Update, position: Some(5), .. } = unwrapper().debezium_framed(&writer(), &bytes).unwrap() else {
        panic!()
    };
    let delete = record("d", &[], 6);
    assert!(unwrapper().debezium_framed(&writer(), &delete).unwrap_err().contains("no `before` object"));
}
