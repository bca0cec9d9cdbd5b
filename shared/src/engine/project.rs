//! Rows decoded against one schema, re-laid onto another by column name: what a commit does
//! when the table's schema moved (evolved by another writer) between decoding and writing.
//! Columns the rows lack become nulls, types widen (int→long, float→double, wider decimals),
//! and the target's field metadata (Parquet field ids) is carried at every level.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, MapArray, RecordBatch, StructArray, new_null_array};
use arrow_schema::{DataType, FieldRef, Fields, SchemaRef};

use crate::base::error::{Error, Result};

/// `rows` with the columns of `target`, matched by name. A column of `rows` that `target` lacks,
/// or a required target column that `rows` lack, is an error: projecting never loses a value.
pub fn project_batch(rows: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    if rows.schema() == *target {
        return Ok(rows.clone());
    }
    let columns = project_fields(rows.schema().fields(), rows.columns(), target.fields(), rows.num_rows(), "")?;
    Ok(RecordBatch::try_new(target.clone(), columns)?)
}

fn project_fields(fields: &Fields, arrays: &[ArrayRef], target: &Fields, len: usize, path: &str) -> Result<Vec<ArrayRef>> {
    if let Some(lost) = fields.iter().find(|f| target.find(f.name()).is_none()) {
        return Err(Error::Invariant(format!("column `{}{}` has no place in the table's schema", path, lost.name())));
    }
    target
        .iter()
        .map(|column| match fields.find(column.name()) {
            Some((i, _)) => project_array(&arrays[i], column, &format!("{path}{}.", column.name())),
            None if column.is_nullable() => Ok(new_null_array(column.data_type(), len)),
            None => Err(Error::Invariant(format!("required column `{}{}` has no values", path, column.name()))),
        })
        .collect()
}

fn project_array(array: &ArrayRef, target: &FieldRef, path: &str) -> Result<ArrayRef> {
    if array.data_type() == target.data_type() {
        return Ok(array.clone());
    }
    Ok(match (array.data_type(), target.data_type()) {
        (DataType::Struct(fields), DataType::Struct(columns)) => {
            let s = array.as_struct();
            let children = project_fields(fields, s.columns(), columns, s.len(), path)?;
            Arc::new(StructArray::try_new(columns.clone(), children, s.nulls().cloned())?)
        }
        (DataType::List(_), DataType::List(element)) => {
            let l = array.as_list::<i32>();
            let values = project_array(l.values(), element, path)?;
            Arc::new(ListArray::try_new(element.clone(), l.offsets().clone(), values, l.nulls().cloned())?)
        }
        (DataType::Map(_, _), DataType::Map(entries, sorted)) => {
            let m = array.as_map();
            let entries_array: ArrayRef = Arc::new(m.entries().clone());
            let projected = project_array(&entries_array, entries, path)?;
            let projected = projected.as_struct().clone();
            Arc::new(MapArray::try_new(entries.clone(), m.offsets().clone(), projected, m.nulls().cloned(), *sorted)?)
        }
        (_, to) => arrow_cast::cast(array, to)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};
    use std::collections::HashMap;

    fn id(field: Field, id: i32) -> Field {
        field.with_metadata(HashMap::from([("PARQUET:field_id".to_string(), id.to_string())]))
    }

    #[test]
    fn widens_adds_nulls_and_carries_field_ids_into_structs() {
        let inner = Fields::from(vec![id(Field::new("city", DataType::Utf8, true), 3)]);
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                id(Field::new("qty", DataType::Int32, false), 1),
                id(Field::new("ship", DataType::Struct(inner.clone()), true), 2),
            ])),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StructArray::new(inner, vec![Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef], None)),
            ],
        )
        .unwrap();
        let wider = Fields::from(vec![id(Field::new("city", DataType::Utf8, true), 3), id(Field::new("zip", DataType::Utf8, true), 5)]);
        let target = Arc::new(Schema::new(vec![
            id(Field::new("qty", DataType::Int64, false), 1),
            id(Field::new("ship", DataType::Struct(wider), true), 2),
            id(Field::new("note", DataType::Utf8, true), 4),
        ]));
        let out = project_batch(&rows, &target).unwrap();
        assert_eq!(out.schema(), target);
        assert_eq!(out.column(0).as_primitive::<arrow_array::types::Int64Type>(), &Int64Array::from(vec![1, 2]));
        let ship = out.column(1).as_struct();
        assert_eq!(ship.column(0).as_string::<i32>().value(1), "b");
        assert_eq!(ship.column(1).null_count(), 2);
        assert_eq!(out.column(2).null_count(), 2);
    }

    #[test]
    fn never_drops_a_column_or_fills_a_required_one() {
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)])),
            vec![Arc::new(Int32Array::from(vec![1]))],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![Field::new("b", DataType::Int32, true)]));
        assert!(project_batch(&rows, &target).unwrap_err().to_string().contains("`a`"));
        let target = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false), Field::new("b", DataType::Int32, false)]));
        assert!(project_batch(&rows, &target).unwrap_err().to_string().contains("`b`"));
    }
}
