//! Envelopes of upsert pipelines: what one Kafka record says about one key.
//!
//! - Debezium JSON (with or without the embedded `schema`), or Avro or Protobuf through a schema
//!   registry (read into the same payload, [`avro`], [`protobuf`]): `op` c/r (snapshot read)/u carry
//!   the row in `after`, d the key in `before`; `t` (truncate) empties the table as of its
//!   source position where the pipeline allows it (`allow_truncate`), else is a dead letter; a
//!   Kafka tombstone (null value after a delete) is not a row change. The source position comes
//!   from `source` (`lsn`, `scn`, `file`+`pos`, `ts_ms`). Debezium's representations of dates,
//!   times, timestamps and decimals become the JSON forms the decoder reads, exactly
//!   ([`values`]).
//! - DMS JSON: `data` is the row, `metadata.operation` insert/load/update/delete; control
//!   records change nothing.
//! - CSV: the operation (`I`, `U`, `D`), then the table's columns in schema order, as DMS
//!   writes change files ([`csv`]).
//! - row: the value is the row in the pipeline's format; a null value deletes the record
//!   key's row (the key: a JSON object of the key columns, or one key column's value, or with
//!   a registry a framed Avro or JSON key, read in `super::registry_rows`).

pub(super) mod avro;
mod csv;
pub(super) mod protobuf;
mod values;

use arrow_schema::Schema as ArrowSchema;
use serde_json::{Map, Value};

use crate::model::pipeline::upsert::{DecimalHandling, Envelope, Order, SourceField};
use values::Values;

/// What a change does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

impl Op {
    /// The one-letter code of the CSV envelope and of the changelog's `operation` column.
    pub fn code(self) -> &'static str {
        match self {
            Op::Insert => "I",
            Op::Update => "U",
            Op::Delete => "D",
        }
    }
}

/// One record's change.
#[derive(Debug, PartialEq, Eq)]
pub enum Unwrapped<'a> {
    /// The value is the row itself (`envelope = "row"`).
    Raw(&'a [u8]),
    /// A row image (a JSON object in the decoder's forms).
    Upsert { row: Vec<u8>, op: Op, position: Option<i64> },
    /// A key image (a JSON object holding at least the key columns).
    Delete { image: Vec<u8>, position: Option<i64> },
    /// Every key's row goes, as of this source position (a Debezium truncate).
    Truncate { position: i64 },
    /// No row change: a Kafka tombstone following a Debezium delete, a DMS control record.
    Control,
}

/// Reads one pipeline's envelope.
pub struct Unwrapper {
    envelope: Envelope,
    source_field: Option<SourceField>,
    /// Debezium's representations of the table's columns.
    values: Values,
    single_key: Option<String>,
    allow_truncate: bool,
    /// The CSV envelope's columns.
    csv: csv::CsvColumns,
}

impl Unwrapper {
    pub fn new(envelope: Envelope, order: &Order, table: &ArrowSchema, key: &[String], decimals: DecimalHandling) -> Self {
        let source_field = match order {
            Order::Source(f) => Some(*f),
            _ => None,
        };
        Self {
            envelope,
            source_field,
            values: Values::new(table, decimals),
            single_key: (key.len() == 1).then(|| key[0].clone()),
            allow_truncate: false,
            csv: csv::CsvColumns::of(table),
        }
    }

    /// Read Debezium times and timestamps finer than microseconds as the pipeline's
    /// `timestamp_precision` says (default: refused).
    pub fn with_timestamp_precision(mut self, precision: crate::model::pipeline::TimestampPrecision) -> Self {
        self.values.precision = precision;
        self
    }

    /// Apply Debezium truncates instead of refusing them (`allow_truncate`; needs a source
    /// position to order by).
    pub fn with_truncate(mut self, allow: bool) -> Self {
        self.allow_truncate = allow && self.source_field.is_some();
        self
    }

    /// The change in one record (`key`, `value`: the Kafka record's, `None` when null).
    pub fn unwrap<'a>(&self, key: Option<&[u8]>, value: Option<&'a [u8]>) -> Result<Unwrapped<'a>, String> {
        match self.envelope {
            Envelope::Row => match value {
                Some(v) => Ok(Unwrapped::Raw(v)),
                None => Ok(Unwrapped::Delete { image: self.key_image(key)?, position: None }),
            },
            Envelope::Debezium => match value {
                None => Ok(Unwrapped::Control),
                Some(v) => self.debezium(v),
            },
            Envelope::Dms => match value {
                None => Err("value is absent (null): a DMS record carries `data` and `metadata`".into()),
                Some(v) => self.dms(v),
            },
            Envelope::Csv => match value {
                None => Err("value is absent (null): a CSV change is a line of its operation and row".into()),
                Some(v) => Ok(match self.csv.read(v)? {
                    (Op::Delete, image) => Unwrapped::Delete { image, position: None },
                    (op, row) => Unwrapped::Upsert { row, op, position: None },
                }),
            },
        }
    }

    /// The delete a null value makes of its record key, read already (a registry-framed key).
    pub fn delete_of_key(&self, key: Value) -> Result<Unwrapped<'static>, String> {
        let image = match (key, &self.single_key) {
            (Value::Object(map), _) => Value::Object(map),
            (scalar, Some(column)) => Value::Object(Map::from_iter([(column.clone(), scalar)])),
            (_, None) => return Err("the record key must be a record of the key columns (the key has several columns)".into()),
        };
        Ok(Unwrapped::Delete { image: image.to_string().into_bytes(), position: None })
    }

    fn key_image(&self, key: Option<&[u8]>) -> Result<Vec<u8>, String> {
        let key = key.ok_or("a null value deletes its key's row, but the record has no key")?;
        let parsed = serde_json::from_slice::<Value>(key).ok();
        let image = match (parsed, &self.single_key) {
            (Some(Value::Object(map)), _) => Value::Object(map),
            (Some(scalar), Some(column)) => Value::Object(Map::from_iter([(column.clone(), scalar)])),
            (None, Some(column)) => {
                let text = std::str::from_utf8(key).map_err(|_| "the record key is neither JSON nor UTF-8 text")?;
                Value::Object(Map::from_iter([(column.clone(), Value::String(text.to_string()))]))
            }
            (_, None) => return Err("the record key must be a JSON object of the key columns (the key has several columns)".into()),
        };
        Ok(image.to_string().into_bytes())
    }

    fn debezium<'a>(&self, value: &[u8]) -> Result<Unwrapped<'a>, String> {
        let doc: Value = serde_json::from_slice(value).map_err(|e| format!("Debezium record is not JSON: {e}"))?;
        // With the JSON converter's schemas enabled the change is under `payload`.
        match (doc.get("payload"), doc.get("schema")) {
            (Some(p), Some(s)) if p.is_object() => self.debezium_payload(p, Some(s)),
            _ => self.debezium_payload(&doc, None),
        }
    }

    /// A Debezium Avro or Protobuf record (`payload`: its value, the registry frame removed)
    /// read with its writer's envelope. (A null value, the Kafka tombstone after a delete, goes
    /// through [`Self::unwrap`].)
    pub fn debezium_framed<'a>(
        &self,
        envelope: &super::registry_envelopes::WriterEnvelope,
        payload: &[u8],
    ) -> Result<Unwrapped<'a>, String> {
        let (payload, connect) = envelope.payload(payload, self.values.precision)?;
        self.debezium_payload(&payload, Some(connect))
    }

    /// One change from its payload (`before`, `after`, `op`, `source`) and, when the record
    /// brings one, its Connect schema.
    fn debezium_payload<'a>(&self, payload: &Value, schema: Option<&Value>) -> Result<Unwrapped<'a>, String> {
        let op = payload.get("op").and_then(Value::as_str).ok_or("Debezium record has no `op`")?;
        let image = |side: &str| -> Result<Vec<u8>, String> {
            let row = payload.get(side).and_then(Value::as_object).ok_or_else(|| format!("Debezium op {op:?} has no `{side}` object"))?;
            Ok(Value::Object(self.values.normalize(row.clone(), &declared(schema, side))?).to_string().into_bytes())
        };
        let position = || self.debezium_position(payload.get("source"));
        Ok(match op {
            "c" | "r" => Unwrapped::Upsert { row: image("after")?, op: Op::Insert, position: position()? },
            "u" => Unwrapped::Upsert { row: image("after")?, op: Op::Update, position: position()? },
            "d" => Unwrapped::Delete { image: image("before")?, position: position()? },
            "t" if self.allow_truncate => {
                let position = position()?.ok_or("Debezium truncate without a source position")?;
                Unwrapped::Truncate { position }
            }
            "t" => return Err("Debezium op \"t\" (truncate) is not applied: the pipeline does not set allow_truncate = true".into()),
            "m" => Unwrapped::Control,
            other => return Err(format!("Debezium op {other:?} is not one of c, r, u, d, t, m")),
        })
    }

    fn debezium_position(&self, source: Option<&Value>) -> Result<Option<i64>, String> {
        let Some(field) = self.source_field else { return Ok(None) };
        let source = source.ok_or("Debezium record has no `source`")?;
        let get = |name: &str| source.get(name).filter(|v| !v.is_null()).ok_or_else(|| format!("source.{name} is missing (order_by)"));
        let number = |name: &str| -> Result<i64, String> {
            match get(name)? {
                Value::Number(n) => n.as_i64().ok_or_else(|| format!("source.{name} = {n} is not a whole number in the long range")),
                Value::String(s) => s.parse::<i64>().map_err(|_| format!("source.{name} = {s:?} is not a whole number in the long range")),
                other => Err(format!("source.{name} = {other} is not a number")),
            }
        };
        Ok(Some(match field {
            SourceField::Lsn => number("lsn")?,
            SourceField::Scn => number("scn")?,
            SourceField::TsMs => number("ts_ms")?,
            SourceField::BinlogPos => {
                let file = get("file")?.as_str().ok_or("source.file is not a string")?;
                binlog_position(file, number("pos")?)?
            }
            SourceField::DmsTimestamp => return Err("metadata.timestamp is a DMS field".into()),
        }))
    }

    fn dms<'a>(&self, value: &[u8]) -> Result<Unwrapped<'a>, String> {
        let doc: Value = serde_json::from_slice(value).map_err(|e| format!("DMS record is not JSON: {e}"))?;
        let metadata = doc.get("metadata").ok_or("DMS record has no `metadata`")?;
        if metadata.get("record-type").and_then(Value::as_str) == Some("control") {
            return Ok(Unwrapped::Control);
        }
        let data = doc.get("data").and_then(Value::as_object).ok_or("DMS record has no `data` object")?;
        let op = match metadata.get("operation").and_then(Value::as_str) {
            Some("insert" | "load") => Op::Insert,
            Some("update") => Op::Update,
            Some("delete") => Op::Delete,
            other => return Err(format!("metadata.operation {other:?} is not one of insert, update, delete, load")),
        };
        let row = Value::Object(data.clone()).to_string().into_bytes();
        let position = match self.source_field {
            Some(SourceField::DmsTimestamp) => {
                let text = metadata.get("timestamp").and_then(Value::as_str).ok_or("metadata.timestamp is missing (order_by)")?;
                Some(timestamp(text)?)
            }
            _ => None,
        };
        Ok(match op {
            Op::Delete => Unwrapped::Delete { image: row, position },
            op => Unwrapped::Upsert { row, op, position },
        })
    }
}

/// ISO-8601 with an offset (converted to UTC), or without one (taken as UTC, as DMS writes it).
fn timestamp(text: &str) -> Result<i64, String> {
    use chrono::{DateTime, NaiveDateTime, Utc};
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc).timestamp_micros());
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, fmt) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    Err(format!("metadata.timestamp {text:?} is not an ISO-8601 timestamp"))
}

/// The fields of `side` in an embedded Debezium schema, by name.
fn declared(schema: Option<&Value>, side: &str) -> Map<String, Value> {
    let fields = schema.and_then(|s| s.get("fields")).and_then(Value::as_array);
    let Some(struct_) = fields.and_then(|f| f.iter().find(|f| f.get("field").and_then(Value::as_str) == Some(side))) else {
        return Map::new();
    };
    let inner = struct_.get("fields").and_then(Value::as_array).cloned().unwrap_or_default();
    inner.into_iter().filter_map(|f| Some((f.get("field")?.as_str()?.to_string(), f))).collect()
}

/// MySQL binlog order: the file's sequence number (its numeric suffix), then the position in
/// it (binlog files stay under 4 GiB, so 32 bits hold it).
fn binlog_position(file: &str, pos: i64) -> Result<i64, String> {
    let digits: String = file.chars().rev().take_while(char::is_ascii_digit).collect::<Vec<_>>().into_iter().rev().collect();
    let sequence: i64 = digits.parse().map_err(|_| format!("source.file {file:?} has no numeric suffix"))?;
    if !(0..1 << 32).contains(&pos) || !(0..1 << 31).contains(&sequence) {
        return Err(format!("source.file {file:?} / pos {pos} is out of range"));
    }
    Ok(sequence << 32 | pos)
}

#[cfg(test)]
mod tests;
