//! `dedup=window`: drop rows whose key the table already holds, looking back
//! `dedup_window_minutes` from the newest `event_time` of the batch.
//!
//! Cost per batch: one scan of the table restricted by `event_time` to the batch's span within
//! the window. With a time partition on `event_time` the predicate prunes whole partitions
//! through the manifests' partition summaries, and only the key and time columns are read from
//! the surviving files: about (window / partition width) partitions' worth of a few columns,
//! whatever the table's size. Prefer it when producers re-send across batches (retries after
//! timeouts); `batch` costs nothing extra and suffices when re-sends arrive close together.

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::DataType;
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::{Datum, PrimitiveType, Type};
use iceberg::table::Table;

use crate::base::error::{Error, Result};
use crate::modes::dedup::{KeyRows, key_columns};

/// Drop rows of `batch` whose `key` is already in `table` within the window of `event_time`.
/// Returns the kept rows and how many were dropped.
pub async fn drop_seen(
    table: &Table,
    batch: &RecordBatch,
    key: &[String],
    event_time: &str,
    window_minutes: i64,
) -> Result<(RecordBatch, usize)> {
    if batch.num_rows() == 0 || table.metadata().current_snapshot().is_none() {
        return Ok((batch.clone(), 0));
    }
    let times =
        batch.column_by_name(event_time).ok_or_else(|| Error::Config(format!("dedup window: the batch has no column {event_time:?}")))?;
    let times = arrow_cast::cast(times, &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None))?;
    let times = times.as_primitive::<TimestampMicrosecondType>();
    let (Some(newest), Some(oldest)) = (times.iter().flatten().max(), times.iter().flatten().min()) else {
        return Ok((batch.clone(), 0));
    };
    let lower = oldest.max(newest - window_minutes * 60 * 1_000_000);
    let keys = KeyRows::of(batch, key)?;
    let seen = keys_between(table, &keys, batch, key, event_time, lower, newest).await?;
    if seen.is_empty() {
        return Ok((batch.clone(), 0));
    }
    let keep: BooleanArray = (0..batch.num_rows()).map(|i| Some(!seen.contains(keys.key(i)))).collect();
    let kept = filter_record_batch(batch, &keep)?;
    let dropped = batch.num_rows() - kept.num_rows();
    Ok((kept, dropped))
}

/// Keys (as row bytes of `keys`' converter) the table holds with `lower <= event_time <= upper`
/// (microseconds).
async fn keys_between(
    table: &Table,
    keys: &KeyRows,
    batch: &RecordBatch,
    key: &[String],
    event_time: &str,
    lower: i64,
    upper: i64,
) -> Result<HashSet<Vec<u8>>> {
    let column = table
        .metadata()
        .current_schema()
        .as_struct()
        .field_by_name(event_time)
        .ok_or_else(|| Error::Config(format!("dedup window: table has no column {event_time:?}")))?;
    let datum = |us: i64| match *column.field_type {
        Type::Primitive(PrimitiveType::Timestamp) => Datum::timestamp_micros(us),
        _ => Datum::timestamptz_micros(us),
    };
    let predicate = Reference::new(event_time)
        .greater_than_or_equal_to(datum(lower))
        .and(Reference::new(event_time).less_than_or_equal_to(datum(upper)));
    let mut select: Vec<&str> = key.iter().map(String::as_str).collect();
    select.push(event_time);
    let scan = table.scan().select(select).with_filter(predicate).build()?;
    let wanted = key_columns(batch, key)?;
    let mut stream = scan.to_arrow().await?;
    let mut seen = HashSet::new();
    while let Some(found) = stream.try_next().await? {
        // Files other engines wrote may use other physical types for the same columns: cast to
        // the batch's, so equal keys convert to equal bytes.
        let columns = wanted
            .iter()
            .enumerate()
            .map(|(i, want)| Ok(arrow_cast::cast(found.column(i), want.data_type())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let times = arrow_cast::cast(found.column(key.len()), &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None))?;
        let times = times.as_primitive::<TimestampMicrosecondType>();
        let rows = keys.convert(&columns)?;
        for i in 0..found.num_rows() {
            // The scan filters at file and row-group level; check rows exactly here.
            if !times.is_null(i) && (lower..=upper).contains(&times.value(i)) {
                seen.insert(rows.row(i).data().to_vec());
            }
        }
    }
    Ok(seen)
}
