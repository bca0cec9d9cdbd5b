//! The one-pass reading of a message of singular fields against `decode_message`'s.

use std::sync::Arc;

use arrow_schema::{DataType, Field};
use prost::Message;
use prost_reflect::{DynamicMessage, Value as Proto};

use super::*;
use crate::decode::tests::own_target;
use crate::model::schema::{Format, SourceSchema};
use crate::testkit::TestResult;

/// Every kind of singular field: each scalar, an enum, a timestamp, a wrapper, a nested message
/// and an explicitly optional scalar. `G` has one more field, unknown to `F`.
const SCHEMA: &str = r#"syntax = "proto3"; package t;
    import "google/protobuf/timestamp.proto"; import "google/protobuf/wrappers.proto";
    enum E { A = 0; B = 1; }
    message Inner { int32 x = 1; string y = 2; }
    message F { int32 a = 1; int64 b = 2; uint32 c = 3; uint64 d = 4; sint32 e = 5; sint64 f = 6;
        fixed32 g = 7; fixed64 h = 8; sfixed32 i = 9; sfixed64 j = 10; float k = 11; double l = 12;
        bool m = 13; string n = 14; bytes o = 15; E p = 16; google.protobuf.Timestamp q = 17;
        Inner r = 18; google.protobuf.Int64Value s = 19; optional int32 t = 20; int64 big = 100; }
    message G { int32 a = 1; int64 b = 2; string n = 14; Inner r = 18; int64 unknown = 50; int64 big = 100; }"#;

fn schema() -> TestResult<SourceSchema> {
    Ok(SourceSchema::from_text(Format::Protobuf, SCHEMA, Some("t.F"))?)
}

fn encoded(schema: &SourceSchema, name: &str, fields: Vec<(&str, Proto)>) -> TestResult<Vec<u8>> {
    let SourceSchema::Protobuf(p) = schema else { return Err("not protobuf".into()) };
    let descriptor = p.message.parent_pool().get_message_by_name(name).ok_or(name.to_string())?;
    let mut m = DynamicMessage::new(descriptor.clone());
    for (field, value) in fields {
        m.set_field_by_name(field, value);
    }
    Ok(m.encode_to_vec())
}

/// Messages with every field set, with none, with some, and with a field the target lacks.
fn messages(schema: &SourceSchema) -> TestResult<Vec<Vec<u8>>> {
    let SourceSchema::Protobuf(p) = schema else { return Err("not protobuf".into()) };
    let pool = p.message.parent_pool();
    let inner = |x: i32, y: &str| -> TestResult<Proto> {
        let mut m = DynamicMessage::new(pool.get_message_by_name("t.Inner").ok_or("Inner")?);
        m.set_field_by_name("x", Proto::I32(x));
        m.set_field_by_name("y", Proto::String(y.into()));
        Ok(Proto::Message(m))
    };
    let timestamp = |seconds: i64, nanos: i32| -> TestResult<Proto> {
        let mut m = DynamicMessage::new(pool.get_message_by_name("google.protobuf.Timestamp").ok_or("Timestamp")?);
        m.set_field_by_name("seconds", Proto::I64(seconds));
        m.set_field_by_name("nanos", Proto::I32(nanos));
        Ok(Proto::Message(m))
    };
    let wrapper = |v: i64| -> TestResult<Proto> {
        let mut m = DynamicMessage::new(pool.get_message_by_name("google.protobuf.Int64Value").ok_or("Int64Value")?);
        m.set_field_by_name("value", Proto::I64(v));
        Ok(Proto::Message(m))
    };
    Ok(vec![
        encoded(
            schema,
            "t.F",
            vec![
                ("a", Proto::I32(-7)),
                ("b", Proto::I64(i64::MIN)),
                ("c", Proto::U32(u32::MAX)),
                ("d", Proto::U64(1 << 40)),
                ("e", Proto::I32(-3)),
                ("f", Proto::I64(-1 << 50)),
                ("g", Proto::U32(9)),
                ("h", Proto::U64(10)),
                ("i", Proto::I32(-11)),
                ("j", Proto::I64(-12)),
                ("k", Proto::F32(0.5)),
                ("l", Proto::F64(-2.25)),
                ("m", Proto::Bool(true)),
                ("n", Proto::String("né".into())),
                ("o", Proto::Bytes(vec![0, 255].into())),
                ("p", Proto::EnumNumber(1)),
                ("q", timestamp(1_780_000_000, 123_456_000)?),
                ("r", inner(5, "five")?),
                ("s", wrapper(-5)?),
                ("t", Proto::I32(0)),
                ("big", Proto::I64(1)),
            ],
        )?,
        Vec::new(),
        encoded(schema, "t.F", vec![("b", Proto::I64(3)), ("q", timestamp(0, 0)?), ("p", Proto::EnumNumber(7))])?,
        encoded(schema, "t.G", vec![("unknown", Proto::I64(9)), ("a", Proto::I32(1)), ("r", inner(-1, "")?), ("big", Proto::I64(2))])?,
    ])
}

/// A reader of `F` into its own target, and an empty row column for it.
fn reader_and_row(schema: &SourceSchema) -> TestResult<(ProtoReader, Col)> {
    let SourceSchema::Protobuf(p) = schema else { return Err("not protobuf".into()) };
    let target = own_target(schema);
    let root = Arc::new(Field::new("", DataType::Struct(target.fields().clone()), false));
    Ok((ProtoReader::new(p, target.fields(), Default::default()), Col::new(&root).ok_or("no column for the target")?))
}

/// Each value read by `ProtoReader::append` (one pass where it can) and by `decode_message`
/// alone: the same outcome each, the same rows in the end.
fn both_ways(values: &[Vec<u8>]) -> TestResult {
    let schema = schema()?;
    let (reader, mut one_pass) = reader_and_row(&schema)?;
    let (_, mut general) = reader_and_row(&schema)?;
    for value in values {
        let rows = general.len();
        let expected = decode_message(value, &reader.row, &mut general).map_err(|e| e.to_string());
        if expected.is_err() {
            general.truncate(rows);
        }
        let got = reader.append(value, &mut one_pass).map_err(|e| e.to_string());
        if got.is_err() {
            one_pass.truncate(rows);
        }
        assert_eq!(got, expected, "{value:?}");
    }
    assert_eq!(one_pass.finish()?.to_data(), general.finish()?.to_data());
    Ok(())
}

#[test]
fn singular_messages_take_one_pass_and_read_as_the_general_way() -> TestResult {
    let schema = schema()?;
    let (reader, mut row) = reader_and_row(&schema)?;
    assert!(reader.row.one_pass, "F has only singular fields");
    let messages = messages(&schema)?;
    for value in &messages {
        assert!(matches!(decode_one_pass(value, &reader.row, &mut row), Ok(true)), "{value:?} in one pass");
    }
    // A field seen twice (concatenated encodings: the last scalar wins, messages merge) is
    // handed back.
    let twice = [messages[0].clone(), messages[2].clone()].concat();
    assert!(matches!(decode_one_pass(&twice, &reader.row, &mut row), Ok(false)));
    both_ways(&messages)
}

#[test]
fn repeats_and_corruptions_read_as_the_general_way() -> TestResult {
    let messages = messages(&schema()?)?;
    let mut values = Vec::new();
    for a in &messages {
        for b in &messages {
            values.push([a.as_slice(), b].concat());
        }
    }
    // Every byte of the full message changed, and every cut of it.
    let full = &messages[0];
    for at in 0..full.len() {
        for to in [0x00, 0x01, 0x08, 0x0a, 0x7f, 0x80, 0xff] {
            let mut v = full.clone();
            v[at] = to;
            values.push(v);
        }
        values.push(full[..at].to_vec());
    }
    both_ways(&values)
}

#[test]
fn messages_with_lists_or_maps_keep_the_general_way() -> TestResult {
    let schema = SourceSchema::from_text(
        Format::Protobuf,
        r#"syntax = "proto3"; package t; message L { int32 a = 1; repeated int32 xs = 2; }"#,
        Some("t.L"),
    )?;
    let SourceSchema::Protobuf(p) = &schema else { return Err("not protobuf".into()) };
    assert!(!ProtoReader::new(p, own_target(&schema).fields(), Default::default()).row.one_pass);
    Ok(())
}

/// A timestamp's encoding: fields 1 and 2 as varints, each left out when zero.
fn timestamp_encoding(seconds: i64, nanos: i32) -> Vec<u8> {
    let mut out = Vec::new();
    for (tag, value) in [(0x08u8, seconds as u64), (0x10, nanos as i64 as u64)] {
        if value != 0 {
            out.push(tag);
            let mut v = value;
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
    }
    out
}

proptest::proptest! {
    /// Encoders' timestamps take the short reading, to what the general one reads.
    #[test]
    fn written_timestamps_read_as_the_general_way(seconds in proptest::num::i64::ANY, nanos in proptest::num::i32::ANY) {
        let bytes = timestamp_encoding(seconds, nanos);
        proptest::prop_assert_eq!(timestamp_as_written(&bytes), Some((seconds, nanos)));
        proptest::prop_assert_eq!(timestamp_fields(&bytes).ok(), Some((seconds, nanos)));
    }

    /// Whatever the short reading takes, it reads as the general one (the rest it leaves).
    #[test]
    fn any_bytes_the_short_reading_takes_read_as_the_general_way(bytes in proptest::collection::vec(
        proptest::prop_oneof![proptest::num::u8::ANY, proptest::strategy::Just(0x08u8), proptest::strategy::Just(0x10u8)], 0..14)) {
        if let Some(fields) = timestamp_as_written(&bytes) {
            proptest::prop_assert_eq!(timestamp_fields(&bytes).ok(), Some(fields));
        }
    }
}

#[test]
fn timestamps_in_another_order_or_with_more_fields_read_the_general_way() {
    // nanos before seconds, seconds twice (the last wins), an unknown field.
    for (bytes, expected) in
        [(vec![0x10, 0x05, 0x08, 0x02], (2, 5)), (vec![0x08, 0x01, 0x08, 0x03], (3, 0)), (vec![0x08, 0x01, 0x18, 0x07, 0x10, 0x02], (1, 2))]
    {
        assert_eq!(timestamp_as_written(&bytes), None, "{bytes:?}");
        assert_eq!(timestamp_fields(&bytes).ok(), Some(expected), "{bytes:?}");
    }
}
