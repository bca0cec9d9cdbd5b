use arrow_schema::Field;

use super::*;

fn table() -> ArrowSchema {
    ArrowSchema::new(vec![
        Field::new("tenant", DataType::Utf8, false),
        Field::new("id", DataType::Int64, false),
        Field::new("born", DataType::Date32, true),
        Field::new("seen", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
    ])
}

fn debezium(order: &str) -> Unwrapper {
    let field = match order {
        "lsn" => SourceField::Lsn,
        "scn" => SourceField::Scn,
        "pos" => SourceField::BinlogPos,
        _ => SourceField::TsMs,
    };
    Unwrapper::new(Envelope::Debezium, &Order::Source(field), &table(), &["tenant".into(), "id".into()])
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn debezium_with_and_without_the_embedded_schema() {
    let plain = br#"{"before":null,"after":{"tenant":"a","id":1,"born":19000,"seen":1700000000123},"source":{"lsn":42,"ts_ms":5},"op":"c"}"#;
    let Unwrapped::Upsert { row, op, position } = debezium("lsn").unwrap(None, Some(plain)).unwrap() else { panic!() };
    assert_eq!((op, position), (Op::Insert, Some(42)));
    assert_eq!(json(&row), serde_json::json!({"tenant":"a","id":1,"born":"2022-01-08","seen":"2023-11-14T22:13:20.123Z"}));
    let with_schema = br#"{"schema":{"type":"struct","fields":[{"type":"struct","field":"after","fields":[
        {"type":"int64","field":"seen","name":"io.debezium.time.MicroTimestamp"}]}]},
        "payload":{"before":null,"after":{"tenant":"a","id":1,"seen":1700000000123456},"source":{"scn":"9007199254740993"},"op":"r"}}"#;
    let Unwrapped::Upsert { row, op, position } = debezium("scn").unwrap(None, Some(with_schema)).unwrap() else { panic!() };
    assert_eq!((op, position), (Op::Insert, Some(9_007_199_254_740_993)));
    assert_eq!(json(&row)["seen"], "2023-11-14T22:13:20.123456Z");
    let delete = br#"{"before":{"tenant":"a","id":1},"after":null,"source":{"file":"mysql-bin.000003","pos":154},"op":"d"}"#;
    let Unwrapped::Delete { image, position } = debezium("pos").unwrap(None, Some(delete)).unwrap() else { panic!() };
    assert_eq!(position, Some(3 << 32 | 154));
    assert_eq!(json(&image), serde_json::json!({"tenant":"a","id":1}));
    assert_eq!(debezium("lsn").unwrap(Some(b"{}"), None), Ok(Unwrapped::Control), "a Kafka tombstone is not a change");
}

#[test]
fn debezium_refusals_name_what_is_wrong() {
    let err = |v: &str| debezium("lsn").unwrap(None, Some(v.as_bytes())).unwrap_err();
    assert!(err(r#"{"op":"t","source":{"lsn":1}}"#).contains("truncate"));
    assert!(err(r#"{"op":"x"}"#).contains("not one of c, r, u, d, t, m"));
    assert!(err(r#"{"op":"c","after":{"id":1},"source":{}}"#).contains("source.lsn is missing"));
    assert!(err(r#"{"op":"d","before":null,"source":{"lsn":1}}"#).contains("no `before` object"));
    assert!(err(r#"{"op":"u","after":{"born":1.5},"source":{"lsn":1}}"#).contains("field `born`"));
    assert!(err("{").contains("not JSON"));
}

#[test]
fn dms_and_row_envelopes() {
    let dms = Unwrapper::new(Envelope::Dms, &Order::Source(SourceField::DmsTimestamp), &table(), &["id".into()]);
    let update = br#"{"data":{"tenant":"a","id":1},"metadata":{"operation":"update","timestamp":"2026-11-30T10:00:00.000001Z"}}"#;
    let Unwrapped::Upsert { op, position, .. } = dms.unwrap(None, Some(update)).unwrap() else { panic!() };
    assert_eq!((op, position), (Op::Update, Some(1_796_032_800_000_001)));
    let control = br#"{"data":{},"metadata":{"record-type":"control","operation":"create-table"}}"#;
    assert_eq!(dms.unwrap(None, Some(control)), Ok(Unwrapped::Control));
    assert!(dms.unwrap(None, Some(br#"{"data":{},"metadata":{"operation":"merge"}}"#)).unwrap_err().contains("metadata.operation"));

    let row = Unwrapper::new(Envelope::Row, &Order::Kafka, &table(), &["id".into()]);
    assert_eq!(row.unwrap(None, Some(b"x")), Ok(Unwrapped::Raw(b"x")));
    let Unwrapped::Delete { image, .. } = row.unwrap(Some(b"17"), None).unwrap() else { panic!() };
    assert_eq!(json(&image), serde_json::json!({"id": 17}));
    assert!(row.unwrap(None, None).unwrap_err().contains("no key"));
    let composite = Unwrapper::new(Envelope::Row, &Order::Kafka, &table(), &["tenant".into(), "id".into()]);
    let Unwrapped::Delete { image, .. } = composite.unwrap(Some(br#"{"tenant":"a","id":2}"#), None).unwrap() else { panic!() };
    assert_eq!(json(&image), serde_json::json!({"tenant":"a","id":2}));
    assert!(composite.unwrap(Some(b"a-2"), None).unwrap_err().contains("JSON object"));
}
