use arrow_schema::{DataType, Field, TimeUnit};
use base64::Engine;

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
    Unwrapper::new(Envelope::Debezium, &Order::Source(field), &table(), &["tenant".into(), "id".into()], DecimalHandling::default())
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn debezium_with_and_without_the_embedded_schema() {
    let plain =
        br#"{"before":null,"after":{"tenant":"a","id":1,"born":19000,"seen":1700000000123},"source":{"lsn":42,"ts_ms":5},"op":"c"}"#;
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
    assert!(err(r#"{"op":"t","source":{"lsn":1}}"#).contains("truncate) is not applied: the pipeline does not set allow_truncate = true"));
    assert!(err(r#"{"op":"x"}"#).contains("not one of c, r, u, d, t, m"));
    assert!(err(r#"{"op":"c","after":{"id":1},"source":{}}"#).contains("source.lsn is missing"));
    assert!(err(r#"{"op":"d","before":null,"source":{"lsn":1}}"#).contains("no `before` object"));
    assert!(err(r#"{"op":"u","after":{"born":1.5},"source":{"lsn":1}}"#).contains("field `born`"));
    assert!(err("{").contains("not JSON"));
}

#[test]
fn debezium_truncates_apply_where_allowed_at_their_source_position() {
    let truncate = br#"{"before":null,"after":null,"source":{"lsn":77,"ts_ms":5},"op":"t","ts_ms":6}"#;
    let allowed = debezium("lsn").with_truncate(true);
    assert_eq!(allowed.unwrap(None, Some(truncate)), Ok(Unwrapped::Truncate { position: 77 }));
    let e = allowed.unwrap(None, Some(br#"{"op":"t","source":{"ts_ms":5}}"#)).unwrap_err();
    assert!(e.contains("source.lsn is missing"), "{e}");
    // Without a source position a truncate cannot be placed among the keys' changes.
    let by_column = Unwrapper::new(Envelope::Debezium, &Order::Column("id".into()), &table(), &["id".into()], DecimalHandling::default())
        .with_truncate(true);
    assert!(by_column.unwrap(None, Some(truncate)).unwrap_err().contains("allow_truncate"));
}

#[test]
fn dms_and_row_envelopes() {
    let dms =
        Unwrapper::new(Envelope::Dms, &Order::Source(SourceField::DmsTimestamp), &table(), &["id".into()], DecimalHandling::default());
    let update = br#"{"data":{"tenant":"a","id":1},"metadata":{"operation":"update","timestamp":"2026-11-30T10:00:00.000001Z"}}"#;
    let Unwrapped::Upsert { op, position, .. } = dms.unwrap(None, Some(update)).unwrap() else { panic!() };
    assert_eq!((op, position), (Op::Update, Some(1_796_032_800_000_001)));
    let control = br#"{"data":{},"metadata":{"record-type":"control","operation":"create-table"}}"#;
    assert_eq!(dms.unwrap(None, Some(control)), Ok(Unwrapped::Control));
    assert!(dms.unwrap(None, Some(br#"{"data":{},"metadata":{"operation":"merge"}}"#)).unwrap_err().contains("metadata.operation"));

    let row = Unwrapper::new(Envelope::Row, &Order::Kafka, &table(), &["id".into()], DecimalHandling::default());
    assert_eq!(row.unwrap(None, Some(b"x")), Ok(Unwrapped::Raw(b"x")));
    let Unwrapped::Delete { image, .. } = row.unwrap(Some(b"17"), None).unwrap() else { panic!() };
    assert_eq!(json(&image), serde_json::json!({"id": 17}));
    assert!(row.unwrap(None, None).unwrap_err().contains("no key"));
    let composite = Unwrapper::new(Envelope::Row, &Order::Kafka, &table(), &["tenant".into(), "id".into()], DecimalHandling::default());
    let Unwrapped::Delete { image, .. } = composite.unwrap(Some(br#"{"tenant":"a","id":2}"#), None).unwrap() else { panic!() };
    assert_eq!(json(&image), serde_json::json!({"tenant":"a","id":2}));
    assert!(composite.unwrap(Some(b"a-2"), None).unwrap_err().contains("JSON object"));
}

/// A table of every rewritten type, and the after-image its Debezium record decodes to.
fn typed(decimals: DecimalHandling) -> Unwrapper {
    let table = ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Decimal128(10, 2), true),
        Field::new("born", DataType::Date32, true),
        Field::new("opens", DataType::Time64(TimeUnit::Microsecond), true),
        Field::new("local", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("seen", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
        Field::new("uid", DataType::FixedSizeBinary(16), true),
    ]);
    Unwrapper::new(Envelope::Debezium, &Order::Source(SourceField::Lsn), &table, &["id".into()], decimals)
}

/// The after-image of a Debezium record with `after` and, when `fields` is not empty, an
/// embedded schema declaring them.
fn after(unwrapper: &Unwrapper, after: Value, fields: Value) -> Result<Value, String> {
    let payload = serde_json::json!({"before": null, "after": after, "source": {"lsn": 1}, "op": "c"});
    let doc = if fields.as_array().is_some_and(|f| !f.is_empty()) {
        serde_json::json!({"schema": {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": fields}]}, "payload": payload})
    } else {
        payload
    };
    match unwrapper.unwrap(None, Some(doc.to_string().as_bytes()))? {
        Unwrapped::Upsert { row, .. } => Ok(json(&row)),
        other => panic!("{other:?}"),
    }
}

fn field(name: &str, ty: &str, semantic: &str) -> Value {
    serde_json::json!({"field": name, "type": ty, "name": semantic, "optional": true})
}

fn none() -> Value {
    serde_json::json!([])
}

#[test]
fn decimals_in_every_debezium_mode_land_at_the_columns_scale() {
    use serde_json::json;
    // 12345.67 unscaled 1234567 = 0x12D687; -1.50 unscaled -150 = 0xFF6A.
    let precise = typed(DecimalHandling::Precise);
    assert_eq!(after(&precise, json!({"id": 1, "amount": "EtaH"}), none()).unwrap()["amount"], "12345.67");
    assert_eq!(after(&precise, json!({"id": 1, "amount": "/2o="}), none()).unwrap()["amount"], "-1.50");
    let declared = |scale: &str| {
        json!([{"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                                         "parameters": {"scale": scale, "connect.decimal.precision": "10"}}])
    };
    assert_eq!(after(&precise, json!({"id": 1, "amount": "EtaH"}), declared("2")).unwrap()["amount"], "12345.67");
    // The embedded schema wins over decimal_handling; another scale reaches the decoder as such.
    let string = typed(DecimalHandling::String);
    assert_eq!(after(&string, json!({"id": 1, "amount": "EtaH"}), declared("3")).unwrap()["amount"], "1234.567");
    assert_eq!(after(&string, json!({"id": 1, "amount": "123.45"}), none()).unwrap()["amount"], "123.45");
    assert_eq!(after(&precise, json!({"id": 1, "amount": "123.45"}), json!([field("amount", "string", "")])).unwrap()["amount"], "123.45");
    // double: the number's exact shortest text, padded to the scale, never rounded.
    for handling in [DecimalHandling::Double, DecimalHandling::Precise] {
        let u = typed(handling);
        assert_eq!(after(&u, json!({"id": 1, "amount": 123.4}), none()).unwrap()["amount"], "123.40");
        assert_eq!(after(&u, json!({"id": 1, "amount": -7}), none()).unwrap()["amount"], "-7.00");
        assert_eq!(after(&u, json!({"id": 1, "amount": u64::MAX}), none()).unwrap()["amount"], "18446744073709551615.00");
        let err = after(&u, json!({"id": 1, "amount": 0.125}), none()).unwrap_err();
        assert!(err.contains("field `amount`") && err.contains("not rounded"), "{err}");
    }
    assert!(
        after(&typed(DecimalHandling::Double), json!({"id": 1, "amount": "1.00"}), none())
            .unwrap_err()
            .contains("decimal_handling = \"double\"")
    );
    // VariableScaleDecimal: its own scale, padded; a finer one is refused.
    let vsd = |scale: i64, value: &str| json!({"id": 1, "amount": {"scale": scale, "value": value}});
    assert_eq!(after(&precise, vsd(1, "Dw=="), none()).unwrap()["amount"], "1.50");
    let vsd_schema = json!([{"field": "amount", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}]);
    assert_eq!(after(&precise, vsd(0, "Dw=="), vsd_schema).unwrap()["amount"], "15.00");
    assert!(after(&precise, vsd(3, "Dw=="), none()).unwrap_err().contains("more than the column's scale 2"));
    // Bytes that are not base64, or beyond 38 digits, are refused naming the field.
    assert!(after(&precise, json!({"id": 1, "amount": "12.5"}), none()).unwrap_err().contains("field `amount`"));
    let wide = base64::engine::general_purpose::STANDARD.encode([1u8; 17]);
    assert!(after(&precise, json!({"id": 1, "amount": wide}), none()).unwrap_err().contains("38 digits"));
}

#[test]
fn times_dates_and_timestamps_by_their_semantic_types() {
    use serde_json::json;
    let u = typed(DecimalHandling::Precise);
    let row =
        json!({"id": 1, "born": -1, "opens": 45_296_789_012i64, "local": 1_700_000_000_123_456i64, "seen": 1_700_000_000_123_456_000i64});
    let fields = json!([
        field("born", "int32", "io.debezium.time.Date"),
        field("opens", "int64", "io.debezium.time.MicroTime"),
        field("local", "int64", "io.debezium.time.MicroTimestamp"),
        field("seen", "int64", "io.debezium.time.NanoTimestamp"),
    ]);
    let got = after(&u, row, fields).unwrap();
    assert_eq!(
        (&got["born"], &got["opens"], &got["local"], &got["seen"]),
        (&json!("1969-12-31"), &json!("12:34:56.789012"), &json!("2023-11-14T22:13:20.123456"), &json!("2023-11-14T22:13:20.123456Z"))
    );
    // Milliseconds: Debezium's Time/Timestamp, Connect's, and integers without a schema.
    for (time, stamp) in [
        ("io.debezium.time.Time", "io.debezium.time.Timestamp"),
        ("org.apache.kafka.connect.data.Time", "org.apache.kafka.connect.data.Timestamp"),
    ] {
        let fields = json!([field("opens", "int32", time), field("local", "int64", stamp)]);
        let got = after(&u, json!({"id": 1, "opens": 45_296_789, "local": 1_700_000_000_123i64}), fields).unwrap();
        assert_eq!((&got["opens"], &got["local"]), (&json!("12:34:56.789000"), &json!("2023-11-14T22:13:20.123")));
    }
    let got = after(&u, json!({"id": 1, "opens": 1, "seen": 1_700_000_000_123i64}), none()).unwrap();
    assert_eq!((&got["opens"], &got["seen"]), (&json!("00:00:00.001000"), &json!("2023-11-14T22:13:20.123Z")));
    let nano = json!([field("opens", "int64", "io.debezium.time.NanoTime")]);
    assert_eq!(after(&u, json!({"id": 1, "opens": 1_000}), nano.clone()).unwrap()["opens"], "00:00:00.000001");
    assert!(after(&u, json!({"id": 1, "opens": 1_001}), nano.clone()).unwrap_err().contains("not truncated"));
    // timestamp_precision = "truncate": the microsecond at or before, before 1970 too.
    let cuts = typed(DecimalHandling::Precise).with_timestamp_precision(crate::model::pipeline::TimestampPrecision::Truncate);
    assert_eq!(after(&cuts, json!({"id": 1, "opens": 1_999}), nano).unwrap()["opens"], "00:00:00.000001");
    let nano_stamp = json!([field("seen", "int64", "io.debezium.time.NanoTimestamp")]);
    assert_eq!(after(&cuts, json!({"id": 1, "seen": -1}), nano_stamp).unwrap()["seen"], "1969-12-31T23:59:59.999999Z");
    assert!(after(&u, json!({"id": 1, "opens": 86_400_000}), none()).unwrap_err().contains("field `opens`"));
    // ZonedTime and ZonedTimestamp: the UTC time; strings in the decoder's forms pass as they are.
    let zoned =
        json!({"id": 1, "opens": "23:30:00.5-01:00", "local": "2026-11-30T10:00:00.000001+02:00", "seen": "2026-11-30T10:00:00+02:00"});
    let got = after(&u, zoned, none()).unwrap();
    assert_eq!(
        (&got["opens"], &got["local"], &got["seen"]),
        (&json!("00:30:00.500"), &json!("2026-11-30T08:00:00.000001"), &json!("2026-11-30T10:00:00+02:00"))
    );
    let got = after(&u, json!({"id": 1, "opens": "07:00:00Z", "uid": "0f8fad5b-d9cb-469f-a165-70867728950e"}), none()).unwrap();
    assert_eq!((&got["opens"], &got["uid"]), (&json!("07:00:00"), &json!("0f8fad5b-d9cb-469f-a165-70867728950e")));
}

#[test]
fn decoded_decimals_and_times_are_exact_and_a_wrong_scale_is_refused() {
    use crate::decode::RecordDecoder;
    use crate::model::schema::{Format, SourceSchema};
    let schema = r#"{"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"},
        "amount": {"type": ["string", "null"], "format": "decimal", "precision": 10, "scale": 2},
        "opens": {"type": ["string", "null"], "format": "time"},
        "local": {"type": ["string", "null"], "format": "local-date-time"}}}"#;
    let source = SourceSchema::from_text(Format::Json, schema, None).unwrap();
    let target = std::sync::Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Decimal128(10, 2), true),
        Field::new("opens", DataType::Time64(TimeUnit::Microsecond), true),
        Field::new("local", DataType::Timestamp(TimeUnit::Microsecond, None), true),
    ]));
    let u = Unwrapper::new(Envelope::Debezium, &Order::Source(SourceField::Lsn), &target, &["id".into()], DecimalHandling::Precise);
    let mut decoder = RecordDecoder::new(&source, target.clone()).unwrap();
    let declared = |scale: &str| {
        serde_json::json!([{"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": scale}},
                                                   field("opens", "int64", "io.debezium.time.MicroTime"), field("local", "int64", "io.debezium.time.MicroTimestamp")])
    };
    let row = serde_json::json!({"id": 1, "amount": "/2o=", "opens": 1, "local": -1});
    let image = after(&u, row.clone(), declared("2")).unwrap();
    decoder.append(image.to_string().as_bytes()).unwrap();
    // The same bytes declared at scale 3 are -0.150, not the column's scale: a dead letter.
    let wrong = after(&u, row, declared("3")).unwrap();
    let err = decoder.append(wrong.to_string().as_bytes()).unwrap_err();
    assert_eq!(err, "json: field `amount`: -0.150 has scale 3, the column is decimal(10,2): not rescaled");
    let too_wide = serde_json::json!({"id": 2, "amount": "123456789.00"});
    assert!(decoder.append(too_wide.to_string().as_bytes()).unwrap_err().contains("does not fit the column's decimal(10,2)"));
    for (bad, needle) in [
        (serde_json::json!({"id": 3, "amount": "1e3"}), "expected a decimal"),
        (serde_json::json!({"id": 3, "amount": "12."}), "expected a decimal"),
        (serde_json::json!({"id": 3, "opens": "10:00:00.0000001"}), "finer than the column's microseconds"),
        (serde_json::json!({"id": 3, "local": "2026-11-30T10:00:00Z"}), "without zone"),
    ] {
        let err = decoder.append(bad.to_string().as_bytes()).unwrap_err();
        assert!(err.contains(needle), "{bad}: {err}");
    }
    let columns = decoder.finish().unwrap();
    let options = arrow_cast::display::FormatOptions::default();
    let shown: Vec<String> =
        columns.iter().map(|c| arrow_cast::display::ArrayFormatter::try_new(c, &options).unwrap().value(0).to_string()).collect();
    assert_eq!(shown, ["1", "-1.50", "00:00:00.000001", "1969-12-31T23:59:59.999999"]);
}

/// Issue 46: Debezium's and DMS's JSON doubles reach the column as the double their text
/// denotes, bit for bit (the envelope is read, re-written and read again by the decoder).
#[test]
fn debezium_and_dms_doubles_are_exact() {
    use crate::decode::RecordDecoder;
    use crate::model::schema::{Format, SourceSchema};
    use arrow_array::Array;
    let schema = r#"{"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}, "x": {"type": ["number", "null"]}}}"#;
    let source = SourceSchema::from_text(Format::Json, schema, None).unwrap();
    let target =
        std::sync::Arc::new(ArrowSchema::new(vec![Field::new("id", DataType::Int64, false), Field::new("x", DataType::Float64, true)]));
    let doubles = crate::testkit::shortest_doubles(10_000);
    let debezium =
        Unwrapper::new(Envelope::Debezium, &Order::Source(SourceField::Lsn), &target, &["id".into()], DecimalHandling::default());
    let dms = Unwrapper::new(Envelope::Dms, &Order::Kafka, &target, &["id".into()], DecimalHandling::default());
    for (name, unwrapper, wrap) in [
        ("debezium", &debezium, (r#"{"before":null,"source":{"lsn":1},"op":"c","after":"#, "}")),
        ("dms", &dms, (r#"{"metadata":{"operation":"insert"},"data":"#, "}")),
    ] {
        let mut decoder = RecordDecoder::new(&source, target.clone()).unwrap();
        for (i, (_, text)) in doubles.iter().enumerate() {
            let value = format!(r#"{}{{"id":{i},"x":{text}}}{}"#, wrap.0, wrap.1);
            let Unwrapped::Upsert { row, .. } = unwrapper.unwrap(None, Some(value.as_bytes())).unwrap() else { panic!("{value}") };
            decoder.append(&row).unwrap();
        }
        let columns = decoder.finish().unwrap();
        let read = columns[1].as_any().downcast_ref::<arrow_array::Float64Array>().unwrap();
        let wrong: Vec<String> = doubles
            .iter()
            .zip(read.values())
            .filter(|((want, _), got)| want.to_bits() != got.to_bits())
            .map(|((_, text), got)| format!("{text} -> {got:?}"))
            .collect();
        assert!(
            wrong.is_empty(),
            "{name}: {} of {} doubles read back wrong, e.g. {:?}",
            wrong.len(),
            doubles.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}

#[test]
fn dms_timestamps_are_utc() {
    assert_eq!(timestamp("2026-11-30T11:00:00+01:00"), timestamp("2026-11-30T10:00:00Z"));
    assert_eq!(timestamp("2026-11-30 10:00:00"), timestamp("2026-11-30T10:00:00Z"));
    assert!(timestamp("yesterday").unwrap_err().contains("ISO-8601"));
}
