//! JSON values (one object per record) into columns. The plan comes from the JSON Schema's
//! types: a `date-time` column takes an RFC 3339 string or integer epoch milliseconds.

use arrow_schema::{DataType, Fields};
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::column::Col;
use super::json_number as number;
use super::{DecodeError, element_type, millis_to_micros, source_field, uuid_bytes};
use crate::model::pipeline::TimestampPrecision;
use crate::model::schema::json_schema::JsonSchema;
use crate::model::schema::{Prim, Ty, join};

pub(crate) struct JsonReader {
    /// A `Plan::Object` of the target's columns.
    row: Plan,
    /// Timestamps and times finer than microseconds.
    precision: TimestampPrecision,
}

/// How one JSON value lands in its column.
enum Plan {
    Prim(Prim),
    /// A string column whose schema lists the allowed values (`enum`).
    Enum(Vec<String>),
    /// Per target child: the property it comes from; whether a property no child takes is an
    /// error (`unknown_fields = "dead_letter"`) rather than skipped.
    Object(Vec<Option<(String, Plan)>>, bool),
    List(Box<Plan>),
    Map(Box<Plan>),
}

impl JsonReader {
    pub fn new(schema: &JsonSchema, target: &Fields, precision: TimestampPrecision) -> Self {
        JsonReader { row: Plan::Object(object_plan(schema, &schema.fields, target, ""), schema.reject_unknown), precision }
    }

    pub fn append(&self, value: &[u8], row: &mut Col) -> Result<(), DecodeError> {
        let before = row.len();
        let mut value = std::borrow::Cow::Borrowed(value);
        loop {
            let mut error = None;
            let mut json = serde_json::Deserializer::from_slice(&value);
            let parsed = Put { plan: &self.row, col: &mut *row, error: &mut error, precision: self.precision }
                .deserialize(&mut json)
                .and_then(|()| json.end());
            return match (parsed, error) {
                // An integer column met a number with a fraction or exponent: its text decides.
                (Err(at), Some(e)) if e.message == number::REREAD => match number::as_integer(&value, &at) {
                    Ok(plain) => {
                        row.truncate(before);
                        value = std::borrow::Cow::Owned(plain);
                        continue;
                    }
                    Err(message) => Err(DecodeError { message, ..e }),
                },
                (_, Some(e)) => Err(e),
                (Err(e), None) => Err(DecodeError::new(format!("invalid JSON: {e}"))),
                (Ok(()), None) => Ok(()),
            };
        }
    }
}

/// `path`: the fields' parent, as the schema's `enums` name it.
fn object_plan(schema: &JsonSchema, fields: &[crate::model::schema::Field], target: &Fields, path: &str) -> Vec<Option<(String, Plan)>> {
    target
        .iter()
        .map(|column| source_field(fields, column).map(|f| (f.name.clone(), plan(schema, &f.ty, column.data_type(), &join(path, &f.name)))))
        .collect()
}

/// The plan for `ty` at `path` into a column of type `target` (the pair was checked to fit).
fn plan(schema: &JsonSchema, ty: &Ty, target: &DataType, path: &str) -> Plan {
    match (ty, target) {
        (Ty::Struct(fields), DataType::Struct(columns)) => Plan::Object(object_plan(schema, fields, columns, path), schema.reject_unknown),
        (Ty::List(element), _) => Plan::List(Box::new(plan(schema, &element.ty, &element_type(target, 0), &join(path, "element")))),
        (Ty::Map(_, value), _) => Plan::Map(Box::new(plan(schema, &value.ty, &element_type(target, 1), &join(path, "value")))),
        (Ty::Prim(Prim::String), _) => match schema.enums.get(path) {
            Some(values) => Plan::Enum(values.clone()),
            None => Plan::Prim(Prim::String),
        },
        (Ty::Prim(p), _) => Plan::Prim(*p),
        (Ty::Struct(_), _) => Plan::Object(Vec::new(), false),
    }
}

/// One value into one column, streamed: serde_json hands each token to the plan's visitor, so
/// no `serde_json::Value` tree is built per record. The first [`DecodeError`] is parked in
/// `error` (serde's error type cannot carry it) and gains its path on the way up.
struct Put<'p, 'c> {
    plan: &'p Plan,
    col: &'c mut Col,
    error: &'c mut Option<DecodeError>,
    precision: TimestampPrecision,
}

impl<'p, 'c> Put<'p, 'c> {
    fn fail<E: serde::de::Error>(self, e: DecodeError) -> Result<(), E> {
        *self.error = Some(e);
        Err(E::custom("invalid value"))
    }

    fn done<E: serde::de::Error>(self, pushed: Result<(), DecodeError>) -> Result<(), E> {
        match pushed {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e),
        }
    }

    fn expected<E: serde::de::Error>(self, got: &str) -> Result<(), E> {
        let what = match self.plan {
            Plan::Object(..) | Plan::Map(_) => "object",
            Plan::List(_) => "array",
            Plan::Prim(Prim::Boolean) => "boolean",
            Plan::Prim(Prim::Long | Prim::Int) => "integer",
            Plan::Prim(Prim::Double) => "number",
            Plan::Prim(Prim::Timestamptz) => "an RFC 3339 string or epoch milliseconds",
            Plan::Prim(Prim::Date) => "a date string (YYYY-MM-DD)",
            Plan::Prim(Prim::Uuid) => "a UUID string",
            Plan::Prim(Prim::Decimal { .. }) => "a decimal string",
            Plan::Prim(Prim::Time) => "a time string (HH:MM:SS[.ffffff])",
            Plan::Enum(_) => "one of the enum's strings",
            Plan::Prim(Prim::Timestamp) => "a timestamp string without zone (YYYY-MM-DDTHH:MM:SS[.ffffff])",
            Plan::Prim(_) => "string",
        };
        self.fail(DecodeError::new(format!("expected {what}, got {got}")))
    }
}

/// Adds `segment` to the parked error's path (a child failed under it).
fn under(error: &mut Option<DecodeError>, segment: impl Into<String>) {
    if let Some(e) = error.take() {
        *error = Some(e.at(segment));
    }
}

impl<'de> DeserializeSeed<'de> for Put<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Put<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a value of the schema's type")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        let pushed = self.col.push_missing();
        self.done(pushed)
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<(), E> {
        match self.plan {
            Plan::Prim(Prim::Boolean) => {
                let pushed = self.col.push_bool(b);
                self.done(pushed)
            }
            _ => self.expected("boolean"),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        let pushed = match self.plan {
            Plan::Prim(Prim::Long) => self.col.push_i64(v),
            Plan::Prim(Prim::Int) => match i32::try_from(v) {
                Ok(v) => self.col.push_i32(v),
                Err(_) => Err(DecodeError::new(format!("expected an integer in the int range, got {v}"))),
            },
            Plan::Prim(Prim::Double) => self.col.push_f64(v as f64),
            Plan::Prim(Prim::Timestamptz) => millis_to_micros(v).and_then(|us| self.col.push_i64(us)),
            _ => return self.expected("number"),
        };
        self.done(pushed)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) if matches!(self.plan, Plan::Prim(Prim::Double)) => {
                let pushed = self.col.push_f64(v as f64);
                self.done(pushed)
            }
            Err(_) => self.fail(DecodeError::new(format!("{v} exceeds the long range"))),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        match self.plan {
            Plan::Prim(Prim::Double) => {
                let pushed = self.col.push_f64(v);
                self.done(pushed)
            }
            // JSON Schema counts 42.0 (and 4.2e1) as an integer. The double serde read may not be
            // the text's value (2^64 reads as 18446744073709551616.0, 1.0000000000000000001 as
            // 1.0): the record is read again with the text's own digits (`number`).
            Plan::Prim(Prim::Long | Prim::Int | Prim::Timestamptz) => self.fail(DecodeError::new(number::REREAD)),
            _ => self.expected("number"),
        }
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        let pushed = match self.plan {
            Plan::Prim(Prim::String) => self.col.push_bytes(s.as_bytes()),
            Plan::Enum(values) if values.iter().any(|v| v == s) => self.col.push_bytes(s.as_bytes()),
            Plan::Enum(values) => Err(DecodeError::new(format!(
                "{:?} is not one of the enum's values ({})",
                s.chars().take(40).collect::<String>(),
                values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")
            ))),
            Plan::Prim(Prim::Uuid) => uuid_bytes(s).and_then(|u| self.col.push_fixed(&u)),
            Plan::Prim(Prim::Date) => parse_date(s).and_then(|d| self.col.push_i32(d)),
            Plan::Prim(Prim::Timestamptz) => parse_timestamp(s, self.precision).and_then(|t| self.col.push_i64(t)),
            Plan::Prim(Prim::Timestamp) => parse_local_timestamp(s, self.precision).and_then(|t| self.col.push_i64(t)),
            Plan::Prim(Prim::Time) => parse_time(s, self.precision).and_then(|t| self.col.push_i64(t)),
            Plan::Prim(Prim::Decimal { precision, scale }) => decimal(s, *precision, *scale).and_then(|d| self.col.push_decimal(d)),
            _ => return self.expected("string"),
        };
        self.done(pushed)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Plan::List(element) = self.plan else { return self.expected("array") };
        let child = match self.col.element() {
            Ok(child) => child,
            Err(e) => return self.fail(e),
        };
        let mut i = 0;
        loop {
            let item = Put { plan: element, col: &mut *child, error: &mut *self.error, precision: self.precision };
            match seq.next_element_seed(item) {
                Ok(Some(())) => i += 1,
                Ok(None) => break,
                Err(e) => {
                    under(self.error, format!("[{i}]"));
                    return Err(e);
                }
            }
        }
        self.col.close_row();
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        match self.plan {
            Plan::Object(children, strict) => {
                let columns = match self.col.children() {
                    Ok(columns) => columns,
                    Err(e) => return self.fail(e),
                };
                // Small objects track seen keys on the stack, no allocation per record.
                let (mut on_stack, mut on_heap) = ([false; 32], Vec::new());
                let seen: &mut [bool] = if children.len() <= on_stack.len() {
                    &mut on_stack[..children.len()]
                } else {
                    on_heap.resize(children.len(), false);
                    &mut on_heap
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let Some(i) = children.iter().position(|c| c.as_ref().is_some_and(|(name, _)| *name == key)) else {
                        if *strict {
                            *self.error =
                                Some(DecodeError::new("not a field of the schema (unknown_fields = \"dead_letter\")").at(key.as_ref()));
                            return Err(A::Error::custom("unknown field"));
                        }
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    if std::mem::replace(&mut seen[i], true) {
                        *self.error = Some(DecodeError::new("the key appears twice").at(key.as_ref()));
                        return Err(A::Error::custom("duplicate key"));
                    }
                    let plan = &children[i].as_ref().expect("position found a planned child").1;
                    if let Err(e) =
                        map.next_value_seed(Put { plan, col: &mut columns[i], error: &mut *self.error, precision: self.precision })
                    {
                        under(self.error, key.as_ref());
                        return Err(e);
                    }
                }
                for (i, column) in columns.iter_mut().enumerate() {
                    if !seen[i]
                        && let Err(e) = column.push_missing()
                    {
                        *self.error = Some(e.at(column.name()));
                        return Err(A::Error::custom("missing"));
                    }
                }
            }
            Plan::Map(value_plan) => {
                let (keys, values) = match self.col.entries() {
                    Ok(parts) => parts,
                    Err(e) => return self.fail(e),
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if let Err(e) = keys.push_bytes(key.as_bytes()) {
                        *self.error = Some(e);
                        return Err(A::Error::custom("key"));
                    }
                    if let Err(e) =
                        map.next_value_seed(Put { plan: value_plan, col: &mut *values, error: &mut *self.error, precision: self.precision })
                    {
                        under(self.error, key.as_ref());
                        return Err(e);
                    }
                }
            }
            _ => return self.expected("object"),
        }
        self.col.close_row();
        Ok(())
    }
}

fn parse_date(s: &str) -> Result<i32, DecodeError> {
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|e| DecodeError::new(format!("expected a date (YYYY-MM-DD), got `{s}`: {e}")))?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("1970-01-01 is a date");
    i32::try_from((date - epoch).num_days()).map_err(|_| DecodeError::new(format!("date `{s}` out of range")))
}

/// Microseconds from seconds and nanoseconds: what a microsecond column cannot hold exactly is
/// refused or truncated, as `precision` says.
fn micros(seconds: i64, nanos: u32, s: &str, precision: TimestampPrecision) -> Result<i64, DecodeError> {
    precision.micros(seconds, nanos, &format_args!("`{}`", s.chars().take(40).collect::<String>())).map_err(DecodeError::new)
}

/// An Iceberg `time`: `HH:MM:SS[.ffffff]`, microseconds since midnight.
fn parse_time(s: &str, precision: TimestampPrecision) -> Result<i64, DecodeError> {
    let t = chrono::NaiveTime::parse_from_str(s, "%H:%M:%S%.f")
        .map_err(|e| DecodeError::new(format!("expected a time (HH:MM:SS[.ffffff]), got `{s}`: {e}")))?;
    use chrono::Timelike;
    micros(i64::from(t.num_seconds_from_midnight()), t.nanosecond(), s, precision)
}

/// An Iceberg `timestamp` (no zone): `YYYY-MM-DDTHH:MM:SS[.ffffff]`.
fn parse_local_timestamp(s: &str, precision: TimestampPrecision) -> Result<i64, DecodeError> {
    let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .map_err(|e| {
            DecodeError::new(format!(
                "expected a timestamp without zone (YYYY-MM-DDTHH:MM:SS[.ffffff]), got `{}`: {e}",
                s.chars().take(40).collect::<String>()
            ))
        })?
        .and_utc();
    micros(t.timestamp(), t.timestamp_subsec_nanos(), s, precision)
}

/// A decimal's unscaled value from its text (`-123.45`): the scale (digits after the point)
/// must be the column's and the digits must fit its precision; nothing is rounded.
fn decimal(s: &str, precision: u32, scale: u32) -> Result<i128, DecodeError> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let plain = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !plain(whole) || !plain(fraction) || (digits.contains('.') && fraction.is_empty()) {
        return Err(DecodeError::new(format!(
            "expected a decimal (digits, an optional point and digits), got `{}`",
            s.chars().take(40).collect::<String>()
        )));
    }
    let column = format!("decimal({precision},{scale})");
    if fraction.len() != scale as usize {
        return Err(DecodeError::new(format!("{s} has scale {}, the column is {column}: not rescaled", fraction.len())));
    }
    let (p, sc) = (u8::try_from(precision).unwrap_or(u8::MAX), i8::try_from(scale).unwrap_or(i8::MAX));
    arrow_cast::parse::parse_decimal::<arrow_array::types::Decimal128Type>(s, p, sc)
        .map_err(|_| DecodeError::new(format!("{s} does not fit the column's {column}")))
}

fn parse_timestamp(s: &str, precision: TimestampPrecision) -> Result<i64, DecodeError> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map_err(|e| DecodeError::new(format!("expected an RFC 3339 timestamp, got `{}`: {e}", s.chars().take(40).collect::<String>())))?;
    micros(t.timestamp(), t.timestamp_subsec_nanos(), s, precision)
}
