use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

use super::evolve;
use crate::model::schema::{Field, Format, Prim, SourceSchema, Ty};

fn table(avsc: &str) -> (Schema, i32) {
    let source = SourceSchema::from_text(Format::Avro, avsc, None).unwrap();
    let schema = source.to_iceberg().unwrap();
    let last = schema.highest_field_id();
    (schema, last)
}

fn writer(avsc: &str) -> Vec<Field> {
    SourceSchema::from_text(Format::Avro, avsc, None).unwrap().fields().to_vec()
}

const V1: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},
  {"name":"qty","type":"int"},
  {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"ship","type":{"type":"record","name":"Ship","fields":[{"name":"city","type":"string"}]}}
]}"#;

fn field_type(schema: &Schema, name: &str) -> Type {
    (*schema.field_by_name(name).unwrap().field_type).clone()
}

#[test]
fn new_optional_fields_get_fresh_ids_nested_too() {
    let (current, mut last) = table(V1);
    let v2 = r#"{"type":"record","name":"Order","fields":[
      {"name":"id","type":"long"},
      {"name":"qty","type":"int"},
      {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
      {"name":"ship","type":{"type":"record","name":"Ship","fields":[{"name":"city","type":"string"},{"name":"zip","type":["null","string"],"default":null}]}},
      {"name":"note","type":["null","string"],"default":null},
      {"name":"tags","type":{"type":"array","items":"string"},"default":[]}
    ]}"#;
    let before = last;
    let evolved = evolve(&current, &writer(v2), &mut last).unwrap().expect("the table must change");
    // Old columns keep their ids; new ones take ids past the last one, never reused.
    for name in ["id", "qty", "price", "ship", "ship.city"] {
        assert_eq!(evolved.field_by_name(name).unwrap().id, current.field_by_name(name).unwrap().id, "{name}");
    }
    let zip = evolved.field_by_name("ship.zip").unwrap();
    let note = evolved.field_by_name("note").unwrap();
    let tags = evolved.field_by_name("tags").unwrap();
    assert!(zip.id > before && note.id > before && tags.id > before);
    assert!(!zip.required && !note.required && !tags.required, "new columns are optional: older rows have no value");
    assert_eq!(last, evolved.highest_field_id());
    // Idempotent: a second writer with the same schema changes nothing (one column, not two).
    assert!(evolve(&evolved, &writer(v2), &mut last).unwrap().is_none());
    // An older writer still fits the evolved table.
    assert!(evolve(&evolved, &writer(V1), &mut last).unwrap().is_none());
}

#[test]
fn widening_changes_the_table_and_a_narrower_writer_fits() {
    let (current, mut last) = table(V1);
    let wider =
        V1.replace(r#""name":"qty","type":"int""#, r#""name":"qty","type":"long""#).replace(r#""precision":9"#, r#""precision":18"#);
    let evolved = evolve(&current, &writer(&wider), &mut last).unwrap().unwrap();
    assert_eq!(field_type(&evolved, "qty"), Type::Primitive(PrimitiveType::Long));
    assert_eq!(field_type(&evolved, "price"), Type::Primitive(PrimitiveType::Decimal { precision: 18, scale: 2 }));
    assert_eq!(evolved.field_by_name("qty").unwrap().id, current.field_by_name("qty").unwrap().id);
    assert!(evolve(&evolved, &writer(V1), &mut last).unwrap().is_none(), "int and decimal(9,2) values fit long and decimal(18,2)");
}

#[test]
fn required_becomes_optional_when_a_writer_may_omit_it() {
    let (current, mut last) = table(V1);
    let optional = V1.replace(r#""name":"qty","type":"int""#, r#""name":"qty","type":["null","int"],"default":null"#);
    let evolved = evolve(&current, &writer(&optional), &mut last).unwrap().unwrap();
    assert!(!evolved.field_by_name("qty").unwrap().required);
    let dropped = V1.replace(r#"{"name":"qty","type":"int"},"#, "");
    let evolved = evolve(&current, &writer(&dropped), &mut last).unwrap().unwrap();
    assert!(!evolved.field_by_name("qty").unwrap().required, "a field a writer no longer has becomes optional, never dropped");
}

#[test]
fn type_changes_narrowing_and_new_required_fields_are_refused_naming_the_field_and_types() {
    let (current, mut last) = table(V1);
    let text = V1.replace(r#""name":"qty","type":"int""#, r#""name":"qty","type":"string""#);
    let e = evolve(&current, &writer(&text), &mut last).unwrap_err();
    assert!(e.contains("field `qty`") && e.contains("string") && e.contains("int"), "{e}");
    let rescaled = V1.replace(r#""scale":2"#, r#""scale":3"#);
    let e = evolve(&current, &writer(&rescaled), &mut last).unwrap_err();
    assert!(e.contains("field `price`") && e.contains("decimal(9,3)") && e.contains("decimal(9, 2)"), "{e}");
    let nested = V1.replace(r#"{"name":"city","type":"string"}"#, r#"{"name":"city","type":"long"}"#);
    let e = evolve(&current, &writer(&nested), &mut last).unwrap_err();
    assert!(e.contains("field `ship.city`"), "{e}");
    let required = V1.replace(r#"{"name":"id","type":"long"},"#, r#"{"name":"id","type":"long"},{"name":"region","type":"string"},"#);
    let e = evolve(&current, &writer(&required), &mut last).unwrap_err();
    assert!(e.contains("field `region`") && e.contains("required") && e.contains("default"), "{e}");
    let defaulted =
        V1.replace(r#"{"name":"id","type":"long"},"#, r#"{"name":"id","type":"long"},{"name":"region","type":"string","default":"eu"},"#);
    assert!(evolve(&current, &writer(&defaulted), &mut last).unwrap().is_some(), "a required field with a default is added as optional");
    assert_eq!(last, current.highest_field_id() + 1, "a refused plan uses no ids");
}

#[test]
fn key_columns_stay_required_and_lineage_is_untouched() {
    let (current, mut last) = table(V1);
    let id = current.field_by_name("id").unwrap().id;
    let lineage_id = last + 1;
    let mut fields: Vec<_> = current.as_struct().fields().to_vec();
    fields.push(NestedField::required(lineage_id, "kafka_offset", Type::Primitive(PrimitiveType::Long)).into());
    let keyed = Schema::builder().with_identifier_field_ids([id]).with_fields(fields).build().unwrap();
    last = lineage_id;
    let optional_id = V1.replace(r#""name":"id","type":"long""#, r#""name":"id","type":["null","long"],"default":null"#);
    assert!(evolve(&keyed, &writer(&optional_id), &mut last).unwrap().is_none(), "a key stays required; a null key is refused per record");
    let no_id = V1.replace(r#"{"name":"id","type":"long"},"#, "");
    let e = evolve(&keyed, &writer(&no_id), &mut last).unwrap_err();
    assert!(e.contains("field `id`") && e.contains("key"), "{e}");
    assert!(evolve(&keyed, &writer(V1), &mut last).unwrap().is_none(), "lineage columns are not the writer's business");
    let reserved = vec![Field::new("kafka_topic", true, Ty::Prim(Prim::String))];
    assert!(evolve(&keyed, &reserved, &mut last).is_err());
}

#[test]
fn protobuf_and_json_schema_defaults() {
    let proto = SourceSchema::from_text(Format::Protobuf, "syntax = \"proto3\"; message M { int64 id = 1; }", Some("M")).unwrap();
    let proto2 =
        SourceSchema::from_text(Format::Protobuf, "syntax = \"proto3\"; message M { int64 id = 1; int32 extra = 2; }", Some("M")).unwrap();
    let current = proto.to_iceberg().unwrap();
    let mut last = current.highest_field_id();
    assert!(evolve(&current, proto2.fields(), &mut last).unwrap().is_some(), "protobuf fields always have a default");
    let json = |extra: &str| {
        SourceSchema::from_text(
            Format::Json,
            &format!(r#"{{"type":"object","properties":{{"id":{{"type":"integer"}}{extra}}},"required":["id","x"]}}"#),
            None,
        )
        .unwrap()
    };
    let base = json("");
    let current = base.to_iceberg().unwrap();
    let mut last = current.highest_field_id();
    assert!(evolve(&current, json(r#","x":{"type":"string"}"#).fields(), &mut last).is_err());
    assert!(evolve(&current, json(r#","x":{"type":"string","default":""}"#).fields(), &mut last).unwrap().is_some());
}
