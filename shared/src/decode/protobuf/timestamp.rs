//! `google.protobuf.Timestamp` values: a timestamp is a message of two fields, read here
//! without the general message reader when it is laid out as encoders lay it out.

use super::{Raw, next_field, varint};
use crate::decode::DecodeError;
use crate::model::pipeline::TimestampPrecision;

/// A `google.protobuf.Timestamp`'s seconds and nanos as encoders write them: field 1, then field
/// 2, each left out when zero, nothing else. `None` for anything else, which
/// [`timestamp_fields`] reads. Half the cost of the general loop (~280 instructions a reference
/// record, callgrind).
#[inline]
pub(super) fn timestamp_as_written(mut bytes: &[u8]) -> Option<(i64, i32)> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    if let Some(rest) = bytes.strip_prefix(&[0x08]) {
        bytes = rest;
        seconds = varint(&mut bytes).ok()? as i64;
    }
    if let Some(rest) = bytes.strip_prefix(&[0x10]) {
        bytes = rest;
        nanos = varint(&mut bytes).ok()? as i32;
    }
    bytes.is_empty().then_some((seconds, nanos))
}

/// A `google.protobuf.Timestamp`'s seconds and nanos, its fields in any order, the last of each
/// winning, others skipped.
pub(super) fn timestamp_fields(mut bytes: &[u8]) -> Result<(i64, i32), DecodeError> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    while let Some((number, raw)) = next_field(&mut bytes)? {
        match (number, raw) {
            (1, Raw::Varint(v)) => seconds = v as i64,
            (2, Raw::Varint(v)) => nanos = v as i32,
            _ => {}
        }
    }
    Ok((seconds, nanos))
}

/// `google.protobuf.Timestamp` as UTC microseconds.
pub(super) fn timestamp_micros(seconds: i64, nanos: i32, precision: TimestampPrecision) -> Result<i64, DecodeError> {
    let Some(nanos) = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000) else {
        return Err(DecodeError::new(format!("timestamp nanos {nanos} out of range 0..1e9")));
    };
    precision.micros(seconds, nanos, &format_args!("a Timestamp of {seconds} s and {nanos} ns")).map_err(DecodeError::new)
}
