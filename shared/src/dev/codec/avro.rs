//! Avro: schemaless binary datums of `shared/avro/VehicleTelemetry.avsc` (no container header,
//! no schema-registry prefix), decoded with apache-avro against that one schema.

use std::sync::OnceLock;

use apache_avro::Schema;
use apache_avro::types::Value;

use super::{Reading, TelemetryBuilder};

/// The writer schema, shipped in the repository.
pub const SCHEMA_JSON: &str = include_str!("../../../avro/VehicleTelemetry.avsc");

pub fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| Schema::parse_str(SCHEMA_JSON).expect("the shipped .avsc is valid"))
}

pub fn decode_into(value: &[u8], out: &mut TelemetryBuilder) -> Result<(), String> {
    let mut reader = value;
    let datum = apache_avro::from_avro_datum(schema(), &mut reader, None).map_err(|e| format!("avro: {e}"))?;
    if !reader.is_empty() {
        return Err(format!("avro: {} trailing bytes after the record", reader.len()));
    }
    let Value::Record(fields) = datum else {
        return Err("avro: datum is not a record".into());
    };
    let mut f = fields.into_iter().map(|(_, v)| v);
    let (vehicle_id, event_time, model, speed, soc, odo, charging) = (f.next(), f.next(), f.next(), f.next(), f.next(), f.next(), f.next());
    match (vehicle_id, event_time, model, speed, soc, odo, charging) {
        (
            Some(Value::Long(vehicle_id)),
            Some(Value::TimestampMillis(ms) | Value::Long(ms)),
            Some(Value::String(model)),
            Some(Value::Int(speed)),
            Some(Value::Int(soc)),
            Some(Value::Long(odo)),
            Some(Value::Boolean(charging)),
        ) => {
            let us = ms.checked_mul(1000).ok_or_else(|| format!("avro: event_time {ms} out of range"))?;
            out.append_values(vehicle_id, us, &model, speed, soc, odo, charging);
            Ok(())
        }
        _ => Err("avro: record does not match VehicleTelemetry".into()),
    }
}

pub fn encode(r: &Reading) -> Vec<u8> {
    let value = Value::Record(vec![
        ("vehicle_id".into(), Value::Long(r.vehicle_id)),
        ("event_time".into(), Value::TimestampMillis(r.event_time_us.div_euclid(1000))),
        ("model".into(), Value::String(r.model.clone())),
        ("speed_kmh".into(), Value::Int(r.speed_kmh)),
        ("soc_pct".into(), Value::Int(r.soc_pct)),
        ("odometer_km".into(), Value::Long(r.odometer_km)),
        ("charging".into(), Value::Boolean(r.charging)),
    ]);
    apache_avro::to_avro_datum(schema(), value).expect("a VehicleTelemetry value matches its schema")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_avro_is_rejected() {
        let mut b = TelemetryBuilder::with_capacity(1);
        // A protobuf payload is not this Avro record (or leaves bytes over).
        let proto = super::super::proto::encode(&super::super::tests::sample());
        assert!(decode_into(&proto, &mut b).unwrap_err().starts_with("avro"));
        let mut extra = encode(&super::super::tests::sample());
        extra.push(0);
        assert!(decode_into(&extra, &mut b).unwrap_err().contains("trailing"));
    }
}
