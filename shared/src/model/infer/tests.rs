use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

use super::*;
use crate::model::schema::SourceSchema;

fn empty() -> Schema {
    Schema::builder().build().unwrap()
}

fn folded(values: &[&str]) -> (Inference, Vec<Result<(), String>>) {
    let mut inference = Inference::from_table(&empty(), vec![], vec![]);
    let results = values.iter().map(|v| inference.add(v.as_bytes())).collect();
    (inference, results)
}

/// The inferred columns as `name type` lines, nested ones indented by their parent's path.
fn columns(inference: &Inference) -> String {
    let schema = SourceSchema::Json(inference.schema()).to_iceberg().unwrap();
    schema.as_struct().fields().iter().map(|f| format!("{} {}", f.name, f.field_type)).collect::<Vec<_>>().join("; ")
}

#[test]
fn values_give_their_columns_and_a_batch_mixing_integers_and_fractions_is_double() {
    let (inference, results) = folded(&[
        r#"{"id": 1, "name": "a", "ok": true, "price": 3, "tags": ["x"], "customer": {"id": 7}, "gone": null}"#,
        r#"{"id": 2, "price": 2.5, "tags": [], "customer": {"country": "DE"}, "later": [1, 2.5]}"#,
    ]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let shown = columns(&inference);
    for want in ["id long", "name string", "ok boolean", "price double"] {
        assert!(shown.contains(want), "{want} in {shown}");
    }
    let schema = SourceSchema::Json(inference.schema()).to_iceberg().unwrap();
    let element = |name: &str| schema.field_by_name(&format!("{name}.element")).unwrap().field_type.to_string();
    assert_eq!((element("later").as_str(), element("tags").as_str()), ("double", "string"));
    assert!(!shown.contains("gone"), "a field seen only as null has no column yet: {shown}");
    let fields = inference.fields();
    let customer = fields.iter().find(|f| f.name == "customer").unwrap();
    let Ty::Struct(children) = &customer.ty else { panic!("customer is a struct") };
    assert_eq!(children.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["id", "country"]);
    assert!(fields.iter().all(|f| f.optional), "every inferred column is optional");
}

#[test]
fn a_conflict_is_a_dead_letter_naming_the_field_and_both_types_and_folds_nothing() {
    let (inference, results) = folded(&[r#"{"customer": {"id": 7}, "n": 1}"#, r#"{"customer": "x", "added": true}"#, r#"{"n": [1, "a"]}"#]);
    let e = results[1].as_ref().unwrap_err();
    assert!(e.contains("field `customer`") && e.contains("string") && e.contains("struct<id>"), "{e}");
    assert!(!columns(&inference).contains("added"), "nothing of a refused record is folded");
    let e = results[2].as_ref().unwrap_err();
    assert!(e.contains("field `n`") && e.contains("list") && e.contains("long"), "{e}");
    // An integer beyond 2^53 would land rounded in a double column: refused, not rounded.
    let (inference, results) = folded(&[r#"{"x": 0.5}"#, r#"{"x": 9007199254740993}"#, r#"{"x": 9007199254740992}"#]);
    let e = results[1].as_ref().unwrap_err();
    assert!(e.contains("field `x`") && e.contains("9007199254740993") && e.contains("double"), "{e}");
    assert!(results[2].is_ok() && inference.check(br#"{"x": 18446744073709551615}"#).is_err());
    let (inference, _) = folded(&[r#"{"customer": {"id": 7}, "n": 1}"#]);
    // Read again, the refused records are refused still; the folded one fits.
    assert!(inference.check(br#"{"customer": "x", "added": true}"#).is_err());
    assert!(inference.check(br#"{"customer": {"id": 8}, "n": 2}"#).is_ok());
}

#[test]
fn a_long_column_of_the_table_refuses_a_fraction_naming_the_field_the_type_and_the_value() {
    let table = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "reading", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::required(3, "kafka_offset", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap();
    let mut inference = Inference::from_table(&table, vec!["ts_day".into()], vec![]);
    let e = inference.add(br#"{"reading": 2.5}"#).unwrap_err();
    assert!(e.contains("field `reading`") && e.contains("2.5") && e.contains("long"), "{e}");
    // A whole number written with a fraction is the integer it is; timestamps take strings and epoch ms.
    inference.add(br#"{"reading": 3.0, "ts": "2026-12-04T10:00:00Z"}"#).unwrap();
    inference.add(br#"{"reading": 4, "ts": 1714564800000}"#).unwrap();
    for reserved in [r#"{"kafka_topic": "x"}"#, r#"{"ts_day": 3}"#] {
        let e = inference.add(reserved.as_bytes()).unwrap_err();
        assert!(e.contains("field `"), "{e}");
    }
    assert_eq!(columns(&inference), "reading long; ts timestamptz");
}

#[test]
fn declared_timestamps_nest_into_structs() {
    let schema = SourceSchema::Json(declared(&["ts".into(), "event.at".into(), "event.ts".into()]).unwrap()).to_iceberg().unwrap();
    assert_eq!(schema.field_by_name("event.at").unwrap().field_type.to_string(), "timestamptz");
    assert_eq!(schema.field_by_name("ts").unwrap().field_type.to_string(), "timestamptz");
    assert!(declared(&["a".into(), "a.b".into()]).is_err());
}

#[test]
fn a_replaceable_long_column_meeting_a_fraction_asks_for_a_double() {
    let table = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "reading", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "count", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap();
    let mut inference = Inference::from_table(&table, vec![], vec!["reading".into()]);
    inference.add(br#"{"reading": 2.5, "count": 1}"#).unwrap();
    assert!(inference.add(br#"{"count": 1.5}"#).unwrap_err().contains("field `count`"), "only the replaceable columns");
    let e = inference.add(br#"{"reading": 9007199254740993}"#).unwrap_err();
    assert!(e.contains("field `reading`") && e.contains("double"), "{e}");
    let schema = inference.schema();
    assert_eq!(schema.replace_long, ["reading"]);
    assert_eq!(columns(&inference), "reading double; count long");
    // Integers alone leave it long: nothing to replace.
    let mut integers = Inference::from_table(&table, vec![], vec!["reading".into()]);
    integers.add(br#"{"reading": 3}"#).unwrap();
    assert!(integers.schema().replace_long.is_empty());
}
