//! A Debezium Protobuf record (Confluent's ProtobufConverter) as the JSON converter would have
//! written its payload, so one path ([`super::Unwrapper::debezium_payload`]) reads it: scalars
//! as themselves (bytes as base64, enums by name), wrappers as their value, an absent field
//! with presence (`optional`, a message, a wrapper) as null, and the converter's logical-type
//! messages as the Connect encodings their fields' schemas name
//! (`schema::debezium_proto::connect_schema`):
//!
//! | message | becomes |
//! |---|---|
//! | `google.protobuf.Timestamp` | µs since the epoch (`MicroTimestamp`); finer than µs is refused |
//! | `google.type.Date` | days since the epoch (Connect `Date`) |
//! | `google.type.TimeOfDay` | µs of the day (`MicroTime`); finer than µs is refused |
//! | `confluent.type.Decimal` | `{"scale", "value"}` (`VariableScaleDecimal`: the unscaled big-endian two's complement, base64) |

use base64::Engine;
use chrono::{NaiveDate, NaiveTime, Timelike};
use prost_reflect::{DynamicMessage, Kind, MapKey, MessageDescriptor, ReflectMessage, Value as Proto};
use serde_json::{Map, Number, Value};

use crate::model::pipeline::TimestampPrecision;

/// Decode one record's payload (the registry frame removed) with its writer's envelope message.
pub fn payload_json(envelope: &MessageDescriptor, payload: &[u8], precision: TimestampPrecision) -> Result<Value, String> {
    message_json_of(envelope, payload, "Debezium Protobuf value", precision)
}

/// Decode one Protobuf message (`what` it is, for errors) into its Connect JSON form; times
/// finer than microseconds as `precision` says.
pub fn message_json_of(descriptor: &MessageDescriptor, payload: &[u8], what: &str, precision: TimestampPrecision) -> Result<Value, String> {
    let message = DynamicMessage::decode(descriptor.clone(), payload).map_err(|e| format!("{what}: {e}"))?;
    message_json(&message, precision).map_err(|e| format!("{what}: {e}"))
}

fn message_json(message: &DynamicMessage, precision: TimestampPrecision) -> Result<Value, String> {
    if let Some(value) = logical(message, precision)? {
        return Ok(value);
    }
    let mut out = Map::new();
    for fd in message.descriptor().fields() {
        let value = if fd.supports_presence() && !message.has_field(&fd) {
            Value::Null
        } else {
            value_json(&fd.kind(), &message.get_field(&fd), precision).map_err(|e| format!("field `{}`: {e}", fd.name()))?
        };
        out.insert(fd.name().to_string(), value);
    }
    Ok(Value::Object(out))
}

fn value_json(kind: &Kind, value: &Proto, precision: TimestampPrecision) -> Result<Value, String> {
    let float = |f: f64| Number::from_f64(f).map(Value::Number).ok_or_else(|| format!("the float {f} has no JSON form"));
    Ok(match value {
        Proto::Bool(b) => Value::Bool(*b),
        Proto::I32(i) => Value::from(*i),
        Proto::I64(i) => Value::from(*i),
        Proto::U32(u) => Value::from(*u),
        Proto::U64(u) => Value::from(*u),
        Proto::F32(f) => float(f64::from(*f))?,
        Proto::F64(f) => float(*f)?,
        Proto::String(s) => Value::String(s.clone()),
        Proto::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Proto::EnumNumber(n) => match kind {
            Kind::Enum(e) => e.get_value(*n).map(|v| Value::String(v.name().to_string())).unwrap_or_else(|| Value::from(*n)),
            _ => Value::from(*n),
        },
        Proto::Message(m) => message_json(m, precision)?,
        Proto::List(items) => Value::Array(items.iter().map(|v| value_json(kind, v, precision)).collect::<Result<_, _>>()?),
        Proto::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let mut out = Map::new();
            for (k, v) in entries {
                let key = match k {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(u) => u.to_string(),
                    MapKey::U64(u) => u.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                out.insert(key, value_json(&value_kind, v, precision)?);
            }
            Value::Object(out)
        }
    })
}

/// A field of a well-known message (zero when absent, as proto3 reads it).
fn int(message: &DynamicMessage, name: &str) -> i64 {
    match message.get_field_by_name(name).as_deref() {
        Some(Proto::I32(i)) => i64::from(*i),
        Some(Proto::I64(i)) => *i,
        Some(Proto::U32(u)) => i64::from(*u),
        _ => 0,
    }
}

/// The Connect encoding of the converter's logical-type messages and the wrappers' value;
/// `None` for any other message.
fn logical(message: &DynamicMessage, precision: TimestampPrecision) -> Result<Option<Value>, String> {
    let descriptor = message.descriptor();
    let name = descriptor.full_name();
    Ok(Some(match name {
        "google.protobuf.Timestamp" => {
            let (seconds, nanos) = (int(message, "seconds"), int(message, "nanos"));
            let Some(nanos) = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000) else {
                return Err(format!("a Timestamp's nanos {nanos} are out of range 0..1e9"));
            };
            Value::from(precision.micros(seconds, nanos, &format_args!("a Timestamp of {seconds} s and {nanos} ns"))?)
        }
        "google.type.Date" => {
            let (year, month, day) = (int(message, "year"), int(message, "month"), int(message, "day"));
            let date =
                i32::try_from(year).ok().and_then(|y| NaiveDate::from_ymd_opt(y, u32::try_from(month).ok()?, u32::try_from(day).ok()?));
            let date = date.ok_or_else(|| format!("a Date of {year}-{month}-{day} is not a calendar date"))?;
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).ok_or("the epoch is a date")?;
            Value::from((date - epoch).num_days())
        }
        "google.type.TimeOfDay" => {
            let [h, m, s, n] = ["hours", "minutes", "seconds", "nanos"].map(|f| u32::try_from(int(message, f)).ok());
            let time = match (h, m, s, n) {
                (Some(h), Some(m), Some(s), Some(n)) => NaiveTime::from_hms_nano_opt(h, m, s, n),
                _ => None,
            };
            let time = time.ok_or_else(|| format!("a TimeOfDay of {h:?}:{m:?}:{s:?}.{n:?} is not a time of day"))?;
            Value::from(precision.micros(
                i64::from(time.num_seconds_from_midnight()),
                time.nanosecond(),
                &format_args!("a TimeOfDay of {time}"),
            )?)
        }
        "confluent.type.Decimal" => {
            let value = match message.get_field_by_name("value").as_deref() {
                Some(Proto::Bytes(b)) if !b.is_empty() => b.to_vec(),
                // proto3 omits empty bytes: the unscaled value 0.
                _ => vec![0],
            };
            let value = base64::engine::general_purpose::STANDARD.encode(value);
            serde_json::json!({"scale": int(message, "scale"), "value": value})
        }
        _ if name.starts_with("google.protobuf.") && name.ends_with("Value") && descriptor.get_field_by_name("value").is_some() => {
            let fd = descriptor.get_field_by_name("value").ok_or("a wrapper without its value")?;
            value_json(&fd.kind(), &message.get_field(&fd), precision)?
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
#[path = "protobuf_tests.rs"]
mod tests;
