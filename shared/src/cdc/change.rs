//! One CDC change and its two wire formats: the reference's CSV line
//! `operation,account_id,balance,last_updated,seq` and the JSON the AWS DMS Kafka target emits
//! (`{"data":{..},"metadata":{"operation":"insert|update|delete|load",..}}`).
//!
//! Balances are integer cents from the wire to the table: a fractional or float balance is an
//! error (the record goes to the dead-letter table), never rounded.

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};
use serde_json::Value;

use crate::model::config::CdcFormat;
use crate::base::error::Result;

/// What a change does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

impl Op {
    /// The one-letter code of the CSV format and of the changelog's `operation` column.
    pub fn code(self) -> &'static str {
        match self {
            Op::Insert => "I",
            Op::Update => "U",
            Op::Delete => "D",
        }
    }
}

/// One change of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub op: Op,
    pub account_id: i64,
    /// Integer cents; absent only on deletes.
    pub balance_cents: Option<i64>,
    pub last_updated_us: i64,
    /// Monotonic source sequence: orders changes of a key.
    pub seq: i64,
}

/// What a record value held: a change, or a control record (DMS DDL/heartbeats) that changes
/// no row and is not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Change(Change),
    Control,
}

impl Change {
    /// The CSV line (no newline).
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{}",
            self.op.code(),
            self.account_id,
            self.balance_cents.map(|b| b.to_string()).unwrap_or_default(),
            format_time(self.last_updated_us),
            self.seq
        )
    }

    /// The DMS Kafka-target JSON, with the ordering column named `order_column`.
    pub fn to_dms_json(&self, order_column: &str) -> String {
        let operation = match self.op {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        };
        let mut data = serde_json::Map::new();
        data.insert("account_id".into(), self.account_id.into());
        data.insert("balance".into(), self.balance_cents.map(Value::from).unwrap_or(Value::Null));
        data.insert("last_updated".into(), format_time(self.last_updated_us).into());
        data.insert(order_column.into(), self.seq.into());
        serde_json::json!({
            "data": data,
            "metadata": {
                "timestamp": format_time(self.last_updated_us),
                "record-type": "data",
                "operation": operation,
                "partition-key-type": "primary-key",
                "schema-name": "bank",
                "table-name": "accounts",
            }
        })
        .to_string()
    }

    /// The Kafka key producers use when keyed: the account id.
    pub fn key(&self) -> String {
        self.account_id.to_string()
    }
}

fn format_time(us: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| us.to_string())
}

/// Decode one record value in `format`. The error names what was wrong.
pub fn decode(format: CdcFormat, order_column: &str, value: &[u8]) -> std::result::Result<Decoded, String> {
    match format {
        CdcFormat::Csv => decode_csv(value).map(Decoded::Change),
        CdcFormat::Dms => decode_dms(value, order_column),
    }
}

fn decode_csv(value: &[u8]) -> std::result::Result<Change, String> {
    let line = std::str::from_utf8(value).map_err(|e| format!("CSV line is not UTF-8: {e}"))?;
    let line = line.trim_end_matches(['\r', '\n']);
    let fields: Vec<&str> = line.split(',').collect();
    if fields.len() != 5 {
        return Err(format!(
            "CSV line has {} fields, expected 5 (operation,account_id,balance,last_updated,seq): {line:?}",
            fields.len()
        ));
    }
    let op = match fields[0].trim() {
        "I" => Op::Insert,
        "U" => Op::Update,
        "D" => Op::Delete,
        other => return Err(format!("operation {other:?} is not one of I, U, D")),
    };
    let account_id = whole(fields[1].trim(), "account_id")?;
    let balance = fields[2].trim();
    let balance_cents = if balance.is_empty() { None } else { Some(whole(balance, "balance")?) };
    let last_updated_us = timestamp(fields[3].trim())?;
    let seq = whole(fields[4].trim(), "seq")?;
    checked(Change { op, account_id, balance_cents, last_updated_us, seq })
}

fn decode_dms(value: &[u8], order_column: &str) -> std::result::Result<Decoded, String> {
    let doc: Value = serde_json::from_slice(value).map_err(|e| format!("DMS record is not JSON: {e}"))?;
    let metadata = doc.get("metadata").ok_or("DMS record has no `metadata`")?;
    if metadata.get("record-type").and_then(Value::as_str) == Some("control") {
        return Ok(Decoded::Control);
    }
    let op = match metadata.get("operation").and_then(Value::as_str) {
        Some("insert" | "load") => Op::Insert,
        Some("update") => Op::Update,
        Some("delete") => Op::Delete,
        other => return Err(format!("metadata.operation {other:?} is not one of insert, update, delete, load")),
    };
    let data = doc.get("data").and_then(Value::as_object).ok_or("DMS record has no `data` object")?;
    let field = |name: &str| data.get(name).filter(|v| !v.is_null());
    let number = |name: &str| -> std::result::Result<i64, String> {
        match field(name) {
            None => Err(format!("data.{name} is missing")),
            Some(Value::Number(n)) => n.as_i64().map_or_else(|| whole(&n.to_string(), &format!("data.{name}")), Ok),
            Some(Value::String(s)) => whole(s, &format!("data.{name}")),
            Some(other) => Err(format!("data.{name} = {other} is not a whole number")),
        }
    };
    let account_id = number("account_id")?;
    let balance_cents = match (op, field("balance")) {
        (Op::Delete, None) => None,
        _ => Some(number("balance")?),
    };
    let last_updated_us = match field("last_updated") {
        Some(Value::String(s)) => timestamp(s)?,
        Some(other) => return Err(format!("data.last_updated = {other} is not a timestamp string")),
        None => return Err("data.last_updated is missing".to_string()),
    };
    let seq = number(order_column)?;
    checked(Change { op, account_id, balance_cents, last_updated_us, seq }).map(Decoded::Change)
}

fn checked(change: Change) -> std::result::Result<Change, String> {
    if change.op != Op::Delete && change.balance_cents.is_none() {
        return Err(format!("{} of account {} has no balance", change.op.code(), change.account_id));
    }
    Ok(change)
}

fn whole(text: &str, what: &str) -> std::result::Result<i64, String> {
    text.parse::<i64>().map_err(|_| {
        if text.contains('.') || text.contains('e') || text.contains('E') {
            format!("{what} {text:?} is not whole: balances are integer cents, never fractions")
        } else {
            format!("{what} {text:?} is not a whole number")
        }
    })
}

/// ISO-8601 with an offset (converted to UTC), or without one (taken as UTC, as DMS writes it).
pub(crate) fn timestamp(text: &str) -> std::result::Result<i64, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc).timestamp_micros());
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, fmt) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    Err(format!("last_updated {text:?} is not an ISO-8601 timestamp"))
}

/// Column builders for the changelog schema (`tables::accounts_changelog`).
#[derive(Default)]
pub struct ChangelogBuilder {
    operation: StringBuilder,
    account_id: Int64Builder,
    balance: Int64Builder,
    last_updated: TimestampMicrosecondBuilder,
    seq: Int64Builder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
}

impl ChangelogBuilder {
    pub fn append(&mut self, change: &Change, topic: &str, partition: i32, offset: i64) {
        self.operation.append_value(change.op.code());
        self.account_id.append_value(change.account_id);
        self.balance.append_option(change.balance_cents);
        self.last_updated.append_value(change.last_updated_us);
        self.seq.append_value(change.seq);
        self.topic.append_value(topic);
        self.partition.append_value(partition);
        self.offset.append_value(offset);
    }

    pub fn finish(mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.operation.finish()),
            Arc::new(self.account_id.finish()),
            Arc::new(self.balance.finish()),
            Arc::new(self.last_updated.finish().with_timezone("+00:00")),
            Arc::new(self.seq.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(op: Op, balance: Option<i64>) -> Change {
        Change { op, account_id: 42, balance_cents: balance, last_updated_us: 1_764_496_800_123_456, seq: 7 }
    }

    #[test]
    fn csv_and_dms_round_trip() {
        for c in [change(Op::Insert, Some(10_050)), change(Op::Update, Some(-3)), change(Op::Delete, None)] {
            assert_eq!(decode(CdcFormat::Csv, "seq", c.to_csv().as_bytes()), Ok(Decoded::Change(c.clone())));
            let json = c.to_dms_json("scn");
            assert_eq!(decode(CdcFormat::Dms, "scn", json.as_bytes()), Ok(Decoded::Change(c.clone())));
        }
    }

    #[test]
    fn bad_values_name_what_is_wrong() {
        let err = |v: &str| decode(CdcFormat::Csv, "seq", v.as_bytes()).unwrap_err();
        assert!(err("X,1,2,2026-11-30T10:00:00Z,3").contains("operation \"X\""));
        assert!(err("I,1,12.50,2026-11-30T10:00:00Z,3").contains("integer cents"));
        assert!(err("I,1,,2026-11-30T10:00:00Z,3").contains("no balance"));
        assert!(err("I,1,2,yesterday,3").contains("ISO-8601"));
        assert!(err("I,1,2").contains("3 fields"));
        assert!(err("operation,account_id,balance,last_updated,seq").contains("operation \"operation\""));
        let dms = |v: &str| decode(CdcFormat::Dms, "seq", v.as_bytes());
        let float = r#"{"data":{"account_id":1,"balance":12.5,"last_updated":"2026-11-30 10:00:00","seq":1},"metadata":{"operation":"update"}}"#;
        assert!(dms(float).unwrap_err().contains("data.balance"));
        let no_seq = r#"{"data":{"account_id":1,"balance":1,"last_updated":"2026-11-30 10:00:00"},"metadata":{"operation":"insert"}}"#;
        assert!(dms(no_seq).unwrap_err().contains("data.seq is missing"));
        assert!(dms("{").unwrap_err().contains("not JSON"));
        let control = r#"{"data":{},"metadata":{"record-type":"control","operation":"create-table"}}"#;
        assert_eq!(dms(control), Ok(Decoded::Control));
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(timestamp("2026-11-30T11:00:00+01:00"), timestamp("2026-11-30T10:00:00Z"));
        assert_eq!(timestamp("2026-11-30 10:00:00"), timestamp("2026-11-30T10:00:00Z"));
    }
}
