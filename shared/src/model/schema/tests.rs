use std::path::{Path, PathBuf};

use iceberg::spec::{PrimitiveType, Type};

use super::*;

pub(crate) fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative)
}

pub(crate) fn telemetry_schema(format: Format) -> SourceSchema {
    match format {
        Format::Avro => SourceSchema::load(format, &repo_file("shared/avro/VehicleTelemetry.avsc"), None),
        Format::Protobuf => {
            SourceSchema::load(format, &repo_file("shared/proto/vehicle_telemetry.proto"), Some("icestream.telemetry.v1.VehicleTelemetry"))
        }
        Format::Json => SourceSchema::load(format, &repo_file("shared/json/vehicle_telemetry.schema.json"), None),
    }
    .unwrap()
}

pub(crate) fn rich_schema(format: Format) -> SourceSchema {
    match format {
        Format::Avro => SourceSchema::load(format, &repo_file("tests/schemas/rich.avsc"), None),
        Format::Protobuf => SourceSchema::load(format, &repo_file("tests/schemas/rich.proto"), Some("shop.Order")),
        Format::Json => SourceSchema::load(format, &repo_file("tests/schemas/rich.schema.json"), None),
    }
    .unwrap()
}

/// `id name type required` per field, nested fields included, depth-first.
fn describe(schema: &Schema) -> Vec<String> {
    fn walk(fields: &[NestedFieldRef], out: &mut Vec<String>) {
        for f in fields {
            let kind = match &*f.field_type {
                Type::Primitive(p) => p.to_string(),
                Type::Struct(_) => "struct".into(),
                Type::List(_) => "list".into(),
                Type::Map(_) => "map".into(),
            };
            out.push(format!("{} {} {} {}", f.id, f.name, kind, if f.required { "required" } else { "optional" }));
            match &*f.field_type {
                Type::Struct(s) => walk(s.fields(), out),
                Type::List(l) => walk(std::slice::from_ref(&l.element_field), out),
                Type::Map(m) => walk(&[m.key_field.clone(), m.value_field.clone()], out),
                Type::Primitive(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(schema.as_struct().fields(), &mut out);
    out
}

#[test]
fn telemetry_schemas_map_to_the_telemetry_columns() {
    for format in [Format::Avro, Format::Protobuf, Format::Json] {
        let schema = telemetry_schema(format).to_iceberg().unwrap();
        let event_time = if format == Format::Protobuf { "optional" } else { "required" };
        assert_eq!(
            describe(&schema),
            [
                "1 vehicle_id long required".to_string(),
                format!("2 event_time timestamptz {event_time}"),
                "3 model string required".into(),
                "4 speed_kmh int required".into(),
                "5 soc_pct int required".to_string(),
                "6 odometer_km long required".into(),
                "7 charging boolean required".into(),
            ],
            "{format:?}"
        );
    }
}

#[test]
fn rich_avro_maps_every_type_with_depth_first_ids() {
    let d = describe(&rich_schema(Format::Avro).to_iceberg().unwrap());
    let expected = [
        "1 order_id long required",
        "2 id uuid required",
        "3 placed_at timestamptz required",
        "4 packed_at timestamptz optional",
        "5 local_time timestamp required",
        "6 pickup time required",
        "7 delivery_date date optional",
        "8 status string required",
        "9 customer struct required",
        "10 name string required",
        "11 email string optional",
        "12 address struct optional",
        "13 street string required",
        "14 zip string required",
        "15 items list required",
        "16 element struct required",
        "17 sku string required",
        "18 quantity int required",
        "19 unit_price decimal(10, 2) required",
        "20 attributes map required",
        "21 key string required",
        "22 value long required",
        "23 total decimal(18, 2) required",
        "24 note string optional",
        "25 weight float required",
        "26 discount double required",
        "27 gift boolean required",
        "28 payload binary required",
        "29 checksum fixed(4) required",
        "30 tags list required",
        "31 element string optional",
    ];
    assert_eq!(d, expected);
}

#[test]
fn rich_proto_maps_presence_lists_maps_and_well_known_types() {
    let d = describe(&rich_schema(Format::Protobuf).to_iceberg().unwrap());
    let expected = [
        "1 order_id long required",
        "2 placed_at timestamptz optional",
        "3 status string required",
        "4 customer struct optional",
        "5 name string required",
        "6 email string optional",
        "7 address struct optional",
        "8 street string required",
        "9 zip string required",
        "10 items list required",
        "11 element struct required",
        "12 sku string required",
        "13 quantity int required",
        "14 unit_price double required",
        "15 attributes map required",
        "16 key string required",
        "17 value long required",
        "18 card_last4 string optional",
        "19 voucher_code string optional",
        "20 note string optional",
        "21 coupon long optional",
        "22 loyalty_points long required",
        "23 visits long required",
        "24 priority int required",
        "25 tags list required",
        "26 element string required",
        "27 gift boolean required",
        "28 weight float required",
        "29 discount double required",
        "30 payload binary required",
    ];
    assert_eq!(d, expected);
}

#[test]
fn rich_json_schema_maps_refs_formats_maps_and_nullability() {
    let d = describe(&rich_schema(Format::Json).to_iceberg().unwrap());
    let expected = [
        "1 order_id long required",
        "2 id uuid required",
        "3 placed_at timestamptz required",
        "4 delivery_date date optional",
        "5 status string required",
        "6 customer struct required",
        "7 name string required",
        "8 email string optional",
        "9 address struct optional",
        "10 street string required",
        "11 zip string required",
        "12 items list required",
        "13 element struct required",
        "14 sku string required",
        "15 quantity long required",
        "16 unit_price double required",
        "17 attributes map required",
        "18 key string required",
        "19 value long required",
        "20 note string optional",
        "21 discount double required",
        "22 gift boolean required",
        "23 tags list required",
        "24 element string required",
    ];
    assert_eq!(d, expected);
}

fn error(format: Format, text: &str, message: Option<&str>) -> String {
    SourceSchema::from_text(format, text, message).unwrap_err().to_string()
}

#[test]
fn avro_refuses_general_unions_recursion_and_non_records() {
    let e = error(Format::Avro, r#"{"type":"record","name":"R","fields":[{"name":"x","type":["int","string"]}]}"#, None);
    assert!(e.contains("field `x`") && e.contains("only unions of null and one other type"), "{e}");
    let e = error(Format::Avro, r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#, None);
    assert!(e.contains("field `next`") && e.contains("recursive type `Node`"), "{e}");
    let e = error(Format::Avro, r#""string""#, None);
    assert!(e.contains("must be a record"), "{e}");
    let e = error(
        Format::Avro,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"fixed","name":"D","size":12,"logicalType":"duration"}}]}"#,
        None,
    );
    assert!(e.contains("field `d`") && e.contains("Duration"), "{e}");
}

#[test]
fn protobuf_refuses_recursion_naming_the_cycle() {
    let source = r#"syntax = "proto3"; package t;
        message Tree { string name = 1; Branch branch = 2; }
        message Branch { repeated Tree children = 1; }"#;
    let e = error(Format::Protobuf, source, Some("t.Tree"));
    assert!(e.contains("field `branch.children`") && e.contains("t.Tree -> t.Branch -> t.Tree"), "{e}");
}

#[test]
fn protobuf_needs_an_existing_message_and_compiles_imports_of_well_known_types() {
    let source = r#"syntax = "proto3"; package t; import "google/protobuf/timestamp.proto";
        message A { google.protobuf.Timestamp at = 1; } message B { int32 x = 1; }"#;
    assert!(error(Format::Protobuf, source, None).contains("needs `message`"));
    let e = error(Format::Protobuf, source, Some("t.C"));
    assert!(e.contains("no message `t.C`") && e.contains("t.A") && e.contains("t.B"), "{e}");
    let e = error(Format::Protobuf, "syntax = \"proto3\"; message {", Some("X"));
    assert!(e.contains("cannot compile"), "{e}");
}

#[test]
fn protobuf_descriptor_sets_load_with_or_without_a_message_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut compiler = protox::Compiler::new([repo_file("shared/proto")]).unwrap();
    compiler.include_imports(true).open_file("vehicle_telemetry.proto").unwrap();
    let path = dir.path().join("telemetry.pb");
    std::fs::write(&path, compiler.encode_file_descriptor_set()).unwrap();
    let schema = SourceSchema::load(Format::Protobuf, &path, None).unwrap();
    assert_eq!(schema.to_iceberg().unwrap(), telemetry_schema(Format::Protobuf).to_iceberg().unwrap());
    let e = SourceSchema::load(Format::Protobuf, &repo_file("shared/avro/VehicleTelemetry.avsc"), None).unwrap_err();
    assert!(e.to_string().contains("VehicleTelemetry.avsc") && e.to_string().contains("descriptor set"), "{e}");
}

#[test]
fn json_schema_refuses_unsupported_constructs_with_the_path() {
    let e = error(
        Format::Json,
        r#"{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"anyOf":[{"type":"string"}]}}}}}"#,
        None,
    );
    assert!(e.contains("field `a.b`") && e.contains("`anyOf`"), "{e}");
    let e = error(
        Format::Json,
        r##"{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}}}}}"##,
        None,
    );
    assert!(e.contains("field `a.a`") && e.contains("recursive $ref"), "{e}");
    let e = error(Format::Json, r#"{"type":"object","properties":{"a":{"type":["string","integer"]}}}"#, None);
    assert!(e.contains("field `a`"), "{e}");
    let e = error(Format::Json, r##"{"type":"object","properties":{"a":{"$ref":"other.json#/x"}}}"##, None);
    assert!(e.contains("field `a`") && e.contains("#/definitions"), "{e}");
    let e = error(Format::Json, r#"{"type":"array","items":{"type":"string"}}"#, None);
    assert!(e.contains("top-level"), "{e}");
}

#[test]
fn json_schema_declares_decimals_times_and_zone_less_timestamps() {
    let schema = r#"{"type":"object","required":["price"],"properties":{
        "price":{"type":"string","format":"decimal","precision":12,"scale":3},
        "opens":{"type":["string","null"],"format":"time"},
        "local":{"type":["string","null"],"format":"local-date-time"}}}"#;
    let d = describe(&SourceSchema::from_text(Format::Json, schema, None).unwrap().to_iceberg().unwrap());
    assert_eq!(d, ["1 price decimal(12, 3) required", "2 opens time optional", "3 local timestamp optional"]);
    for bad in [r#""precision":12"#, r#""precision":39,"scale":2"#, r#""precision":4,"scale":5"#, r#""precision":"12","scale":2"#] {
        let text = format!(r#"{{"type":"object","properties":{{"p":{{"type":"string","format":"decimal",{bad}}}}}}}"#);
        let e = error(Format::Json, &text, None);
        assert!(e.contains("field `p`") && e.contains("`precision` (1 to 38) and `scale`"), "{bad}: {e}");
    }
}

#[test]
fn load_names_the_file_and_formats_parse() {
    let e = SourceSchema::load(Format::Avro, Path::new("/nonexistent/x.avsc"), None).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/x.avsc"), "{e}");
    assert_eq!("protobuf".parse::<Format>().unwrap(), Format::Protobuf);
    assert!("xml".parse::<Format>().unwrap_err().to_string().contains("avro, protobuf, json"));
    assert_eq!(
        *rich_schema(Format::Avro).to_iceberg().unwrap().field_by_name("total").unwrap().field_type,
        Type::Primitive(PrimitiveType::Decimal { precision: 18, scale: 2 })
    );
}
