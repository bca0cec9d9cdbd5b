//! Decoders for telemetry record values, one module per format, all landing in the same
//! [`TelemetryBuilder`] of Arrow column builders. A value that does not decode is returned as
//! an error message (it becomes a dead-letter row); nothing here panics on input.

pub mod avro;
pub mod json;
pub mod proto;

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use crate::base::error::Result;
use crate::model::config::Source;

/// One telemetry reading, format-independent. `event_time_us` is UTC microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub vehicle_id: i64,
    pub event_time_us: i64,
    pub model: String,
    pub speed_kmh: i32,
    pub soc_pct: i32,
    pub odometer_km: i64,
    pub charging: bool,
}

/// Decode one value in `source` format straight into `out`; on failure nothing is appended.
pub fn decode_into(source: Source, value: &[u8], out: &mut TelemetryBuilder) -> Result<(), String> {
    if value.is_empty() {
        return Err("empty value".into());
    }
    match source {
        Source::Proto => proto::decode_into(value, out),
        Source::Avro => avro::decode_into(value, out),
        Source::Json => json::decode_into(value, out),
    }
}

/// Encode a reading in `source` format (generators and tests).
pub fn encode(source: Source, reading: &Reading) -> Vec<u8> {
    match source {
        Source::Proto => proto::encode(reading),
        Source::Avro => avro::encode(reading),
        Source::Json => json::encode(reading),
    }
}

/// Read the readings back out of a telemetry batch (tests, demo, generators).
pub fn readings(batch: &RecordBatch) -> Result<Vec<Reading>> {
    use crate::model::tables::telemetry::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
    let col = |name: &str| {
        batch.column_by_name(name).cloned().ok_or_else(|| crate::base::error::Error::Invariant(format!("batch has no column {name}")))
    };
    let (vid, time, model, speed, soc, odo, charging) =
        (col(VEHICLE_ID)?, col(EVENT_TIME)?, col(MODEL)?, col(SPEED_KMH)?, col(SOC_PCT)?, col(ODOMETER_KM)?, col(CHARGING)?);
    Ok((0..batch.num_rows())
        .map(|i| Reading {
            vehicle_id: vid.as_primitive::<Int64Type>().value(i),
            event_time_us: time.as_primitive::<TimestampMicrosecondType>().value(i),
            model: model.as_string::<i32>().value(i).to_string(),
            speed_kmh: speed.as_primitive::<Int32Type>().value(i),
            soc_pct: soc.as_primitive::<Int32Type>().value(i),
            odometer_km: odo.as_primitive::<Int64Type>().value(i),
            charging: charging.as_boolean().value(i),
        })
        .collect())
}

/// Column builders for the `vehicle_telemetry` schema, lineage columns included.
pub struct TelemetryBuilder {
    vehicle_id: Int64Builder,
    event_time: TimestampMicrosecondBuilder,
    model: StringBuilder,
    speed_kmh: Int32Builder,
    soc_pct: Int32Builder,
    odometer_km: Int64Builder,
    charging: BooleanBuilder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
}

impl TelemetryBuilder {
    pub fn with_capacity(rows: usize) -> Self {
        Self {
            vehicle_id: Int64Builder::with_capacity(rows),
            event_time: TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("+00:00"),
            model: StringBuilder::with_capacity(rows, rows * 12),
            speed_kmh: Int32Builder::with_capacity(rows),
            soc_pct: Int32Builder::with_capacity(rows),
            odometer_km: Int64Builder::with_capacity(rows),
            charging: BooleanBuilder::with_capacity(rows),
            topic: StringBuilder::with_capacity(rows, rows * 16),
            partition: Int32Builder::with_capacity(rows),
            offset: Int64Builder::with_capacity(rows),
        }
    }

    /// Append the reading's own columns; lineage follows with [`Self::append_lineage`].
    #[allow(clippy::too_many_arguments)]
    pub fn append_values(
        &mut self,
        vehicle_id: i64,
        event_time_us: i64,
        model: &str,
        speed_kmh: i32,
        soc_pct: i32,
        odometer_km: i64,
        charging: bool,
    ) {
        self.vehicle_id.append_value(vehicle_id);
        self.event_time.append_value(event_time_us);
        self.model.append_value(model);
        self.speed_kmh.append_value(speed_kmh);
        self.soc_pct.append_value(soc_pct);
        self.odometer_km.append_value(odometer_km);
        self.charging.append_value(charging);
    }

    pub fn append_reading(&mut self, r: &Reading) {
        self.append_values(r.vehicle_id, r.event_time_us, &r.model, r.speed_kmh, r.soc_pct, r.odometer_km, r.charging);
    }

    /// Where the last appended reading came from.
    pub fn append_lineage(&mut self, topic: &str, partition: i32, offset: i64) {
        self.topic.append_value(topic);
        self.partition.append_value(partition);
        self.offset.append_value(offset);
    }

    /// Finish into a batch of `schema` (the table's Arrow schema, with field ids).
    pub fn finish(mut self, schema: SchemaRef) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.vehicle_id.finish()),
            Arc::new(self.event_time.finish()),
            Arc::new(self.model.finish()),
            Arc::new(self.speed_kmh.finish()),
            Arc::new(self.soc_pct.finish()),
            Arc::new(self.odometer_km.finish()),
            Arc::new(self.charging.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use arrow_array::builder::ArrayBuilder;

    use super::*;

    pub fn sample() -> Reading {
        Reading {
            vehicle_id: 42,
            event_time_us: 1_700_000_000_123_000,
            model: "Model-E".into(),
            speed_kmh: 87,
            soc_pct: 64,
            odometer_km: 123_456,
            charging: false,
        }
    }

    fn decode_one(source: Source, bytes: &[u8]) -> Result<Reading, String> {
        let mut b = TelemetryBuilder::with_capacity(1);
        decode_into(source, bytes, &mut b)?;
        b.append_lineage("t", 0, 0);
        let def = crate::model::tables::vehicle_telemetry("t", "zstd", 1 << 20).unwrap();
        let batch = b.finish(def.arrow_schema().unwrap()).unwrap();
        Ok(readings(&batch).unwrap().remove(0))
    }

    #[test]
    fn round_trip_every_format() {
        for source in [Source::Proto, Source::Avro, Source::Json] {
            let r = sample();
            assert_eq!(decode_one(source, &encode(source, &r)).unwrap(), r, "{source:?}");
        }
    }

    #[test]
    fn empty_value_is_rejected_in_every_format() {
        for source in [Source::Proto, Source::Avro, Source::Json] {
            assert_eq!(decode_one(source, b"").unwrap_err(), "empty value");
        }
    }

    #[test]
    fn failed_decode_appends_nothing() {
        let mut b = TelemetryBuilder::with_capacity(1);
        for source in [Source::Proto, Source::Avro, Source::Json] {
            let mut bytes = encode(source, &sample());
            bytes.truncate(bytes.len() - 1); // cuts the last field mid-value
            assert!(decode_into(source, &bytes, &mut b).is_err(), "{source:?}");
        }
        assert_eq!(b.vehicle_id.len(), 0);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            for source in [Source::Proto, Source::Avro, Source::Json] {
                let mut b = TelemetryBuilder::with_capacity(1);
                let before = b.vehicle_id.len();
                match decode_into(source, &bytes, &mut b) {
                    Ok(()) => proptest::prop_assert_eq!(b.vehicle_id.len(), before + 1),
                    Err(e) => {
                        proptest::prop_assert!(!e.is_empty());
                        proptest::prop_assert_eq!(b.vehicle_id.len(), before);
                    }
                }
            }
        }

        #[test]
        fn any_reading_round_trips(vehicle_id in proptest::num::i64::ANY, ms in 0i64..4_000_000_000_000,
                                   model in "[A-Za-z0-9 -]{0,20}", speed in proptest::num::i32::ANY,
                                   soc in 0i32..=100, odo in proptest::num::i64::ANY, charging in proptest::bool::ANY) {
            let r = Reading { vehicle_id, event_time_us: ms * 1000, model, speed_kmh: speed, soc_pct: soc, odometer_km: odo, charging };
            for source in [Source::Proto, Source::Avro, Source::Json] {
                proptest::prop_assert_eq!(decode_one(source, &encode(source, &r)).unwrap(), r.clone());
            }
        }
    }
}
