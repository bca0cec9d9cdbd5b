//! The CSV envelope: one change per line, as AWS DMS writes change files — the operation
//! (`I`, `U`, `D`), then the table's columns in schema order. A line becomes the JSON row the
//! decoder reads: an empty field is null, a field of a numeric or boolean column is written as
//! its text (the decoder judges it, exactly: `12.50` in a long column is refused, not rounded),
//! any other field as a string. Fields may be double-quoted (`""` inside is one quote), so a
//! value may hold commas.

use arrow_schema::{DataType, Schema as ArrowSchema};
use serde_json::Value;

use super::Op;
use crate::model::tables::is_written_by_icestream;

/// How one column's field is written into the JSON row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Number,
    Boolean,
    Text,
}

/// The columns a line carries after its operation, in order.
#[derive(Debug, Clone)]
pub(super) struct CsvColumns(Vec<(String, Kind)>);

impl CsvColumns {
    /// The table's columns (not icestream's lineage and source position), in schema order.
    pub(super) fn of(table: &ArrowSchema) -> Self {
        let kind = |t: &DataType| match t {
            t if t.is_numeric() => Kind::Number,
            DataType::Boolean => Kind::Boolean,
            _ => Kind::Text,
        };
        Self(
            table.fields().iter().filter(|f| !is_written_by_icestream(f.name())).map(|f| (f.name().clone(), kind(f.data_type()))).collect(),
        )
    }

    fn names(&self) -> String {
        self.0.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(",")
    }

    /// The operation code and the JSON row of one line.
    pub(super) fn read(&self, value: &[u8]) -> Result<(Op, Vec<u8>), String> {
        let line = std::str::from_utf8(value).map_err(|e| format!("CSV line is not UTF-8: {e}"))?;
        let fields = split(line.trim_end_matches(['\r', '\n']))?;
        if fields.len() != self.0.len() + 1 {
            return Err(format!(
                "CSV line has {} fields, expected {} (operation,{}): {line:?}",
                fields.len(),
                self.0.len() + 1,
                self.names()
            ));
        }
        let op = match fields[0].trim() {
            "I" => Op::Insert,
            "U" => Op::Update,
            "D" => Op::Delete,
            other => return Err(format!("operation {other:?} is not one of I, U, D")),
        };
        // Written as text, not through `Value`: a number keeps its digits as the line has them.
        let mut row = String::from("{");
        for ((name, kind), text) in self.0.iter().zip(&fields[1..]) {
            let value = match (kind, text.as_str()) {
                (_, "") => "null".to_string(),
                (Kind::Number, t) if is_number(t) => t.to_string(),
                (Kind::Number, t) => return Err(format!("field `{name}`: {t:?} is not a number")),
                (Kind::Boolean, "true" | "TRUE" | "t" | "1") => "true".to_string(),
                (Kind::Boolean, "false" | "FALSE" | "f" | "0") => "false".to_string(),
                (Kind::Boolean, t) => return Err(format!("field `{name}`: {t:?} is not a boolean")),
                (Kind::Text, t) => Value::String(t.to_string()).to_string(),
            };
            if row.len() > 1 {
                row.push(',');
            }
            row.push_str(&Value::String(name.clone()).to_string());
            row.push(':');
            row.push_str(&value);
        }
        row.push('}');
        Ok((op, row.into_bytes()))
    }
}

/// Whether `text` is a JSON number (its grammar: no leading `+`, no `.5`, no `NaN`, no spaces).
fn is_number(text: &str) -> bool {
    text.trim() == text && serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_number())
}

/// The fields of one line: split at commas outside double quotes.
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        let field = fields.last_mut().expect("one field at least");
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => {
                quoted = false;
                if chars.peek().is_some_and(|n| *n != ',') {
                    return Err(format!("CSV line has text after a closing quote: {line:?}"));
                }
            }
            (',', false) => fields.push(String::new()),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err(format!("CSV line has an unclosed quote: {line:?}"));
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use arrow_schema::{Field, TimeUnit};

    use super::*;

    fn accounts() -> CsvColumns {
        CsvColumns::of(&ArrowSchema::new(vec![
            Field::new("account_id", DataType::Int64, false),
            Field::new("balance", DataType::Int64, true),
            Field::new("last_updated", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
            Field::new("seq", DataType::Int64, false),
            Field::new("kafka_offset", DataType::Int64, false),
        ]))
    }

    #[test]
    fn a_line_is_its_operation_and_the_row_in_schema_order() {
        let (op, row) = accounts().read(b"U,42,-3,2026-11-30T10:00:00Z,7\r\n").unwrap();
        assert_eq!(op, Op::Update);
        assert_eq!(String::from_utf8(row).unwrap(), r#"{"account_id":42,"balance":-3,"last_updated":"2026-11-30T10:00:00Z","seq":7}"#);
        let (op, row) = accounts().read(b"D,42,,2026-11-30T10:00:00Z,8").unwrap();
        assert_eq!((op, serde_json::from_slice::<Value>(&row).unwrap()["balance"].clone()), (Op::Delete, Value::Null));
        // Digits are kept as written: the decoder refuses a fraction in a long column.
        let (_, row) = accounts().read(b"I,1,12.50,2026-11-30T10:00:00Z,3").unwrap();
        assert!(String::from_utf8(row).unwrap().contains(r#""balance":12.50"#));
    }

    #[test]
    fn quoted_fields_hold_commas_and_quotes() {
        assert_eq!(split(r#"I,"a,b","say ""hi""",,x"#).unwrap(), ["I", "a,b", r#"say "hi""#, "", "x"]);
        assert!(split(r#"I,"open"#).unwrap_err().contains("unclosed quote"));
        assert!(split(r#"I,"a"b"#).unwrap_err().contains("after a closing quote"));
    }

    #[test]
    fn bad_lines_name_what_is_wrong() {
        let err = |v: &str| accounts().read(v.as_bytes()).unwrap_err();
        assert!(err("X,1,2,2026-11-30T10:00:00Z,3").contains("operation \"X\""));
        assert!(err("I,1,2").contains("3 fields, expected 5 (operation,account_id,balance,last_updated,seq)"));
        assert!(err("operation,account_id,balance,last_updated,seq").contains("operation \"operation\""));
        assert!(err("I,1,+2,2026-11-30T10:00:00Z,3").contains("field `balance`"));
        assert!(accounts().read(&[0xff]).unwrap_err().contains("not UTF-8"));
    }
}
