//! JSON values (one object per record) into columns. The plan comes from the JSON Schema's
//! types: a `date-time` column takes an RFC 3339 string or integer epoch milliseconds.

use arrow_schema::{DataType, Fields};
use serde_json::Value;

use super::column::Col;
use super::{DecodeError, millis_to_micros, source_field, uuid_bytes};
use crate::schema::json_schema::JsonSchema;
use crate::schema::{Prim, Ty};

pub(crate) struct JsonReader {
    row: Vec<Option<(String, Plan)>>,
}

/// How one JSON value lands in its column.
enum Plan {
    Prim(Prim),
    /// Per target child: the property it comes from.
    Object(Vec<Option<(String, Plan)>>),
    List(Box<Plan>),
    Map(Box<Plan>),
}

impl JsonReader {
    pub fn new(schema: &JsonSchema, target: &Fields) -> Self {
        JsonReader { row: object_plan(&schema.fields, target) }
    }

    pub fn append(&self, value: &[u8], row: &mut Col) -> Result<(), DecodeError> {
        let value: Value = serde_json::from_slice(value).map_err(|e| DecodeError::new(format!("invalid JSON: {e}")))?;
        put_object(&value, &self.row, row)
    }
}

fn object_plan(fields: &[crate::schema::Field], target: &Fields) -> Vec<Option<(String, Plan)>> {
    target
        .iter()
        .map(|column| source_field(fields, column).map(|f| (f.name.clone(), plan(&f.ty, column.data_type()))))
        .collect()
}

/// The plan for `ty` into a column of type `target` (the pair was checked to fit).
fn plan(ty: &Ty, target: &DataType) -> Plan {
    match (ty, target) {
        (Ty::Struct(fields), DataType::Struct(columns)) => Plan::Object(object_plan(fields, columns)),
        (Ty::List(element), _) => Plan::List(Box::new(plan(&element.ty, &element_type(target, 0)))),
        (Ty::Map(_, value), _) => Plan::Map(Box::new(plan(&value.ty, &element_type(target, 1)))),
        (Ty::Prim(p), _) => Plan::Prim(*p),
        (Ty::Struct(_), _) => Plan::Object(Vec::new()),
    }
}

/// A list's element type (`_`), or a map's key (0) or value (1) type.
pub(crate) fn element_type(t: &DataType, index: usize) -> DataType {
    match t {
        DataType::List(e) => e.data_type().clone(),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => kv[index].data_type().clone(),
            _ => DataType::Null,
        },
        _ => DataType::Null,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn expected(what: &str, got: &Value) -> DecodeError {
    DecodeError::new(format!("expected {what}, got {}", kind(got)))
}

fn put_object(v: &Value, plans: &[Option<(String, Plan)>], col: &mut Col) -> Result<(), DecodeError> {
    let Value::Object(object) = v else { return Err(expected("object", v)) };
    for (child, plan) in col.children()?.iter_mut().zip(plans) {
        match plan {
            None => child.push_missing()?,
            Some((name, plan)) => {
                let put = match object.get(name) {
                    Some(value) => put(value, plan, child),
                    None => child.push_missing(),
                };
                put.map_err(|e| e.at(name.as_str()))?
            }
        }
    }
    col.close_row();
    Ok(())
}

fn put(v: &Value, plan: &Plan, col: &mut Col) -> Result<(), DecodeError> {
    if v.is_null() {
        return col.push_missing();
    }
    match plan {
        Plan::Object(children) => put_object(v, children, col),
        Plan::List(element) => {
            let Value::Array(items) = v else { return Err(expected("array", v)) };
            let child = col.element()?;
            for (i, item) in items.iter().enumerate() {
                put(item, element, child).map_err(|e| e.at(format!("[{i}]")))?;
            }
            col.close_row();
            Ok(())
        }
        Plan::Map(value_plan) => {
            let Value::Object(entries) = v else { return Err(expected("object", v)) };
            let (keys, values) = col.entries()?;
            for (key, value) in entries {
                keys.push_bytes(key.as_bytes())?;
                put(value, value_plan, values).map_err(|e| e.at(key.as_str()))?;
            }
            col.close_row();
            Ok(())
        }
        Plan::Prim(p) => put_prim(v, *p, col),
    }
}

fn put_prim(v: &Value, p: Prim, col: &mut Col) -> Result<(), DecodeError> {
    match (p, v) {
        (Prim::Boolean, Value::Bool(b)) => col.push_bool(*b),
        (Prim::Long, Value::Number(n)) => col.push_i64(n.as_i64().ok_or_else(|| DecodeError::new(format!("expected an integer in the long range, got {n}")))?),
        (Prim::Int, Value::Number(n)) => {
            col.push_i32(n.as_i64().and_then(|v| i32::try_from(v).ok()).ok_or_else(|| DecodeError::new(format!("expected an integer in the int range, got {n}")))?)
        }
        (Prim::Double, Value::Number(n)) => col.push_f64(n.as_f64().unwrap_or(f64::NAN)),
        (Prim::String, Value::String(s)) => col.push_bytes(s.as_bytes()),
        (Prim::Uuid, Value::String(s)) => col.push_fixed(&uuid_bytes(s)?),
        (Prim::Date, Value::String(s)) => col.push_i32(parse_date(s)?),
        (Prim::Timestamptz, Value::String(s)) => col.push_i64(parse_timestamp(s)?),
        (Prim::Timestamptz, Value::Number(n)) => {
            let ms = n.as_i64().ok_or_else(|| DecodeError::new(format!("expected epoch milliseconds (an integer), got {n}")))?;
            col.push_i64(millis_to_micros(ms)?)
        }
        (Prim::Timestamptz, _) => Err(expected("an RFC 3339 string or epoch milliseconds", v)),
        (Prim::Boolean, _) => Err(expected("boolean", v)),
        (Prim::Long | Prim::Int, _) => Err(expected("integer", v)),
        (Prim::Double, _) => Err(expected("number", v)),
        (Prim::Date, _) => Err(expected("a date string (YYYY-MM-DD)", v)),
        (Prim::Uuid, _) => Err(expected("a UUID string", v)),
        _ => Err(expected("string", v)),
    }
}

fn parse_date(s: &str) -> Result<i32, DecodeError> {
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|e| DecodeError::new(format!("expected a date (YYYY-MM-DD), got `{s}`: {e}")))?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("1970-01-01 is a date");
    i32::try_from((date - epoch).num_days()).map_err(|_| DecodeError::new(format!("date `{s}` out of range")))
}

fn parse_timestamp(s: &str) -> Result<i64, DecodeError> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map_err(|e| DecodeError::new(format!("expected an RFC 3339 timestamp, got `{}`: {e}", s.chars().take(40).collect::<String>())))?;
    Ok(t.timestamp_micros())
}
