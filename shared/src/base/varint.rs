//! Base-128 varints (LEB128): Protobuf's tags and integers, Avro's zigzagged longs, the
//! message indexes of registry frames. At most ten bytes, the low seven bits of each first.
//!
//! One byte at a time. Reading eight bytes as one word (finding the end among the high bits,
//! packing the 7-bit groups with shifts and masks) took more instructions for the values of the
//! reference records, of one to five bytes: 575M → 591M for a 300k-record event's Protobuf
//! decoding (callgrind).

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The input ends before the varint does.
    Truncated,
    /// Ten bytes, each with its continuation bit set.
    TooLong,
}

/// The varint at the start of `input`, which is advanced past it. Inlined: it is read for
/// every field's tag, and a call per tag cost 8M instructions per 10k records (callgrind).
#[inline(always)]
pub(crate) fn read(input: &mut &[u8]) -> Result<u64, VarintError> {
    // One byte: every Protobuf tag of a field numbered below 16, and small values.
    if let Some((&byte, rest)) = input.split_first()
        && byte < 0x80
    {
        *input = rest;
        return Ok(u64::from(byte));
    }
    let mut value = 0u64;
    for (i, byte) in input.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *input = &input[i + 1..];
            return Ok(value);
        }
    }
    Err(if input.len() < 10 { VarintError::Truncated } else { VarintError::TooLong })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The varint of `value` as Protobuf writes it.
    fn encoded(mut value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
        out
    }

    fn read_all(input: &[u8]) -> (Result<u64, VarintError>, usize) {
        let mut rest = input;
        let read = read(&mut rest);
        (read, input.len() - rest.len())
    }

    #[test]
    fn every_length_reads_its_value_with_any_bytes_after_it() {
        let mut values = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX, i64::MAX as u64, 1_780_000_000, 999_999_999];
        values.extend((0..64).map(|bit| 1u64 << bit));
        values.extend((1..64).map(|bit| (1u64 << bit) - 1));
        for value in values {
            let bytes = encoded(value);
            // Alone, and followed by 0 to 9 bytes: continuation bytes or not.
            for tail in 0..10 {
                for filler in [0x00, 0x7f, 0x80, 0xff] {
                    let mut input = bytes.clone();
                    input.extend(std::iter::repeat_n(filler, tail));
                    assert_eq!(read_all(&input), (Ok(value), bytes.len()), "{value} + {tail} x {filler:#x}");
                }
            }
        }
    }

    #[test]
    fn a_cut_or_overlong_varint_is_refused() {
        for len in 0..12 {
            let input = vec![0x80; len];
            let expected = if len < 10 { VarintError::Truncated } else { VarintError::TooLong };
            assert_eq!(read_all(&input).0, Err(expected), "{len} continuation bytes");
        }
    }

    proptest::proptest! {
        /// Any value, followed by any bytes, reads back and stops at its end.
        #[test]
        fn any_value_reads_back(value in proptest::num::u64::ANY, tail in proptest::collection::vec(proptest::num::u8::ANY, 0..12)) {
            let bytes = encoded(value);
            let input = [bytes.as_slice(), &tail].concat();
            proptest::prop_assert_eq!(read_all(&input), (Ok(value), bytes.len()));
        }
    }
}
