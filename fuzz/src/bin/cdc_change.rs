//! The CDC change decoders (CSV and DMS JSON): any value either decodes or is rejected with a
//! reason; a decoded change written back in the same format decodes to the same change.
#![no_main]

use icestream::cdc::change::{Decoded, decode};
use icestream::model::config::CdcFormat;
use libfuzzer_sys::fuzz_target;

const ORDER_COLUMN: &str = "seq";

fuzz_target!(|data: &[u8]| {
    // The first byte picks the format, the rest is the record value.
    let Some((&selector, value)) = data.split_first() else { return };
    let format = if selector % 2 == 0 { CdcFormat::Csv } else { CdcFormat::Dms };
    let Ok(Decoded::Change(change)) = decode(format, ORDER_COLUMN, value) else { return };
    let rendered = match format {
        CdcFormat::Csv => change.to_csv(),
        CdcFormat::Dms => change.to_dms_json(ORDER_COLUMN),
    };
    let again = decode(format, ORDER_COLUMN, rendered.as_bytes()).expect("a rendered change decodes");
    assert_eq!(again, Decoded::Change(change), "round trip changed the change");
});
