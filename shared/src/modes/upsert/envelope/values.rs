//! Debezium's representations of column values, rewritten into the forms the JSON decoder
//! reads (`decode/json.rs`), exactly: nothing is rounded or truncated, a value its column
//! cannot hold is an error naming the field (the record becomes a dead letter).
//!
//! | column | Debezium (JSON converter) |
//! |---|---|
//! | date | int days (`io.debezium.time.Date`, Connect `Date`) |
//! | time | int ms (`io.debezium.time.Time`, Connect `Time`), µs (`MicroTime`), ns (`NanoTime`); `ZonedTime` text |
//! | timestamp, timestamptz | int ms (`io.debezium.time.Timestamp`, Connect `Timestamp`), µs (`MicroTimestamp`), ns (`NanoTimestamp`); `ZonedTimestamp` text |
//! | decimal | base64 unscaled bytes (`precise`, Connect `Decimal` with its `scale`), text (`string`), a number (`double`), `VariableScaleDecimal` `{scale, value}` |
//!
//! The embedded schema names each field's representation. Without it an integer time or
//! timestamp is in milliseconds (as `time.precision.mode = connect` writes them) and a decimal
//! string is read as the pipeline's `decimal_handling` says.

use arrow_array::types::{Decimal128Type, DecimalType};
use arrow_schema::{DataType, Schema as ArrowSchema, TimeUnit};
use base64::Engine;
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveTime, SecondsFormat};
use serde_json::{Map, Value};

use crate::model::pipeline::TimestampPrecision;
use crate::model::pipeline::upsert::DecimalHandling;

/// A table column whose Debezium values are rewritten.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Date,
    Time,
    Timestamp { zoned: bool },
    Decimal { scale: i8 },
}

/// The rewrites of one table's columns.
pub(super) struct Values {
    columns: Vec<(String, Kind)>,
    decimals: DecimalHandling,
    /// Times finer than microseconds (`Nano*`).
    pub(super) precision: TimestampPrecision,
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

impl Values {
    pub fn new(table: &ArrowSchema, decimals: DecimalHandling) -> Self {
        let columns = table
            .fields()
            .iter()
            .filter_map(|f| {
                let kind = match f.data_type() {
                    DataType::Date32 => Kind::Date,
                    DataType::Time64(TimeUnit::Microsecond) => Kind::Time,
                    DataType::Timestamp(TimeUnit::Microsecond, tz) => Kind::Timestamp { zoned: tz.is_some() },
                    DataType::Decimal128(_, scale) => Kind::Decimal { scale: *scale },
                    _ => return None,
                };
                Some((f.name().clone(), kind))
            })
            .collect();
        Self { columns, decimals, precision: TimestampPrecision::default() }
    }

    /// `row` with its Debezium values in the decoder's forms; `declared`: the embedded schema's
    /// fields of this side by name (empty without one).
    pub fn normalize(&self, mut row: Map<String, Value>, declared: &Map<String, Value>) -> Result<Map<String, Value>, String> {
        for (name, kind) in &self.columns {
            let Some(value) = row.get(name).filter(|v| !v.is_null()) else { continue };
            let schema = declared.get(name);
            let semantic = schema.and_then(|s| s.get("name")).and_then(Value::as_str);
            let rewritten = match *kind {
                Kind::Date => date(value),
                Kind::Time => time(value, semantic, self.precision),
                Kind::Timestamp { zoned } => timestamp(value, semantic, zoned, self.precision),
                Kind::Decimal { scale } => self.decimal(value, schema, scale),
            }
            .map_err(|e| format!("field `{name}`: {e}"))?;
            if let Some(text) = rewritten {
                row.insert(name.clone(), Value::String(text));
            }
        }
        Ok(row)
    }

    /// A decimal as text at its own scale (the decoder refuses another scale than the column's)
    /// or, for representations without a declared scale, padded to the column's.
    fn decimal(&self, value: &Value, schema: Option<&Value>, column_scale: i8) -> Result<Option<String>, String> {
        let semantic = schema.and_then(|s| s.get("name")).and_then(Value::as_str);
        match value {
            Value::Object(vsd) => {
                if semantic.is_some_and(|n| n != "io.debezium.data.VariableScaleDecimal") {
                    return Err(format!("an object, but the embedded schema says {}", semantic.unwrap_or_default()));
                }
                let scale = vsd.get("scale").and_then(Value::as_i64).ok_or("a VariableScaleDecimal needs an integer `scale`")?;
                let bytes = vsd.get("value").and_then(Value::as_str).ok_or("a VariableScaleDecimal needs a base64 `value`")?;
                padded(unscaled_text(bytes, scale)?, column_scale).map(Some)
            }
            Value::Number(n) => {
                // Debezium's `double` mode: the number's shortest exact text (Rust's Display
                // never uses an exponent), which must fit the column's scale.
                let text = match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => u.to_string(),
                    (None, Some(i), _) => i.to_string(),
                    (None, None, Some(f)) => f.to_string(),
                    _ => n.to_string(),
                };
                padded(text, column_scale).map(Some)
            }
            Value::String(s) => {
                let handling = match schema.and_then(|s| s.get("type")).and_then(Value::as_str) {
                    Some("bytes") => DecimalHandling::Precise,
                    Some("string") => DecimalHandling::String,
                    Some(other) => return Err(format!("a string, but the embedded schema's type is {other}")),
                    None => self.decimals,
                };
                match handling {
                    DecimalHandling::String => Ok(None),
                    DecimalHandling::Double => Err("a string, but decimal_handling = \"double\" reads decimals as JSON numbers".into()),
                    DecimalHandling::Precise => {
                        let scale = match schema.and_then(|s| s.pointer("/parameters/scale")) {
                            None => i64::from(column_scale),
                            Some(Value::String(s)) => {
                                s.parse().map_err(|_| format!("the embedded schema's scale {s:?} is not a whole number"))?
                            }
                            Some(other) => {
                                other.as_i64().ok_or_else(|| format!("the embedded schema's scale {other} is not a whole number"))?
                            }
                        };
                        unscaled_text(s, scale).map(Some)
                    }
                }
            }
            _ => Ok(None),
        }
    }
}

fn integer(value: &Value) -> Option<Result<i64, String>> {
    match value {
        Value::Number(n) => Some(n.as_i64().ok_or_else(|| format!("{n} is not a whole number"))),
        _ => None,
    }
}

fn date(value: &Value) -> Result<Option<String>, String> {
    let Some(days) = integer(value).transpose()? else { return Ok(None) };
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch is a date");
    let date = i32::try_from(days).ok().and_then(|d| epoch.checked_add_signed(chrono::Duration::days(d.into())));
    Ok(Some(date.ok_or_else(|| format!("{days} days is out of range"))?.format("%Y-%m-%d").to_string()))
}

/// An integer time or timestamp in microseconds, by its semantic type (milliseconds when
/// none is named: Debezium's `Time`/`Timestamp`, Connect's, and records without a schema).
fn micros(v: i64, semantic: Option<&str>, precision: TimestampPrecision) -> Result<i64, String> {
    match semantic {
        Some("io.debezium.time.MicroTime" | "io.debezium.time.MicroTimestamp") => Ok(v),
        Some("io.debezium.time.NanoTime" | "io.debezium.time.NanoTimestamp") => {
            const NANOS: i64 = 1_000_000_000;
            precision.micros(v.div_euclid(NANOS), v.rem_euclid(NANOS) as u32, &format_args!("{v} ns"))
        }
        _ => v.checked_mul(1000).ok_or_else(|| format!("{v} ms is out of range")),
    }
}

fn time_text(micros: i64) -> Result<String, String> {
    let of_day = (0..MICROS_PER_DAY)
        .contains(&micros)
        .then(|| NaiveTime::from_num_seconds_from_midnight_opt((micros / 1_000_000) as u32, (micros % 1_000_000) as u32 * 1000));
    let t = of_day.flatten().ok_or_else(|| format!("{micros} µs is not a time of day"))?;
    Ok(t.format("%H:%M:%S%.6f").to_string())
}

fn time(value: &Value, semantic: Option<&str>, precision: TimestampPrecision) -> Result<Option<String>, String> {
    if let Some(v) = integer(value).transpose()? {
        return time_text(micros(v, semantic, precision)?).map(Some);
    }
    // `ZonedTime` (`10:15:30.5Z`, `10:15:30+02:00`): the time of day in UTC.
    let Value::String(s) = value else { return Ok(None) };
    let (local, offset) = match s.strip_suffix('Z') {
        Some(local) => (local, 0),
        None => match s.get(8..).and_then(|tail| tail.rfind(['+', '-'])).map(|i| s.split_at(i + 8)) {
            Some((local, offset)) => {
                let offset: FixedOffset = offset.parse().map_err(|_| format!("`{s}`: the zone offset is not ±HH:MM"))?;
                (local, offset.local_minus_utc())
            }
            None => return Ok(None),
        },
    };
    let t = NaiveTime::parse_from_str(local, "%H:%M:%S%.f").map_err(|e| format!("`{s}` is not a time: {e}"))?;
    let (utc, _) = t.overflowing_sub_signed(chrono::Duration::seconds(offset.into()));
    Ok(Some(utc.format("%H:%M:%S%.f").to_string()))
}

fn timestamp(value: &Value, semantic: Option<&str>, zoned: bool, precision: TimestampPrecision) -> Result<Option<String>, String> {
    let instant = match (integer(value).transpose()?, value) {
        (Some(v), _) => {
            let us = micros(v, semantic, precision)?;
            DateTime::from_timestamp_micros(us).ok_or_else(|| format!("{v} is out of the timestamp range"))?
        }
        // A `ZonedTimestamp` into a column without zone: its UTC time.
        (None, Value::String(s)) if !zoned => match DateTime::parse_from_rfc3339(s) {
            Ok(t) => t.to_utc(),
            Err(_) => return Ok(None),
        },
        _ => return Ok(None),
    };
    Ok(Some(if zoned {
        instant.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    } else {
        instant.naive_utc().format("%Y-%m-%dT%H:%M:%S%.f").to_string()
    }))
}

/// Text of the unscaled big-endian two's-complement value in `base64` at `scale`.
fn unscaled_text(base64: &str, scale: i64) -> Result<String, String> {
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(base64).map_err(|e| format!("{base64:?} is not base64 decimal bytes: {e}"))?;
    if bytes.is_empty() || bytes.len() > 16 {
        return Err(format!("{} bytes of unscaled value: a decimal column holds 1 to 16 (38 digits)", bytes.len()));
    }
    let mut be = if bytes[0] & 0x80 != 0 { [0xff; 16] } else { [0; 16] };
    be[16 - bytes.len()..].copy_from_slice(&bytes);
    let unscaled = i128::from_be_bytes(be);
    let scale = i8::try_from(scale).ok().filter(|s| (0..=38).contains(s)).ok_or_else(|| format!("scale {scale} is not 0 to 38"))?;
    if !Decimal128Type::is_valid_decimal_precision(unscaled, 38) {
        return Err(format!("{unscaled} (unscaled) has more than 38 digits"));
    }
    Ok(Decimal128Type::format_decimal(unscaled, 38, scale))
}

/// `text` padded with zeros to `scale` digits after the point; more digits are refused.
fn padded(mut text: String, scale: i8) -> Result<String, String> {
    let scale = scale.max(0) as usize;
    let digits = text.split_once('.').map_or(0, |(_, f)| f.len());
    if digits > scale {
        return Err(format!("{text} has {digits} digits after the point, more than the column's scale {scale}: not rounded"));
    }
    if digits == 0 && scale > 0 {
        text.push('.');
    }
    text.extend(std::iter::repeat_n('0', scale - digits));
    Ok(text)
}
