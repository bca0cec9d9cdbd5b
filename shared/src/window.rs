//! `dedup=window`: drop readings whose identity `(vehicle_id, event_time)` the table already
//! holds, looking back `dedup_window_minutes` from the newest reading of the batch.
//!
//! Cost per batch: one scan of the table restricted by `event_time` to the batch's span within
//! the window. The predicate prunes whole `hours(event_time)` partitions through the manifests'
//! partition summaries, and only the two identity columns are read from the surviving files.
//! So it reads about (window / 1 h) hourly partitions' worth of two columns, whatever the
//! table's size. Prefer it when producers re-send across batches (retries after timeouts);
//! `batch` costs nothing extra and suffices when re-sends arrive close together.

use std::collections::HashSet;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::Datum;
use iceberg::table::Table;

use crate::columns::Columns;
use crate::dedup::{Identity, TelemetryColumns};
use crate::error::Result;
use crate::tables::telemetry;

/// Drop rows of `batch` whose identity is already in `table` within the window. Returns the
/// kept rows and how many were dropped.
pub async fn drop_seen(table: &Table, batch: &RecordBatch, window_minutes: i64) -> Result<(RecordBatch, usize)> {
    if batch.num_rows() == 0 || table.metadata().current_snapshot().is_none() {
        return Ok((batch.clone(), 0));
    }
    let cols = TelemetryColumns::of(batch)?;
    let times = &cols.event_time;
    let newest = times.values().iter().copied().max().unwrap_or(0);
    let oldest = times.values().iter().copied().min().unwrap_or(0);
    let lower = oldest.max(newest - window_minutes * 60 * 1_000_000);
    let seen = identities_between(table, lower, newest).await?;
    if seen.is_empty() {
        return Ok((batch.clone(), 0));
    }
    let keep: BooleanArray = (0..batch.num_rows()).map(|i| Some(!seen.contains(&cols.identity(i)))).collect();
    let kept = filter_record_batch(batch, &keep)?;
    let dropped = batch.num_rows() - kept.num_rows();
    Ok((kept, dropped))
}

/// Identities the table holds with `lower <= event_time <= upper` (microseconds).
pub async fn identities_between(table: &Table, lower: i64, upper: i64) -> Result<HashSet<Identity>> {
    let predicate = Reference::new(telemetry::EVENT_TIME)
        .greater_than_or_equal_to(Datum::timestamptz_micros(lower))
        .and(Reference::new(telemetry::EVENT_TIME).less_than_or_equal_to(Datum::timestamptz_micros(upper)));
    let scan = table
        .scan()
        .select([telemetry::VEHICLE_ID, telemetry::EVENT_TIME])
        .with_filter(predicate)
        .build()?;
    let mut stream = scan.to_arrow().await?;
    let mut seen = HashSet::new();
    while let Some(batch) = stream.try_next().await? {
        let columns = Columns::new(&batch, "telemetry scan").with_schema(table.metadata().current_schema());
        let (ids, times) = (columns.i64(telemetry::VEHICLE_ID)?, columns.timestamp_micros(telemetry::EVENT_TIME)?);
        for i in 0..batch.num_rows() {
            let t = times.value(i);
            // The scan filters at file and row-group level; check rows exactly here.
            if (lower..=upper).contains(&t) {
                seen.insert((ids.value(i), t));
            }
        }
    }
    Ok(seen)
}
