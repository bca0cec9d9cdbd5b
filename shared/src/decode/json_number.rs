//! JSON numbers in integer columns, read from their text: serde hands the JSON reader a double
//! for any number with a fraction or exponent, and a double is not always the text's value
//! (`18446744073709551616` reads as `18446744073709552000`, `1.0000000000000000001` as `1`). JSON
//! Schema counts a number with a zero fraction (`42.0`, `4.2e1`) as an integer, so the reader
//! parks [`REREAD`] and the record is read again with the number's plain digits, or refused
//! naming the number as written.

/// The parked message that asks for the number's text.
pub(super) const REREAD: &str = "\u{1}a number in an integer column, to read from its text";

/// `value` with the number serde stopped after (`at`: its error's position) written as plain
/// digits, or why it is not an integer of the long range.
pub(super) fn as_integer(value: &[u8], at: &serde_json::Error) -> Result<Vec<u8>, String> {
    let (start, end) = number_ending_at(value, at.line(), at.column()).ok_or("expected an integer, got a number")?;
    let text = String::from_utf8_lossy(&value[start..end]);
    match exact_integer(&text) {
        Some(Ok(n)) => Ok([&value[..start], n.to_string().as_bytes(), &value[end..]].concat()),
        Some(Err(())) => Err(format!("expected an integer, got {text} (beyond the long range)")),
        None => Err(format!("expected an integer, got {text}")),
    }
}

/// Where the number ends that ends at `line` (1-based) and `column` (bytes into the line, as
/// serde_json counts them): `(start, end)` in `value`.
fn number_ending_at(value: &[u8], line: usize, column: usize) -> Option<(usize, usize)> {
    let line_start = match line {
        0 => return None,
        1 => 0,
        n => value.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(n - 2)?.0 + 1,
    };
    let end = line_start.checked_add(column)?.min(value.len());
    let start = value[..end].iter().rposition(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')).map_or(0, |i| i + 1);
    (start < end).then_some((start, end))
}

/// The integer a JSON number's text denotes: `None` when it has a fraction, `Some(Err(()))`
/// when it is whole but outside the long range.
fn exact_integer(text: &str) -> Option<Result<i64, ()>> {
    let (negative, rest) = text.strip_prefix('-').map_or((false, text), |r| (true, r));
    let (mantissa, exponent) = match rest.split_once(['e', 'E']) {
        // Too long an exponent for an i64 is as good as infinite either way.
        Some((m, e)) => (m, e.parse::<i64>().unwrap_or(if e.starts_with('-') { -i64::MAX / 2 } else { i64::MAX / 2 })),
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let joined = format!("{whole}{fraction}");
    let digits = joined.trim_start_matches('0');
    if digits.is_empty() {
        return Some(Ok(0));
    }
    // The value is `digits` × 10^shift.
    let shift = exponent.saturating_sub(fraction.len() as i64);
    let integer = if shift >= 0 {
        if digits.len() as i64 + shift > 20 {
            return Some(Err(()));
        }
        format!("{digits}{}", "0".repeat(shift as usize))
    } else {
        let cut = usize::try_from(-shift).unwrap_or(usize::MAX);
        let kept = digits.len().checked_sub(cut)?;
        if digits[kept..].bytes().any(|b| b != b'0') {
            return None;
        }
        digits[..kept].to_string()
    };
    let magnitude: i128 = if integer.is_empty() { 0 } else { integer.parse().ok()? };
    Some(i64::try_from(if negative { -magnitude } else { magnitude }).map_err(drop))
}

#[cfg(test)]
mod tests {
    use super::exact_integer;

    #[test]
    fn the_text_decides_what_integer_a_number_is() {
        let cases: &[(&str, Option<Result<i64, ()>>)] = &[
            ("42.0", Some(Ok(42))),
            ("4.2e1", Some(Ok(42))),
            ("-0.0", Some(Ok(0))),
            ("0e99999999999999999999", Some(Ok(0))),
            ("9007199254740993.0", Some(Ok(9_007_199_254_740_993))),
            ("-9223372036854775808.00", Some(Ok(i64::MIN))),
            ("9223372036854775808.0", Some(Err(()))),
            ("18446744073709551616", Some(Err(()))),
            ("1e30", Some(Err(()))),
            ("1e99999999999999999999", Some(Err(()))),
            ("42.5", None),
            ("1.0000000000000000001", None),
            ("4.25e1", None),
            ("5e-1", None),
            ("1e-99999999999999999999", None),
        ];
        for (text, want) in cases {
            assert_eq!(&exact_integer(text), want, "{text}");
        }
    }
}
