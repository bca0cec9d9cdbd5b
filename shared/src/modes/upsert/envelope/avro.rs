//! A Debezium Avro record as the JSON converter would have written its payload: the same
//! envelope, the same Connect encodings (bytes as base64, logical types as their integers), so
//! one path ([`super::Unwrapper::debezium_payload`]) reads both.

use apache_avro::types::Value as Avro;
use base64::Engine;
use serde_json::{Map, Number, Value};

/// Decode one record's payload (the registry frame removed) with its writer's envelope.
pub fn payload_json(writer: &apache_avro::Schema, payload: &[u8]) -> Result<Value, String> {
    datum_json(writer, payload, "Debezium Avro value")
}

/// Decode one Avro datum (`what` it is, for errors) into its Connect JSON form.
pub fn datum_json(writer: &apache_avro::Schema, payload: &[u8], what: &str) -> Result<Value, String> {
    let mut rest = payload;
    let datum = apache_avro::from_avro_datum(writer, &mut rest, None).map_err(|e| format!("{what}: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{what}: {} bytes after the datum", rest.len()));
    }
    // apache-avro reads a string, boolean or union cut off by the end of the value as null; the
    // writer's schema refuses such a null wherever the field cannot be null (`op`, `source`
    // and the non-null row fields after the cut).
    if !datum.validate(writer) {
        return Err(format!("{what}: truncated, or not a datum of its writer's schema"));
    }
    to_json(datum).map_err(|e| format!("{what}: {e}"))
}

fn to_json(value: Avro) -> Result<Value, String> {
    let base64 = |bytes: &[u8]| Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    let float = |f: f64| Number::from_f64(f).map(Value::Number).ok_or_else(|| format!("the float {f} has no JSON form"));
    Ok(match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Value::from(i),
        Avro::Long(i)
        | Avro::TimeMicros(i)
        | Avro::TimestampMillis(i)
        | Avro::TimestampMicros(i)
        | Avro::TimestampNanos(i)
        | Avro::LocalTimestampMillis(i)
        | Avro::LocalTimestampMicros(i)
        | Avro::LocalTimestampNanos(i) => Value::from(i),
        Avro::Float(f) => float(f64::from(f))?,
        Avro::Double(f) => float(f)?,
        Avro::Bytes(b) | Avro::Fixed(_, b) => base64(&b),
        // Connect's Decimal: the unscaled big-endian two's complement, as the JSON converter
        // writes it (its scale is in the field's schema).
        Avro::Decimal(d) => base64(&Vec::<u8>::try_from(&d).map_err(|e| format!("a decimal: {e}"))?),
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::Union(_, inner) => to_json(*inner)?,
        Avro::Array(items) => Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?),
        Avro::Map(entries) => Value::Object(entries.into_iter().map(|(k, v)| Ok((k, to_json(v)?))).collect::<Result<Map<_, _>, String>>()?),
        Avro::Record(fields) => {
            Value::Object(fields.into_iter().map(|(k, v)| Ok((k, to_json(v)?))).collect::<Result<Map<_, _>, String>>()?)
        }
        other => return Err(format!("{other:?} has no Connect form")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schema::debezium::DebeziumAvro;
    use apache_avro::types::Record;

    #[test]
    fn a_record_becomes_the_json_converters_payload() {
        let schema = DebeziumAvro::parse(crate::model::schema::debezium::tests::ENVELOPE).unwrap();
        let apache_avro::Schema::Record(envelope) = &schema.writer else { panic!() };
        let row_schema = match &envelope.fields[0].schema {
            apache_avro::Schema::Union(u) => u.variants()[1].clone(),
            _ => panic!(),
        };
        let mut row = Record::new(&row_schema).unwrap();
        row.put("id", 7i64);
        row.put("price", Avro::Union(1, Box::new(Avro::Decimal(apache_avro::Decimal::from(vec![0x30, 0x39])))));
        row.put("born", Avro::Union(1, Box::new(Avro::Int(19_000))));
        row.put("seen", Avro::Union(0, Box::new(Avro::Null)));
        row.put("at", Avro::Union(1, Box::new(Avro::String("2026-12-01T10:00:00Z".into()))));
        row.put("uid", Avro::Union(0, Box::new(Avro::Null)));
        row.put("note", Avro::Union(1, Box::new(Avro::String("ünï".into()))));
        let mut source = Record::new(&envelope.fields[2].schema).unwrap();
        source.put("lsn", Avro::Union(1, Box::new(Avro::Long(42))));
        let mut record = Record::new(&schema.writer).unwrap();
        record.put("before", Avro::Union(0, Box::new(Avro::Null)));
        record.put("after", Avro::Union(1, Box::new(row.into())));
        record.put("source", source);
        record.put("op", "c");
        record.put("ts_ms", Avro::Union(0, Box::new(Avro::Null)));
        let bytes = apache_avro::to_avro_datum(&schema.writer, record).unwrap();
        let json = payload_json(&schema.writer, &bytes).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"before": null, "after": {"id": 7, "price": "MDk=", "born": 19000, "seen": null, "at": "2026-12-01T10:00:00Z",
                "uid": null, "note": "ünï"}, "source": {"lsn": 42}, "op": "c", "ts_ms": null})
        );
        // Cut anywhere before its last field (`ts_ms`, whose absence apache-avro reads as null),
        // a value is refused, never read with nulls where the cut fell.
        for cut in 0..bytes.len() - 1 {
            assert!(payload_json(&schema.writer, &bytes[..cut]).unwrap_err().contains("Debezium Avro value"), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(payload_json(&schema.writer, &longer).unwrap_err().contains("1 bytes after the datum"));
    }
}
