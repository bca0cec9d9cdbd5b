//! Schema evolution: the table schema that can take a writer's records, or why none can.
//!
//! Columns are matched by name at every level. Allowed, in the same commit as the first rows
//! that need it: new optional columns (fresh field ids, nested ones too), int→long,
//! float→double, a decimal of wider precision, required→optional. Never a drop, a rename or a
//! narrowing: a writer with a narrower type still fits (its values widen); any other type
//! change, or a new field that is required and has no default, is refused with a reason naming
//! the field and both types, and the table stays as it is.

use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedFieldRef, PrimitiveType, Schema, StructType, Type};

use crate::model::schema::{Field, Prim, SourceSchema, Ty, iceberg_field, iceberg_type, join};
use crate::model::tables::is_written_by_icestream;
use crate::model::tables::kafka::KafkaColumns;

/// The schema `current` must become to take records of `writer`, or `None` if it already can.
/// New field ids start after `last_column_id` (the table's, which dropped ids never reuse) and
/// `last_column_id` moves past the ids used. `Err` names the field and both types.
pub(crate) fn evolve(current: &Schema, writer: &[Field], last_column_id: &mut i32) -> Result<Option<Schema>, String> {
    let mut plan = Plan { next_id: *last_column_id, changed: false, identifier: current.identifier_field_ids().collect() };
    let fields = plan.evolve_struct(current.as_struct(), writer, "")?;
    if !plan.changed {
        return Ok(None);
    }
    *last_column_id = plan.next_id;
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| format!("the evolved schema is not valid: {e}"))?;
    Ok(Some(schema))
}

/// The schema `current` must become to take the records of every one of `writers` (folded in
/// order) and the Kafka metadata columns `kafka`, or `None` if it already can. Ids start after
/// the table's `last_column_id`.
pub fn evolve_for(
    current: &Schema,
    last_column_id: i32,
    writers: &[Arc<SourceSchema>],
    kafka: KafkaColumns,
) -> Result<Option<Schema>, String> {
    let mut last = last_column_id;
    let mut next: Option<Schema> = None;
    for writer in writers {
        if let Some(evolved) = evolve(next.as_ref().unwrap_or(current), writer.fields(), &mut last)? {
            next = Some(evolved);
        }
    }
    if let Some(evolved) = add_kafka_columns(next.as_ref().unwrap_or(current), kafka, &mut last)? {
        next = Some(evolved);
    }
    Ok(next)
}

/// `current` with the Kafka metadata columns of `kafka` it lacks added at the end (optional,
/// ids after `last_column_id`, which moves past them), or `None` if it has them all.
pub(crate) fn add_kafka_columns(current: &Schema, kafka: KafkaColumns, last_column_id: &mut i32) -> Result<Option<Schema>, String> {
    let missing: Vec<_> = kafka.fields().into_iter().filter(|f| current.field_by_name(&f.name).is_none()).collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let mut fields: Vec<NestedFieldRef> = current.as_struct().fields().to_vec();
    fields.extend(missing.iter().map(|f| iceberg_field(f, last_column_id)));
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| format!("the schema with Kafka metadata columns is not valid: {e}"))?;
    Ok(Some(schema))
}

struct Plan {
    /// The last field id used.
    next_id: i32,
    changed: bool,
    /// Identifier (key) columns: they stay required.
    identifier: Vec<i32>,
}

impl Plan {
    fn evolve_struct(&mut self, current: &StructType, writer: &[Field], path: &str) -> Result<Vec<NestedFieldRef>, String> {
        let mut out = Vec::with_capacity(current.fields().len() + writer.len());
        for column in current.fields() {
            let here = join(path, &column.name);
            if path.is_empty() && is_written_by_icestream(&column.name) {
                out.push(column.clone());
                continue;
            }
            let key = self.identifier.contains(&column.id);
            let mut evolved = (**column).clone();
            match writer.iter().find(|f| f.name == column.name) {
                Some(field) => {
                    evolved.field_type = Box::new(self.evolve_type(&column.field_type, &field.ty, &here)?);
                    // A key column stays required: a record without it is refused per record.
                    if column.required && field.optional && !key {
                        evolved.required = false;
                        self.changed = true;
                    }
                }
                None if column.required && key => {
                    return Err(format!("field `{here}`: the writer schema has no such field, and the table requires it (a key column)"));
                }
                None if column.required => {
                    evolved.required = false;
                    self.changed = true;
                }
                None => {}
            }
            out.push(Arc::new(evolved));
        }
        for field in writer.iter().filter(|f| current.field_by_name(&f.name).is_none()) {
            let here = join(path, &field.name);
            if !field.optional && !field.has_default {
                return Err(format!(
                    "field `{here}`: new in the writer schema as a required {} without a default; a table cannot add a required column \
                     (make it optional or give it a default)",
                    field.ty
                ));
            }
            if path.is_empty() && is_written_by_icestream(&field.name) {
                return Err(format!("field `{here}`: the name is reserved for Kafka lineage and metadata columns"));
            }
            let mut added = (*iceberg_field(field, &mut self.next_id)).clone();
            added.required = false;
            out.push(Arc::new(added));
            self.changed = true;
        }
        Ok(out)
    }

    fn evolve_type(&mut self, current: &Type, writer: &Ty, path: &str) -> Result<Type, String> {
        Ok(match (current, writer) {
            (Type::Primitive(column), Ty::Prim(value)) => Type::Primitive(self.evolve_primitive(column, *value, path)?),
            (Type::Struct(columns), Ty::Struct(fields)) => Type::Struct(StructType::new(self.evolve_struct(columns, fields, path)?)),
            (Type::List(list), Ty::List(element)) => {
                Type::List(ListType::new(self.evolve_element(&list.element_field, element, &join(path, "element"))?))
            }
            (Type::Map(map), Ty::Map(key, value)) => Type::Map(MapType::new(
                self.evolve_element(&map.key_field, key, &join(path, "key"))?,
                self.evolve_element(&map.value_field, value, &join(path, "value"))?,
            )),
            (column, value) => return Err(mismatch(path, value, column)),
        })
    }

    /// A list element or map key/value: its type evolves, and it may become optional.
    fn evolve_element(&mut self, current: &NestedFieldRef, writer: &Field, path: &str) -> Result<NestedFieldRef, String> {
        let mut evolved = (**current).clone();
        evolved.field_type = Box::new(self.evolve_type(&current.field_type, &writer.ty, path)?);
        if current.required && writer.optional {
            evolved.required = false;
            self.changed = true;
        }
        Ok(Arc::new(evolved))
    }

    fn evolve_primitive(&mut self, column: &PrimitiveType, value: Prim, path: &str) -> Result<PrimitiveType, String> {
        use PrimitiveType as P;
        let Type::Primitive(wanted) = iceberg_type(&Ty::Prim(value), &mut 0) else { unreachable!("a primitive maps to a primitive") };
        let widened = match (column, &wanted) {
            (c, w) if c == w => return Ok(c.clone()),
            // The writer's values widen into the table's wider type.
            (P::Long, P::Int) | (P::Double, P::Float) => return Ok(column.clone()),
            (P::Decimal { precision, scale }, P::Decimal { precision: p2, scale: s2 }) if scale == s2 && p2 <= precision => {
                return Ok(column.clone());
            }
            // The table widens.
            (P::Int, P::Long) | (P::Float, P::Double) => wanted.clone(),
            (P::Decimal { scale, .. }, P::Decimal { scale: s2, .. }) if scale == s2 => wanted.clone(),
            _ => return Err(mismatch(path, &Ty::Prim(value), &Type::Primitive(column.clone()))),
        };
        self.changed = true;
        Ok(widened)
    }
}

fn mismatch(path: &str, value: &Ty, column: &Type) -> String {
    format!(
        "field `{path}`: the writer's {value} cannot go into the table's {column} \
         (allowed: the same type, int→long, float→double, a decimal of wider precision, new optional fields)"
    )
}

#[cfg(test)]
mod tests;
