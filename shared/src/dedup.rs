//! Duplicate suppression on the telemetry identity `(vehicle_id, event_time)`.
//!
//! `batch`: within one invocation, keep the copy with the highest offset (the producer's
//! verbatim re-sends carry the same identity at a later offset). `window` (see `window.rs`)
//! also drops identities the table already holds in its recent partitions.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;

use crate::error::Result;
use crate::tables::{lineage, telemetry};

/// Identity of a reading.
pub type Identity = (i64, i64);

/// Column accessors for a telemetry batch.
pub struct TelemetryColumns {
    pub vehicle_id: arrow_array::Int64Array,
    pub event_time: arrow_array::TimestampMicrosecondArray,
    pub partition: arrow_array::Int32Array,
    pub offset: arrow_array::Int64Array,
}

impl TelemetryColumns {
    pub fn of(batch: &RecordBatch) -> Result<Self> {
        let columns = crate::columns::Columns::new(batch, "telemetry batch");
        Ok(Self {
            vehicle_id: columns.i64(telemetry::VEHICLE_ID)?,
            event_time: columns.timestamp_micros(telemetry::EVENT_TIME)?,
            partition: columns.i32(lineage::PARTITION)?,
            offset: columns.i64(lineage::OFFSET)?,
        })
    }

    pub fn identity(&self, row: usize) -> Identity {
        (self.vehicle_id.value(row), self.event_time.value(row))
    }

    /// Order of two copies: the later delivery wins (offset, then partition for determinism).
    fn delivery(&self, row: usize) -> (i64, i32) {
        (self.offset.value(row), self.partition.value(row))
    }
}

/// Keep one row per identity: the one with the highest offset. Returns the batch and how many
/// rows were dropped.
pub fn dedup_batch(batch: &RecordBatch) -> Result<(RecordBatch, usize)> {
    let cols = TelemetryColumns::of(batch)?;
    let mut best: HashMap<Identity, usize> = HashMap::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        match best.entry(cols.identity(row)) {
            Entry::Vacant(v) => {
                v.insert(row);
            }
            Entry::Occupied(mut o) => {
                if cols.delivery(row) > cols.delivery(*o.get()) {
                    o.insert(row);
                }
            }
        }
    }
    let dropped = batch.num_rows() - best.len();
    if dropped == 0 {
        return Ok((batch.clone(), 0));
    }
    let mut keep = vec![false; batch.num_rows()];
    for row in best.into_values() {
        keep[row] = true;
    }
    Ok((filter_record_batch(batch, &BooleanArray::from(keep))?, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Reading, TelemetryBuilder};

    fn batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
        let def = crate::tables::vehicle_telemetry("t", "zstd", 1 << 20).unwrap();
        let mut b = TelemetryBuilder::with_capacity(rows.len());
        for &(vehicle, time, offset) in rows {
            b.append_reading(&Reading { vehicle_id: vehicle, event_time_us: time, model: format!("o{offset}"), speed_kmh: 0, soc_pct: 0, odometer_km: 0, charging: false });
            b.append_lineage("t", 0, offset);
        }
        b.finish(def.arrow_schema().unwrap()).unwrap()
    }

    #[test]
    fn keeps_highest_offset_per_identity_and_distinct_readings() {
        let (out, dropped) = dedup_batch(&batch(&[(1, 10, 5), (1, 10, 9), (1, 11, 6), (2, 10, 7), (1, 10, 8)])).unwrap();
        assert_eq!(dropped, 2);
        let cols = TelemetryColumns::of(&out).unwrap();
        let mut kept: Vec<_> = (0..out.num_rows()).map(|i| (cols.identity(i), cols.offset.value(i))).collect();
        kept.sort();
        assert_eq!(kept, [((1, 10), 9), ((1, 11), 6), ((2, 10), 7)]);
    }
}
