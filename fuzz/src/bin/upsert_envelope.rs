//! The accounts feed's envelopes (CSV and DMS JSON) on the shipped account schema: any value
//! either unwraps or is rejected with a reason, and every row or key image it yields is a JSON
//! object the decoder can read.
#![no_main]

use std::sync::LazyLock;

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use icestream::model::pipeline::upsert::{DecimalHandling, Envelope, Order};
use icestream::modes::upsert::envelope::{Unwrapped, Unwrapper};
use libfuzzer_sys::fuzz_target;

/// The `accounts` table's columns (shared/json/account.schema.json).
fn accounts(envelope: Envelope) -> Unwrapper {
    let table = Schema::new(vec![
        Field::new("account_id", DataType::Int64, false),
        Field::new("balance", DataType::Int64, true),
        Field::new("last_updated", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
        Field::new("seq", DataType::Int64, false),
    ]);
    Unwrapper::new(envelope, &Order::Column("seq".into()), &table, &["account_id".into()], DecimalHandling::default())
}

static CSV: LazyLock<Unwrapper> = LazyLock::new(|| accounts(Envelope::Csv));
static DMS: LazyLock<Unwrapper> = LazyLock::new(|| accounts(Envelope::Dms));

fuzz_target!(|data: &[u8]| {
    // The first byte picks the envelope, the rest is the record value.
    let Some((&selector, value)) = data.split_first() else { return };
    let unwrapper = if selector % 2 == 0 { &*CSV } else { &*DMS };
    let image = match unwrapper.unwrap(None, Some(value)) {
        Ok(Unwrapped::Upsert { row, .. }) => row,
        Ok(Unwrapped::Delete { image, .. }) => image,
        Ok(_) | Err(_) => return,
    };
    let parsed: serde_json::Value = serde_json::from_slice(&image).expect("an unwrapped image is JSON");
    assert!(parsed.is_object(), "an unwrapped image is a JSON object: {parsed}");
});
