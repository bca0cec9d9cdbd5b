//! The exact byte length of a record's JSON as [`icestream::model::event::record_json`] renders it
//! (compact serde_json), computed without rendering: the batch builder counts every record
//! against the 6 MB cap, and building a `serde_json::Value` per record only to measure it cost
//! more than the rest of the poller. Records with a value error or schema metadata (never from a
//! broker) are measured by rendering them.

use icestream::model::event::{KafkaRecordIn, TopicPartition, record_json};

/// `{"headers":,"key":,"offset":,"partition":,"timestamp":,"timestampType":,"topic":,"value":}`
/// without the values: the keys, quotes, colons, commas and braces.
const RECORD_FRAME: usize = r#"{"headers":,"key":,"offset":,"partition":,"timestamp":,"timestampType":,"topic":,"value":}"#.len();

/// Bytes of `record_json(tp, r).to_string()`.
pub fn record_json_len(tp: &TopicPartition, r: &KafkaRecordIn) -> usize {
    if r.value_error.is_some() || r.value_schema.is_some() {
        return record_json(tp, r).to_string().len();
    }
    // `[` `]`, a comma between items; each item `{"key":[b,b,...]}`.
    let (items, count) = r.headers.iter().fold((0usize, 0usize), |(items, count), (k, v)| {
        let bytes = if v.is_empty() { 0 } else { v.iter().map(|&b| i8_len(b as i8)).sum::<usize>() + v.len() - 1 };
        (items + 1 + json_str_len(k) + 1 + 1 + bytes + 1 + 1, count + 1)
    });
    let headers = 2 + items + count.saturating_sub(1);
    RECORD_FRAME
        + headers
        + base64_field_len(r.key.as_deref())
        + int_len(r.offset)
        + int_len(i64::from(tp.partition))
        + int_len(r.timestamp_ms)
        + r.timestamp_type.map_or("null".len(), |t| t.name().len() + 2)
        + json_str_len(&tp.topic)
        + base64_field_len(r.value.as_deref())
}

/// Bytes of the group key `"topic-partition"` as a JSON string.
pub fn group_key_len(tp: &TopicPartition) -> usize {
    json_str_len(&tp.topic) + 1 + int_len(i64::from(tp.partition))
}

/// A quoted base64 string, or `null`.
fn base64_field_len(bytes: Option<&[u8]>) -> usize {
    bytes.map_or(4, |b| 2 + b.len().div_ceil(3) * 4)
}

/// A JSON string as serde_json writes it: quotes, `\"` `\\` and the short escapes, `\u00XX`
/// for the other control characters; everything else (UTF-8 included) as is.
fn json_str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

fn int_len(n: i64) -> usize {
    let sign = usize::from(n < 0);
    let mut digits = 1;
    let mut rest = n.unsigned_abs();
    while rest >= 10 {
        rest /= 10;
        digits += 1;
    }
    sign + digits
}

fn i8_len(n: i8) -> usize {
    int_len(i64::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no dependency): xorshift.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn bytes(&mut self, max: u64) -> Vec<u8> {
            (0..self.below(max + 1)).map(|_| self.next() as u8).collect()
        }
        fn text(&mut self, max: u64) -> String {
            // ASCII, control characters, quotes, backslashes and multi-byte characters.
            const PIECES: &[&str] = &["a", "Z", "-", ".", "\"", "\\", "\n", "\t", "\u{1}", "\u{1f}", "\u{7f}", "é", "€", "𝄞", "/"];
            (0..self.below(max + 1)).map(|_| PIECES[self.below(PIECES.len() as u64) as usize]).collect()
        }
        fn int(&mut self) -> i64 {
            match self.below(4) {
                0 => self.next() as i64,
                1 => -(self.below(1000) as i64),
                2 => self.below(10) as i64,
                _ => [i64::MIN, i64::MAX, 0, -1, 9, 10, 99, 100][self.below(8) as usize],
            }
        }
    }

    #[test]
    fn the_computed_length_is_the_rendered_length() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let tp = TopicPartition { topic: rng.text(12), partition: rng.int() as i32 };
            let headers = (0..rng.below(4)).map(|_| (rng.text(6), rng.bytes(12))).collect();
            let record = KafkaRecordIn {
                offset: rng.int(),
                timestamp_ms: rng.int(),
                timestamp_type: None,
                key: (rng.below(3) > 0).then(|| rng.bytes(40).into()),
                value: (rng.below(5) > 0).then(|| rng.bytes(300).into()),
                value_error: None,
                headers,
                value_schema: None,
            };
            let rendered = record_json(&tp, &record).to_string();
            assert_eq!(record_json_len(&tp, &record), rendered.len(), "{rendered}");
            assert_eq!(group_key_len(&tp), serde_json::to_string(&tp.to_string()).unwrap().len(), "{tp}");
        }
    }

    #[test]
    fn records_with_a_value_error_or_schema_metadata_are_measured_by_rendering() {
        let tp = TopicPartition { topic: "t".into(), partition: 0 };
        let mut record = KafkaRecordIn {
            offset: 1,
            timestamp_ms: 2,
            timestamp_type: None,
            key: Some(b"not base64 \"raw\"".to_vec().into()),
            value: Some(b"x".to_vec().into()),
            value_error: Some(Box::new("key is not base64: invalid".into())),
            headers: Default::default(),
            value_schema: None,
        };
        assert_eq!(record_json_len(&tp, &record), record_json(&tp, &record).to_string().len());
        record.value_error = None;
        record.value_schema = Some(Box::new(icestream::model::event::SchemaMetadata { data_format: "AVRO".into(), schema_id: "7".into() }));
        assert_eq!(record_json_len(&tp, &record), record_json(&tp, &record).to_string().len());
    }
}
