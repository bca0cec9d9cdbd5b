mod rich;

use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field as ArrowField, Schema as ArrowSchema, SchemaRef};

use super::RecordDecoder;
use crate::dev::codec::{Reading, TelemetryBuilder};
use crate::model::config::Source;
use crate::model::schema::tests::{rich_schema, telemetry_schema};
use crate::model::schema::{Format, SourceSchema};

const FORMATS: [Format; 3] = [Format::Avro, Format::Protobuf, Format::Json];

fn codec_source(format: Format) -> Source {
    match format {
        Format::Avro => Source::Avro,
        Format::Protobuf => Source::Proto,
        Format::Json => Source::Json,
    }
}

/// The telemetry table's data columns (lineage dropped).
fn telemetry_target() -> SchemaRef {
    let def = crate::model::tables::vehicle_telemetry("t", "zstd", 1 << 20).unwrap();
    Arc::new(def.arrow_schema().unwrap().project(&[0, 1, 2, 3, 4, 5, 6]).unwrap())
}

/// The target a new table made from `source` would have.
pub(super) fn own_target(source: &SourceSchema) -> SchemaRef {
    Arc::new(iceberg::arrow::schema_to_arrow_schema(&source.to_iceberg().unwrap()).unwrap())
}

/// Each row as `name=value` texts (arrow-cast's display, nested values included).
pub(super) fn rows(schema: &ArrowSchema, columns: &[ArrayRef]) -> Vec<Vec<String>> {
    let options = FormatOptions::default().with_null("null");
    let formatters: Vec<_> = columns.iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap()).collect();
    (0..columns.first().map_or(0, |c| c.len()))
        .map(|row| schema.fields().iter().zip(&formatters).map(|(f, fmt)| format!("{}={}", f.name(), fmt.value(row))).collect())
        .collect()
}

fn readings() -> Vec<Reading> {
    (0..50)
        .map(|i| Reading {
            vehicle_id: i * 7919 - 100,
            event_time_us: 1_700_000_000_000_000 + i * 1_234_000,
            model: format!("Model-{}", "E".repeat(i as usize % 5)),
            speed_kmh: (i as i32 * 13) % 250 - 5,
            soc_pct: (i as i32 * 7) % 101,
            odometer_km: i64::MAX - i,
            charging: i % 3 == 0,
        })
        .collect()
}

#[test]
fn telemetry_decodes_to_the_same_columns_as_the_hand_written_codec() {
    let target = telemetry_target();
    for format in FORMATS {
        let source = codec_source(format);
        let mut decoder = RecordDecoder::new(&telemetry_schema(format), target.clone()).unwrap();
        let mut builder = TelemetryBuilder::with_capacity(64);
        for r in readings() {
            let value = crate::dev::codec::encode(source, &r);
            decoder.append(&value).unwrap();
            crate::dev::codec::decode_into(source, &value, &mut builder).unwrap();
            builder.append_lineage("t", 0, 0);
        }
        assert_eq!(decoder.len(), 50);
        let def = crate::model::tables::vehicle_telemetry("t", "zstd", 1 << 20).unwrap();
        let expected = builder.finish(def.arrow_schema().unwrap()).unwrap();
        let got = decoder.finish().unwrap();
        for (i, column) in got.iter().enumerate() {
            assert_eq!(column.as_ref(), expected.column(i).as_ref(), "{format:?} column {}", target.field(i).name());
        }
        assert_eq!(decoder.len(), 0, "finish resets");
    }
}

#[test]
fn telemetry_json_takes_rfc3339_strings_too() {
    let mut decoder = RecordDecoder::new(&telemetry_schema(Format::Json), telemetry_target()).unwrap();
    let value = br#"{"vehicle_id":1,"event_time":"2023-11-14T22:13:20.123+00:00","model":"m","speed_kmh":1,"soc_pct":2,"odometer_km":3,"charging":true}"#;
    decoder.append(value).unwrap();
    let columns = decoder.finish().unwrap();
    assert_eq!(rows(&telemetry_target(), &columns)[0][1], "event_time=2023-11-14T22:13:20.123Z");
}

#[test]
fn bad_telemetry_records_name_the_field_and_append_nothing() {
    let target = telemetry_target();
    let cases: [(Format, Vec<u8>, &str); 9] = [
        // A repeated key would give its column two values in one row.
        (Format::Json, br#"{"vehicle_id":1,"vehicle_id":2}"#.to_vec(), "field `vehicle_id`: the key appears twice"),
        (Format::Json, br#"{"vehicle_id":1.5}"#.to_vec(), "field `vehicle_id`: expected an integer, got 1.5"),
        (Format::Json, br#"{"vehicle_id":"one","event_time":5}"#.to_vec(), "field `vehicle_id`: expected integer, got string"),
        (
            Format::Json,
            br#"{"vehicle_id":1,"event_time":5,"model":"m","speed_kmh":1,"soc_pct":2,"charging":true}"#.to_vec(),
            "field `odometer_km`: required but missing",
        ),
        (Format::Json, br#"{"vehicle_id":1,"#.to_vec(), "invalid JSON"),
        (
            Format::Protobuf,
            prost::Message::encode_to_vec(&crate::dev::codec::proto::VehicleTelemetry { vehicle_id: 1, ..Default::default() }),
            "field `event_time`: required but missing",
        ),
        (Format::Protobuf, vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f], "truncated: 4294967295 bytes declared, 0 left"),
        (Format::Protobuf, vec![0x0a, 0x00], "field `vehicle_id`: a length-delimited value where the schema has int64"),
        (Format::Avro, vec![0x02, 0x04, 0xfe, 0xff, 0xff, 0xff, 0x0f], "field `model`: truncated"),
    ];
    for (format, value, message) in cases {
        let mut decoder = RecordDecoder::new(&telemetry_schema(format), target.clone()).unwrap();
        decoder.append(&crate::dev::codec::encode(codec_source(format), &readings()[0])).unwrap();
        let e = decoder.append(&value).unwrap_err();
        assert!(e.contains(message), "{format:?}: {e}");
        assert_eq!(decoder.len(), 1, "{format:?}: nothing appended");
        assert!(decoder.finish().unwrap().iter().all(|c| c.len() == 1));
    }
}

#[test]
fn strings_are_any_utf8_and_nothing_else() -> crate::testkit::TestResult {
    for format in [Format::Protobuf, Format::Avro] {
        let source = codec_source(format);
        let mut decoder = RecordDecoder::new(&telemetry_schema(format), telemetry_target())?;
        let reading = |model: &str| Reading { model: model.into(), ..readings()[0].clone() };
        // ASCII, then two- and four-byte characters.
        decoder.append(&crate::dev::codec::encode(source, &reading("Zoe")))?;
        decoder.append(&crate::dev::codec::encode(source, &reading("Zoë 🚗")))?;
        // A byte no UTF-8 text has, in place of the `~`.
        let mut bad = crate::dev::codec::encode(source, &reading("Zo~"));
        let at = bad.windows(3).position(|w| w == b"Zo~").ok_or("the model is not in the encoding")?;
        bad[at + 2] = 0xff;
        let e = decoder.append(&bad).err().ok_or("invalid UTF-8 accepted")?;
        assert!(e.contains("field `model`") && e.contains("invalid UTF-8"), "{format:?}: {e}");
        assert_eq!(decoder.len(), 2, "{format:?}: nothing appended");
        let columns = decoder.finish()?;
        let models: Vec<String> = rows(&telemetry_target(), &columns).into_iter().map(|row| row[2].clone()).collect();
        assert_eq!(models, ["model=Zoe", "model=Zoë 🚗"], "{format:?}");
    }
    Ok(())
}

/// Issue 46: about one double in ten written as its shortest text read back one ulp off.
#[test]
fn json_doubles_are_the_double_their_text_denotes_bit_for_bit() -> crate::testkit::TestResult {
    let schema = SourceSchema::from_text(Format::Json, r#"{"type": "object", "properties": {"x": {"type": "number"}}}"#, None)?;
    let target = own_target(&schema);
    let mut decoder = RecordDecoder::new(&schema, target)?;
    let doubles = crate::testkit::shortest_doubles(20_000);
    for (_, text) in &doubles {
        decoder.append(format!(r#"{{"x": {text}}}"#).as_bytes())?;
    }
    let columns = decoder.finish()?;
    let read = columns[0].as_any().downcast_ref::<arrow_array::Float64Array>().ok_or("x is not a double column")?;
    let wrong: Vec<String> = doubles
        .iter()
        .zip(read.values())
        .filter(|((want, _), got)| want.to_bits() != got.to_bits())
        .map(|((_, text), got)| format!("{text} -> {got:?}"))
        .collect();
    assert!(wrong.is_empty(), "{} of {} doubles read back wrong, e.g. {:?}", wrong.len(), doubles.len(), &wrong[..wrong.len().min(5)]);
    Ok(())
}

/// Issue 46: JSON Schema as the spec reads it. `enum` is enforced (at any depth), a whole
/// number written `42.0` or `4.2e1` is an integer, and a number beyond the long range is named
/// as written (not as the double serde reads it: 2^64 is not `18446744073709552000`).
#[test]
fn json_schema_enums_whole_numbers_and_big_integers_follow_the_spec() -> crate::testkit::TestResult {
    let schema = r#"{"type": "object", "properties": {
        "status": {"type": "string", "enum": ["PAID", "REFUNDED"]},
        "n": {"type": "integer"},
        "small": {"type": "integer", "format": "int32"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", null]}}}}"#;
    let schema = SourceSchema::from_text(Format::Json, schema, None)?;
    let target = own_target(&schema);
    let mut decoder = RecordDecoder::new(&schema, target.clone())?;
    decoder.append(br#"{"status": "PAID", "n": 42.0, "small": 4.2e1, "tags": ["a", null, "b"]}"#)?;
    decoder.append(br#"{"n": -9007199254740992.0, "tags": []}"#)?;
    // The text's value, not the double's: 2^53 + 1 has no double.
    decoder.append(br#"{"n": 9007199254740993.0}"#)?;
    let refused = |value: &str| decoder_error(&schema, &target, value);
    assert_eq!(
        refused(r#"{"status": "CHARGEBACK"}"#),
        r#"json: field `status`: "CHARGEBACK" is not one of the enum's values ("PAID", "REFUNDED")"#
    );
    assert!(
        refused(r#"{"tags": ["a", "c"]}"#).contains("field `tags[1]`: \"c\" is not one of the enum's values"),
        "{}",
        refused(r#"{"tags": ["a", "c"]}"#)
    );
    assert_eq!(
        refused(r#"{"n": 18446744073709551616}"#),
        "json: field `n`: expected an integer, got 18446744073709551616 (beyond the long range)"
    );
    assert_eq!(
        refused("{\n  \"n\":\n 1.8446744073709551617e19\n}"),
        "json: field `n`: expected an integer, got 1.8446744073709551617e19 (beyond the long range)"
    );
    assert_eq!(refused(r#"{"n": 42.5}"#), "json: field `n`: expected an integer, got 42.5");
    assert_eq!(refused(r#"{"n": 1.0000000000000000001}"#), "json: field `n`: expected an integer, got 1.0000000000000000001");
    assert!(refused(r#"{"small": 3e9}"#).contains("in the int range, got 3000000000"));
    let rows = rows(&target, &decoder.finish()?);
    assert_eq!(rows[0], ["status=PAID", "n=42", "small=42", "tags=[a, null, b]"]);
    assert_eq!(rows[1], ["status=null", "n=-9007199254740992", "small=null", "tags=[]"]);
    assert_eq!(rows[2][1], "n=9007199254740993");
    Ok(())
}

fn decoder_error(schema: &SourceSchema, target: &SchemaRef, value: &str) -> String {
    let mut decoder = RecordDecoder::new(schema, target.clone()).expect("a decoder");
    decoder.append(value.as_bytes()).expect_err("a record error")
}

/// Issue 46: a timestamp or time finer than microseconds follows the pipeline's one rule on
/// every path: refused by default (the record is a dead letter naming the value), or cut to the
/// microsecond at or before it (also before 1970) with `timestamp_precision = "truncate"`.
#[test]
fn timestamps_finer_than_microseconds_are_refused_or_truncated_as_the_pipeline_says() -> crate::testkit::TestResult {
    use crate::model::pipeline::TimestampPrecision::{self, Reject, Truncate};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Time64MicrosecondType, TimestampMicrosecondType};
    use prost::Message;
    let json = SourceSchema::from_text(
        Format::Json,
        r#"{"type": "object", "properties": {
        "at": {"type": "string", "format": "date-time"}, "local": {"type": "string", "format": "local-date-time"},
        "t": {"type": "string", "format": "time"}}}"#,
        None,
    )?;
    let proto = SourceSchema::from_text(
        Format::Protobuf,
        r#"syntax = "proto3"; import "google/protobuf/timestamp.proto"; message M { google.protobuf.Timestamp at = 1; }"#,
        Some("M"),
    )?;
    let fine = br#"{"at": "1969-12-31T23:59:59.9999999Z", "local": "2024-05-01T12:00:00.123456789", "t": "10:00:00.0000019"}"#;
    let timestamp = |seconds: i64, nanos: i32| {
        let inner = prost_types::Timestamp { seconds, nanos }.encode_to_vec();
        [vec![0x0a, inner.len() as u8], inner].concat()
    };
    let decoders = |precision: TimestampPrecision| -> crate::testkit::TestResult<(RecordDecoder, RecordDecoder)> {
        Ok((
            RecordDecoder::with_precision(&[&json], own_target(&json), precision)?,
            RecordDecoder::with_precision(&[&proto], own_target(&proto), precision)?,
        ))
    };
    let (mut json_rejects, mut proto_rejects) = decoders(Reject)?;
    let e = json_rejects.append(fine).expect_err("refused");
    assert!(e.contains("field `at`: `1969-12-31T23:59:59.9999999Z` is finer than the column's microseconds: not truncated (timestamp_precision = \"reject\")"), "{e}");
    let e = proto_rejects.append(&timestamp(-1, 999_999_999)).expect_err("refused");
    assert!(e.contains("field `at`: a Timestamp of -1 s and 999999999 ns is finer than the column's microseconds"), "{e}");
    // Microseconds exactly are no problem either way.
    json_rejects.append(br#"{"at": "2024-05-01T12:00:00.123456000Z", "local": "2024-05-01T12:00:00.5", "t": "10:00:00.000001"}"#)?;
    proto_rejects.append(&timestamp(1, 5_000))?;

    let (mut json_cuts, mut proto_cuts) = decoders(Truncate)?;
    json_cuts.append(fine)?;
    proto_cuts.append(&timestamp(-1, 999_999_999))?;
    let columns = json_cuts.finish()?;
    assert_eq!(columns[0].as_primitive::<TimestampMicrosecondType>().value(0), -1, "towards the past before 1970");
    assert_eq!(columns[1].as_primitive::<TimestampMicrosecondType>().value(0), 1_714_564_800_123_456);
    assert_eq!(columns[2].as_primitive::<Time64MicrosecondType>().value(0), 36_000_000_001);
    assert_eq!(proto_cuts.finish()?[0].as_primitive::<TimestampMicrosecondType>().value(0), -1);
    Ok(())
}

#[test]
fn avro_leftover_bytes_and_empty_values_are_errors() {
    let mut decoder = RecordDecoder::new(&telemetry_schema(Format::Avro), telemetry_target()).unwrap();
    let mut value = crate::dev::codec::encode(Source::Avro, &readings()[0]);
    value.push(0);
    assert!(decoder.append(&value).unwrap_err().contains("1 bytes left over"));
    assert_eq!(decoder.append(b"").unwrap_err(), "empty value");
}

fn target_of(fields: Vec<ArrowField>) -> SchemaRef {
    Arc::new(ArrowSchema::new(fields))
}

#[test]
fn incompatible_targets_are_refused_naming_the_column_and_both_types() {
    let source = telemetry_schema(Format::Avro);
    let e = RecordDecoder::new(&source, target_of(vec![ArrowField::new("model", DataType::Int64, false)])).err().unwrap();
    assert!(e.to_string().contains("column `model`: the source's string does not fit the table's long"), "{e}");
    let e = RecordDecoder::new(&source, target_of(vec![ArrowField::new("vehicle_id", DataType::Int32, false)])).err().unwrap();
    assert!(e.to_string().contains("column `vehicle_id`: the source's long does not fit the table's int"), "{e}");
    let e = RecordDecoder::new(&source, target_of(vec![ArrowField::new("colour", DataType::Utf8, false)])).err().unwrap();
    assert!(e.to_string().contains("column `colour` is required in the table but the source schema has no such field"), "{e}");
    let rich = rich_schema(Format::Avro);
    let address = DataType::Struct(vec![ArrowField::new("zip", DataType::Int32, false)].into());
    let customer = DataType::Struct(vec![ArrowField::new("address", address, true)].into());
    let e = RecordDecoder::new(&rich, target_of(vec![ArrowField::new("customer", customer, false)])).err().unwrap();
    assert!(e.to_string().contains("column `customer.address.zip`: the source's string does not fit the table's int"), "{e}");
    let narrow = DataType::Decimal128(9, 2);
    let items = DataType::List(Arc::new(ArrowField::new(
        "element",
        DataType::Struct(vec![ArrowField::new("unit_price", narrow, false)].into()),
        false,
    )));
    let e = RecordDecoder::new(&rich, target_of(vec![ArrowField::new("items", items, false)])).err().unwrap();
    assert!(e.to_string().contains("column `items.element.unit_price`: the source's decimal(10,2)"), "{e}");
}

#[test]
fn widening_missing_nullable_columns_and_optional_into_required_fit() {
    // int→long, float→double, decimal(10,2)→decimal(20,2); an extra nullable column; a source
    // field absent from the target (everything else) is ignored.
    let rich = rich_schema(Format::Avro);
    let item = DataType::Struct(
        vec![ArrowField::new("quantity", DataType::Int64, false), ArrowField::new("unit_price", DataType::Decimal128(20, 2), false)].into(),
    );
    let target = target_of(vec![
        ArrowField::new("weight", DataType::Float64, false),
        ArrowField::new("items", DataType::List(Arc::new(ArrowField::new("element", item, false))), false),
        ArrowField::new("extra", DataType::Utf8, true),
        ArrowField::new("note", DataType::Utf8, false),
    ]);
    let mut decoder = RecordDecoder::new(&rich, target.clone()).unwrap();
    decoder.append(&rich::avro_order(true)).unwrap();
    let e = decoder.append(&rich::avro_order(false)).unwrap_err();
    assert_eq!(e, "avro: field `note`: required but missing");
    let columns = decoder.finish().unwrap();
    assert_eq!(
        rows(&target, &columns),
        [["weight=1.5", "items=[{quantity: 2, unit_price: 12.34}, {quantity: 1, unit_price: -0.05}]", "extra=null", "note=leave at door"]]
    );
}

#[test]
fn decoders_and_schemas_can_move_between_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<RecordDecoder>();
    send_and_sync::<SourceSchema>();
}

fn arbitrary_bytes_never_panic_for(schema: &SourceSchema, bytes: &[u8]) {
    let mut decoder = RecordDecoder::new(schema, own_target(schema)).unwrap();
    match decoder.append(bytes) {
        Ok(()) => assert_eq!(decoder.len(), 1),
        Err(e) => {
            assert!(!e.is_empty());
            assert_eq!(decoder.len(), 0);
        }
    }
    decoder.finish().unwrap();
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        for format in FORMATS {
            arbitrary_bytes_never_panic_for(&telemetry_schema(format), &bytes);
            arbitrary_bytes_never_panic_for(&rich_schema(format), &bytes);
        }
    }

    #[test]
    fn corrupted_rich_records_never_panic(flip in 0usize..400, to in proptest::num::u8::ANY, cut in 0usize..400) {
        for (format, mut value) in [(Format::Avro, rich::avro_order(true)), (Format::Protobuf, rich::proto_order(true)), (Format::Json, rich::json_order(true))] {
            let at = flip % value.len();
            value[at] = to;
            value.truncate(cut.max(1));
            arbitrary_bytes_never_panic_for(&rich_schema(format), &value);
        }
    }
}

/// Decode speed against the hand-written codec:
/// `cargo test -p icestream --lib decode::tests::decode_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn decode_speed() {
    const N: usize = 1_000_000;
    let values_for = |format| -> Vec<Vec<u8>> {
        let readings = readings();
        (0..N).map(|i| crate::dev::codec::encode(codec_source(format), &readings[i % readings.len()])).collect()
    };
    for format in FORMATS {
        let values = values_for(format);
        let mut decoder = RecordDecoder::new(&telemetry_schema(format), telemetry_target()).unwrap();
        let start = std::time::Instant::now();
        for chunk in values.chunks(10_000) {
            for v in chunk {
                decoder.append(v).unwrap();
            }
            decoder.finish().unwrap();
        }
        let generic = start.elapsed();
        let start = std::time::Instant::now();
        for chunk in values.chunks(10_000) {
            let mut builder = TelemetryBuilder::with_capacity(chunk.len());
            for v in chunk {
                crate::dev::codec::decode_into(codec_source(format), v, &mut builder).unwrap();
                builder.append_lineage("t", 0, 0);
            }
        }
        let hand = start.elapsed();
        let rate = |d: std::time::Duration| N as f64 / d.as_secs_f64();
        println!("{format:?}: RecordDecoder {:.0} rec/s, hand-written codec {:.0} rec/s", rate(generic), rate(hand));
    }
}
