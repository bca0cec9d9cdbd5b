//! The avro record decoder on the rich test schema (tests/schemas/rich.avsc).
#![no_main]

use std::sync::LazyLock;

use icestream::model::schema::Format;
use icestream_fuzz::Target;
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<Target> = LazyLock::new(|| Target::load(Format::Avro, "rich.avsc", None));

fuzz_target!(|data: &[u8]| TARGET.check(data));
