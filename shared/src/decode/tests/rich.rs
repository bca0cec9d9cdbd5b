//! The rich test schemas (tests/schemas/): values encoded with each format's own library
//! decode to every value they hold.

use std::collections::HashMap;

use apache_avro::types::Value as Avro;
use prost_reflect::{DynamicMessage, MapKey, Value as Proto};

use super::{RecordDecoder, own_target, rows};
use crate::model::schema::tests::rich_schema;
use crate::model::schema::{Format, SourceSchema};

const ORDER_UUID: &str = "6f1c2d3e-4a5b-4c6d-8e7f-901234567890";

fn avro_schema() -> apache_avro::Schema {
    let text = std::fs::read_to_string(crate::model::schema::tests::repo_file("tests/schemas/rich.avsc")).unwrap();
    apache_avro::Schema::parse_str(&text).unwrap()
}

/// An order with every field set; `complete: false` leaves the nullable ones null.
pub(crate) fn avro_order(complete: bool) -> Vec<u8> {
    let some = |v: Avro| if complete { Avro::Union(1, Box::new(v)) } else { Avro::Union(0, Box::new(Avro::Null)) };
    let item = |sku: &str, quantity: i32, cents: i64| {
        let unscaled = cents.to_be_bytes().iter().skip_while(|b| **b == 0).copied().collect::<Vec<_>>();
        let unscaled = if cents < 0 { vec![0xff, (cents as u8)] } else { unscaled };
        Avro::Record(vec![
            ("sku".into(), Avro::String(sku.into())),
            ("quantity".into(), Avro::Int(quantity)),
            ("unit_price".into(), Avro::Decimal(unscaled.into())),
        ])
    };
    let address = Avro::Record(vec![("street".into(), Avro::String("1 Main St".into())), ("zip".into(), Avro::String("02134".into()))]);
    let value = Avro::Record(vec![
        ("order_id".into(), Avro::Long(9_000_000_001)),
        ("id".into(), Avro::Uuid(ORDER_UUID.parse().unwrap())),
        ("placed_at".into(), Avro::TimestampMillis(1_700_000_000_123)),
        ("packed_at".into(), some(Avro::TimestampMicros(1_700_000_100_000_001))),
        ("local_time".into(), Avro::LocalTimestampMicros(1_700_000_000_000_000)),
        ("pickup".into(), Avro::TimeMillis(45_296_789)),
        ("delivery_date".into(), some(Avro::Date(19_700))),
        ("status".into(), Avro::Enum(2, "SHIPPED".into())),
        (
            "customer".into(),
            Avro::Record(vec![
                ("name".into(), Avro::String("Ada".into())),
                ("email".into(), some(Avro::String("ada@example.com".into()))),
                ("address".into(), some(address)),
            ]),
        ),
        ("items".into(), Avro::Array(vec![item("A-1", 2, 1234), item("B-2", 1, -5)])),
        ("attributes".into(), Avro::Map(HashMap::from([("points".to_string(), Avro::Long(-3))]))),
        ("total".into(), Avro::Decimal(vec![0, 0, 0, 0, 0, 0, 0x09, 0xa1].into())),
        (
            "note".into(),
            if complete { Avro::Union(0, Box::new(Avro::String("leave at door".into()))) } else { Avro::Union(1, Box::new(Avro::Null)) },
        ),
        ("weight".into(), Avro::Float(1.5)),
        ("discount".into(), Avro::Double(-0.25)),
        ("gift".into(), Avro::Boolean(true)),
        ("payload".into(), Avro::Bytes(vec![0, 1, 254])),
        ("checksum".into(), Avro::Fixed(4, vec![0xde, 0xad, 0xbe, 0xef])),
        ("tags".into(), Avro::Array(vec![Avro::Union(1, Box::new(Avro::String("fragile".into()))), Avro::Union(0, Box::new(Avro::Null))])),
    ]);
    apache_avro::to_avro_datum(&avro_schema(), value).unwrap()
}

fn decode_rows(schema: &SourceSchema, values: &[Vec<u8>]) -> Vec<Vec<String>> {
    let target = own_target(schema);
    let mut decoder = RecordDecoder::new(schema, target.clone()).unwrap();
    for v in values {
        decoder.append(v).unwrap();
    }
    rows(&target, &decoder.finish().unwrap())
}

#[test]
fn rich_avro_round_trips_every_value() {
    let got = decode_rows(&rich_schema(Format::Avro), &[avro_order(true), avro_order(false)]);
    let common = |packed: &str, date: &str, email: &str, address: &str, note: &str| {
        vec![
            "order_id=9000000001".to_string(),
            "id=6f1c2d3e4a5b4c6d8e7f901234567890".into(),
            "placed_at=2023-11-14T22:13:20.123Z".into(),
            format!("packed_at={packed}"),
            "local_time=2023-11-14T22:13:20".into(),
            "pickup=12:34:56.789".into(),
            format!("delivery_date={date}"),
            "status=SHIPPED".into(),
            format!("customer={{name: Ada, email: {email}, address: {address}}}"),
            "items=[{sku: A-1, quantity: 2, unit_price: 12.34}, {sku: B-2, quantity: 1, unit_price: -0.05}]".into(),
            "attributes={points: -3}".into(),
            "total=24.65".into(),
            format!("note={note}"),
            "weight=1.5".into(),
            "discount=-0.25".into(),
            "gift=true".into(),
            "payload=0001fe".into(),
            "checksum=deadbeef".into(),
            "tags=[fragile, null]".into(),
        ]
    };
    assert_eq!(
        got,
        [
            common("2023-11-14T22:15:00.000001Z", "2023-12-09", "ada@example.com", "{street: 1 Main St, zip: 02134}", "leave at door"),
            common("null", "null", "null", "null", "null"),
        ]
    );
}

fn message(schema: &SourceSchema, name: &str) -> DynamicMessage {
    let SourceSchema::Protobuf(p) = schema else { unreachable!() };
    DynamicMessage::new(p.message.parent_pool().get_message_by_name(name).unwrap())
}

fn set(m: &mut DynamicMessage, fields: Vec<(&str, Proto)>) {
    for (name, value) in fields {
        m.set_field_by_name(name, value);
    }
}

/// An order with every field set; `complete: false` leaves the optional ones unset.
pub(crate) fn proto_order(complete: bool) -> Vec<u8> {
    use prost::Message;
    let schema = rich_schema(Format::Protobuf);
    let mut order = message(&schema, "shop.Order");
    let mut placed = message(&schema, "google.protobuf.Timestamp");
    set(&mut placed, vec![("seconds", Proto::I64(1_700_000_000)), ("nanos", Proto::I32(123_456_000))]);
    let mut customer = message(&schema, "shop.Customer");
    set(&mut customer, vec![("name", Proto::String("Ada".into()))]);
    let items = [("A-1", 2, 12.34), ("B-2", 1, -0.05)].map(|(sku, quantity, price)| {
        let mut item = message(&schema, "shop.Item");
        set(&mut item, vec![("sku", Proto::String(sku.into())), ("quantity", Proto::I32(quantity)), ("unit_price", Proto::F64(price))]);
        Proto::Message(item)
    });
    set(
        &mut order,
        vec![
            ("order_id", Proto::I64(9_000_000_001)),
            ("status", Proto::EnumNumber(if complete { 2 } else { 7 })),
            ("items", Proto::List(items.to_vec())),
            (
                "attributes",
                Proto::Map(HashMap::from([(MapKey::String("b".into()), Proto::I64(2)), (MapKey::String("a".into()), Proto::I64(-1))])),
            ),
            ("loyalty_points", Proto::U64(u64::from(u32::MAX) + 1)),
            ("visits", Proto::U32(u32::MAX)),
            ("priority", Proto::I32(-3)),
            ("tags", Proto::List(vec![Proto::String("fragile".into()), Proto::String("gift".into())])),
            ("gift", Proto::Bool(true)),
            ("weight", Proto::F32(1.5)),
            ("discount", Proto::F64(-0.25)),
            ("payload", Proto::Bytes(vec![0u8, 1, 254].into())),
        ],
    );
    if complete {
        let mut address = message(&schema, "shop.Address");
        set(&mut address, vec![("street", Proto::String("1 Main St".into())), ("zip", Proto::String("02134".into()))]);
        set(&mut customer, vec![("email", Proto::String("ada@example.com".into())), ("address", Proto::Message(address))]);
        let mut note = message(&schema, "google.protobuf.StringValue");
        set(&mut note, vec![("value", Proto::String("leave at door".into()))]);
        let mut coupon = message(&schema, "google.protobuf.Int64Value");
        set(&mut coupon, vec![("value", Proto::I64(0))]);
        set(
            &mut order,
            vec![
                ("placed_at", Proto::Message(placed)),
                ("customer", Proto::Message(customer)),
                ("voucher_code", Proto::String("WELCOME".into())),
                ("note", Proto::Message(note)),
                ("coupon", Proto::Message(coupon)),
            ],
        );
    }
    order.encode_to_vec()
}

#[test]
fn rich_protobuf_round_trips_every_value() {
    let mut got = decode_rows(&rich_schema(Format::Protobuf), &[proto_order(true), proto_order(false)]);
    // Map entries keep wire order, which the encoder takes from a HashMap.
    for row in &mut got {
        row[5] = row[5].replace("{b: 2, a: -1}", "{a: -1, b: 2}");
    }
    let row = |complete: bool| {
        let or_null = |v: &str| if complete { v.to_string() } else { "null".to_string() };
        vec![
            "order_id=9000000001".to_string(),
            format!("placed_at={}", or_null("2023-11-14T22:13:20.123456Z")),
            format!("status={}", if complete { "SHIPPED" } else { "7" }),
            format!("customer={}", or_null("{name: Ada, email: ada@example.com, address: {street: 1 Main St, zip: 02134}}")),
            "items=[{sku: A-1, quantity: 2, unit_price: 12.34}, {sku: B-2, quantity: 1, unit_price: -0.05}]".into(),
            "attributes={a: -1, b: 2}".into(),
            "card_last4=null".into(),
            format!("voucher_code={}", or_null("WELCOME")),
            format!("note={}", or_null("leave at door")),
            format!("coupon={}", or_null("0")),
            "loyalty_points=4294967296".into(),
            "visits=4294967295".into(),
            "priority=-3".into(),
            "tags=[fragile, gift]".into(),
            "gift=true".into(),
            "weight=1.5".into(),
            "discount=-0.25".into(),
            "payload=0001fe".into(),
        ]
    };
    assert_eq!(got, [row(true), row(false)]);
}

#[test]
fn protobuf_uint64_above_the_long_range_is_a_record_error() {
    use prost::Message;
    let schema = rich_schema(Format::Protobuf);
    let mut order = message(&schema, "shop.Order");
    order.set_field_by_name("loyalty_points", Proto::U64(u64::MAX));
    let mut decoder = RecordDecoder::new(&schema, own_target(&schema)).unwrap();
    let e = decoder.append(&order.encode_to_vec()).unwrap_err();
    assert_eq!(e, "protobuf: field `loyalty_points`: 18446744073709551615 exceeds the long range (uint64 above 2^63-1)");
    assert_eq!(decoder.len(), 0);
}

pub(crate) fn json_order(complete: bool) -> Vec<u8> {
    let mut order = serde_json::json!({
        "order_id": 9_000_000_001i64,
        "id": ORDER_UUID,
        "placed_at": "2023-11-14T23:13:20.123+01:00",
        "status": "SHIPPED",
        "customer": {"name": "Ada"},
        "items": [{"sku": "A-1", "quantity": 2, "unit_price": 12.34}, {"sku": "B-2", "quantity": 1, "unit_price": -0.05}],
        "attributes": {"points": -3},
        "discount": -0.25,
        "gift": true,
        "tags": ["fragile"],
        "ignored_extra": {"anything": [1, 2]},
    });
    if complete {
        order["delivery_date"] = "2023-12-09".into();
        order["note"] = "leave at door".into();
        order["customer"]["email"] = "ada@example.com".into();
        order["customer"]["address"] = serde_json::json!({"street": "1 Main St", "zip": "02134"});
    } else {
        order["note"] = serde_json::Value::Null;
    }
    serde_json::to_vec(&order).unwrap()
}

#[test]
fn rich_json_round_trips_every_value() {
    let got = decode_rows(&rich_schema(Format::Json), &[json_order(true), json_order(false)]);
    let row = |complete: bool| {
        let or_null = |v: &str| if complete { v.to_string() } else { "null".to_string() };
        vec![
            "order_id=9000000001".to_string(),
            "id=6f1c2d3e4a5b4c6d8e7f901234567890".into(),
            "placed_at=2023-11-14T22:13:20.123Z".into(),
            format!("delivery_date={}", or_null("2023-12-09")),
            "status=SHIPPED".into(),
            format!(
                "customer={{name: Ada, email: {}, address: {}}}",
                or_null("ada@example.com"),
                or_null("{street: 1 Main St, zip: 02134}")
            ),
            "items=[{sku: A-1, quantity: 2, unit_price: 12.34}, {sku: B-2, quantity: 1, unit_price: -0.05}]".into(),
            "attributes={points: -3}".into(),
            format!("note={}", or_null("leave at door")),
            "discount=-0.25".into(),
            "gift=true".into(),
            "tags=[fragile]".into(),
        ]
    };
    assert_eq!(got, [row(true), row(false)]);
}

#[test]
fn bad_rich_records_name_the_nested_field() {
    let json = rich_schema(Format::Json);
    let mut decoder = RecordDecoder::new(&json, own_target(&json)).unwrap();
    let mut order: serde_json::Value = serde_json::from_slice(&json_order(true)).unwrap();
    order["customer"]["address"]["zip"] = 2134.into();
    assert_eq!(
        decoder.append(order.to_string().as_bytes()).unwrap_err(),
        "json: field `customer.address.zip`: expected string, got number"
    );
    order["customer"]["address"]["zip"] = "02134".into();
    order["items"][1]["quantity"] = serde_json::Value::Null;
    assert_eq!(decoder.append(order.to_string().as_bytes()).unwrap_err(), "json: field `items[1].quantity`: required but missing");
    order["items"][1]["quantity"] = 1.into();
    order["placed_at"] = "yesterday".into();
    let e = decoder.append(order.to_string().as_bytes()).unwrap_err();
    assert!(e.starts_with("json: field `placed_at`: expected an RFC 3339 timestamp, got `yesterday`"), "{e}");
    order["placed_at"] = 1_700_000_000_123i64.into();
    order["id"] = "not-a-uuid".into();
    assert!(decoder.append(order.to_string().as_bytes()).unwrap_err().contains("field `id`: expected a UUID"));
    assert_eq!(decoder.len(), 0, "nothing appended by any bad record");
    // The bad records' partial rows (customer.name before address.zip failed) are gone too.
    decoder.append(&json_order(true)).unwrap();
    let target = own_target(&json);
    assert_eq!(rows(&target, &decoder.finish().unwrap()), decode_rows(&json, &[json_order(true)]));

    let avro = rich_schema(Format::Avro);
    let mut decoder = RecordDecoder::new(&avro, own_target(&avro)).unwrap();
    let good = avro_order(true);
    // The datum ends with tags: [Some("fragile"), None]; cut inside "fragile".
    let e = decoder.append(&good[..good.len() - 3]).unwrap_err();
    assert_eq!(e, "avro: field `tags[0]`: truncated: 7 declared, 6 bytes left");
    // order_id takes 5 bytes, then the uuid's length, then its first character.
    let mut bad_uuid = good.clone();
    bad_uuid[6] = b'x';
    assert!(decoder.append(&bad_uuid).unwrap_err().contains("field `id`: expected a UUID"));
    assert_eq!(decoder.len(), 0);
}

/// Map entries of both decodes in one order (the re-encoder takes them from a HashMap).
fn same_map_order(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    for row in &mut rows {
        row[5] = row[5].replace("{b: 2, a: -1}", "{a: -1, b: 2}");
    }
    rows
}

#[test]
fn protobuf_wire_semantics_match_prost_reflect() {
    use prost::Message;
    // Concatenated encodings merge: the last scalar wins, lists append, messages merge, a
    // repeated map key keeps its last value. prost-reflect's decode + re-encode is the oracle.
    let schema = rich_schema(Format::Protobuf);
    let SourceSchema::Protobuf(p) = &schema else { unreachable!() };
    for bytes in [
        [proto_order(false), proto_order(true)].concat(),
        [proto_order(true), proto_order(false)].concat(),
        [proto_order(true), proto_order(true), proto_order(false)].concat(),
    ] {
        let normalised = DynamicMessage::decode(p.message.clone(), bytes.as_slice()).unwrap().encode_to_vec();
        let (ours, oracle) = (decode_rows(&schema, &[bytes]), decode_rows(&schema, &[normalised]));
        assert_eq!(same_map_order(ours), same_map_order(oracle));
    }
}

#[test]
fn protobuf_packed_and_unpacked_repeated_scalars_decode_alike() {
    use prost::Message;
    let source = r#"syntax = "proto3"; package t; enum E { A = 0; B = 1; }
        message P { repeated int32 xs = 1; repeated sint64 ys = 2; repeated double zs = 3; repeated E es = 4;
                    repeated fixed32 fs = 5; map<int32, string> m = 6; }
        message U { repeated int32 xs = 1 [packed = false]; repeated sint64 ys = 2 [packed = false];
                    repeated double zs = 3 [packed = false]; repeated E es = 4 [packed = false];
                    repeated fixed32 fs = 5 [packed = false]; map<int32, string> m = 6; }"#;
    let packed = SourceSchema::from_text(Format::Protobuf, source, Some("t.P")).unwrap();
    for name in ["t.P", "t.U"] {
        let mut m = message(&packed, name);
        set(
            &mut m,
            vec![
                ("xs", Proto::List(vec![Proto::I32(-1), Proto::I32(2)])),
                ("ys", Proto::List(vec![Proto::I64(-5), Proto::I64(6)])),
                ("zs", Proto::List(vec![Proto::F64(0.5)])),
                ("es", Proto::List(vec![Proto::EnumNumber(1), Proto::EnumNumber(0)])),
                ("fs", Proto::List(vec![Proto::U32(u32::MAX)])),
                ("m", Proto::Map(HashMap::from([(MapKey::I32(7), Proto::String("seven".into()))]))),
            ],
        );
        assert_eq!(
            decode_rows(&packed, &[m.encode_to_vec()]),
            [["xs=[-1, 2]", "ys=[-5, 6]", "zs=[0.5]", "es=[B, A]", "fs=[4294967295]", "m={7: seven}"]],
            "{name}"
        );
    }
}

#[test]
fn protobuf_fields_numbered_anywhere_and_long_varints_decode() {
    use prost::Message;
    // Numbers below the direct lookup's bound, at it and far above it (the largest allowed),
    // values of one to ten varint bytes; unknown fields between them are skipped.
    let source = r#"syntax = "proto3"; package t;
        message M { int64 a = 1; int64 b = 63; int64 c = 64; string d = 1000; int64 e = 536870911; uint32 f = 15; }
        message W { int64 a = 1; int64 x = 2; int64 b = 63; int64 y = 65; int64 c = 64; string d = 1000;
                    int64 e = 536870911; uint32 f = 15; }"#;
    let schema = SourceSchema::from_text(Format::Protobuf, source, Some("t.M")).unwrap();
    let mut m = message(&schema, "t.W");
    set(
        &mut m,
        vec![
            ("a", Proto::I64(127)),
            ("x", Proto::I64(9)),
            ("b", Proto::I64(128)),
            ("y", Proto::I64(-1)),
            ("c", Proto::I64(-1)),
            ("d", Proto::String("thousand".into())),
            ("e", Proto::I64(i64::MAX)),
            ("f", Proto::U32(u32::MAX)),
        ],
    );
    assert_eq!(
        decode_rows(&schema, &[m.encode_to_vec()]),
        [["a=127", "f=4294967295", "b=128", "c=-1", "d=thousand", "e=9223372036854775807"]]
    );
}
