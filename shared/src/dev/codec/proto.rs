//! Protobuf: the reference `VehicleTelemetry` message (`shared/proto/vehicle_telemetry.proto`),
//! declared here with prost derives so no `protoc` is needed to build.

use prost::Message;

use super::{Reading, TelemetryBuilder};

/// `icestream.telemetry.v1.VehicleTelemetry`.
#[derive(Clone, PartialEq, Message)]
pub struct VehicleTelemetry {
    #[prost(int64, tag = "1")]
    pub vehicle_id: i64,
    #[prost(message, optional, tag = "2")]
    pub event_time: Option<prost_types::Timestamp>,
    #[prost(string, tag = "3")]
    pub model: String,
    #[prost(int32, tag = "4")]
    pub speed_kmh: i32,
    #[prost(int32, tag = "5")]
    pub soc_pct: i32,
    #[prost(int64, tag = "6")]
    pub odometer_km: i64,
    #[prost(bool, tag = "7")]
    pub charging: bool,
}

pub fn decode_into(value: &[u8], out: &mut TelemetryBuilder) -> Result<(), String> {
    let m = VehicleTelemetry::decode(value).map_err(|e| format!("protobuf: {e}"))?;
    // proto3 scalars have no presence; the message-typed timestamp does, so it is the one
    // field whose absence we can and must reject.
    let ts = m.event_time.ok_or("protobuf: missing required field event_time")?;
    if !(0..1_000_000_000).contains(&ts.nanos) {
        return Err(format!("protobuf: event_time nanos {} out of range", ts.nanos));
    }
    let event_time_us = ts
        .seconds
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(i64::from(ts.nanos / 1000)))
        .ok_or_else(|| format!("protobuf: event_time seconds {} out of range", ts.seconds))?;
    out.append_values(m.vehicle_id, event_time_us, &m.model, m.speed_kmh, m.soc_pct, m.odometer_km, m.charging);
    Ok(())
}

pub fn encode(r: &Reading) -> Vec<u8> {
    VehicleTelemetry {
        vehicle_id: r.vehicle_id,
        event_time: Some(prost_types::Timestamp {
            seconds: r.event_time_us.div_euclid(1_000_000),
            nanos: (r.event_time_us.rem_euclid(1_000_000) * 1000) as i32,
        }),
        model: r.model.clone(),
        speed_kmh: r.speed_kmh,
        soc_pct: r.soc_pct,
        odometer_km: r.odometer_km,
        charging: r.charging,
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_timestamp_is_an_error() {
        let bytes = VehicleTelemetry { vehicle_id: 1, model: "x".into(), ..Default::default() }.encode_to_vec();
        let mut b = TelemetryBuilder::with_capacity(1);
        assert!(decode_into(&bytes, &mut b).unwrap_err().contains("event_time"));
    }

    #[test]
    fn truncated_message_is_an_error() {
        let bytes = encode(&super::super::tests::sample());
        let mut b = TelemetryBuilder::with_capacity(1);
        assert!(decode_into(&bytes[..bytes.len() - 2], &mut b).unwrap_err().starts_with("protobuf"));
    }
}
