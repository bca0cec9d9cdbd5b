//! JSON telemetry in the Avro field layout: `event_time` is epoch milliseconds.

use serde::{Deserialize, Serialize};

use super::{Reading, TelemetryBuilder};

#[derive(Deserialize, Serialize)]
struct JsonReading<'a> {
    vehicle_id: i64,
    event_time: i64,
    #[serde(borrow)]
    model: std::borrow::Cow<'a, str>,
    speed_kmh: i32,
    soc_pct: i32,
    odometer_km: i64,
    charging: bool,
}

pub fn decode_into(value: &[u8], out: &mut TelemetryBuilder) -> Result<(), String> {
    let r: JsonReading = serde_json::from_slice(value).map_err(|e| format!("json: {e}"))?;
    let event_time_us = r.event_time.checked_mul(1000).ok_or_else(|| format!("json: event_time {} out of range", r.event_time))?;
    out.append_values(r.vehicle_id, event_time_us, &r.model, r.speed_kmh, r.soc_pct, r.odometer_km, r.charging);
    Ok(())
}

pub fn encode(r: &Reading) -> Vec<u8> {
    serde_json::to_vec(&JsonReading {
        vehicle_id: r.vehicle_id,
        event_time: r.event_time_us.div_euclid(1000),
        model: std::borrow::Cow::Borrowed(&r.model),
        speed_kmh: r.speed_kmh,
        soc_pct: r.soc_pct,
        odometer_km: r.odometer_km,
        charging: r.charging,
    })
    .expect("a struct of plain fields always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_field_and_malformed_json_name_the_problem() {
        let mut b = TelemetryBuilder::with_capacity(1);
        let e =
            decode_into(br#"{"vehicle_id":1,"event_time":5,"model":"m","speed_kmh":1,"soc_pct":2,"charging":true}"#, &mut b).unwrap_err();
        assert!(e.contains("missing field `odometer_km`"), "{e}");
        let e = decode_into(br#"{"vehicle_id":1,"event_time":"#, &mut b).unwrap_err();
        assert!(e.starts_with("json:"), "{e}");
        let e = decode_into(br#"{"vehicle_id":"one","event_time":5}"#, &mut b).unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
    }
}
