//! Protobuf values decoded by prost-reflect into a `DynamicMessage`, then walked by the plan
//! built from the message descriptor. prost checks every length prefix against the bytes left.

use arrow_schema::{DataType, Fields};
use prost_reflect::{DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value};

use super::column::Col;
use super::json::element_type;
use super::DecodeError;
use crate::schema::protobuf::{ProtoSchema, WellKnown, well_known};

pub(crate) struct ProtoReader {
    message: MessageDescriptor,
    row: Vec<Option<(FieldDescriptor, Plan)>>,
}

/// How one field's value lands in its column.
enum Plan {
    Scalar,
    Enum(EnumDescriptor),
    /// Per target child: the field it comes from.
    Message(Vec<Option<(FieldDescriptor, Plan)>>),
    Timestamp,
    /// The wrapped scalar (field 1) of a `google.protobuf.*Value`.
    Wrapper,
    List(Box<Plan>),
    Map { key: Box<Plan>, value: Box<Plan> },
}

impl ProtoReader {
    pub fn new(schema: &ProtoSchema, target: &Fields) -> Self {
        ProtoReader { message: schema.message.clone(), row: message_plan(&schema.message, target) }
    }

    pub fn append(&self, value: &[u8], row: &mut Col) -> Result<(), DecodeError> {
        let message = DynamicMessage::decode(self.message.clone(), value).map_err(|e| DecodeError::new(format!("invalid protobuf: {e}")))?;
        put_message(&message, &self.row, row)
    }
}

fn message_plan(m: &MessageDescriptor, target: &Fields) -> Vec<Option<(FieldDescriptor, Plan)>> {
    target
        .iter()
        .map(|column| {
            let fd = m.get_field_by_name(column.name())?;
            let plan = if fd.is_list() {
                Plan::List(Box::new(kind_plan(&fd.kind(), &element_type(column.data_type(), 0))))
            } else if fd.is_map() {
                let Kind::Message(entry) = fd.kind() else { unreachable!("a map field's kind is its entry message") };
                Plan::Map {
                    key: Box::new(kind_plan(&entry.map_entry_key_field().kind(), &element_type(column.data_type(), 0))),
                    value: Box::new(kind_plan(&entry.map_entry_value_field().kind(), &element_type(column.data_type(), 1))),
                }
            } else {
                kind_plan(&fd.kind(), column.data_type())
            };
            Some((fd, plan))
        })
        .collect()
}

fn kind_plan(kind: &Kind, target: &DataType) -> Plan {
    match kind {
        Kind::Enum(e) => Plan::Enum(e.clone()),
        Kind::Message(m) => match (well_known(m), target) {
            (Some(WellKnown::Timestamp), _) => Plan::Timestamp,
            (Some(WellKnown::Wrapper(_)), _) => Plan::Wrapper,
            (None, DataType::Struct(columns)) => Plan::Message(message_plan(m, columns)),
            (None, _) => Plan::Message(Vec::new()),
        },
        _ => Plan::Scalar,
    }
}

fn put_message(m: &DynamicMessage, plans: &[Option<(FieldDescriptor, Plan)>], col: &mut Col) -> Result<(), DecodeError> {
    for (child, plan) in col.children()?.iter_mut().zip(plans) {
        let Some((fd, plan)) = plan else {
            child.push_missing()?;
            continue;
        };
        // Fields with presence (messages, proto3 `optional`, oneof members) are null when
        // unset; plain proto3 scalars, lists and maps read as their default.
        let put = if fd.supports_presence() && !m.has_field(fd) { child.push_missing() } else { put(&m.get_field(fd), plan, child) };
        put.map_err(|e| e.at(fd.name()))?;
    }
    col.close_row();
    Ok(())
}

fn put(v: &Value, plan: &Plan, col: &mut Col) -> Result<(), DecodeError> {
    match (v, plan) {
        (Value::List(items), Plan::List(element)) => {
            let child = col.element()?;
            for (i, item) in items.iter().enumerate() {
                put(item, element, child).map_err(|e| e.at(format!("[{i}]")))?;
            }
            col.close_row();
            Ok(())
        }
        (Value::Map(entries), Plan::Map { key, value }) => {
            let (keys, values) = col.entries()?;
            // Wire order is lost in the decoded map; sorted keys keep rows deterministic.
            let mut sorted: Vec<_> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in sorted {
                let k = key_value(k);
                put(&k, key, keys)?;
                put(v, value, values).map_err(|e| e.at(map_key_text(&k)))?;
            }
            col.close_row();
            Ok(())
        }
        (Value::Message(m), Plan::Message(children)) => put_message(m, children, col),
        (Value::Message(m), Plan::Timestamp) => col.push_i64(timestamp_micros(m)?),
        (Value::Message(m), Plan::Wrapper) => match m.get_field_by_number(1) {
            Some(inner) => put(&inner, &Plan::Scalar, col),
            None => Err(DecodeError::new("a wrapper message without its `value` field")),
        },
        (Value::EnumNumber(n), Plan::Enum(e)) => match e.get_value(*n) {
            Some(known) => col.push_bytes(known.name().as_bytes()),
            None => col.push_bytes(n.to_string().as_bytes()),
        },
        (Value::Bool(b), _) => col.push_bool(*b),
        (Value::I32(x), _) => col.push_i32(*x),
        (Value::I64(x), _) => col.push_i64(*x),
        (Value::U32(x), _) => col.push_i64(i64::from(*x)),
        (Value::U64(x), _) => {
            col.push_i64(i64::try_from(*x).map_err(|_| DecodeError::new(format!("{x} exceeds the long range (uint64 above 2^63-1)")))?)
        }
        (Value::F32(x), _) => col.push_f32(*x),
        (Value::F64(x), _) => col.push_f64(*x),
        (Value::String(s), _) => col.push_bytes(s.as_bytes()),
        (Value::Bytes(b), _) => col.push_bytes(b),
        (other, _) => Err(DecodeError::new(format!("internal: value {other:?} does not match its descriptor"))),
    }
}

fn key_value(k: &MapKey) -> Value {
    match k {
        MapKey::Bool(b) => Value::Bool(*b),
        MapKey::I32(x) => Value::I32(*x),
        MapKey::I64(x) => Value::I64(*x),
        MapKey::U32(x) => Value::U32(*x),
        MapKey::U64(x) => Value::U64(*x),
        MapKey::String(s) => Value::String(s.clone()),
    }
}

fn map_key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// `google.protobuf.Timestamp` as UTC microseconds.
fn timestamp_micros(m: &DynamicMessage) -> Result<i64, DecodeError> {
    let seconds = m.get_field_by_number(1).and_then(|v| v.as_i64()).unwrap_or(0);
    let nanos = m.get_field_by_number(2).and_then(|v| v.as_i32()).unwrap_or(0);
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(DecodeError::new(format!("timestamp nanos {nanos} out of range 0..1e9")));
    }
    seconds
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(i64::from(nanos / 1000)))
        .ok_or_else(|| DecodeError::new(format!("timestamp seconds {seconds} out of range")))
}
