use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::types::Int64Type;
use arrow_array::{Decimal128Array, Float32Array, Int32Array, Int64Array, StringArray};
use arrow_schema::Schema;

use super::*;

fn id(field: Field, id: i32) -> Field {
    field.with_metadata(HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]))
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[test]
fn promoted_types_widen_and_added_optional_columns_read_as_nulls() {
    let file = batch(
        vec![
            id(Field::new("n", DataType::Int32, true), 2),
            id(Field::new("x", DataType::Float32, true), 3),
            id(Field::new("d", DataType::Decimal128(5, 2), true), 4),
        ],
        vec![
            Arc::new(Int32Array::from(vec![Some(-3), None])),
            Arc::new(Float32Array::from(vec![1.5, -0.25])),
            Arc::new(Decimal128Array::from(vec![Some(12345), None]).with_precision_and_scale(5, 2).unwrap()),
        ],
    );
    let target = Arc::new(Schema::new(vec![
        id(Field::new("note", DataType::Utf8, true), 8),
        id(Field::new("n", DataType::Int64, true), 2),
        id(Field::new("x", DataType::Float64, true), 3),
        id(Field::new("d", DataType::Decimal128(10, 2), true), 4),
    ]));
    let out = conform_batch(&file, "f.parquet", &target).unwrap();
    assert_eq!(out.schema(), target);
    assert_eq!(out.column(0).null_count(), 2);
    assert_eq!(out.column(1).as_primitive::<Int64Type>().iter().collect::<Vec<_>>(), [Some(-3), None]);
    assert_eq!(out.column(2).as_primitive::<arrow_array::types::Float64Type>().values(), &[1.5, -0.25]);
    let d = out.column(3).as_primitive::<arrow_array::types::Decimal128Type>();
    assert_eq!((d.value(0), d.precision(), d.scale(), d.is_null(1)), (12345, 10, 2, true));
}

#[test]
fn structs_lists_and_maps_that_grew_are_read_field_by_field_and_ids_win_over_names() {
    let a = id(Field::new("a", DataType::Int32, true), 6);
    let old_struct = DataType::Struct(vec![a.clone()].into());
    let s = StructArray::try_new(
        vec![a.clone()].into(),
        vec![Arc::new(Int32Array::from(vec![Some(1), Some(2)])) as ArrayRef],
        Some(vec![true, false].into()),
    )
    .unwrap();
    let element = id(Field::new("element", old_struct.clone(), true), 11);
    let mut values = ListBuilder::new(Int32Builder::new());
    values.append_value([Some(7)]);
    values.append_null();
    let ints: ArrayRef = Arc::new(values.finish());
    let list = ListArray::try_new(
        Arc::new(element.clone()),
        arrow_buffer::OffsetBuffer::from_lengths([1, 0]),
        Arc::new(StructArray::try_new(vec![a.clone()].into(), vec![Arc::new(Int32Array::from(vec![9])) as ArrayRef], None).unwrap()),
        None,
    )
    .unwrap();
    let file = batch(
        vec![
            id(Field::new("s", old_struct, true), 5),
            id(Field::new("l", list.data_type().clone(), true), 10),
            // Renamed since: the id decides.
            id(Field::new("old_name", ints.data_type().clone(), true), 12),
        ],
        vec![Arc::new(s), Arc::new(list), ints],
    );
    let b = id(Field::new("b", DataType::Utf8, true), 7);
    let grown = DataType::Struct(vec![a.clone(), b].into());
    let target = Arc::new(Schema::new(vec![
        id(Field::new("s", grown.clone(), true), 5),
        id(Field::new("l", DataType::List(Arc::new(id(Field::new("element", grown, true), 11))), true), 10),
        id(Field::new("l2", DataType::List(Arc::new(id(Field::new("item", DataType::Int64, true), 13))), true), 12),
    ]));
    let out = conform_batch(&file, "f.parquet", &target).unwrap();
    let s = out.column(0).as_struct();
    assert_eq!((s.is_null(1), s.column(0).as_primitive::<arrow_array::types::Int32Type>().value(0)), (true, 1));
    assert_eq!(s.column(1).null_count(), 2);
    let l = out.column(1).as_list::<i32>();
    let element = l.value(0);
    assert_eq!(element.as_struct().column(0).as_primitive::<arrow_array::types::Int32Type>().value(0), 9);
    assert_eq!(element.as_struct().column(1).null_count(), 1);
    let l2 = out.column(2).as_list::<i32>();
    assert_eq!((l2.value(0).as_primitive::<Int64Type>().value(0), l2.is_null(1)), (7, true));
}

#[test]
fn narrowing_other_kinds_and_missing_required_columns_are_errors_naming_the_column() {
    let file = batch(
        vec![id(Field::new("n", DataType::Int64, true), 2), id(Field::new("t", DataType::Utf8, true), 3)],
        vec![Arc::new(Int64Array::from(vec![i64::MAX])), Arc::new(StringArray::from(vec!["x"]))],
    );
    let err = |target: Vec<Field>| conform_batch(&file, "f.parquet", &Arc::new(Schema::new(target))).unwrap_err().to_string();
    let e = err(vec![id(Field::new("n", DataType::Int32, true), 2)]);
    assert!(e.contains("f.parquet") && e.contains("column n"), "{e}");
    let e = err(vec![id(Field::new("t", DataType::Int64, true), 3)]);
    assert!(e.contains("column t is Utf8") && e.contains("does not read as Int64"), "{e}");
    let e = err(vec![id(Field::new("d", DataType::Decimal128(4, 2), true), 9), id(Field::new("req", DataType::Int64, false), 20)]);
    assert!(e.contains("has no column req"), "{e}");
    // A decimal's scale never changes, nor does its precision go down.
    assert!(!promotes(&DataType::Decimal128(10, 2), &DataType::Decimal128(10, 3)));
    assert!(!promotes(&DataType::Decimal128(10, 2), &DataType::Decimal128(9, 2)));
    assert!(promotes(&DataType::Decimal128(9, 2), &DataType::Decimal128(38, 2)));
}
